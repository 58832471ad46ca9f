//! Ogg Opus (RFC 7845) through `opus-pure` (a pure-Rust Opus codec checked against libopus 1.6.1,
//! so the default build needs no cmake) and the `ogg` crate: a mono 96 kb/s writer that emits one
//! Ogg page per write, and a reader (symphonia has no Opus decoder).

use std::io::Cursor;

use ogg::{PacketReader, PacketWriteEndInfo, PacketWriter};
use opus_pure::{Application, OpusDecoder, OpusEncoder, MAX_PACKET_BYTES};

use super::decode::{DecodeFailure, FrameBudget, Interleaved};
use super::writer::{AudioSink, Output};
use infer_sdk::{Error, Result};

/// Ogg Opus granule positions always count 48 kHz samples.
const GRANULE_RATE: u64 = 48_000;
const SERIAL: u32 = 0x696e_6672;
const BITRATE: i32 = 96_000;
/// Largest Opus packet duration: 120 ms at 48 kHz.
const MAX_FRAME_48K: usize = 5_760;

pub(crate) struct OpusSink {
    pw: PacketWriter<'static, Output>,
    enc: OpusEncoder,
    rate: u32,
    /// 20 ms at `rate`.
    frame: usize,
    pre_skip: u64,
    lookahead: usize,
    pending: Vec<f32>,
    packets: u64,
    total_in: u64,
    packet: Vec<u8>,
}

fn to_granule(samples: u64, rate: u32) -> u64 {
    (samples * GRANULE_RATE).div_ceil(rate as u64)
}

impl OpusSink {
    pub fn new(out: Output, rate: u32) -> Result<Self> {
        let mut enc = OpusEncoder::new(rate as i32, 1, Application::Audio)
            .map_err(|e| out.err(format!("opus encoder at {rate} Hz: {e}")))?;
        enc.bitrate_bps = BITRATE;
        let lookahead = enc.lookahead();
        let pre_skip = to_granule(lookahead as u64, rate);

        // Identification header: magic, version 1, 1 channel, pre-skip, input rate, gain 0, family 0.
        let mut head = b"OpusHead".to_vec();
        head.push(1);
        head.push(1);
        head.extend_from_slice(&(pre_skip as u16).to_le_bytes());
        head.extend_from_slice(&rate.to_le_bytes());
        head.extend_from_slice(&0i16.to_le_bytes());
        head.push(0);
        // Comment header: vendor string, no user comments.
        let vendor = b"infer";
        let mut tags = b"OpusTags".to_vec();
        tags.extend_from_slice(&(vendor.len() as u32).to_le_bytes());
        tags.extend_from_slice(vendor);
        tags.extend_from_slice(&0u32.to_le_bytes());

        let name = out.name.clone();
        let mut pw = PacketWriter::new(out);
        for h in [head, tags] {
            pw.write_packet(h, SERIAL, PacketWriteEndInfo::EndPage, 0).map_err(|e| Error::io(&name, e))?;
        }
        let frame = rate as usize / 50;
        Ok(OpusSink {
            pw,
            enc,
            rate,
            frame,
            pre_skip,
            lookahead,
            pending: Vec::new(),
            packets: 0,
            total_in: 0,
            packet: vec![0; MAX_PACKET_BYTES],
        })
    }

    fn name(&self) -> String {
        self.pw.inner().name.clone()
    }

    /// Encodes every whole frame in `pending`; the last packet ends a page (or the stream).
    fn drain(&mut self, last: Option<u64>) -> Result<()> {
        let n = self.pending.len() / self.frame;
        for i in 0..n {
            let len = self
                .enc
                .encode(&self.pending[i * self.frame..(i + 1) * self.frame], self.frame, &mut self.packet)
                .map_err(|e| Error::invalid(format!("{}: opus encoding: {e}", self.name())))?;
            self.packets += 1;
            let end = i + 1 == n;
            let (info, granule) = match (end, last) {
                (true, Some(g)) => (PacketWriteEndInfo::EndStream, g),
                (true, None) => (PacketWriteEndInfo::EndPage, self.packets * GRANULE_RATE / 50),
                _ => (PacketWriteEndInfo::NormalPacket, self.packets * GRANULE_RATE / 50),
            };
            let name = self.name();
            self.pw
                .write_packet(self.packet[..len].to_vec(), SERIAL, info, granule)
                .map_err(|e| Error::io(&name, e))?;
        }
        self.pending.drain(..n * self.frame);
        Ok(())
    }
}

impl AudioSink for OpusSink {
    fn write(&mut self, samples: &[f32]) -> Result<()> {
        self.total_in += samples.len() as u64;
        self.pending.extend_from_slice(samples);
        if self.pending.len() >= self.frame {
            self.drain(None)?;
            self.pw.inner_mut().done()?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<()> {
        // Push the encoder's look-ahead out, pad to whole frames, and mark where the audio ends.
        let padded = self.pending.len() + self.lookahead;
        let whole = padded.div_ceil(self.frame).max(1) * self.frame;
        self.pending.resize(whole, 0.0);
        let end = self.pre_skip + to_granule(self.total_in, self.rate);
        self.drain(Some(end))?;
        self.pw.inner_mut().done()
    }
}

/// Whether `bytes` begin an Ogg stream whose first packet is an Opus identification header.
pub(crate) fn is_ogg_opus(bytes: &[u8]) -> bool {
    if bytes.len() < 27 || &bytes[..4] != b"OggS" {
        return false;
    }
    let data = 27 + bytes[26] as usize;
    bytes.get(data..data + 8) == Some(b"OpusHead")
}

/// Decodes an Ogg Opus file (channel mapping family 0: mono or stereo) to 48 kHz, honouring the
/// pre-skip and the end trimming of the last page's granule position.
pub(crate) fn decode_ogg_opus(
    bytes: &[u8],
    name: &str,
    budget: &FrameBudget,
) -> std::result::Result<Interleaved, DecodeFailure> {
    let bad = |m: String| Error::invalid(format!("{name}: {m}"));
    let mut reader = PacketReader::new(Cursor::new(bytes));
    let mut next = || reader.read_packet().map_err(|e| bad(format!("corrupt Ogg stream ({e})")));
    let head = next()?.ok_or_else(|| bad("empty Ogg stream".into()))?;
    let h = &head.data;
    if h.len() < 19 || &h[..8] != b"OpusHead" {
        return Err(bad("Ogg stream without an Opus header".into()).into());
    }
    let (channels, pre_skip) = (h[9] as usize, u16::from_le_bytes([h[10], h[11]]) as usize);
    let gain_db = i16::from_le_bytes([h[16], h[17]]) as f32 / 256.0;
    if !matches!((channels, h[18]), (1, 0) | (2, 0)) {
        return Err(
            Error::unsupported(format!("{name}: Opus with {channels} channels / mapping family {}", h[18])).into()
        );
    }
    next()?.ok_or_else(|| bad("Ogg Opus stream ends before its comment header".into()))?;
    let mut dec = OpusDecoder::new(GRANULE_RATE as i32, channels).map_err(|e| bad(format!("opus: {e}")))?;
    let mut pcm = vec![0f32; MAX_FRAME_48K * channels];
    let mut samples = Vec::new();
    let mut end_granule = None;
    while let Some(p) = next()? {
        let n = dec.decode(&p.data, MAX_FRAME_48K, &mut pcm).map_err(|e| bad(format!("corrupt Opus packet ({e})")))?;
        // Checked before the packet is kept: memory stays within the limit plus a packet.
        budget.check(samples.len() / channels + n, GRANULE_RATE as u32)?;
        samples.extend_from_slice(&pcm[..n * channels]);
        if p.last_in_page() {
            end_granule = Some(p.absgp_page() as usize);
        }
    }
    let end = end_granule.map_or(samples.len() / channels, |g| g.saturating_sub(pre_skip));
    let start = (pre_skip * channels).min(samples.len());
    let mut samples = samples.split_off(start);
    samples.truncate(end * channels);
    if gain_db != 0.0 {
        let g = 10f32.powf(gain_db / 20.0);
        samples.iter_mut().for_each(|v| *v *= g);
    }
    Ok(Interleaved { samples, channels, sample_rate: GRANULE_RATE as u32, format: "ogg/opus".into() })
}
