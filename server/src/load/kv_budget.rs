//! The KV-memory budget of the text models' slots, checked at start: each slot may fill its
//! cache to the model's context, so slots × context × KV bytes must fit in `kv_budget_mib` (0:
//! half of the memory available at start). Past it the slots are lowered until it fits; when one
//! slot per model does not fit, the server refuses to start.

use anyhow::{bail, Result};
use infer_core::{DType, ModelInfo};

/// Positions a cache buffer may hold beyond its window: it grows, and a rotating one keeps its
/// room, in chunks of this many (core/src/text/kv_cache.rs `CHUNK`).
const CACHE_CHUNK: usize = 256;

const MIB: u64 = 1 << 20;

/// One text model's share.
#[derive(Debug, Clone)]
pub struct KvNeed {
    pub name: String,
    /// Bytes of the largest KV cache one sequence can hold.
    pub per_slot: u64,
    pub slots: usize,
}

/// The largest KV cache of one sequence: keys and values of every layer and KV head over every
/// position it may keep (the rotating cache's length, else the trained context; a model with
/// neither counts `fallback_positions`). Sliding-window layers are counted at full length: an
/// estimate from above.
pub fn per_slot_bytes(info: &ModelInfo, context_len: usize, kv_dtype: DType, fallback_positions: usize) -> u64 {
    let positions = match (context_len, info.max_position_embeddings) {
        (0, 0) => fallback_positions,
        (0, max) => max,
        (c, _) => c,
    } + CACHE_CHUNK;
    let per_position = kv_dtype.storage_bytes(2 * info.num_kv_heads * info.head_dim) as u64;
    (info.num_layers as u64).saturating_mul(positions as u64).saturating_mul(per_position)
}

/// The budget in bytes: `kv_budget_mib`, else half of MemAvailable (`None` where it cannot be
/// read: no check).
pub fn budget_bytes(kv_budget_mib: u64) -> Option<u64> {
    if kv_budget_mib > 0 {
        return Some(kv_budget_mib.saturating_mul(MIB));
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    mem_available(&meminfo).map(|b| b / 2)
}

fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

fn mib(bytes: u64) -> u64 {
    bytes.div_ceil(MIB)
}

/// Lowers `needs`' slots until their caches fit in `budget`: the largest consumer first, one
/// slot at a time. Returns the line to print when it lowered any, and an error (one line) when
/// not even one slot per model fits.
pub fn fit(needs: &mut [KvNeed], budget: u64, source: &str) -> Result<Option<String>> {
    let one_each: u64 = needs.iter().map(|n| n.per_slot).sum();
    if one_each > budget {
        let each: Vec<String> = needs.iter().map(|n| format!("{} {} MiB", n.name, mib(n.per_slot))).collect();
        bail!(
            "the KV cache of one slot per text model takes {} MiB ({}), over the KV budget of {} MiB ({source}): \
             lower context_len, set kv_dtype = \"f16\", or raise kv_budget_mib",
            mib(one_each),
            each.join(", "),
            mib(budget)
        );
    }
    let total = |needs: &[KvNeed]| needs.iter().map(|n| n.per_slot.saturating_mul(n.slots as u64)).sum::<u64>();
    let asked: Vec<usize> = needs.iter().map(|n| n.slots).collect();
    let before = total(needs);
    if before <= budget {
        return Ok(None);
    }
    while total(needs) > budget {
        let largest = needs
            .iter_mut()
            .filter(|n| n.slots > 1)
            .max_by_key(|n| n.per_slot.saturating_mul(n.slots as u64))
            .expect("one slot each fits, so some model has more than one");
        largest.slots -= 1;
    }
    let changed: Vec<String> = needs
        .iter()
        .zip(asked)
        .filter(|(n, a)| n.slots != *a)
        .map(|(n, a)| format!("{} {a} -> {} slots ({} MiB each)", n.name, n.slots, mib(n.per_slot)))
        .collect();
    Ok(Some(format!(
        "kv budget: the text models' KV caches would take up to {} MiB, over the budget of {} MiB ({source}): {}",
        mib(before),
        mib(budget),
        changed.join(", ")
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn need(name: &str, per_slot_mib: u64, slots: usize) -> KvNeed {
        KvNeed { name: name.into(), per_slot: per_slot_mib * MIB, slots }
    }

    #[test]
    fn gemma_3_270m_takes_its_context_in_f32() {
        let info = ModelInfo {
            num_layers: 18,
            num_kv_heads: 1,
            head_dim: 256,
            max_position_embeddings: 32768,
            ..Default::default()
        };
        assert_eq!(per_slot_bytes(&info, 0, DType::F32, 0), 18 * (32768 + 256) * 2 * 256 * 4);
        // A rotating cache counts its length; f16 halves it.
        assert_eq!(per_slot_bytes(&info, 1024, DType::F16, 0), 18 * (1024 + 256) * 2 * 256 * 2);
    }

    #[test]
    fn lowers_the_largest_consumer_until_it_fits() {
        let mut needs = vec![need("a", 100, 8), need("b", 10, 4)];
        let line = fit(&mut needs, 500 * MIB, "kv_budget_mib").unwrap().unwrap();
        assert_eq!((needs[0].slots, needs[1].slots), (4, 4), "{line}");
        assert!(line.contains("a 8 -> 4 slots") && !line.contains("b 4"), "{line}");
        assert!(fit(&mut needs, 500 * MIB, "x").unwrap().is_none());
    }

    #[test]
    fn refuses_when_one_slot_each_does_not_fit() {
        let e = fit(&mut [need("a", 100, 1), need("b", 10, 4)], 50 * MIB, "kv_budget_mib").unwrap_err().to_string();
        assert!(e.contains("110 MiB") && e.contains("budget of 50 MiB") && !e.contains('\n'), "{e}");
    }

    #[test]
    fn reads_mem_available() {
        let meminfo = "MemTotal:       24684084 kB\nMemFree: 1 kB\nMemAvailable:   2048 kB\n";
        assert_eq!(mem_available(meminfo), Some(2048 * 1024));
        assert_eq!(mem_available("MemTotal: 1 kB\n"), None);
    }
}
