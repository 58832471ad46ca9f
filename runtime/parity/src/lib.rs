//! What a model plugin's author needs to check a model against its reference implementation:
//! the reference writes a tiny random checkpoint and a `golden.json` (prompt ids, its greedy
//! continuation, the last prompt position's logits; tools/fixtures writes them with transformers),
//! and [`check_text_model`] runs greedy decoding and the logits on the loaded model and says where
//! they part. Comparisons are NaN-aware: a non-finite output never passes a tolerance.
//!
//! ```no_run
//! # fn demo(model: &dyn infer_sdk::TextModel) {
//! let golden = infer_parity::Golden::read("tests/fixtures/olmo2/base".as_ref()).unwrap();
//! let report = infer_parity::check_text_model(model, &golden, 1e-4).unwrap();
//! println!("{} cases, logits within {}", report.cases, report.max_logit_diff);
//! # }
//! ```

use std::fmt;
use std::path::Path;

use infer_sdk::{GenerateConfig, TextModel};
use serde::Deserialize;

/// `golden.json`: what the reference recorded for each prompt.
#[derive(Debug, Clone, Deserialize)]
pub struct Golden {
    /// Which reference wrote it (library versions).
    pub reference: String,
    pub cases: Vec<GoldenCase>,
}

/// One prompt and the reference's outputs for it.
#[derive(Debug, Clone, Deserialize)]
pub struct GoldenCase {
    pub prompt: String,
    /// The prompt's token ids (as the reference's tokenizer made them).
    pub ids: Vec<u32>,
    /// Logits at the last prompt position, the distribution of the next token.
    pub last_logits: Vec<f32>,
    /// The reference's greedy continuation.
    pub greedy: Vec<u32>,
}

impl Golden {
    /// Reads `dir/golden.json`.
    pub fn read(dir: &Path) -> Result<Golden, Mismatch> {
        let path = dir.join("golden.json");
        let text = std::fs::read_to_string(&path).map_err(|e| Mismatch::Golden(format!("{}: {e}", path.display())))?;
        serde_json::from_str(&text).map_err(|e| Mismatch::Golden(format!("{}: {e}", path.display())))
    }
}

/// What a passing check measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ParityReport {
    pub cases: usize,
    /// The largest absolute logit difference over every case.
    pub max_logit_diff: f32,
}

/// Where a model parts from its reference.
#[derive(Debug)]
pub enum Mismatch {
    /// The golden file is missing or malformed.
    Golden(String),
    /// The model failed to run.
    Model(infer_sdk::Error),
    /// Greedy ids differ; `at` is the first differing position.
    Ids { prompt: String, at: usize, expected: Vec<u32>, got: Vec<u32> },
    /// Logits differ by more than the tolerance (infinite: a NaN or infinity, or another length).
    Logits { prompt: String, diff: f32, tolerance: f32 },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Golden(e) => write!(f, "golden file: {e}"),
            Mismatch::Model(e) => write!(f, "model: {e}"),
            Mismatch::Ids { prompt, at, expected, got } => {
                write!(f, "greedy ids for {prompt:?} differ at position {at}: expected {expected:?}, got {got:?}")
            }
            Mismatch::Logits { prompt, diff, tolerance } => {
                write!(f, "last logits for {prompt:?} differ by {diff} (tolerance {tolerance})")
            }
        }
    }
}

impl std::error::Error for Mismatch {}

impl From<infer_sdk::Error> for Mismatch {
    fn from(e: infer_sdk::Error) -> Self {
        Mismatch::Model(e)
    }
}

/// Runs every case of `golden` on `model`: greedy ids must be equal, the last prompt position's
/// logits within `logits_tolerance` (absolute). The first mismatch is the error, and so is a
/// golden with no cases.
pub fn check_text_model(
    model: &dyn TextModel,
    golden: &Golden,
    logits_tolerance: f32,
) -> Result<ParityReport, Mismatch> {
    // A check with nothing to compare would pass whatever the model does.
    if golden.cases.is_empty() {
        return Err(Mismatch::Golden("it has no cases".into()));
    }
    let mut max_logit_diff = 0.0f32;
    for case in &golden.cases {
        let gen = GenerateConfig { max_tokens: case.greedy.len(), ignore_eos: true, ..Default::default() };
        let got = model.generate_ids(&case.ids, &gen)?.map(|t| t.map(|t| t.id)).collect::<Result<Vec<u32>, _>>()?;
        if got != case.greedy {
            let at = got.iter().zip(&case.greedy).take_while(|(a, b)| a == b).count();
            return Err(Mismatch::Ids { prompt: case.prompt.clone(), at, expected: case.greedy.clone(), got });
        }
        // Any continuation token will do: the logits asked for are those before it.
        let next = case.greedy.first().copied().unwrap_or(0);
        let logits = model.continuation_logits(&case.ids, &[next])?.into_iter().next().unwrap_or_default();
        let diff = max_abs_diff(&logits, &case.last_logits);
        if diff.is_nan() || diff > logits_tolerance {
            return Err(Mismatch::Logits { prompt: case.prompt.clone(), diff, tolerance: logits_tolerance });
        }
        max_logit_diff = worst([max_logit_diff, diff]);
    }
    Ok(ParityReport { cases: golden.cases.len(), max_logit_diff })
}

/// Largest absolute difference between two slices; infinite where either holds a NaN or an
/// infinity, or where their lengths differ, so that no tolerance passes such an output.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return f32::INFINITY;
    }
    worst(a.iter().zip(b).map(|(x, y)| (x - y).abs()))
}

/// The largest of some non-negative errors; infinite when any is NaN or infinite (a fold with
/// `f32::max` would drop NaN: `0.0f32.max(NaN)` is 0).
pub fn worst(errors: impl IntoIterator<Item = f32>) -> f32 {
    errors.into_iter().fold(0.0, |m, e| if e.is_finite() { m.max(e) } else { f32::INFINITY })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_finite_and_misshapen_outputs_never_pass() {
        assert_eq!(max_abs_diff(&[1.0, 2.0], &[1.0, 2.5]), 0.5);
        assert_eq!(max_abs_diff(&[f32::NAN, 2.0], &[1.0, 2.0]), f32::INFINITY);
        assert_eq!(max_abs_diff(&[1.0, f32::INFINITY], &[1.0, 2.0]), f32::INFINITY);
        assert_eq!(max_abs_diff(&[1.0], &[1.0, 2.0]), f32::INFINITY);
        assert_eq!(worst([0.1, f32::NAN, 0.2]), f32::INFINITY);
    }

    #[test]
    fn a_golden_file_that_is_not_there_is_an_error() {
        let err = Golden::read(Path::new("/nonexistent-infer-parity")).unwrap_err();
        assert!(matches!(err, Mismatch::Golden(_)), "{err}");
    }
}
