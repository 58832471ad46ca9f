//! SentencePiece-BPE tokenization as llama.cpp performs it for `tokenizer.ggml.model = "llama"`
//! vocabularies (Gemma, Llama 2): symbols start as UTF-8 characters; repeatedly the adjacent pair
//! whose concatenation is the highest-scoring piece merges (leftmost on ties); a character that is
//! no piece is written as its `<0xXX>` byte pieces.
//! Spaces are written `▁`. Control and user-defined pieces in the text are matched first, whole.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use aho_corasick::{AhoCorasick, MatchKind};

use crate::hf_tokenizer::SpecialTokens;
use crate::piece_table::PieceTable;
use infer_sdk::ChatTemplate;
use infer_sdk::{Error, Result};
use infer_sdk::{TokenBytes, Tokenizer};

const SPACE: &str = "\u{2581}";

pub struct SpmModel {
    pieces: PieceTable,
    scores: Vec<f32>,
    /// Pieces that are bytes (`<0x0A>`), by byte value.
    byte_ids: [Option<u32>; 256],
    byte_of: HashMap<u32, u8>,
    /// Control / user-defined pieces matched verbatim in input text.
    specials: Option<(AhoCorasick, Vec<u32>)>,
    special_ids: Vec<bool>,
    /// GGUF piece types by id (see [`SpmModel::new`]).
    types: Vec<i64>,
    add_space_prefix: bool,
}

/// A candidate merge of the symbols at `left` and `left`'s successor.
struct Bigram {
    left: usize,
    score: f32,
    len: usize,
}

impl PartialEq for Bigram {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Bigram {}
impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Bigram {
    /// Highest score first, then leftmost.
    fn cmp(&self, o: &Self) -> Ordering {
        self.score.total_cmp(&o.score).then(o.left.cmp(&self.left))
    }
}

struct Symbol {
    start: usize,
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

impl SpmModel {
    /// `types` follows GGUF: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    pub fn new(pieces: Vec<String>, scores: Vec<f32>, types: Vec<i64>, add_space_prefix: bool) -> Result<Self> {
        if scores.len() != pieces.len() {
            return Err(Error::Tokenizer(format!("{} pieces but {} scores", pieces.len(), scores.len())));
        }
        let mut byte_ids = [None; 256];
        for (i, p) in pieces.iter().enumerate() {
            if let Some(hex) = p.strip_prefix("<0x").and_then(|h| h.strip_suffix('>')) {
                if let Ok(b) = u8::from_str_radix(hex, 16) {
                    byte_ids[b as usize] = Some(i as u32);
                }
            }
        }
        let byte_of = byte_ids.iter().enumerate().filter_map(|(b, id)| id.map(|id| (id, b as u8))).collect();
        let special_ids: Vec<bool> = types.iter().map(|&t| t == 3 || t == 4).collect();
        let special: Vec<(String, u32)> = pieces
            .iter()
            .enumerate()
            .filter(|(i, p)| special_ids.get(*i).copied().unwrap_or(false) && !p.is_empty())
            .map(|(i, p)| (p.clone(), i as u32))
            .collect();
        let specials = if special.is_empty() {
            None
        } else {
            let ac = AhoCorasick::builder()
                .match_kind(MatchKind::LeftmostLongest)
                .build(special.iter().map(|(p, _)| p.as_str()))
                .map_err(|e| Error::Tokenizer(format!("special token matcher: {e}")))?;
            Some((ac, special.into_iter().map(|(_, id)| id).collect()))
        };
        let pieces = PieceTable::new(&pieces)?;
        Ok(SpmModel { pieces, scores, byte_ids, byte_of, specials, special_ids, types, add_space_prefix })
    }

    pub fn vocab_size(&self) -> usize {
        self.pieces.len()
    }

    pub fn piece(&self, id: u32) -> Option<&str> {
        self.pieces.piece(id)
    }

    pub fn id(&self, piece: &str) -> Option<u32> {
        self.pieces.id(piece)
    }

    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        let mut first = true;
        let fragment = |s: &str, out: &mut Vec<u32>, first: &mut bool| {
            if s.is_empty() {
                return;
            }
            let prefixed = if *first && self.add_space_prefix { format!(" {s}") } else { s.to_string() };
            *first = false;
            self.encode_fragment(&prefixed.replace(' ', SPACE), out);
        };
        match &self.specials {
            Some((ac, ids)) => {
                let mut at = 0;
                for m in ac.find_iter(text) {
                    fragment(&text[at..m.start()], &mut out, &mut first);
                    out.push(ids[m.pattern().as_usize()]);
                    at = m.end();
                }
                fragment(&text[at..], &mut out, &mut first);
            }
            None => fragment(text, &mut out, &mut first),
        }
        out
    }

    /// `text` with special-token strings kept as text, as a fragment inside a larger input
    /// (no space prefix).
    pub fn encode_literal(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        if !text.is_empty() {
            self.encode_fragment(&text.replace(' ', SPACE), &mut out);
        }
        out
    }

    pub fn contains_special(&self, text: &str) -> bool {
        self.specials.as_ref().is_some_and(|(ac, _)| ac.is_match(text))
    }

    fn encode_fragment(&self, text: &str, out: &mut Vec<u32>) {
        let mut symbols: Vec<Symbol> = Vec::new();
        for (i, (start, c)) in text.char_indices().enumerate() {
            symbols.push(Symbol { start, len: c.len_utf8(), prev: i.checked_sub(1), next: Some(i + 1) });
        }
        if let Some(last) = symbols.last_mut() {
            last.next = None;
        }
        let mut heap = BinaryHeap::new();
        let try_pair = |heap: &mut BinaryHeap<Bigram>, symbols: &[Symbol], left: usize| {
            let Some(right) = symbols[left].next else { return };
            let (s, e) = (symbols[left].start, symbols[right].start + symbols[right].len);
            if let Some(id) = self.pieces.id(&text[s..e]) {
                heap.push(Bigram { left, score: self.scores[id as usize], len: e - s });
            }
        };
        for i in 0..symbols.len() {
            try_pair(&mut heap, &symbols, i);
        }
        while let Some(b) = heap.pop() {
            let left = b.left;
            let Some(right) = symbols[left].next else { continue };
            // Stale entry: one side changed since it was queued.
            if symbols[left].len == 0 || symbols[left].len + symbols[right].len != b.len {
                continue;
            }
            symbols[left].len += symbols[right].len;
            symbols[right].len = 0;
            symbols[left].next = symbols[right].next;
            if let Some(n) = symbols[right].next {
                symbols[n].prev = Some(left);
            }
            if let Some(p) = symbols[left].prev {
                try_pair(&mut heap, &symbols, p);
            }
            try_pair(&mut heap, &symbols, left);
        }
        let mut i = if symbols.is_empty() { None } else { Some(0) };
        while let Some(at) = i {
            let s = &symbols[at];
            self.emit(&text[s.start..s.start + s.len], out);
            i = s.next;
        }
    }

    /// A final symbol: a merged piece (always in the vocabulary) or one character, which is
    /// written as its bytes when it is no piece.
    fn emit(&self, symbol: &str, out: &mut Vec<u32>) {
        match self.pieces.id(symbol) {
            Some(id) => out.push(id),
            None => out.extend(symbol.bytes().filter_map(|b| self.byte_ids[b as usize])),
        }
    }

    /// What each id decodes to: control pieces (GGUF type 3) are special; user-defined ones
    /// (type 4) decode to their own text.
    pub fn token_bytes(&self) -> Vec<TokenBytes> {
        (0..self.vocab_size() as u32)
            .map(|id| match (self.piece(id), self.types.get(id as usize)) {
                (None, _) | (Some(_), Some(2 | 5)) => TokenBytes::Unused,
                (Some(p), Some(3)) => TokenBytes::Special(p.to_string()),
                (Some(p), _) => match self.byte_of.get(&id) {
                    Some(&b) => TokenBytes::Text(vec![b]),
                    None => TokenBytes::Text(p.replace(SPACE, " ").into_bytes()),
                },
            })
            .collect()
    }

    pub fn decode(&self, ids: &[u32], skip_special: bool) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            let Some(piece) = self.piece(id) else { continue };
            if self.special_ids.get(id as usize).copied().unwrap_or(false) {
                if !skip_special {
                    bytes.extend_from_slice(piece.as_bytes());
                }
                continue;
            }
            match self.byte_of.get(&id) {
                Some(&byte) => bytes.push(byte),
                None => bytes.extend_from_slice(piece.replace(SPACE, " ").as_bytes()),
            }
        }
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if self.add_space_prefix {
            text.strip_prefix(' ').map(String::from).unwrap_or(text)
        } else {
            text
        }
    }
}

/// A SentencePiece vocabulary with the checkpoint's special-token facts.
pub struct SpmTokenizer {
    pub model: SpmModel,
    pub special: SpecialTokens,
}

impl Tokenizer for SpmTokenizer {
    fn encode(&self, text: &str, add_bos: bool) -> Result<Vec<u32>> {
        let mut ids = Vec::new();
        if add_bos {
            ids.extend(self.special.bos);
        }
        ids.extend(self.model.encode(text));
        Ok(ids)
    }
    fn encode_literal(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self.model.encode_literal(text))
    }
    fn contains_special_token(&self, text: &str) -> bool {
        self.model.contains_special(text)
    }
    fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        Ok(self.model.decode(ids, skip_special))
    }
    fn vocab_size(&self) -> usize {
        self.model.vocab_size()
    }
    fn token_to_id(&self, token: &str) -> Option<u32> {
        self.model.id(token)
    }
    fn id_to_token(&self, id: u32) -> Option<String> {
        self.model.piece(id).map(String::from)
    }
    fn bos_id(&self) -> Option<u32> {
        self.special.bos
    }
    fn adds_bos(&self) -> bool {
        self.special.add_bos
    }
    fn eos_ids(&self) -> &[u32] {
        &self.special.eos
    }
    fn token_bytes(&self) -> Option<Vec<TokenBytes>> {
        Some(self.model.token_bytes())
    }
    fn chat_template(&self) -> Option<&dyn ChatTemplate> {
        self.special.template.as_ref().map(|t| t as &dyn ChatTemplate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> SpmModel {
        let pieces: Vec<String> =
            ["<unk>", "<s>", "a", "b", "c", "ab", "abc", "▁", "▁ab", "<0x41>", "<0xE2>", "<0x82>", "<0xAC>", "<x>"]
                .map(String::from)
                .to_vec();
        let scores = vec![0.0, 0.0, -1.0, -1.0, -1.0, -0.5, -0.2, -1.0, -0.1, 0.0, 0.0, 0.0, 0.0, 0.0];
        let types = vec![2, 3, 1, 1, 1, 1, 1, 1, 1, 6, 6, 6, 6, 4];
        SpmModel::new(pieces, scores, types, false).unwrap()
    }

    #[test]
    fn merges_best_scoring_pairs_and_falls_back_to_bytes() {
        let m = model();
        assert_eq!(m.encode("abc"), vec![6]);
        assert_eq!(m.encode(" ab"), vec![8]);
        // "A" is no piece: its byte; "€" is three bytes.
        assert_eq!(m.encode("A€"), vec![9, 10, 11, 12]);
        // Specials are matched whole, the rest tokenized around them.
        assert_eq!(m.encode("ab<x>c"), vec![5, 13, 4]);
        assert_eq!(m.decode(&[8, 9, 10, 11, 12], false), " abA€");
        assert_eq!(m.decode(&[1, 5], true), "ab");
    }
}
