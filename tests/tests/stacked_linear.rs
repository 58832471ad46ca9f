//! Linear layers stacked into one product (`infer_layers::StackedLinear`: q/k/v, gate/up) give
//! exactly the outputs of the separate layers: with weights quantized at load (stacked) and in
//! f32 (kept separate), for one row (decode) and several (prefill), with and without biases.

use infer_backend_candle::CandleBackend;
use infer_core::{DType, Tensor, Weights};
use infer_layers::{Linear, StackedLinear};

const IN: usize = 64;
// 30 rows: the third part starts off the kernels' 4-row groups when stacked.
const OUTS: [usize; 3] = [96, 30, 38];

/// Three linears `p0..p2` with deterministic, varied weights and biases.
fn checkpoint(dir: &std::path::Path) {
    let mut data: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    for (p, &out) in OUTS.iter().enumerate() {
        let value = |i: usize| (((i * 7919 + p * 104_729) % 2003) as f32 / 2003.0 - 0.5) * (1.0 + p as f32);
        let bytes = |n: usize| (0..n).flat_map(|i| value(i).to_le_bytes()).collect::<Vec<u8>>();
        data.push((format!("p{p}.weight"), vec![out, IN], bytes(out * IN)));
        data.push((format!("p{p}.bias"), vec![out], bytes(out)));
    }
    let tensors: Vec<_> =
        data.iter().map(|(n, s, b)| (n.as_str(), safetensors::Dtype::F32, s.clone(), &b[..])).collect();
    infer_tests::write_safetensors(dir, &tensors);
}

fn bits(t: &Tensor) -> Vec<u32> {
    t.to_vec_f32().unwrap().iter().map(|v| v.to_bits()).collect()
}

#[test]
fn stacked_outputs_equal_the_separate_layers_bit_for_bit() {
    let tmp = tempfile::tempdir().unwrap();
    checkpoint(tmp.path());
    let backend = CandleBackend::backend().unwrap();
    for quant in [Some(DType::Q8_0), None] {
        let w = Weights::from_dir(tmp.path(), &backend, DType::F32).unwrap().with_linear_quant(quant).unwrap();
        for bias in [false, true] {
            let parts: Vec<(Weights, usize)> =
                OUTS.iter().enumerate().map(|(p, &out)| (w.prefixed(format!("p{p}")), out)).collect();
            let stacked = StackedLinear::load(&parts, IN, bias).unwrap();
            let separate: Vec<Linear> = parts.iter().map(|(w, out)| Linear::load(w, *out, IN, bias).unwrap()).collect();
            for rows in [1, 3] {
                let x: Vec<f32> = (0..rows * IN).map(|i| (i as f32 * 0.37).sin()).collect();
                let x = Tensor::from_f32(&backend, &x, &[1, rows, IN]).unwrap();
                let ys = stacked.forward(&x).unwrap();
                assert_eq!(ys.len(), OUTS.len());
                for (p, (y, l)) in ys.iter().zip(&separate).enumerate() {
                    let want = l.forward(&x).unwrap();
                    assert_eq!(y.dims(), want.dims(), "{quant:?} bias {bias} rows {rows} part {p}");
                    assert_eq!(bits(y), bits(&want), "{quant:?} bias {bias} rows {rows} part {p}");
                }
            }
        }
    }
}
