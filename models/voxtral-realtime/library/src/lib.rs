//! infer-voxtral-realtime packaged as a plugin library. It links `infer-layers` (no registrations),
//! never another model crate, so it exports only the Voxtral Realtime plugin.

// Referencing the crate keeps its `inventory` registrations in this library.
use infer_voxtral_realtime as _;

infer_core::export_plugin_library!();
