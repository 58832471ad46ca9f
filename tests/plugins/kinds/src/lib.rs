//! Model kinds across the plugin boundary, as later SDKs will make them:
//!
//! - `future-kinds` provides text generation and a kind this host has never heard of
//!   (`infer-test.future-kind/1`): the host must load it and use its text kind as usual;
//! - `drifted-text` provides a vtable under the text-generation id whose layout differs from
//!   the host's: the host must refuse it with one line, not call through it;
//! - `stale-speech` provides speech synthesis under the id an older SDK gave it
//!   (`infer.speech-synthesis/1`): the host must say which id it needs, not call it an unknown model.

// abi_stable's derives expand to impls rustc now lints as non-local.
#![allow(non_local_definitions)]

use std::path::Path;

use infer_sdk::plugin::{Architecture, IntoKind, Kind, ModelLoadOptions, TextGeneration};
use infer_sdk::{Backend, CausalLmBox, Error, Result};

infer_sdk::declare_kind! {
    /// A kind from the future: its model is a number.
    pub struct FutureKind {
        id: "infer-test.future-kind/1",
        name: "future",
        boxed: u32,
        vtable: FutureVtable / FutureFns,
    }
}

impl IntoKind<FutureKind> for u32 {
    fn into_boxed(self) -> u32 {
        self
    }
}

infer_sdk::declare_kind! {
    /// Claims the text-generation id with a vtable of another layout (its loader returns a number).
    pub struct DriftedText {
        id: <TextGeneration as Kind>::ID,
        name: "text",
        boxed: u64,
        vtable: DriftedVtable / DriftedFns,
    }
}

impl IntoKind<DriftedText> for u64 {
    fn into_boxed(self) -> u64 {
        self
    }
}

infer_sdk::declare_kind! {
    /// Speech synthesis as an SDK of another ABI version names it (its loader returns a number).
    pub struct StaleSpeech {
        id: "infer.speech-synthesis/1",
        name: "speech synthesis",
        boxed: u16,
        vtable: StaleSpeechVtable / StaleSpeechFns,
    }
}

impl IntoKind<StaleSpeech> for u16 {
    fn into_boxed(self) -> u16 {
        self
    }
}

/// A text model that never loads: the test only needs to see the host reach this loader.
struct NoModel;

impl IntoKind<TextGeneration> for NoModel {
    fn into_boxed(self) -> CausalLmBox {
        unreachable!("never loaded")
    }
}

fn load_text(_: &Path, _: &Backend, _: &ModelLoadOptions) -> Result<NoModel> {
    Err(Error::unsupported("the kinds test model loads nothing"))
}

fn load_future(_: &Path, _: &Backend, _: &ModelLoadOptions) -> Result<u32> {
    Ok(7)
}

fn load_drifted(_: &Path, _: &Backend, _: &ModelLoadOptions) -> Result<u64> {
    Ok(7)
}

infer_sdk::register_model! {
    name: "future-kinds",
    description: "test plugin: text generation plus a kind the host does not know",
    architectures: [Architecture::named("future_kinds")],
    kinds: [TextGeneration => load_text, FutureKind => load_future],
}

infer_sdk::register_model! {
    name: "drifted-text",
    description: "test plugin: a text-generation vtable of another layout",
    architectures: [Architecture::named("drifted_text")],
    kinds: [DriftedText => load_drifted],
}

fn load_stale(_: &Path, _: &Backend, _: &ModelLoadOptions) -> Result<u16> {
    Ok(7)
}

infer_sdk::register_model! {
    name: "stale-speech",
    description: "test plugin: speech synthesis under the id of another SDK",
    architectures: [Architecture::named("stale_speech")],
    kinds: [StaleSpeech => load_stale],
}

infer_sdk::export_plugin_library!();
