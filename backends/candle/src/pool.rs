//! candle's barrier pool as the kernels' [`Pool`]: the kernels run on the threads candle's own
//! ops use (`CANDLE_NUM_THREADS`).

use infer_cpu_kernels::Pool;

/// candle's pool (`candle_core::utils::barrier_pool`).
#[derive(Clone, Copy, Debug, Default)]
pub struct CandlePool;

impl Pool for CandlePool {
    fn threads(&self) -> usize {
        candle_core::utils::barrier_pool().n_workers() + 1
    }

    fn execute_chunked<F: Fn(std::ops::Range<usize>) + Sync>(&self, items: usize, f: F) {
        candle_core::utils::barrier_pool().execute_chunked(items, f)
    }
}
