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

use abi_stable::{
    prefix_type::{PrefixRef, WithMetadata},
    std_types::{RResult, RStr},
    StableAbi,
};
use infer_sdk::plugin::extension::ffi_load;
use infer_sdk::plugin::{Architecture, IntoKind, Kind, Loader, ModelLoadOptions, TextGeneration};
use infer_sdk::{Backend, CausalLmBox, Error, FfiError, Result};

/// A kind from the future: its model is a number.
pub struct FutureKind;

#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = FutureVtable)))]
#[sabi(missing_field(panic))]
pub struct FutureFns {
    #[sabi(last_prefix_field)]
    pub load: extern "C" fn(path: RStr<'_>, backend: &Backend, options: &ModelLoadOptions) -> RResult<u32, FfiError>,
}

impl Kind for FutureKind {
    const ID: &'static str = "infer-test.future-kind/1";
    const NAME: &'static str = "future";
    type Boxed = u32;
    type Vtable = FutureVtable;
    fn vtable<L: Loader<Self>>() -> FutureVtable {
        FutureVtable(PrefixRef::from_ref(const { &WithMetadata::new(FutureFns { load: ffi_load::<Self, L> }) }))
    }
}

impl IntoKind<FutureKind> for u32 {
    fn into_boxed(self) -> u32 {
        self
    }
}

/// Claims the text-generation id with a vtable of another layout (its loader returns a number).
pub struct DriftedText;

#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = DriftedVtable)))]
#[sabi(missing_field(panic))]
pub struct DriftedFns {
    #[sabi(last_prefix_field)]
    pub load: extern "C" fn(path: RStr<'_>, backend: &Backend, options: &ModelLoadOptions) -> RResult<u64, FfiError>,
}

impl Kind for DriftedText {
    const ID: &'static str = <TextGeneration as Kind>::ID;
    const NAME: &'static str = "text";
    type Boxed = u64;
    type Vtable = DriftedVtable;
    fn vtable<L: Loader<Self>>() -> DriftedVtable {
        DriftedVtable(PrefixRef::from_ref(const { &WithMetadata::new(DriftedFns { load: ffi_load::<Self, L> }) }))
    }
}

impl IntoKind<DriftedText> for u64 {
    fn into_boxed(self) -> u64 {
        self
    }
}

/// Speech synthesis as an SDK of another ABI version names it (its loader returns a number).
pub struct StaleSpeech;

#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = StaleSpeechVtable)))]
#[sabi(missing_field(panic))]
pub struct StaleSpeechFns {
    #[sabi(last_prefix_field)]
    pub load: extern "C" fn(path: RStr<'_>, backend: &Backend, options: &ModelLoadOptions) -> RResult<u16, FfiError>,
}

impl Kind for StaleSpeech {
    const ID: &'static str = "infer.speech-synthesis/1";
    const NAME: &'static str = "speech synthesis";
    type Boxed = u16;
    type Vtable = StaleSpeechVtable;
    fn vtable<L: Loader<Self>>() -> StaleSpeechVtable {
        StaleSpeechVtable(PrefixRef::from_ref(
            const { &WithMetadata::new(StaleSpeechFns { load: ffi_load::<Self, L> }) },
        ))
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
