//! Rejecting reference recordings that cannot work: too short, too long, silent, or broken samples.
//! The thresholds are the model's call; [`AudioLimits::default`] suits speaker / voice references.

use infer_sdk::audio::Audio;
use infer_sdk::{Error, Result};

/// What a reference recording must satisfy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AudioLimits {
    /// Shortest accepted duration in seconds.
    pub min_seconds: f64,
    /// Longest accepted duration in seconds (`None`: no limit).
    pub max_seconds: Option<f64>,
    /// Peak level (dBFS) at or below which the recording counts as silent.
    pub silence_peak_dbfs: f32,
}

impl Default for AudioLimits {
    /// At least 1 s, at most 10 min, and a peak above -60 dBFS (16-bit dither and hum stay well
    /// below speech, which peaks near -20..0 dBFS).
    fn default() -> Self {
        AudioLimits { min_seconds: 1.0, max_seconds: Some(600.0), silence_peak_dbfs: -60.0 }
    }
}

/// Peak level in dBFS (`-inf` for digital silence).
pub fn peak_dbfs(samples: &[f32]) -> f32 {
    let peak = samples.iter().fold(0f32, |m, v| m.max(v.abs()));
    20.0 * peak.log10()
}

/// Checks `audio` against `limits`; `what` names it in the error ("reference audio ref.wav").
pub fn check_audio(audio: &Audio, limits: &AudioLimits, what: &str) -> Result<()> {
    if audio.sample_rate == 0 {
        return Err(Error::invalid(format!("{what}: sample rate is 0")));
    }
    if audio.samples.is_empty() {
        return Err(Error::invalid(format!("{what}: contains no samples")));
    }
    if let Some(i) = audio.samples.iter().position(|v| !v.is_finite()) {
        return Err(Error::invalid(format!("{what}: sample {i} is not a finite number")));
    }
    let secs = audio.duration_secs();
    if secs < limits.min_seconds {
        return Err(Error::invalid(format!(
            "{what}: too short ({secs:.2} s); at least {:.1} s of speech is needed",
            limits.min_seconds
        )));
    }
    if let Some(max) = limits.max_seconds.filter(|&m| secs > m) {
        return Err(Error::invalid(format!("{what}: too long ({secs:.1} s); at most {max:.0} s is accepted")));
    }
    let peak = peak_dbfs(&audio.samples);
    if peak <= limits.silence_peak_dbfs {
        let level = if peak.is_finite() { format!("peak {peak:.1} dBFS") } else { "all samples are zero".into() };
        return Err(Error::invalid(format!(
            "{what}: silent ({level}, threshold {:.0} dBFS); record or pick audio with speech in it",
            limits.silence_peak_dbfs
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silent_short_and_broken_audio_are_named() {
        let l = AudioLimits::default();
        let a = |samples: Vec<f32>| Audio::new(samples, 16_000);
        let e = |x: Audio| check_audio(&x, &l, "ref.wav").unwrap_err().to_string();
        assert!(e(a(vec![0.0; 32_000])).contains("silent (all samples are zero"));
        assert!(e(a(vec![1e-4; 32_000])).contains("silent (peak -80.0 dBFS"));
        assert!(e(a(vec![0.3; 8_000])).contains("too short (0.50 s)"));
        assert!(e(a(vec![])).contains("no samples"));
        let mut nan = vec![0.3; 32_000];
        nan[7] = f32::NAN;
        assert!(e(a(nan)).contains("sample 7 is not a finite"));
        assert!(check_audio(&a(vec![0.3; 32_000]), &l, "ref.wav").is_ok());
    }
}
