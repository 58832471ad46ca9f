//! infer-backend-candle packaged as a plugin library. The backend crate itself is an rlib: a root-module
//! export in it would collide with other plugins' when several are linked into one binary.

// Referencing the crate keeps its `inventory` registrations in this library.
use infer_backend_candle as _;

infer_core::export_plugin_library!();
