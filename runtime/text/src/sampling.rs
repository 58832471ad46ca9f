//! The sampling chain on last-position logits: repeat penalty, then greedy when temperature is
//! 0, else temperature -> top-k -> top-p -> min-p -> a seeded categorical draw (the order
//! transformers' logits processors use).

use rand::{rngs::StdRng, Rng, SeedableRng};

use infer_sdk::text::types::GenerateConfig;

pub struct Sampler {
    temperature: f32,
    top_k: usize,
    top_p: f32,
    min_p: f32,
    repeat_penalty: f32,
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
            rng,
        }
    }

    /// Picks the next id from `logits` given the ids seen so far (prompt and output).
    pub fn sample(&mut self, logits: &mut [f32], history: &[u32]) -> u32 {
        if self.repeat_penalty != 1.0 {
            apply_repeat_penalty(logits, history, self.repeat_penalty);
        }
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
