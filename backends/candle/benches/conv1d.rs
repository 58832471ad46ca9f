//! Dense f32 convolutions of an audio codec's decoder (Qwen3-TTS's 12 Hz tokenizer, 2 s of
//! audio): the default path (the direct stride-1 kernel where k > 1) against the column buffer +
//! gemm, side by side in one run, and the upsamplers' transposed convolutions. Prints the best
//! milliseconds per call and GFLOP/s.
//!
//! `cargo bench -p infer-backend-candle --bench conv1d [-- NAME...]`; threads:
//! `CANDLE_NUM_THREADS`. NAME: run the rows whose label contains it.

mod common;

use common::{best, tensor};
use infer_backend_candle::conv::{conv1d_using, conv_transpose1d, ConvParams, DenseConv};

/// (label, cin, cout, k, dilation, input length).
const SHAPES: [(&str, usize, usize, usize, usize, usize); 8] = [
    ("conv-in 1024->1536 k7", 1024, 1536, 7, 1, 106),
    ("block1 res k7 d9", 768, 768, 7, 9, 854),
    ("block1 res k1", 768, 768, 1, 1, 800),
    ("block2 res k7 d3", 384, 384, 7, 3, 4018),
    ("block3 res k7 d1", 192, 192, 7, 1, 16006),
    ("block4 res k7 d9", 96, 96, 7, 9, 48054),
    ("block4 res k1", 96, 96, 1, 1, 48000),
    ("conv-out 96->1 k7", 96, 1, 7, 1, 48006),
];

/// (label, cin, cout, stride (kernel 2·stride), input length): the decoder blocks' upsamplers.
const TRANSPOSED: [(&str, usize, usize, usize, usize); 4] = [
    ("up1 1536->768 s8", 1536, 768, 8, 100),
    ("up2 768->384 s5", 768, 384, 5, 800),
    ("up3 384->192 s4", 384, 192, 4, 4000),
    ("up4 192->96 s3", 192, 96, 3, 16000),
];

fn main() {
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    println!("{:<24} {:>10} {:>10} {:>8} {:>8} {:>6}", "shape", "gemm ms", "auto ms", "gemm GF", "auto GF", "ratio");
    for (seed, &(label, cin, cout, k, dilation, l)) in SHAPES.iter().enumerate() {
        if !filter.is_empty() && !filter.iter().any(|f| label.contains(f.as_str())) {
            continue;
        }
        let x = tensor(&[1, cin, l], 2 * seed as u64 + 1);
        let w = tensor(&[cout, cin, k], 2 * seed as u64 + 2);
        let b = tensor(&[cout], 7);
        let p = ConvParams { stride: 1, padding: 0, dilation, groups: 1, output_padding: 0 };
        let l_out = l - dilation * (k - 1);
        let flop = 2.0 * (cout * cin * k * l_out) as f64;
        let time = |how| {
            best(5, || {
                conv1d_using(&x, &w, Some(&b), p, how).unwrap();
            })
        };
        let (g, d) = (time(DenseConv::Gemm), time(DenseConv::Auto));
        println!(
            "{label:<24} {:>10.2} {:>10.2} {:>8.1} {:>8.1} {:>6.2}",
            g * 1e3,
            d * 1e3,
            flop / g / 1e9,
            flop / d / 1e9,
            g / d
        );
    }
    for (seed, &(label, cin, cout, stride, l)) in TRANSPOSED.iter().enumerate() {
        if !filter.is_empty() && !filter.iter().any(|f| label.contains(f.as_str())) {
            continue;
        }
        let k = 2 * stride;
        let x = tensor(&[1, cin, l], 2 * seed as u64 + 1);
        let w = tensor(&[cin, cout, k], 2 * seed as u64 + 2);
        let b = tensor(&[cout], 7);
        let p = ConvParams { stride, padding: stride, dilation: 1, groups: 1, output_padding: 0 };
        let flop = 2.0 * (cout * cin * k * l) as f64;
        let t = best(5, || {
            conv_transpose1d(&x, &w, Some(&b), p).unwrap();
        });
        // One path only (one gemm per tap): its time goes in the gemm columns.
        println!("{label:<24} {:>10.2} {:>10} {:>8.1}", t * 1e3, "", flop / t / 1e9);
    }
}
