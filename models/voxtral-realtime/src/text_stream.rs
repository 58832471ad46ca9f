//! Text as the decoder commits tokens. The reference decodes (mistral-common, special tokens
//! ignored) each run of regular tokens to UTF-8 with replacement; a control token such as
//! `[STREAMING_PAD]` ends a run. Streaming must give the same string in pieces, so bytes of a
//! character split across tokens wait for the rest, and an unfinished character at the end of a
//! run becomes U+FFFD as the reference writes it.

use infer_core::text::tekken::Tekken;

#[derive(Default)]
pub struct TextStream {
    pending: Vec<u8>,
}

impl TextStream {
    /// The text `id` completes (possibly empty).
    pub fn push(&mut self, tekken: &Tekken, id: u32) -> String {
        match tekken.regular_bytes(id) {
            Some(bytes) => {
                self.pending.extend_from_slice(bytes);
                self.take(false)
            }
            // A special token (or an id past the vocabulary, which decodes to nothing) ends the run.
            None => self.take(true),
        }
    }

    /// Ends the current run.
    pub fn flush(&mut self) -> String {
        self.take(true)
    }

    fn take(&mut self, end_of_run: bool) -> String {
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(std::str::from_utf8(&self.pending[..valid]).expect("validated prefix"));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                        None if end_of_run => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.clear();
                            return out;
                        }
                        None => {
                            // An incomplete character: wait for its next bytes.
                            self.pending.drain(..valid);
                            return out;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::TextStream;

    fn feed(chunks: &[&[u8]], end: bool) -> String {
        let mut s = TextStream::default();
        let mut out = String::new();
        for c in chunks {
            s.pending.extend_from_slice(c);
            out += &s.take(false);
        }
        if end {
            out += &s.take(true);
        }
        out
    }

    #[test]
    fn split_characters_wait_and_broken_ones_are_replaced_like_lossy_decoding() {
        let text = "héllo 😀 wörld".as_bytes();
        let pieces: Vec<&[u8]> = text.chunks(1).collect();
        assert_eq!(feed(&pieces, true), "héllo 😀 wörld");
        // A run that ends inside a character, and invalid bytes in the middle.
        let broken: &[&[u8]] = &[b"a\xf0\x9f", b"\x98", b"b\xffc\xe2\x82"];
        let whole: Vec<u8> = broken.concat();
        assert_eq!(feed(broken, true), String::from_utf8_lossy(&whole));
    }
}
