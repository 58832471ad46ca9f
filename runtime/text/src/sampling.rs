//! The sampling chain on last-position logits: the adjustments (repeat penalty, OpenAI's
//! presence and frequency penalties, logit bias), then greedy when temperature is 0, else
//! temperature -> top-k -> top-p -> min-p -> a seeded categorical draw (the order transformers'
//! logits processors use). Each row is sampled alone, so a sequence draws the same whatever else
//! is in its batch.

use rand::{rngs::StdRng, Rng, SeedableRng};

use infer_sdk::text::sequence_batch::TokenLogprobs;
use infer_sdk::text::types::GenerateConfig;

pub struct Sampler {
    temperature: f32,
    top_k: usize,
    top_p: f32,
    min_p: f32,
    repeat_penalty: f32,
    presence_penalty: f32,
    frequency_penalty: f32,
    logit_bias: Vec<(u32, f32)>,
    rng: StdRng,
}

impl Sampler {
    pub fn new(cfg: &GenerateConfig) -> Self {
        let rng = match cfg.seed {
            Some(s) => StdRng::seed_from_u64(s),
            None => StdRng::from_os_rng(),
        };
        Sampler {
            temperature: cfg.temperature,
            top_k: cfg.top_k,
            top_p: cfg.top_p,
            min_p: cfg.min_p,
            repeat_penalty: cfg.repeat_penalty,
            presence_penalty: cfg.presence_penalty,
            frequency_penalty: cfg.frequency_penalty,
            logit_bias: cfg.logit_bias.clone(),
            rng,
        }
    }

    /// Picks the next id from `logits` given the ids seen so far (prompt and output), with no
    /// presence or frequency penalty (they count generated ids: [`Sampler::sample_generated`]).
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> u32 {
        self.sample_generated(logits, history, &[])
    }

    /// [`Sampler::sample`] for a generation: `generated` (the tail of `history` after the
    /// prompt) is what the presence and frequency penalties count.
    pub fn sample_generated(&mut self, logits: &mut [f32], history: &[u32], generated: &[u32]) -> u32 {
        self.adjust(logits, history, generated);
        self.pick(logits)
    }

    /// The adjustments before the draw, in place: repeat penalty over `history`, presence and
    /// frequency penalties over `generated`, then the logit bias (last, so +100 forces a token
    /// whatever the penalties did).
    pub fn adjust(&self, logits: &mut [f32], history: &[u32], generated: &[u32]) {
        if self.repeat_penalty != 1.0 {
            apply_repeat_penalty(logits, history, self.repeat_penalty);
        }
        if self.presence_penalty != 0.0 || self.frequency_penalty != 0.0 {
            apply_openai_penalties(logits, generated, self.presence_penalty, self.frequency_penalty);
        }
        for &(id, bias) in &self.logit_bias {
            if let Some(l) = logits.get_mut(id as usize) {
                *l += bias;
            }
        }
    }

    /// Draws from adjusted `logits` (greedy at temperature 0).
    pub fn pick(&mut self, logits: &[f32]) -> u32 {
        if self.temperature <= 0.0 {
            return argmax(logits);
        }
        // Candidates as (id, logit), best first once truncated.
        let mut cands: Vec<(u32, f32)> =
            logits.iter().enumerate().map(|(i, &l)| (i as u32, l / self.temperature)).collect();
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1);
        if self.top_k > 0 && self.top_k < cands.len() {
            cands.select_nth_unstable_by(self.top_k - 1, by_logit);
            cands.truncate(self.top_k);
        }
        cands.sort_unstable_by(by_logit);
        let max = cands[0].1;
        let mut probs: Vec<f32> = cands.iter().map(|c| (c.1 - max).exp()).collect();
        let total: f32 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
        let mut keep = probs.len();
        if self.top_p < 1.0 {
            let mut acc = 0.0;
            for (i, p) in probs.iter().enumerate() {
                acc += p;
                if acc >= self.top_p {
                    keep = i + 1;
                    break;
                }
            }
        }
        if self.min_p > 0.0 {
            let floor = self.min_p * probs[0];
            keep = keep.min(probs.iter().take_while(|&&p| p >= floor).count().max(1));
        }
        let mass: f32 = probs[..keep].iter().sum();
        let mut r = self.rng.random::<f32>() * mass;
        for i in 0..keep {
            r -= probs[i];
            if r <= 0.0 {
                return cands[i].0;
            }
        }
        cands[keep - 1].0
    }
}

/// Index of the largest logit (the first one on ties, as torch.argmax). NaNs never win (and a
/// NaN first logit, which nothing compares greater than, makes it 0).
pub fn argmax(logits: &[f32]) -> u32 {
    // The same answer as a scan keeping the first strictly greater value, in two vectorizable
    // passes over the (vocabulary-sized) row: the maximum lane by lane, then its first index.
    const LANES: usize = 16;
    let Some(&first) = logits.first() else { return 0 };
    let mut acc = [first; LANES];
    let mut chunks = logits.chunks_exact(LANES);
    for c in &mut chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a = if v > *a { v } else { *a };
        }
    }
    let mut max = first;
    for &v in acc.iter().chain(chunks.remainder()) {
        if v > max {
            max = v;
        }
    }
    if max.is_nan() {
        return 0;
    }
    let chunk = logits.chunks(LANES).position(|c| c.iter().fold(false, |hit, &v| hit | (v == max))).unwrap_or(0);
    let within = logits[chunk * LANES..].iter().position(|&v| v == max).unwrap_or(0);
    (chunk * LANES + within) as u32
}

/// The log-softmax of `logits` at `id` and at the `top` most likely ids (most likely first; ties
/// by lower id). NaN logits count as impossible.
pub fn token_logprobs(logits: &[f32], id: u32, top: usize) -> TokenLogprobs {
    let max = logits.iter().copied().filter(|l| !l.is_nan()).fold(f32::NEG_INFINITY, f32::max);
    // In f64: a vocabulary of 10^5 terms summed in f32 loses the small ones.
    let sum: f64 = logits.iter().filter(|l| !l.is_nan()).map(|&l| ((l - max) as f64).exp()).sum();
    let log_z = max as f64 + sum.ln();
    let logprob = |l: f32| if l.is_nan() { f32::NEG_INFINITY } else { (l as f64 - log_z) as f32 };
    let mut ids: Vec<u32> = (0..logits.len() as u32).collect();
    let order = |a: &u32, b: &u32| logprob(logits[*b as usize]).total_cmp(&logprob(logits[*a as usize])).then(a.cmp(b));
    let top = top.min(ids.len());
    if top > 0 && top < ids.len() {
        ids.select_nth_unstable_by(top - 1, order);
    }
    ids.truncate(top);
    ids.sort_unstable_by(order);
    TokenLogprobs {
        logprob: logits.get(id as usize).map_or(f32::NEG_INFINITY, |&l| logprob(l)),
        top: ids.into_iter().map(|i| (i, logprob(logits[i as usize]))).collect(),
    }
}

/// OpenAI's penalties: an id generated `n > 0` times loses `presence + frequency · n`.
pub fn apply_openai_penalties(logits: &mut [f32], generated: &[u32], presence: f32, frequency: f32) {
    let mut ids = generated.to_vec();
    ids.sort_unstable();
    for run in ids.chunk_by(|a, b| a == b) {
        if let Some(l) = logits.get_mut(run[0] as usize) {
            *l -= presence + frequency * run.len() as f32;
        }
    }
}

/// CTRL-style penalty: positive logits of seen ids are divided by `penalty`, negative ones
/// multiplied (as transformers' RepetitionPenaltyLogitsProcessor).
pub fn apply_repeat_penalty(logits: &mut [f32], history: &[u32], penalty: f32) {
    let mut seen = history.to_vec();
    seen.sort_unstable();
    seen.dedup();
    for id in seen {
        if let Some(l) = logits.get_mut(id as usize) {
            *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(t: f32) -> GenerateConfig {
        GenerateConfig { temperature: t, seed: Some(7), ..Default::default() }
    }

    #[test]
    fn greedy_takes_first_max() {
        let mut s = Sampler::new(&cfg(0.0));
        assert_eq!(s.sample(&mut [0.1, 3.0, 3.0, -1.0], &[]), 1);
    }

    /// The sequential definition: the first index holding a strictly greater value.
    fn argmax_scan(logits: &[f32]) -> u32 {
        let mut best = 0;
        for (i, &v) in logits.iter().enumerate() {
            if v > logits[best] {
                best = i;
            }
        }
        best as u32
    }

    #[test]
    fn argmax_matches_the_sequential_scan() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut rows: Vec<Vec<f32>> = (0..200)
            .map(|r| {
                (0..(r * 7 % 100))
                    .map(|_| {
                        s ^= s << 13;
                        s ^= s >> 7;
                        s ^= s << 17;
                        // Few distinct values, so ties are common.
                        ((s >> 59) as f32 - 16.0) / 4.0
                    })
                    .collect()
            })
            .collect();
        rows.push(vec![]);
        rows.push(vec![f32::NAN, 1.0, 2.0]);
        rows.push(vec![1.0, f32::NAN, 3.0, 3.0]);
        rows.push(vec![-0.0, 0.0, -1.0]);
        rows.push(vec![0.0, -0.0]);
        rows.push(vec![f32::NEG_INFINITY; 40]);
        rows.push((0..40).map(|i| if i == 33 { f32::INFINITY } else { i as f32 }).collect());
        for row in &rows {
            assert_eq!(argmax(row), argmax_scan(row), "{row:?}");
        }
    }

    #[test]
    fn repeat_penalty_changes_winner() {
        let mut s = Sampler::new(&GenerateConfig { repeat_penalty: 2.0, ..cfg(0.0) });
        assert_eq!(s.sample(&mut [2.0, 1.5, -1.0], &[0]), 1);
    }

    #[test]
    fn openai_penalties_subtract_presence_once_and_frequency_per_occurrence() {
        let mut logits = [1.0, 1.0, 1.0, 1.0];
        apply_openai_penalties(&mut logits, &[2, 0, 2, 2, 9], 0.5, 0.25);
        assert_eq!(logits, [1.0 - 0.75, 1.0, 1.0 - 1.25, 1.0]);
        // Negative values reward repeats, as the API allows.
        let mut logits = [0.0, 0.0];
        apply_openai_penalties(&mut logits, &[1], -1.0, -1.0);
        assert_eq!(logits, [0.0, 2.0]);
    }

    #[test]
    fn presence_penalty_counts_generated_ids_not_the_prompt() {
        let cfg = GenerateConfig { presence_penalty: 2.0, ..cfg(0.0) };
        // Id 0 is in the prompt only: untouched, it wins.
        assert_eq!(Sampler::new(&cfg).sample_generated(&mut [2.0, 1.5, -1.0], &[0, 1], &[1]), 0);
        // Generated, it loses 2 and id 1 wins.
        assert_eq!(Sampler::new(&cfg).sample_generated(&mut [2.0, 1.5, -1.0], &[0], &[0]), 1);
        // `sample` (no generated ids) leaves the logits alone.
        assert_eq!(Sampler::new(&cfg).sample(&mut [2.0, 1.5, -1.0], &[0]), 0);
    }

    #[test]
    fn logit_bias_forces_or_bans_and_ignores_ids_past_the_vocabulary() {
        let ban = GenerateConfig { logit_bias: vec![(2, -100.0), (99, 5.0)], ..cfg(0.0) };
        assert_eq!(Sampler::new(&ban).sample(&mut [0.0, 0.5, 2.0], &[]), 1);
        let force = GenerateConfig { logit_bias: vec![(0, 100.0)], frequency_penalty: 1.0, ..cfg(1.0) };
        let mut s = Sampler::new(&force);
        for _ in 0..50 {
            assert_eq!(s.sample_generated(&mut [0.0, 3.0, 2.0], &[0], &[0, 0, 0]), 0);
        }
    }

    #[test]
    fn logprobs_are_the_log_softmax_with_the_best_ids_first() {
        let logits = [1.0, 3.0, 2.0, 3.0, f32::NAN];
        let lp = token_logprobs(&logits, 2, 3);
        let z = (1f64.exp() + 2.0 * 3f64.exp() + 2f64.exp()).ln();
        assert!((lp.logprob as f64 - (2.0 - z)).abs() < 1e-6, "{lp:?}");
        assert_eq!(lp.top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 3, 2]);
        assert_eq!(lp.top[0].1, lp.top[1].1);
        let all = token_logprobs(&logits, 4, 10);
        assert_eq!(all.top.len(), 5);
        assert_eq!(all.logprob, f32::NEG_INFINITY);
        let mass: f64 = all.top.iter().map(|t| (t.1 as f64).exp()).sum();
        assert!((mass - 1.0).abs() < 1e-6, "{mass}");
        assert!(token_logprobs(&logits, 1, 0).top.is_empty());
    }

    #[test]
    fn top_k_one_is_greedy() {
        let mut s = Sampler::new(&GenerateConfig { top_k: 1, ..cfg(1.0) });
        for _ in 0..20 {
            assert_eq!(s.sample(&mut [0.0, 0.5, 2.0, 1.9], &[]), 2);
        }
    }

    #[test]
    fn top_p_restricts_to_nucleus() {
        let mut s = Sampler::new(&GenerateConfig { top_p: 0.5, ..cfg(1.0) });
        // p(2) ≈ 0.84 alone covers 0.5.
        for _ in 0..50 {
            assert_eq!(s.sample(&mut [0.0, 0.0, 3.0, 0.0], &[]), 2);
        }
    }

    #[test]
    fn min_p_drops_unlikely() {
        let mut s = Sampler::new(&GenerateConfig { min_p: 0.5, ..cfg(1.0) });
        for _ in 0..50 {
            let id = s.sample(&mut [5.0, 4.8, -3.0, -3.0], &[]);
            assert!(id == 0 || id == 1);
        }
    }

    #[test]
    fn seeded_draws_repeat_and_cover_support() {
        let draw = || {
            let mut s = Sampler::new(&cfg(1.0));
            (0..200).map(|_| s.sample(&mut [0.0, 0.1, 0.2, 0.3], &[])).collect::<Vec<_>>()
        };
        let a = draw();
        assert_eq!(a, draw());
        for id in 0..4 {
            assert!(a.contains(&id), "id {id} never drawn");
        }
    }
}
