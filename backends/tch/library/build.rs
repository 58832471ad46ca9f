//! rpath to the libtorch the backend was built against and, where it can load, libtorch_cuda
//! kept linked: both reported by infer-backend-tch's build script (see backends/tch/build.rs).

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_INFER_TCH_LIBTORCH_LIB");
    println!("cargo:rerun-if-env-changed=DEP_INFER_TCH_CUDA");
    if let Ok(dir) = std::env::var("DEP_INFER_TCH_LIBTORCH_LIB") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    if std::env::var("DEP_INFER_TCH_CUDA").as_deref() == Ok("1") {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-ltorch_cuda,--as-needed");
    }
}
