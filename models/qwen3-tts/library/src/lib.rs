//! infer-qwen3-tts packaged as a plugin library. It links `infer-layers` (no registrations), never
//! another model crate, so it exports only the Qwen3-TTS plugin.

// Referencing the crate keeps its `inventory` registrations in this library.
use infer_qwen3_tts as _;

infer_core::export_plugin_library!();
