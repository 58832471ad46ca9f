//! With the `tch` feature: an rpath to the libtorch the tch backend was built against, and
//! libtorch_cuda kept linked where it can load (both reported by infer-backend-tch's build
//! script; see backends/tch/build.rs). Without the feature this does nothing.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_INFER_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-env-changed=DEP_INFER_TCH_CUDA");
    if std::env::var_os("CARGO_FEATURE_TCH").is_none() {
        return;
    }
    if let Ok(dir) = std::env::var("DEP_INFER_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    if std::env::var("DEP_INFER_TCH_CUDA").as_deref() == Ok("1") {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}
