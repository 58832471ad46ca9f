//! infer-backend-tch packaged as a plugin library. Its rpath points at the libtorch it was built
//! against, so `plugins.toml` can name it without LD_LIBRARY_PATH; where that libtorch is gone,
//! loading it fails with the loader's one-line error naming the missing library.

// Referencing the crate keeps its `inventory` registrations in this library.
use infer_backend_tch as _;

infer_core::export_plugin_library!();
