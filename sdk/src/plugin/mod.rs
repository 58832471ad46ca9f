//! Plugin declarations. A plugin is data: a descriptor with `extern "C"` entry points,
//! registered with `inventory` when built in, and listed by a library's root module when loaded
//! from a shared library. Both arrive in the host's registry as the same descriptor.
//!
//! A model plugin's descriptor ([`ModelPlugin`]) says which checkpoints it claims
//! ([`Architecture`], data) and lists the kinds it provides, each an [`Extension`] found by a
//! versioned id ([`kinds`]). Write plugins with [`register_backend!`](crate::register_backend) and
//! [`register_model!`](crate::register_model); a plugin library adds
//! [`export_plugin_library!`](crate::export_plugin_library) once.

pub mod architecture;
pub mod extension;
pub mod kinds;
pub mod library;

pub use architecture::{Architecture, ChatFormat, PreTokenizer};
pub use extension::{Extension, Kind, Loader};
pub use kinds::{AudioCodecKind, IntoKind, SpeechRecognition, SpeechSynthesis, TextEmbedding, TextGeneration};

use std::path::Path;

use abi_stable::{
    prefix_type::PrefixTypeTrait,
    std_types::{ROption, RResult, RSlice, RStr, RVec},
    StableAbi,
};

use crate::backend::BackendObj;
use crate::{DType, Error, FfiError};

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

/// The model kinds infer defines, for hosts that pick one ([`Kind`] is the open set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelKind {
    Text,
    SpeechSynthesis,
    SpeechRecognition,
    AudioCodec,
    TextEmbedding,
}

impl ModelKind {
    /// Every kind infer defines.
    pub const ALL: [ModelKind; 5] = [
        ModelKind::Text,
        ModelKind::SpeechSynthesis,
        ModelKind::SpeechRecognition,
        ModelKind::AudioCodec,
        ModelKind::TextEmbedding,
    ];

    /// The extension id of this kind.
    pub fn id(self) -> &'static str {
        match self {
            ModelKind::Text => <TextGeneration as Kind>::ID,
            ModelKind::SpeechSynthesis => <SpeechSynthesis as Kind>::ID,
            ModelKind::SpeechRecognition => <SpeechRecognition as Kind>::ID,
            ModelKind::AudioCodec => <AudioCodecKind as Kind>::ID,
            ModelKind::TextEmbedding => <TextEmbedding as Kind>::ID,
        }
    }

    /// Its name in listings (`text`, `speech synthesis`).
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Text => <TextGeneration as Kind>::NAME,
            ModelKind::SpeechSynthesis => <SpeechSynthesis as Kind>::NAME,
            ModelKind::SpeechRecognition => <SpeechRecognition as Kind>::NAME,
            ModelKind::AudioCodec => <AudioCodecKind as Kind>::NAME,
            ModelKind::TextEmbedding => <TextEmbedding as Kind>::NAME,
        }
    }
}

/// A model plugin's descriptor: which checkpoints it claims and the kinds it provides. A prefix
/// type: fields appended later read as absent from older plugins.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = ModelPluginRef)))]
#[sabi(missing_field(panic))]
pub struct ModelPlugin {
    pub name: RStr<'static>,
    pub version: RStr<'static>,
    pub description: RStr<'static>,
    /// The architectures it loads, and what it says about them.
    pub architectures: RSlice<'static, Architecture>,
    /// One per kind it provides.
    #[sabi(last_prefix_field)]
    pub extensions: RSlice<'static, Extension>,
}

impl ModelPlugin {
    /// A descriptor that lives for the rest of the process (made once per plugin).
    pub fn leak(
        name: &'static str,
        version: &'static str,
        description: &'static str,
        architectures: &'static [Architecture],
        extensions: Vec<Extension>,
    ) -> ModelPluginRef {
        let extensions: &'static [Extension] = Vec::leak(extensions);
        ModelPlugin {
            name: RStr::from_str(name),
            version: RStr::from_str(version),
            description: RStr::from_str(description),
            architectures: RSlice::from_slice(architectures),
            extensions: RSlice::from_slice(extensions),
        }
        .leak_into_prefix()
    }
}

impl ModelPluginRef {
    /// The vtable of kind `K`, if this plugin provides it (an error if it does, built against an
    /// incompatible SDK).
    pub fn extension<K: Kind>(self) -> crate::Result<Option<K::Vtable>> {
        for e in self.extensions().iter() {
            if let Some(v) = e.get::<K>()? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// Whether it provides the kind with extension id `id`.
    pub fn provides(self, id: &str) -> bool {
        self.extensions().iter().any(|e| e.id.as_str() == id)
    }

    /// The architecture `name`, if it claims it.
    pub fn architecture(self, name: &str) -> Option<&'static Architecture> {
        self.architectures().as_slice().iter().find(|a| a.name.as_str() == name)
    }
}

/// A built-in model plugin: its descriptor, made on first use ([`register_model!`](crate::register_model)).
pub struct ModelRegistration(pub fn() -> ModelPluginRef);

inventory::collect!(BackendPlugin);
inventory::collect!(ModelRegistration);

/// Built-in backend plugins linked into this binary (or into this plugin library).
pub fn builtin_backends() -> impl Iterator<Item = &'static BackendPlugin> {
    inventory::iter::<BackendPlugin>.into_iter()
}

/// Built-in model plugins linked into this binary (or into this plugin library).
pub fn builtin_models() -> impl Iterator<Item = ModelPluginRef> {
    inventory::iter::<ModelRegistration>.into_iter().map(|r| (r.0)())
}

/// [`builtin_models`] as a library's root module lists them.
pub fn builtin_models_ffi() -> RVec<ModelPluginRef> {
    builtin_models().collect()
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

/// Registers a model plugin: its name, the architectures it claims (const [`Architecture`]
/// values) and, for each kind it provides, a Rust loader
/// `fn(&Path, &Backend, &ModelLoadOptions) -> infer_sdk::Result<M>` where `M` is a model of that
/// kind (a [`CausalLm`](crate::CausalLm) for [`TextGeneration`], a
/// [`SpeechSynthesizer`](crate::audio::SpeechSynthesizer) for [`SpeechSynthesis`], ...). Panics
/// inside a loader become errors. The same macro serves built-in plugins and plugin libraries.
///
/// ```ignore
/// infer_sdk::register_model! {
///     name: "bigram",
///     description: "a bigram language model",
///     architectures: [infer_sdk::plugin::Architecture::named("bigram")],
///     kinds: [infer_sdk::plugin::TextGeneration => load],
/// }
/// ```
#[macro_export]
macro_rules! register_model {
    (
        name: $name:literal,
        description: $desc:literal,
        architectures: [$($arch:expr),* $(,)?],
        kinds: [$($kind:ty => $load:path),+ $(,)?] $(,)?
    ) => {
        const _: () = {
            static ARCHITECTURES: &[$crate::plugin::Architecture] = &[$($arch),*];
            fn descriptor() -> $crate::plugin::ModelPluginRef {
                static DESCRIPTOR: ::std::sync::OnceLock<$crate::plugin::ModelPluginRef> = ::std::sync::OnceLock::new();
                *DESCRIPTOR.get_or_init(|| {
                    let extensions = vec![$({
                        struct Load;
                        impl $crate::plugin::Loader<$kind> for Load {
                            const WHAT: &'static str = concat!("model plugin ", $name, " load");
                            fn load(
                                path: &::std::path::Path,
                                backend: &$crate::Backend,
                                options: &$crate::plugin::ModelLoadOptions,
                            ) -> $crate::Result<<$kind as $crate::plugin::Kind>::Boxed> {
                                $load(path, backend, options).map($crate::plugin::IntoKind::<$kind>::into_boxed)
                            }
                        }
                        $crate::plugin::Extension::new::<$kind>(<$kind as $crate::plugin::Kind>::vtable::<Load>())
                    }),+];
                    $crate::plugin::ModelPlugin::leak($name, env!("CARGO_PKG_VERSION"), $desc, ARCHITECTURES, extensions)
                })
            }
            $crate::__private::inventory::submit! { $crate::plugin::ModelRegistration(descriptor) }
        };
    };
}
