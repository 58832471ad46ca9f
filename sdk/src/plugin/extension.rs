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
}

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
