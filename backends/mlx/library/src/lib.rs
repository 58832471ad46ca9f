//! infer-backend-mlx packaged as a plugin library. On Linux its rpath points at the libmlx it
//! was built against (the `mlx-cpu` wheel installed by tools/setup_mlx.sh), so `plugins.toml`
//! can name it without LD_LIBRARY_PATH; where that libmlx is gone, loading it fails with the
//! loader's one-line error naming the missing library.

// Referencing the crate keeps its `inventory` registrations in this library.
use infer_backend_mlx as _;

infer_core::export_plugin_library!();
