//! Makes everything linked against a shared libmlx (the Linux build: the `mlx-cpu` wheel's
//! `libmlx.so`) find it at run time without LD_LIBRARY_PATH.
//!
//! The patched mlx-sys reports the directory it linked libmlx from (`DEP_MLX_LIB_DIR`); this
//! crate's own link targets (its tests) get an rpath to it here, and crates that link this one
//! into a cdylib (`library/`) receive it as `DEP_INFER_MLX_LIB_DIR` and print the same flag
//! themselves: cargo applies `rustc-link-arg` only to the package that prints it. On macOS
//! mlx-sys links MLX statically and reports no directory: nothing to do.

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_MLX_LIB_DIR");
    if let Ok(dir) = std::env::var("DEP_MLX_LIB_DIR") {
        println!("cargo:lib_dir={dir}");
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
