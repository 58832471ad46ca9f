//! FLAC (flacenc, pure Rust): 16-bit mono, lossless. FLAC's header records the total length and an
//! MD5 of the samples, so the stream is encoded when the sink finishes.

use flacenc::component::BitRepr;
use flacenc::error::Verify;

use super::format::to_i16;
use super::writer::{AudioSink, Output};
use infer_sdk::Result;

pub(crate) struct FlacSink {
    out: Output,
    rate: u32,
    samples: Vec<i32>,
}

impl FlacSink {
    pub fn new(out: Output, rate: u32) -> Self {
        FlacSink { out, rate, samples: Vec::new() }
    }
}

impl AudioSink for FlacSink {
    fn write(&mut self, samples: &[f32]) -> Result<()> {
        self.samples.extend(samples.iter().map(|&x| to_i16(x) as i32));
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        let config = flacenc::config::Encoder::default()
            .into_verified()
            .map_err(|(_, e)| self.out.err(format!("flac encoder config: {e:?}")))?;
        let source = flacenc::source::MemSource::from_samples(&self.samples, 1, 16, self.rate as usize);
        let stream_frames = self.samples.len().div_ceil(config.block_size);
        let mut stream = flacenc::encode_with_fixed_block_size(&config, source, config.block_size)
            .map_err(|e| self.out.err(format!("flac encoding: {e:?}")))?;
        // FLAC's STREAMINFO minimum block size excludes the last block; flacenc counts it, which
        // makes a fixed-block-size stream look variable-sized to decoders (symphonia rejects it).
        let info = stream.stream_info_mut();
        if stream_frames > 1 && info.min_block_size() < info.max_block_size() {
            let max = info.max_block_size();
            info.set_block_sizes(max, max).map_err(|e| self.out.err(format!("flac stream info: {e:?}")))?;
        }
        let mut sink = flacenc::bitsink::ByteSink::new();
        stream.write(&mut sink).map_err(|e| self.out.err(format!("flac encoding: {e:?}")))?;
        self.out.put(sink.as_slice())?;
        self.out.done()
    }
}
