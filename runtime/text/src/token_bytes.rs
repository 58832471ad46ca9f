//! The bytes behind each id of a `tokenizers` vocabulary, read back through its decoder's
//! convention: byte-level BPE pieces spell bytes with GPT-2's printable characters
//! (`Ġ` = 0x20), SentencePiece-style pieces write spaces as `▁` and bytes as `<0xNN>`.

use std::collections::HashMap;

use infer_sdk::TokenBytes;
use serde_json::Value;

/// How a vocabulary's pieces spell text.
enum PieceSpelling {
    /// Every character stands for one byte (GPT-2's `bytes_to_unicode`).
    ByteLevel(HashMap<char, u8>),
    /// Text with `space` for ' ', and `<0xNN>` byte pieces.
    Spaced { space: char },
}

impl PieceSpelling {
    /// The spelling a serialized `tokenizers` decoder undoes; `None` for one it cannot tell.
    fn of_decoder(decoder: &Value) -> Option<PieceSpelling> {
        let kind = decoder.get("type").and_then(Value::as_str)?;
        match kind {
            "ByteLevel" => Some(PieceSpelling::ByteLevel(gpt2_char_bytes())),
            "Metaspace" => {
                let space = decoder.get("replacement").and_then(Value::as_str)?.chars().next()?;
                Some(PieceSpelling::Spaced { space })
            }
            "Sequence" => {
                let parts = decoder.get("decoders").and_then(Value::as_array)?;
                if let Some(inner) = parts.iter().find_map(|d| match d.get("type").and_then(Value::as_str) {
                    Some("ByteLevel" | "Metaspace") => PieceSpelling::of_decoder(d),
                    _ => None,
                }) {
                    return Some(inner);
                }
                // ByteFallback + Replace("▁" -> " ") (+ Fuse, Strip): Llama 2 / Gemma style.
                parts.iter().any(|d| d.get("type").and_then(Value::as_str) == Some("ByteFallback")).then(|| {
                    let space = parts
                        .iter()
                        .filter(|d| d.get("type").and_then(Value::as_str) == Some("Replace"))
                        .filter(|d| d.get("content").and_then(Value::as_str) == Some(" "))
                        .find_map(|d| d.pointer("/pattern/String").and_then(Value::as_str)?.chars().next())
                        .unwrap_or('\u{2581}');
                    PieceSpelling::Spaced { space }
                })
            }
            _ => None,
        }
    }

    fn bytes(&self, piece: &str) -> Option<Vec<u8>> {
        match self {
            PieceSpelling::ByteLevel(table) => piece.chars().map(|c| table.get(&c).copied()).collect(),
            PieceSpelling::Spaced { space } => Some(match byte_piece(piece) {
                Some(b) => vec![b],
                None => piece.replace(*space, " ").into_bytes(),
            }),
        }
    }
}

/// `<0x0A>` -> 0x0A.
pub(crate) fn byte_piece(piece: &str) -> Option<u8> {
    let hex = piece.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// GPT-2's `bytes_to_unicode` inverted: printable Latin-1 bytes stand for themselves, the other
/// bytes take the code points from U+0100 up, in byte order.
fn gpt2_char_bytes() -> HashMap<char, u8> {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    let mut next = 0x100u32;
    (0..=255u8)
        .map(|b| {
            if printable(b) {
                (char::from(b), b)
            } else {
                let c = char::from_u32(next).expect("below the surrogates");
                next += 1;
                (c, b)
            }
        })
        .collect()
}

/// Per-id bytes of `tok` (added tokens included); `None` when its decoder is of a kind whose
/// pieces cannot be read back as bytes.
pub(crate) fn of_tokenizer(tok: &tokenizers::Tokenizer) -> Option<Vec<TokenBytes>> {
    let decoder = serde_json::to_value(tok.get_decoder()?).ok()?;
    let spelling = PieceSpelling::of_decoder(&decoder)?;
    let added = tok.get_added_tokens_decoder();
    let size = tok.get_vocab_size(true).max(added.keys().map(|&id| id as usize + 1).max().unwrap_or(0));
    let mut out = vec![TokenBytes::Unused; size];
    for (piece, id) in tok.get_vocab(false) {
        if let Some(slot) = out.get_mut(id as usize) {
            *slot = TokenBytes::Text(spelling.bytes(&piece)?);
        }
    }
    for (id, token) in added {
        out[id as usize] = if token.special {
            TokenBytes::Special(token.content)
        } else {
            TokenBytes::Text(token.content.into_bytes())
        };
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_table_maps_every_byte_once() {
        let t = gpt2_char_bytes();
        assert_eq!(t.len(), 256);
        assert_eq!(t[&'\u{120}'], b' ');
        assert_eq!(t[&'\u{10A}'], b'\n');
        assert_eq!(t[&'a'], b'a');
        let mut bytes: Vec<u8> = t.values().copied().collect();
        bytes.sort_unstable();
        bytes.dedup();
        assert_eq!(bytes.len(), 256);
    }

    #[test]
    fn spellings_follow_the_decoder() {
        let byte_level = PieceSpelling::of_decoder(&serde_json::json!({"type": "ByteLevel"})).unwrap();
        assert_eq!(byte_level.bytes("\u{120}{\u{10A}").unwrap(), b" {\n");
        let spm = serde_json::json!({"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u{2581}"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"}]});
        let spm = PieceSpelling::of_decoder(&spm).unwrap();
        assert_eq!(spm.bytes("\u{2581}the").unwrap(), b" the");
        assert_eq!(spm.bytes("<0x0A>").unwrap(), b"\n");
        assert!(PieceSpelling::of_decoder(&serde_json::json!({"type": "WordPiece"})).is_none());
    }
}
