//! Makes everything linked against libtorch find it at run time without LD_LIBRARY_PATH, and
//! keeps libtorch_cuda linked where it can load.
//!
//! torch-sys reports the libtorch lib dir it linked (`DEP_TCH_LIBTORCH_LIB`). This crate's own
//! link targets (tests, examples) get an rpath to it here. Crates that link this one into a
//! binary or cdylib (`backends/tch/library`, the CLI's `tch` feature) receive the directory as
//! `DEP_INFER_TCH_LIBTORCH_LIB` and whether to force-link CUDA as `DEP_INFER_TCH_CUDA`, and
//! print the same flags themselves: cargo applies `rustc-link-arg` only to the package that
//! prints it.
//!
//! CUDA: `--as-needed` (the toolchain's default) drops libtorch_cuda.so, whose symbols nothing
//! references directly (its kernels register themselves from static initializers); without it
//! libtorch sees no GPU even on a GPU machine. So it is linked with `--no-as-needed` when it can
//! load: when every library it needs resolves (the full `torch` wheel with its CUDA
//! dependencies). The lean install of tools/setup_libtorch.sh has libtorch_cuda.so but not
//! cuBLAS/cuDNN/..., and linking it there would make every binary fail to start.
//! `INFER_TCH_CUDA=1` / `=0` overrides the detection.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-env-changed=INFER_TCH_CUDA");
    let Ok(dir) = std::env::var("DEP_TCH_LIBTORCH_LIB") else {
        println!("cargo:warning=torch-sys did not report its libtorch lib dir: set LD_LIBRARY_PATH at run time");
        return;
    };
    let cuda = cuda_loadable(Path::new(&dir));
    println!("cargo:libtorch_lib={dir}");
    println!("cargo:cuda={}", u8::from(cuda));
    println!("cargo:rustc-env=INFER_TCH_LIBTORCH_LIB={dir}");
    println!("cargo:rustc-env=INFER_TCH_CUDA_LINKED={}", u8::from(cuda));
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    if cuda {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}

/// Whether libtorch_cuda.so exists and every library it needs resolves (`ldd` finds them all).
fn cuda_loadable(dir: &Path) -> bool {
    match std::env::var("INFER_TCH_CUDA").as_deref() {
        Ok("1") => return true,
        Ok("0") => return false,
        _ => {}
    }
    let lib = dir.join("libtorch_cuda.so");
    if !lib.exists() {
        return false;
    }
    match Command::new("ldd").arg(&lib).output() {
        Ok(out) if out.status.success() => !String::from_utf8_lossy(&out.stdout).contains("not found"),
        _ => false,
    }
}
