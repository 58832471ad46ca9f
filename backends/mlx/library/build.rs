//! rpath to the shared libmlx the backend was built against (reported by infer-backend-mlx's
//! build script; see backends/mlx/build.rs).

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_INFER_MLX_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_INFER_MLX_LIB_DIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
