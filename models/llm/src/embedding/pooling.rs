//! Pooling a sequence's hidden states into one vector, and the normalisation and Matryoshka
//! truncation after it (sentence-transformers' Pooling and Normalize modules).

/// How a sequence's rows become one vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The last token's row (decoders: the only row that has seen the whole text).
    LastToken,
    /// The mean of every row.
    Mean,
    /// The first token's row.
    Cls,
}

impl Pooling {
    /// The mode named by a Pooling config: v5's `pooling_mode` value or the suffix of a pre-v5
    /// `pooling_mode_*` flag.
    pub fn from_mode(mode: &str) -> Result<Self, String> {
        match mode {
            "lasttoken" => Ok(Pooling::LastToken),
            "mean" | "mean_tokens" => Ok(Pooling::Mean),
            "cls" | "cls_token" => Ok(Pooling::Cls),
            other => Err(format!("pooling mode `{other}` is not supported (supported: lasttoken, mean, cls)")),
        }
    }

    /// Pools `rows` (row-major `[token][hidden]`, at least one token) into `out` (hidden).
    pub fn pool(self, rows: &[f32], hidden: usize, out: &mut Vec<f32>) {
        let tokens = rows.len() / hidden;
        match self {
            Pooling::LastToken => out.extend_from_slice(&rows[(tokens - 1) * hidden..]),
            Pooling::Cls => out.extend_from_slice(&rows[..hidden]),
            Pooling::Mean => {
                let start = out.len();
                out.resize(start + hidden, 0.0);
                let acc = &mut out[start..];
                for row in rows.chunks(hidden) {
                    acc.iter_mut().zip(row).for_each(|(a, &x)| *a += x);
                }
                acc.iter_mut().for_each(|a| *a /= tokens as f32);
            }
        }
    }
}

/// Scales `v` to unit L2 norm (a zero vector stays zero, as torch's `normalize` leaves it).
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-12);
    v.iter_mut().for_each(|x| *x /= norm);
}

/// Keeps the first `keep` components of each `full`-long vector in `values`.
pub fn truncate(values: &[f32], full: usize, keep: usize) -> Vec<f32> {
    values.chunks(full).flat_map(|v| &v[..keep]).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_picks_its_rows() {
        let rows = [1.0, 2.0, 3.0, 4.0, 5.0, 9.0];
        let pooled = |p: Pooling| {
            let mut out = Vec::new();
            p.pool(&rows, 2, &mut out);
            out
        };
        assert_eq!(pooled(Pooling::LastToken), [5.0, 9.0]);
        assert_eq!(pooled(Pooling::Cls), [1.0, 2.0]);
        assert_eq!(pooled(Pooling::Mean), [3.0, 5.0]);
    }

    #[test]
    fn normalize_gives_unit_length_and_truncate_keeps_prefixes() {
        let mut v = [3.0, 4.0];
        l2_normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        assert_eq!(truncate(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 3, 2), [1.0, 2.0, 4.0, 5.0]);
    }
}
