//! MP3 (LAME, built from the source bundled in `mp3lame-sys`): mono, CBR 128 kb/s. Each write
//! emits the frames LAME has completed. Decoders see LAME's start-up delay (~1700 samples of
//! near-silence) since no gapless header is written.

use mp3lame_encoder::{Bitrate, Builder, FlushGap, Mode, MonoPcm, Quality};

use super::writer::{AudioSink, Output};
use infer_sdk::Result;

pub(crate) struct Mp3Sink {
    out: Output,
    enc: mp3lame_encoder::Encoder,
    bytes: Vec<u8>,
}

impl Mp3Sink {
    pub fn new(out: Output, rate: u32) -> Result<Self> {
        let mut b = Builder::new().ok_or_else(|| out.err("LAME: cannot allocate an encoder"))?;
        let setup = b
            .set_num_channels(1)
            .and_then(|_| b.set_sample_rate(rate))
            .and_then(|_| b.set_mode(Mode::Mono))
            .and_then(|_| b.set_brate(Bitrate::Kbps128))
            .and_then(|_| b.set_quality(Quality::Good));
        setup.map_err(|e| out.err(format!("LAME setup at {rate} Hz: {e:?}")))?;
        let enc = b.build().map_err(|e| out.err(format!("LAME setup at {rate} Hz: {e:?}")))?;
        Ok(Mp3Sink { out, enc, bytes: Vec::new() })
    }
}

impl AudioSink for Mp3Sink {
    fn write(&mut self, samples: &[f32]) -> Result<()> {
        self.bytes.clear();
        self.bytes.reserve(mp3lame_encoder::max_required_buffer_size(samples.len()));
        self.enc.encode_to_vec(MonoPcm(samples), &mut self.bytes).map_err(|e| self.out.err(format!("LAME: {e:?}")))?;
        self.out.put(&self.bytes)?;
        self.out.done()
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        self.bytes.clear();
        self.bytes.reserve(7200);
        self.enc.flush_to_vec::<FlushGap>(&mut self.bytes).map_err(|e| self.out.err(format!("LAME: {e:?}")))?;
        self.out.put(&self.bytes)?;
        self.out.done()
    }
}
