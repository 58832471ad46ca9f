//! Plugin declarations. A plugin is data: a static descriptor with `extern "C"` entry points,
//! registered with `inventory` when built in, and listed by a library's root module when loaded
//! from a shared library. Both arrive in the [`crate::Registry`] as the same descriptor.
//!
//! Write plugins with [`register_backend!`](crate::register_backend) and
//! [`register_text_model!`](crate::register_text_model) (and `register_speech_model!`,
//! `register_recognizer_model!`); a plugin library adds
//! [`export_plugin_library!`](crate::export_plugin_library) once.

pub mod library;

use std::path::Path;

use abi_stable::{
    std_types::{ROption, RResult, RSlice, RStr},
    StableAbi,
};

use crate::backend::BackendObj;
use crate::recognizer_ffi::RecognizerModelBox;
use crate::speech_ffi::SpeechModelBox;
use crate::text::causal_lm::CausalLmBox;
use crate::{Backend, DType, Error, FfiError};

/// Options a model plugin receives when loading a checkpoint.
#[repr(C)]
#[derive(Debug, Clone, Copy, StableAbi)]
pub struct ModelLoadOptions {
    /// Compute dtype for float weights.
    pub dtype: DType,
    /// Bound on cached positions (0 = unbounded).
    pub context_len: usize,
    /// Block format (q8_0, q4_k) the model quantizes its large float linear weights to at load;
    /// a model that cannot says so ([`ModelLoadOptions::refuse_quant`]).
    pub quant: ROption<DType>,
}

impl Default for ModelLoadOptions {
    fn default() -> Self {
        ModelLoadOptions { dtype: DType::F32, context_len: 0, quant: ROption::RNone }
    }
}

impl ModelLoadOptions {
    /// The quantization asked for, if any.
    pub fn quant(&self) -> Option<DType> {
        self.quant.into_option()
    }

    /// An error when a quantization was asked of `model`, which does not quantize at load.
    pub fn refuse_quant(&self, model: &str) -> crate::Result<()> {
        match self.quant() {
            Some(q) => Err(Error::unsupported(format!("{model} does not quantize weights at load (asked for {q})"))),
            None => Ok(()),
        }
    }
}

/// A backend plugin: creates backend instances on a device (`cpu`, `cuda:0`, ...).
#[repr(C)]
#[derive(Clone, Copy, StableAbi)]
pub struct BackendPlugin {
    pub name: RStr<'static>,
    pub version: RStr<'static>,
    pub description: RStr<'static>,
    /// Device kinds it can drive, e.g. `["cpu"]` or `["cpu", "cuda"]`.
    pub devices: RSlice<'static, RStr<'static>>,
    /// Whether the backend can run on this machine now (its native libraries are present, ...).
    pub available: extern "C" fn() -> bool,
    /// Creates an instance on `device` (empty: the backend's default device).
    pub create: extern "C" fn(device: RStr<'_>) -> RResult<BackendObj, FfiError>,
}

/// What kind of model a model plugin loads.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, StableAbi)]
pub enum ModelKind {
    Text,
    SpeechSynthesis,
    SpeechRecognition,
}

/// A model plugin: loads checkpoints whose `model_type` (config.json) or GGUF
/// `general.architecture` is one of `architectures`.
#[repr(C)]
#[derive(Clone, Copy, StableAbi)]
pub struct ModelPlugin {
    pub name: RStr<'static>,
    pub version: RStr<'static>,
    pub description: RStr<'static>,
    pub kind: ModelKind,
    pub architectures: RSlice<'static, RStr<'static>>,
    /// Loads a text model from `path` (a checkpoint directory or file) onto `backend`.
    pub load_text:
        extern "C" fn(path: RStr<'_>, backend: &Backend, options: &ModelLoadOptions) -> RResult<CausalLmBox, FfiError>,
    /// Loads a speech synthesizer (kind `SpeechSynthesis`).
    pub load_speech: extern "C" fn(
        path: RStr<'_>,
        backend: &Backend,
        options: &ModelLoadOptions,
    ) -> RResult<SpeechModelBox, FfiError>,
    /// Loads a speech recognizer (kind `SpeechRecognition`).
    pub load_recognizer: extern "C" fn(
        path: RStr<'_>,
        backend: &Backend,
        options: &ModelLoadOptions,
    ) -> RResult<RecognizerModelBox, FfiError>,
}

/// The `load_text` of plugins that are not text models.
pub extern "C" fn no_text_model(path: RStr<'_>, _: &Backend, _: &ModelLoadOptions) -> RResult<CausalLmBox, FfiError> {
    RResult::RErr(Error::unsupported(format!("{path} is not a text model")).into())
}

/// The `load_speech` of plugins that are not speech synthesizers.
pub extern "C" fn no_speech_model(
    path: RStr<'_>,
    _: &Backend,
    _: &ModelLoadOptions,
) -> RResult<SpeechModelBox, FfiError> {
    RResult::RErr(Error::unsupported(format!("{path} is not a speech synthesis model")).into())
}

/// The `load_recognizer` of plugins that are not speech recognizers.
pub extern "C" fn no_recognizer_model(
    path: RStr<'_>,
    _: &Backend,
    _: &ModelLoadOptions,
) -> RResult<RecognizerModelBox, FfiError> {
    RResult::RErr(Error::unsupported(format!("{path} is not a speech recognition model")).into())
}

inventory::collect!(BackendPlugin);
inventory::collect!(ModelPlugin);

/// Built-in backend plugins linked into this binary (or into this plugin library).
pub fn builtin_backends() -> impl Iterator<Item = &'static BackendPlugin> {
    inventory::iter::<BackendPlugin>.into_iter()
}

/// Built-in model plugins linked into this binary (or into this plugin library).
pub fn builtin_models() -> impl Iterator<Item = &'static ModelPlugin> {
    inventory::iter::<ModelPlugin>.into_iter()
}

/// Helper for the generated entry points: a `&str` path from the FFI string.
pub fn ffi_path(path: RStr<'_>) -> &Path {
    Path::new(path.as_str())
}

/// Registers a backend plugin. `$create` is a Rust `fn(&str) -> infer_core::Result<B>` where
/// `B: BackendImpl`; `$available` a `fn() -> bool`. Panics inside become errors.
#[macro_export]
macro_rules! register_backend {
    (
        name: $name:literal,
        description: $desc:literal,
        devices: [$($dev:literal),* $(,)?],
        available: $available:path,
        create: $create:path $(,)?
    ) => {
        const _: () = {
            use $crate::__private::abi_stable::std_types::{RResult, RStr};
            extern "C" fn __infer_available() -> bool {
                ::std::panic::catch_unwind($available).unwrap_or(false)
            }
            extern "C" fn __infer_create(device: RStr<'_>) -> RResult<$crate::backend::BackendObj, $crate::FfiError> {
                $crate::backend::ffi_result(concat!("backend ", $name, " create"), || {
                    let b = $create(device.as_str())?;
                    Ok($crate::backend::BackendImpl_TO::from_value(b, $crate::__private::abi_stable::sabi_trait::TD_Opaque))
                })
            }
            $crate::__private::inventory::submit! {
                $crate::plugin::BackendPlugin {
                    name: RStr::from_str($name),
                    version: RStr::from_str(env!("CARGO_PKG_VERSION")),
                    description: RStr::from_str($desc),
                    devices: $crate::__private::abi_stable::std_types::RSlice::from_slice(&[$(RStr::from_str($dev)),*]),
                    available: __infer_available,
                    create: __infer_create,
                }
            }
        };
    };
}

/// Registers a text model plugin. `$load` is a Rust
/// `fn(&Path, &Backend, &ModelLoadOptions) -> infer_core::Result<M>` where `M: CausalLm`.
#[macro_export]
macro_rules! register_text_model {
    (
        name: $name:literal,
        description: $desc:literal,
        architectures: [$($arch:literal),* $(,)?],
        load: $load:path $(,)?
    ) => {
        const _: () = {
            use $crate::__private::abi_stable::std_types::{RResult, RStr};
            extern "C" fn __infer_load_text(
                path: RStr<'_>,
                backend: &$crate::Backend,
                options: &$crate::plugin::ModelLoadOptions,
            ) -> RResult<$crate::text::causal_lm::CausalLmBox, $crate::FfiError> {
                $crate::backend::ffi_result(concat!("model plugin ", $name, " load"), || {
                    let m = $load($crate::plugin::ffi_path(path), backend, options)?;
                    Ok($crate::text::causal_lm::CausalLm_TO::from_value(m, $crate::__private::abi_stable::sabi_trait::TD_Opaque))
                })
            }
            $crate::__private::inventory::submit! {
                $crate::plugin::ModelPlugin {
                    name: RStr::from_str($name),
                    version: RStr::from_str(env!("CARGO_PKG_VERSION")),
                    description: RStr::from_str($desc),
                    kind: $crate::plugin::ModelKind::Text,
                    architectures: $crate::__private::abi_stable::std_types::RSlice::from_slice(&[$(RStr::from_str($arch)),*]),
                    load_text: __infer_load_text,
                    load_speech: $crate::plugin::no_speech_model,
                    load_recognizer: $crate::plugin::no_recognizer_model,
                }
            }
        };
    };
}

/// Registers a speech-synthesis model plugin. `$load` is a Rust
/// `fn(&Path, &Backend, &ModelLoadOptions) -> infer_core::Result<M>` where
/// `M: infer_core::audio::SpeechSynthesizer + 'static`.
#[macro_export]
macro_rules! register_speech_model {
    (
        name: $name:literal,
        description: $desc:literal,
        architectures: [$($arch:literal),* $(,)?],
        load: $load:path $(,)?
    ) => {
        const _: () = {
            use $crate::__private::abi_stable::std_types::{RResult, RStr};
            extern "C" fn __infer_load_speech(
                path: RStr<'_>,
                backend: &$crate::Backend,
                options: &$crate::plugin::ModelLoadOptions,
            ) -> RResult<$crate::speech_ffi::SpeechModelBox, $crate::FfiError> {
                $crate::backend::ffi_result(concat!("model plugin ", $name, " load"), || {
                    let m = $load($crate::plugin::ffi_path(path), backend, options)?;
                    Ok($crate::speech_ffi::PluginSpeech::boxed(m))
                })
            }
            $crate::__private::inventory::submit! {
                $crate::plugin::ModelPlugin {
                    name: RStr::from_str($name),
                    version: RStr::from_str(env!("CARGO_PKG_VERSION")),
                    description: RStr::from_str($desc),
                    kind: $crate::plugin::ModelKind::SpeechSynthesis,
                    architectures: $crate::__private::abi_stable::std_types::RSlice::from_slice(&[$(RStr::from_str($arch)),*]),
                    load_text: $crate::plugin::no_text_model,
                    load_speech: __infer_load_speech,
                    load_recognizer: $crate::plugin::no_recognizer_model,
                }
            }
        };
    };
}

/// Registers a speech-recognition model plugin. `$load` is a Rust
/// `fn(&Path, &Backend, &ModelLoadOptions) -> infer_core::Result<M>` where
/// `M: infer_core::audio::SpeechRecognizer + 'static`.
#[macro_export]
macro_rules! register_recognizer_model {
    (
        name: $name:literal,
        description: $desc:literal,
        architectures: [$($arch:literal),* $(,)?],
        load: $load:path $(,)?
    ) => {
        const _: () = {
            use $crate::__private::abi_stable::std_types::{RResult, RStr};
            extern "C" fn __infer_load_recognizer(
                path: RStr<'_>,
                backend: &$crate::Backend,
                options: &$crate::plugin::ModelLoadOptions,
            ) -> RResult<$crate::recognizer_ffi::RecognizerModelBox, $crate::FfiError> {
                $crate::backend::ffi_result(concat!("model plugin ", $name, " load"), || {
                    let m = $load($crate::plugin::ffi_path(path), backend, options)?;
                    Ok($crate::recognizer_ffi::PluginRecognizer::boxed(m))
                })
            }
            $crate::__private::inventory::submit! {
                $crate::plugin::ModelPlugin {
                    name: RStr::from_str($name),
                    version: RStr::from_str(env!("CARGO_PKG_VERSION")),
                    description: RStr::from_str($desc),
                    kind: $crate::plugin::ModelKind::SpeechRecognition,
                    architectures: $crate::__private::abi_stable::std_types::RSlice::from_slice(&[$(RStr::from_str($arch)),*]),
                    load_text: $crate::plugin::no_text_model,
                    load_speech: $crate::plugin::no_speech_model,
                    load_recognizer: __infer_load_recognizer,
                }
            }
        };
    };
}
