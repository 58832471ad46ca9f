//! Mel spectrograms: STFT magnitudes through a librosa-compatible mel filterbank, then log
//! compression. Every knob the references differ on is a field of [`MelConfig`].

use crate::dsp::stft::{Padding, Stft};
use infer_sdk::{Error, Result};

/// Mel frequency scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MelScale {
    /// Slaney (Auditory Toolbox): linear below 1 kHz, logarithmic above. librosa's default
    /// (`htk=False`).
    Slaney,
    /// HTK: `2595 log10(1 + f / 700)`.
    Htk,
}

/// Filter normalisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MelNorm {
    /// Unit area per filter: `2 / (f[i+2] - f[i])` (librosa `norm="slaney"`, its default).
    Slaney,
    /// Peak 1.
    None,
}

/// What becomes of the filterbank energies.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LogCompression {
    /// `ln(max(x, floor))` (HiFi-GAN's `dynamic_range_compression`).
    Ln { floor: f64 },
    /// `log10(max(x, floor))`.
    Log10 { floor: f64 },
    /// The energies as they are.
    None,
}

/// Everything that defines a mel front end.
#[derive(Debug, Clone, PartialEq)]
pub struct MelConfig {
    pub sample_rate: u32,
    pub n_fft: usize,
    pub hop_length: usize,
    pub win_length: usize,
    pub n_mels: usize,
    pub fmin: f64,
    /// `None`: `sample_rate / 2`.
    pub fmax: Option<f64>,
    pub padding: Padding,
    /// 1: magnitude `sqrt(re² + im² + magnitude_eps)`; 2: power `re² + im²`.
    pub power: u8,
    pub magnitude_eps: f64,
    pub scale: MelScale,
    pub norm: MelNorm,
    pub log: LogCompression,
}

/// A mel spectrogram: `n_mels` rows of `frames` values (row-major, `(n_mels, frames)` as the
/// references lay it out).
#[derive(Debug, Clone, PartialEq)]
pub struct Mel {
    pub n_mels: usize,
    pub frames: usize,
    pub data: Vec<f32>,
}

impl Mel {
    pub fn row(&self, mel: usize) -> &[f32] {
        &self.data[mel * self.frames..(mel + 1) * self.frames]
    }
}

fn hz_to_mel(hz: f64, scale: MelScale) -> f64 {
    match scale {
        MelScale::Htk => 2595.0 * (1.0 + hz / 700.0).log10(),
        MelScale::Slaney => {
            let (f_sp, min_log_hz, min_log_mel, logstep) = slaney_consts();
            if hz >= min_log_hz {
                min_log_mel + (hz / min_log_hz).ln() / logstep
            } else {
                hz / f_sp
            }
        }
    }
}

fn mel_to_hz(mel: f64, scale: MelScale) -> f64 {
    match scale {
        MelScale::Htk => 700.0 * (10f64.powf(mel / 2595.0) - 1.0),
        MelScale::Slaney => {
            let (f_sp, min_log_hz, min_log_mel, logstep) = slaney_consts();
            if mel >= min_log_mel {
                min_log_hz * (logstep * (mel - min_log_mel)).exp()
            } else {
                f_sp * mel
            }
        }
    }
}

/// (Hz per mel below 1 kHz, 1 kHz, its mel, log step): librosa's `hz_to_mel(htk=False)`.
fn slaney_consts() -> (f64, f64, f64, f64) {
    let f_sp = 200.0 / 3.0;
    let min_log_hz = 1000.0;
    (f_sp, min_log_hz, min_log_hz / f_sp, 6.4f64.ln() / 27.0)
}

/// Triangular mel filters, `(n_mels, n_fft / 2 + 1)` row-major, as `librosa.filters.mel` builds them
/// (`n_mels + 2` points evenly spaced in mel between fmin and fmax; ramps against the FFT bin
/// frequencies `k * sr / n_fft`).
pub fn mel_filterbank(
    sample_rate: u32,
    n_fft: usize,
    n_mels: usize,
    fmin: f64,
    fmax: f64,
    scale: MelScale,
    norm: MelNorm,
) -> Vec<f64> {
    let bins = n_fft / 2 + 1;
    let fft_freqs: Vec<f64> = (0..bins).map(|k| k as f64 * sample_rate as f64 / n_fft as f64).collect();
    let (lo, hi) = (hz_to_mel(fmin, scale), hz_to_mel(fmax, scale));
    let n_pts = n_mels + 2;
    let step = (hi - lo) / (n_pts - 1) as f64;
    let mel_f: Vec<f64> = (0..n_pts)
        .map(|i| if i == n_pts - 1 { hi } else { lo + i as f64 * step })
        .map(|m| mel_to_hz(m, scale))
        .collect();
    let mut w = vec![0.0; n_mels * bins];
    for i in 0..n_mels {
        let (d0, d1) = (mel_f[i + 1] - mel_f[i], mel_f[i + 2] - mel_f[i + 1]);
        let enorm = match norm {
            MelNorm::Slaney => 2.0 / (mel_f[i + 2] - mel_f[i]),
            MelNorm::None => 1.0,
        };
        for (k, &f) in fft_freqs.iter().enumerate() {
            let lower = (f - mel_f[i]) / d0;
            let upper = (mel_f[i + 2] - f) / d1;
            w[i * bins + k] = lower.min(upper).max(0.0) * enorm;
        }
    }
    w
}

/// A mel front end, planned once.
#[derive(Debug)]
pub struct MelSpectrogram {
    config: MelConfig,
    stft: Stft,
    /// `(n_mels, bins)` row-major.
    filters: Vec<f64>,
}

impl MelSpectrogram {
    pub fn new(config: MelConfig) -> Result<Self> {
        let nyquist = config.sample_rate as f64 / 2.0;
        let fmax = config.fmax.unwrap_or(nyquist);
        if config.n_mels == 0 || !(0.0..fmax).contains(&config.fmin) || fmax > nyquist {
            return Err(Error::invalid(format!(
                "mel: need n_mels > 0 and 0 <= fmin < fmax <= sample_rate / 2 (got {config:?})"
            )));
        }
        if config.power != 1 && config.power != 2 {
            return Err(Error::invalid(format!("mel: power must be 1 or 2, got {}", config.power)));
        }
        let stft = Stft::new(config.n_fft, config.hop_length, config.win_length, config.padding)?;
        let filters = mel_filterbank(
            config.sample_rate,
            config.n_fft,
            config.n_mels,
            config.fmin,
            fmax,
            config.scale,
            config.norm,
        );
        Ok(MelSpectrogram { config, stft, filters })
    }

    pub fn config(&self) -> &MelConfig {
        &self.config
    }

    /// Frames produced for `len` samples.
    pub fn frames(&self, len: usize) -> usize {
        self.stft.frames(len)
    }

    /// The mel spectrogram of `samples` (mono, at `config.sample_rate`).
    pub fn compute(&self, samples: &[f32]) -> Result<Mel> {
        let (n_mels, bins, frames) = (self.config.n_mels, self.stft.bins(), self.stft.frames(samples.len()));
        let mut data = vec![0f32; n_mels * frames];
        let mut mag = vec![0f64; bins];
        let (power, eps, log) = (self.config.power, self.config.magnitude_eps, self.config.log);
        self.stft.for_each_frame(samples, |t, spec| {
            for (m, c) in mag.iter_mut().zip(spec) {
                let p = c.re * c.re + c.im * c.im;
                *m = if power == 1 { (p + eps).sqrt() } else { p };
            }
            for (m, row) in self.filters.chunks_exact(bins).enumerate() {
                let e: f64 = row.iter().zip(&mag).map(|(w, v)| w * v).sum();
                data[m * frames + t] = match log {
                    LogCompression::Ln { floor } => e.max(floor).ln(),
                    LogCompression::Log10 { floor } => e.max(floor).log10(),
                    LogCompression::None => e,
                } as f32;
            }
        })?;
        Ok(Mel { n_mels, frames, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slaney_scale_round_trips_and_is_linear_below_1khz() {
        for hz in [0.0, 300.0, 999.0, 1000.0, 4000.0, 12000.0] {
            let m = hz_to_mel(hz, MelScale::Slaney);
            assert!((mel_to_hz(m, MelScale::Slaney) - hz).abs() < 1e-9);
        }
        assert!((hz_to_mel(500.0, MelScale::Slaney) - 7.5).abs() < 1e-12);
        assert!((hz_to_mel(1000.0, MelScale::Htk) - 999.9855).abs() < 1e-3);
    }

    #[test]
    fn filters_are_triangles_with_unit_area_in_hz() {
        let sr = 24_000;
        let w = mel_filterbank(sr, 1024, 128, 0.0, 12_000.0, MelScale::Slaney, MelNorm::Slaney);
        let bins = 513;
        let df = sr as f64 / 1024.0;
        // Away from the lowest filters (narrower than one bin), area ~= 1 with the Slaney norm.
        for m in [40, 80, 120] {
            let area: f64 = w[m * bins..(m + 1) * bins].iter().sum::<f64>() * df;
            assert!((area - 1.0).abs() < 0.05, "filter {m} area {area}");
        }
        assert!(w.iter().all(|&v| v >= 0.0));
    }

    #[test]
    fn short_audio_is_an_error_not_a_panic() {
        let config = MelConfig {
            sample_rate: 24_000,
            n_fft: 1024,
            hop_length: 256,
            win_length: 1024,
            n_mels: 128,
            fmin: 0.0,
            fmax: Some(12_000.0),
            padding: Padding::Reflect { left: 384, right: 384 },
            power: 1,
            magnitude_eps: 1e-9,
            scale: MelScale::Slaney,
            norm: MelNorm::Slaney,
            log: LogCompression::Ln { floor: 1e-5 },
        };
        let mel = MelSpectrogram::new(config).unwrap();
        let err = mel.compute(&[0.1; 100]).unwrap_err().to_string();
        assert!(err.contains("too short"), "{err}");
        assert_eq!(mel.frames(36_000), 140);
    }
}
