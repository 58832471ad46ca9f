//! A vocabulary's pieces stored once: one text buffer, an offset per id, and a hash table of ids
//! keyed by their text. A `Vec<String>` plus a `HashMap<String, u32>` of the same 262k pieces
//! (Gemma 3) is ~32 MB of small allocations resident for the whole run; this is ~4 MB.

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

use infer_sdk::{Error, Result};

pub struct PieceTable {
    text: String,
    /// Piece `i` is `text[starts[i]..starts[i + 1]]`.
    starts: Vec<u32>,
    /// Ids, found by their piece's text; where a piece repeats, the last id holds it.
    by_text: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl PieceTable {
    pub fn new(pieces: &[String]) -> Result<Self> {
        let total: usize = pieces.iter().map(String::len).sum();
        if total >= u32::MAX as usize || pieces.len() >= u32::MAX as usize {
            return Err(Error::Tokenizer(format!("vocabulary too large ({} pieces, {total} bytes)", pieces.len())));
        }
        let mut text = String::with_capacity(total);
        let mut starts = Vec::with_capacity(pieces.len() + 1);
        for p in pieces {
            starts.push(text.len() as u32);
            text.push_str(p);
        }
        starts.push(text.len() as u32);
        let mut table =
            PieceTable { text, starts, by_text: HashTable::with_capacity(pieces.len()), hasher: Default::default() };
        for id in 0..pieces.len() as u32 {
            table.insert(id);
        }
        Ok(table)
    }

    fn insert(&mut self, id: u32) {
        let Self { text, starts, by_text, hasher } = self;
        let piece_of = |i: u32| &text[starts[i as usize] as usize..starts[i as usize + 1] as usize];
        let piece = piece_of(id);
        let hash = hasher.hash_one(piece);
        match by_text.find_mut(hash, |&other| piece_of(other) == piece) {
            Some(slot) => *slot = id,
            None => {
                by_text.insert_unique(hash, id, |&i| hasher.hash_one(piece_of(i)));
            }
        }
    }

    pub fn len(&self) -> usize {
        self.starts.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn piece(&self, id: u32) -> Option<&str> {
        let i = id as usize;
        (i < self.len()).then(|| &self.text[self.starts[i] as usize..self.starts[i + 1] as usize])
    }

    pub fn id(&self, piece: &str) -> Option<u32> {
        let hash = self.hasher.hash_one(piece);
        self.by_text.find(hash, |&i| self.piece(i) == Some(piece)).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::PieceTable;

    #[test]
    fn finds_pieces_and_ids_and_keeps_the_last_of_a_repeat() {
        let pieces: Vec<String> = ["a", "", "▁ab", "a", "<0x41>"].map(String::from).to_vec();
        let t = PieceTable::new(&pieces).unwrap();
        assert_eq!(t.len(), 5);
        assert_eq!(t.piece(2), Some("▁ab"));
        assert_eq!(t.piece(1), Some(""));
        assert_eq!(t.piece(5), None);
        assert_eq!(t.id("▁ab"), Some(2));
        assert_eq!(t.id(""), Some(1));
        // As a HashMap collected from (piece, id) pairs: the later id of a repeated piece.
        assert_eq!(t.id("a"), Some(3));
        assert_eq!(t.id("b"), None);
        let all: Vec<&str> = (0..5).map(|i| t.piece(i).unwrap()).collect();
        assert_eq!(all, ["a", "", "▁ab", "a", "<0x41>"]);
    }
}
