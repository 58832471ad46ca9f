//! Sample-rate conversion with rubato's synchronous FFT resampler (band-limited, Blackman-Harris
//! anti-aliasing just below the lower Nyquist; rubato's recommendation for fixed ratios, of the
//! same quality as its sinc interpolator). Its delay is a whole number of output samples and is
//! removed; rubato's asynchronous sinc resampler leaves a fractional residue of up to a sample
//! (its 256-tap filter delays by 127.5 input samples, reported rounded), which would shift
//! features against references. Output sample `i` is the signal at
//! time `i / new_rate`, and `n` input samples give [`output_len`] outputs (librosa's count).

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Indexing, Resampler};

use infer_sdk::audio::Audio;
use infer_sdk::{Error, Result};

const CHUNK: usize = 1024;

/// Sample rates audio comes in. The FFT sizes grow with the reduced ratio of the two rates: a
/// file claiming 1 Hz or 4 GHz would need gigabytes.
pub const SAMPLE_RATES: std::ops::RangeInclusive<u32> = 1_000..=768_000;

/// The largest sample magnitude resampled. Audio lies within ±1; an FFT of up to a few million
/// points sums values this large without reaching f32's range.
const MAX_SAMPLE: f32 = 1e12;

fn fft_resampler(from: u32, to: u32) -> Result<Fft<f32>> {
    if !SAMPLE_RATES.contains(&from) || !SAMPLE_RATES.contains(&to) {
        return Err(Error::invalid(format!(
            "cannot resample from {from} Hz to {to} Hz: sample rates must be {} to {} Hz",
            SAMPLE_RATES.start(),
            SAMPLE_RATES.end()
        )));
    }
    Fft::<f32>::new(from as usize, to as usize, CHUNK, 1, FixedSync::Input)
        .map_err(|e| Error::invalid(format!("resampler {from} Hz -> {to} Hz: {e}")))
}

fn rubato_err(e: impl std::fmt::Display) -> Error {
    Error::backend(format!("resampling: {e}"))
}

/// Samples out for `n` in: `ceil(n * (to / from))` with the ratio as an f64, as librosa.resample
/// computes it (one more than the exact `ceil(n * to / from)` when the rounded ratio errs upward,
/// e.g. 44100 -> 24001 at 44.1 -> 24 kHz). Matching it keeps the last mel frame of references that
/// resample with librosa (qwen-tts) identical.
pub fn output_len(n: usize, from: u32, to: u32) -> usize {
    (n as f64 * (to as f64 / from as f64)).ceil() as usize
}

/// `audio` at `sample_rate` (a copy when the rate already matches).
pub fn resample(audio: &Audio, sample_rate: u32) -> Result<Audio> {
    if audio.sample_rate == sample_rate || audio.samples.is_empty() {
        return Ok(Audio { samples: audio.samples.clone(), sample_rate });
    }
    // rubato 4.0.0's `process_all` mis-trims the filter delay when a chunk yields more than twice
    // the delay (fixed in 5.0, which needs Rust 1.87): go through the streaming path instead.
    let mut r = StreamResampler::new(audio.sample_rate, sample_rate)?;
    let mut samples = r.push(&audio.samples)?;
    samples.extend(r.finish()?);
    Ok(Audio::new(samples, sample_rate))
}

/// Incremental resampling for streamed audio: push any number of samples, take what is ready;
/// `finish` flushes the tail. The concatenated output equals [`resample`] of the whole input
/// (up to rounding).
pub struct StreamResampler {
    r: Fft<f32>,
    from: u32,
    to: u32,
    pending: Vec<f32>,
    out: Vec<f32>,
    /// Output frames still to drop (the filter delay).
    to_trim: usize,
    consumed: usize,
    produced: usize,
}

impl StreamResampler {
    pub fn new(from: u32, to: u32) -> Result<Self> {
        let r = fft_resampler(from, to)?;
        let to_trim = r.output_delay();
        let out = vec![0.0; r.output_frames_max()];
        Ok(StreamResampler { r, from, to, pending: Vec::new(), out, to_trim, consumed: 0, produced: 0 })
    }

    fn run(&mut self, partial: Option<usize>, sink: &mut Vec<f32>) -> Result<()> {
        let need = self.r.input_frames_next();
        let zeros;
        let input_data: &[f32] = if partial.is_some() {
            zeros = {
                let mut z = self.pending.clone();
                z.resize(need, 0.0);
                z
            };
            &zeros
        } else {
            &self.pending[..need]
        };
        let input = InterleavedSlice::new(input_data, 1, need).map_err(rubato_err)?;
        let frames_out = self.out.len();
        let mut output = InterleavedSlice::new_mut(&mut self.out, 1, frames_out).map_err(rubato_err)?;
        let indexing = Indexing { input_offset: 0, output_offset: 0, active_channels_mask: None, partial_len: partial };
        let (_, n_out) = self.r.process_into_buffer(&input, &mut output, Some(&indexing)).map_err(rubato_err)?;
        let skip = self.to_trim.min(n_out);
        self.to_trim -= skip;
        sink.extend_from_slice(&self.out[skip..n_out]);
        self.produced += n_out - skip;
        Ok(())
    }

    /// Adds input; returns the output samples that are ready. A NaN, infinite or absurdly large
    /// sample is an error: rubato's FFT panics on the NaN it gives (huge values overflow to
    /// infinity in the FFT's sums).
    pub fn push(&mut self, samples: &[f32]) -> Result<Vec<f32>> {
        if let Some(i) = samples.iter().position(|v| !v.is_finite() || v.abs() > MAX_SAMPLE) {
            return Err(Error::invalid(format!(
                "cannot resample: sample {} is {} (audio samples must be finite and within ±{MAX_SAMPLE:e})",
                self.consumed + i,
                samples[i]
            )));
        }
        self.pending.extend_from_slice(samples);
        self.consumed += samples.len();
        let mut ready = Vec::new();
        loop {
            let need = self.r.input_frames_next();
            if self.pending.len() < need {
                break;
            }
            self.run(None, &mut ready)?;
            self.pending.drain(..need);
        }
        Ok(ready)
    }

    /// The remaining output.
    pub fn finish(mut self) -> Result<Vec<f32>> {
        let expected = output_len(self.consumed, self.from, self.to);
        let mut ready = Vec::new();
        let mut partial = Some(self.pending.len());
        while self.produced < expected {
            self.run(partial, &mut ready)?;
            self.pending.clear();
            partial = Some(0);
        }
        let excess = self.produced - expected;
        ready.truncate(ready.len().saturating_sub(excess));
        Ok(ready)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sine(rate: u32, hz: f32, secs: f32) -> Audio {
        let n = (rate as f32 * secs) as usize;
        let samples = (0..n).map(|i| (2.0 * std::f32::consts::PI * hz * i as f32 / rate as f32).sin() * 0.5).collect();
        Audio { samples, sample_rate: rate }
    }

    #[test]
    fn resampled_sines_match_the_ideal_ones_without_delay() {
        for (from, to) in [(44_100, 24_000), (24_000, 48_000), (24_000, 44_100), (8_000, 24_000), (48_000, 16_000)] {
            let x = sine(from, 440.0, 0.5);
            let y = resample(&x, to).unwrap();
            assert_eq!(y.samples.len(), output_len(x.samples.len(), from, to));
            let want = sine(to, 440.0, 0.5);
            // Away from the edges the output is the ideal sine at the new rate (no delay, no gain).
            let n = want.samples.len().min(y.samples.len());
            let err = (n / 10..n - n / 10).map(|i| (y.samples[i] - want.samples[i]).abs()).fold(0.0, f32::max);
            assert!(err < 1e-3, "{from} -> {to}: max error {err}");
        }
    }

    #[test]
    fn streaming_equals_whole_clip() {
        let x = sine(24_000, 1000.0, 0.3);
        let whole = resample(&x, 48_000).unwrap().samples;
        let mut s = StreamResampler::new(24_000, 48_000).unwrap();
        let mut out = Vec::new();
        for c in x.samples.chunks(777) {
            out.extend(s.push(c).unwrap());
        }
        out.extend(s.finish().unwrap());
        assert_eq!(out.len(), whole.len());
        let err = out.iter().zip(&whole).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
        assert!(err < 1e-5, "max error {err}");
    }
}
