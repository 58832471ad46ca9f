//! Streaming decode: code frames in as the talker makes them, samples out at once.
//!
//! The decoder is causal with exactly `samples_per_frame` samples per frame, so each `push`
//! returns all the audio of its frames; the carried state (conv inputs, conv-transpose overlap
//! frames, the pre-transformer's last `window - 1` keys and values) makes any split of an
//! utterance decode like one call.
//!
//! The reference decodes (`chunked_decode`) in segments of 300 frames, each restarted from
//! scratch with the previous 25 frames as left context whose output it drops. The stream does
//! the same at the same frame counts, so streaming, [`super::Codec12Hz::decode`] and the
//! reference agree for every length.
//!
//! Work per chunk: a push of `n` frames runs the decoder over those `n` frames only, plus each
//! layer's carried left context (at most `span - 1` input columns per convolution, `window - 1`
//! keys per attention layer), whatever the position in the utterance; every `SEGMENT_FRAMES`
//! frames the segment restart re-decodes `SEGMENT_CONTEXT` frames once. So an utterance of `F`
//! frames costs `F + SEGMENT_CONTEXT * ((F - 1) / SEGMENT_FRAMES)` frame decodes in any chunking.

use std::collections::VecDeque;

use infer_core::Result;

use super::state::Carry;
use super::Codec12Hz;

/// Frames per reference decode segment and the left context re-decoded at each segment start
/// (qwen-tts 0.1.1 `Qwen3TTSTokenizerV2Decoder.chunked_decode(chunk_size=300, left_context_size=25)`).
pub const SEGMENT_FRAMES: usize = 300;
pub const SEGMENT_CONTEXT: usize = 25;
/// Most frames one decoder pass takes: a longer push runs in passes of this many (the carry
/// makes that the same decode, within the streaming bound the tests check). A pass's
/// activations grow with its frames (the last block's are 96 channels × 1920 samples a frame,
/// 0.7 MB each), so one pass over a long utterance made them hundreds of MB and ran slower:
/// 200 frames (16 s) took 8.2 s in one pass at 1.7 GB peak RSS.
pub const MAX_PASS_FRAMES: usize = 25;

/// A stateful decoder made by [`Codec12Hz::decode_stream`].
pub struct DecodeStream<'a> {
    codec: &'a Codec12Hz,
    carry: Carry,
    /// Frames emitted in the current segment.
    in_segment: usize,
    /// The last `SEGMENT_CONTEXT` frames, replayed when a new segment starts.
    history: VecDeque<Vec<u32>>,
    frames: usize,
    /// Frames run through the decoder, segment-restart context included.
    decoded: usize,
}

impl<'a> DecodeStream<'a> {
    pub(super) fn new(codec: &'a Codec12Hz) -> Self {
        DecodeStream { codec, carry: Carry::default(), in_segment: 0, history: VecDeque::new(), frames: 0, decoded: 0 }
    }

    /// Decodes `frames` (`[frame][codebook]`) and returns their `frames.len() * 1920` samples.
    /// Bad codes are rejected before anything is decoded, leaving the stream as it was.
    pub fn push(&mut self, frames: &[Vec<u32>]) -> Result<Vec<f32>> {
        self.codec.check_codes(frames, self.frames)?;
        let mut out = Vec::with_capacity(frames.len() * self.codec.samples_per_frame());
        let mut rest = frames;
        while !rest.is_empty() {
            if self.in_segment == SEGMENT_FRAMES {
                self.start_segment()?;
            }
            let n = rest.len().min(SEGMENT_FRAMES - self.in_segment).min(MAX_PASS_FRAMES);
            let (now, later) = rest.split_at(n);
            out.extend(self.codec.decode_frames(now, &mut self.carry)?);
            for f in now {
                if self.history.len() == SEGMENT_CONTEXT {
                    self.history.pop_front();
                }
                self.history.push_back(f.clone());
            }
            self.in_segment += n;
            self.frames += n;
            self.decoded += n;
            rest = later;
        }
        Ok(out)
    }

    /// Ends the utterance. Every frame's samples were already returned by `push` (the decoder
    /// has no look-ahead), so this returns nothing today; callers should still append what it
    /// returns. The stream starts a new utterance afterwards.
    pub fn finish(&mut self) -> Result<Vec<f32>> {
        *self = DecodeStream::new(self.codec);
        Ok(Vec::new())
    }

    /// Frames decoded so far in this utterance.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// Frames run through the decoder so far, the segment restarts' context included: the
    /// stream's work, which does not depend on how the frames were split into pushes.
    pub fn decoded_frames(&self) -> usize {
        self.decoded
    }

    /// Values the stream carries as left context between pushes (bounded: see the module doc).
    pub fn carried_values(&self) -> usize {
        self.carry.carried_values()
    }

    /// A new reference segment: fresh state, the context frames decoded and their samples dropped.
    fn start_segment(&mut self) -> Result<()> {
        self.carry = Carry::default();
        let context: Vec<Vec<u32>> = self.history.iter().cloned().collect();
        self.codec.decode_frames(&context, &mut self.carry)?;
        self.decoded += context.len();
        self.in_segment = 0;
        Ok(())
    }
}
