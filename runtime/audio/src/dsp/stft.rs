//! Short-time Fourier transform of a mono signal (realfft), computed in f64.

use std::sync::Arc;

use realfft::{RealFftPlanner, RealToComplex};

use infer_sdk::{Error, Result};

/// How the signal is extended before framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// Frames start at sample 0 (`torch.stft(center=False)` on the raw signal).
    None,
    /// Mirror the signal without repeating the edge sample (`torch.nn.functional.pad(mode="reflect")`).
    /// `torch.stft(center=True)` is `Reflect { left: n_fft / 2, right: n_fft / 2 }`.
    Reflect { left: usize, right: usize },
    /// Zeros on both sides.
    Zeros { left: usize, right: usize },
}

/// Hann window of `len` samples. `periodic` is `torch.hann_window`'s default (and
/// `scipy.signal.get_window("hann", n)`): `0.5 - 0.5 cos(2πn/len)`; symmetric divides by `len - 1`.
pub fn hann_window(len: usize, periodic: bool) -> Vec<f64> {
    let denom = if periodic { len } else { len.saturating_sub(1).max(1) } as f64;
    (0..len).map(|n| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * n as f64 / denom).cos()).collect()
}

/// A planned STFT: `n_fft`-point real FFTs of windowed frames `hop` samples apart.
pub struct Stft {
    n_fft: usize,
    hop: usize,
    window: Vec<f64>,
    padding: Padding,
    fft: Arc<dyn RealToComplex<f64>>,
}

impl std::fmt::Debug for Stft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Stft(n_fft {}, hop {}, {:?})", self.n_fft, self.hop, self.padding)
    }
}

impl Stft {
    /// A periodic Hann window of `win_length`, zero-padded on both sides to `n_fft` as
    /// `torch.stft` does.
    pub fn new(n_fft: usize, hop: usize, win_length: usize, padding: Padding) -> Result<Self> {
        if n_fft == 0 || hop == 0 || win_length == 0 || win_length > n_fft {
            return Err(Error::invalid(format!(
                "stft: need 0 < win_length ({win_length}) <= n_fft ({n_fft}) and hop ({hop}) > 0"
            )));
        }
        let mut window = vec![0.0; n_fft];
        let offset = (n_fft - win_length) / 2;
        window[offset..offset + win_length].copy_from_slice(&hann_window(win_length, true));
        let fft = RealFftPlanner::<f64>::new().plan_fft_forward(n_fft);
        Ok(Stft { n_fft, hop, window, padding, fft })
    }

    pub fn n_fft(&self) -> usize {
        self.n_fft
    }

    /// Frequency bins per frame (`n_fft / 2 + 1`).
    pub fn bins(&self) -> usize {
        self.n_fft / 2 + 1
    }

    /// The padded signal.
    fn pad(&self, x: &[f32]) -> Result<Vec<f64>> {
        let (left, right, reflect) = match self.padding {
            Padding::None => (0, 0, false),
            Padding::Reflect { left, right } => (left, right, true),
            Padding::Zeros { left, right } => (left, right, false),
        };
        if reflect && (left >= x.len() || right >= x.len()) {
            return Err(Error::invalid(format!(
                "audio too short: {} samples cannot be reflect-padded by {}",
                x.len(),
                left.max(right)
            )));
        }
        let mut out = Vec::with_capacity(x.len() + left + right);
        if reflect {
            out.extend((1..=left).rev().map(|i| x[i] as f64));
        } else {
            out.extend(std::iter::repeat_n(0.0, left));
        }
        out.extend(x.iter().map(|&v| v as f64));
        if reflect {
            out.extend((1..=right).map(|i| x[x.len() - 1 - i] as f64));
        } else {
            out.extend(std::iter::repeat_n(0.0, right));
        }
        Ok(out)
    }

    /// Number of frames for a signal of `len` samples (0 when it is shorter than one frame).
    pub fn frames(&self, len: usize) -> usize {
        let padded = match self.padding {
            Padding::None => len,
            Padding::Reflect { left, right } | Padding::Zeros { left, right } => len + left + right,
        };
        if padded < self.n_fft {
            0
        } else {
            1 + (padded - self.n_fft) / self.hop
        }
    }

    /// Calls `f(frame_index, spectrum)` for each frame with the complex spectrum as (re, im) pairs.
    pub fn for_each_frame(
        &self,
        x: &[f32],
        mut f: impl FnMut(usize, &[realfft::num_complex::Complex<f64>]),
    ) -> Result<()> {
        let padded = self.pad(x)?;
        let frames = self.frames(x.len());
        if frames == 0 {
            return Err(Error::invalid(format!(
                "audio too short: {} samples give no {}-sample frame",
                x.len(),
                self.n_fft
            )));
        }
        let mut input = self.fft.make_input_vec();
        let mut spectrum = self.fft.make_output_vec();
        let mut scratch = self.fft.make_scratch_vec();
        for t in 0..frames {
            let start = t * self.hop;
            for (dst, (s, w)) in input.iter_mut().zip(padded[start..start + self.n_fft].iter().zip(&self.window)) {
                *dst = s * w;
            }
            self.fft
                .process_with_scratch(&mut input, &mut spectrum, &mut scratch)
                .map_err(|e| Error::backend(format!("fft: {e}")))?;
            f(t, &spectrum);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflect_padding_mirrors_without_the_edge() {
        let s = Stft::new(4, 2, 4, Padding::Reflect { left: 2, right: 2 }).unwrap();
        let p = s.pad(&[1.0, 2.0, 3.0, 4.0]).unwrap();
        assert_eq!(p, vec![3.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0, 2.0]);
        assert!(s.pad(&[1.0, 2.0]).is_err());
        assert_eq!(s.frames(4), 3);
    }

    #[test]
    fn a_bin_centred_sine_peaks_in_its_bin() {
        let n = 64;
        let s = Stft::new(n, 16, n, Padding::None).unwrap();
        let x: Vec<f32> = (0..256).map(|i| (2.0 * std::f32::consts::PI * 8.0 * i as f32 / n as f32).sin()).collect();
        s.for_each_frame(&x, |_, spec| {
            let peak = (0..spec.len()).max_by(|&a, &b| spec[a].norm().total_cmp(&spec[b].norm())).unwrap();
            assert_eq!(peak, 8);
        })
        .unwrap();
    }
}
