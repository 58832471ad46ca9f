//! Model kinds as extensions. A model plugin's descriptor lists [`Extension`]s; each is one kind
//! (text generation, speech synthesis, ...) named by a versioned id and carrying a vtable, an
//! `abi_stable` prefix type that grows only by appended fields. A new kind is a new [`Kind`]: a
//! trait for the model, an id and a vtable. Existing plugins' layouts do not change, and a host
//! asks each plugin for the kinds it knows (the pattern of CLAP's `get_extension`).
//!
//! The vtable crosses as an erased pointer with its type layout beside it; the host checks that
//! layout against its own before using it ([`Extension::get`]), as abi_stable checks a root module.

use std::ffi::c_void;
use std::path::Path;

use abi_stable::{
    abi_stability::check_layout_compatibility,
    prefix_type::{PrefixRef, PrefixRefTrait, WithMetadata_},
    std_types::{RResult, RStr},
    type_layout::TypeLayout,
    StableAbi,
};

use crate::plugin::ModelLoadOptions;
use crate::{Backend, Error, FfiError, Result};

/// One kind a model plugin provides.
#[repr(C)]
#[derive(Clone, Copy, StableAbi)]
pub struct Extension {
    /// The kind's versioned id, e.g. `infer.text-generation/1` ([`Kind::ID`]).
    pub id: RStr<'static>,
    /// The layout of the vtable's reference type, as the plugin was built.
    layout: &'static TypeLayout,
    /// The vtable (a `WithMetadata` of the kind's prefix struct), erased.
    vtable: *const c_void,
}

// SAFETY: the vtable is immutable static data (function pointers and static strings).
unsafe impl Send for Extension {}
unsafe impl Sync for Extension {}

impl Extension {
    /// The extension for kind `K` with `vtable`.
    pub fn new<K: Kind>(vtable: K::Vtable) -> Self {
        Extension {
            id: RStr::from_str(K::ID),
            layout: <K::Vtable as StableAbi>::LAYOUT,
            vtable: vtable.to_prefix_ref().to_raw_ptr() as *const c_void,
        }
    }

    /// This extension's vtable if it is kind `K`: `None` for another kind, an error when the id
    /// matches but the layout does not (a plugin built against an incompatible SDK).
    pub fn get<K: Kind>(&self) -> Result<Option<K::Vtable>> {
        if self.id.as_str() != K::ID {
            return Ok(None);
        }
        let ours = <K::Vtable as StableAbi>::LAYOUT;
        if !std::ptr::eq(ours, self.layout) {
            check_layout_compatibility(ours, self.layout).into_result().map_err(|e| {
                Error::unsupported(format!(
                    "its {} vtable does not match this build ({}); rebuild the plugin against this infer-sdk",
                    K::ID,
                    e.to_string()
                        .lines()
                        .find(|l| l.trim_start().starts_with("Error:"))
                        .unwrap_or("layout differs")
                        .trim()
                ))
            })?;
        }
        // SAFETY: built by `Extension::new::<K>` from a `K::Vtable` whose layout was just checked
        // to be compatible with ours.
        let prefix: PrefixRef<<K::Vtable as PrefixRefTrait>::PrefixFields> = unsafe {
            PrefixRef::from_raw(self.vtable as *const WithMetadata_<<K::Vtable as PrefixRefTrait>::PrefixFields, _>)
        };
        Ok(Some(K::Vtable::from_prefix_ref(prefix)))
    }
}

/// A model kind: what a model of this kind is (the trait a plugin implements), the FFI-safe box
/// it crosses in, and the vtable of its extension.
pub trait Kind: 'static {
    /// The versioned extension id. A change that is not an appended vtable field is a new id.
    const ID: &'static str;
    /// A short name for listings and errors (`text`, `speech synthesis`).
    const NAME: &'static str;
    /// The loaded model as it crosses the plugin boundary.
    type Boxed: StableAbi;
    /// The vtable's reference type (the `_Ref` of an `abi_stable` prefix struct).
    type Vtable: PrefixRefTrait + StableAbi + Copy + 'static;
    /// The vtable whose `load` runs `L` (panics caught, errors made FFI-safe).
    fn vtable<L: Loader<Self>>() -> Self::Vtable;
    /// The `load` of a vtable of this kind (as a host found it in a plugin's descriptor).
    fn load_fn(vtable: Self::Vtable) -> LoadFn<Self::Boxed>;
}

/// The loader a kind's vtable holds: a checkpoint's path, the backend, the options.
pub type LoadFn<B> = extern "C" fn(RStr<'_>, &Backend, &ModelLoadOptions) -> RResult<B, FfiError>;

/// A plugin's loader for kind `K`: [`register_model!`](crate::register_model) makes one for each
/// kind it lists.
pub trait Loader<K: Kind + ?Sized>: 'static {
    /// `model plugin NAME load`, for panic messages.
    const WHAT: &'static str;
    fn load(path: &Path, backend: &Backend, options: &ModelLoadOptions) -> Result<K::Boxed>;
}

/// The `extern "C"` loader every kind's vtable holds: `L::load` with panics caught.
pub extern "C" fn ffi_load<K: Kind, L: Loader<K>>(
    path: RStr<'_>,
    backend: &Backend,
    options: &ModelLoadOptions,
) -> RResult<K::Boxed, FfiError> {
    crate::backend::ffi_result(L::WHAT, || L::load(Path::new(path.as_str()), backend, options))
}

/// Declares a model kind: its marker type, its vtable (an `abi_stable` prefix struct whose one
/// prefix field is `load`) and its [`Kind`] impl. What the model is and how it becomes the box
/// is the kind's [`IntoKind`](super::IntoKind) impl, written beside it. The crate using it needs
/// `abi_stable` among its dependencies (the layout derive names it).
///
/// ```ignore
/// infer_sdk::declare_kind! {
///     /// Texts to vectors.
///     pub struct TextEmbedding {
///         id: "infer.text-embedding/1",
///         name: "text embedding",
///         boxed: EmbedderModelBox,
///         vtable: TextEmbeddingVtable / TextEmbeddingFns,
///     }
/// }
/// ```
#[macro_export]
macro_rules! declare_kind {
    (
        $(#[$meta:meta])*
        pub struct $kind:ident {
            id: $id:expr,
            name: $name:literal,
            boxed: $boxed:ty,
            vtable: $vtable:ident / $fns:ident $(,)?
        }
    ) => {
        $(#[$meta])*
        pub struct $kind;

        #[doc = concat!("The vtable of [`", stringify!($kind), "`].")]
        #[repr(C)]
        #[derive(::abi_stable::StableAbi)]
        #[sabi(kind(Prefix(prefix_ref = $vtable)))]
        #[sabi(missing_field(panic))]
        pub struct $fns {
            #[sabi(last_prefix_field)]
            pub load: extern "C" fn(
                path: ::abi_stable::std_types::RStr<'_>,
                backend: &$crate::Backend,
                options: &$crate::plugin::ModelLoadOptions,
            ) -> ::abi_stable::std_types::RResult<$boxed, $crate::FfiError>,
        }

        impl $crate::plugin::Kind for $kind {
            const ID: &'static str = $id;
            const NAME: &'static str = $name;
            type Boxed = $boxed;
            type Vtable = $vtable;
            fn vtable<L: $crate::plugin::Loader<Self>>() -> $vtable {
                $vtable(::abi_stable::prefix_type::PrefixRef::from_ref(
                    const {
                        &::abi_stable::prefix_type::WithMetadata::new($fns {
                            load: $crate::plugin::extension::ffi_load::<Self, L>,
                        })
                    },
                ))
            }
            fn load_fn(vtable: $vtable) -> $crate::plugin::extension::LoadFn<$boxed> {
                vtable.load()
            }
        }
    };
}
