//! infer-voxtral-tts packaged as a plugin library. It links `infer-layers` (no registrations), never
//! another model crate, so it exports only the Voxtral TTS plugin.

// Referencing the crate keeps its `inventory` registrations in this library.
use infer_voxtral_tts as _;

infer_core::export_plugin_library!();
