//! Plugin libraries: a cdylib exports one `abi_stable` root module listing the plugins it
//! registered; the host (infer-core) loads it with abi_stable's version and layout checks.
//!
//! Libraries are never unloaded (abi_stable leaks them on purpose), so everything a plugin made
//! — backends, tensors, models — stays valid for the life of the process.

use abi_stable::{
    declare_root_module_statics,
    library::RootModule,
    package_version_strings,
    sabi_types::VersionStrings,
    std_types::{RStr, RVec},
    StableAbi,
};

use crate::plugin::{BackendPlugin, ModelPluginRef};

/// The root module every plugin library exports.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginLibraryRef)))]
#[sabi(missing_field(panic))]
pub struct PluginLibrary {
    /// The library's crate name, for listings.
    pub name: extern "C" fn() -> RStr<'static>,
    pub backends: extern "C" fn() -> RVec<BackendPlugin>,
    #[sabi(last_prefix_field)]
    pub models: extern "C" fn() -> RVec<ModelPluginRef>,
}

impl RootModule for PluginLibraryRef {
    declare_root_module_statics! {PluginLibraryRef}
    const BASE_NAME: &'static str = "infer_plugin";
    const NAME: &'static str = "infer_plugin";
    // infer-sdk's version. abi_stable refuses a library of another major version or, in 0.x, of
    // an older minor; a newer minor goes on to the layout check.
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// Exports this crate's registered plugins (everything it `register_*!`-ed) as a plugin
/// library. Put it once in a `cdylib` crate.
#[macro_export]
macro_rules! export_plugin_library {
    () => {
        #[$crate::__private::abi_stable::export_root_module]
        fn __infer_plugin_root() -> $crate::plugin::library::PluginLibraryRef {
            use $crate::__private::abi_stable::{prefix_type::PrefixTypeTrait, std_types::RStr};
            extern "C" fn name() -> RStr<'static> {
                RStr::from_str(env!("CARGO_PKG_NAME"))
            }
            extern "C" fn backends() -> $crate::__private::abi_stable::std_types::RVec<$crate::plugin::BackendPlugin> {
                $crate::plugin::builtin_backends().copied().collect()
            }
            extern "C" fn models() -> $crate::__private::abi_stable::std_types::RVec<$crate::plugin::ModelPluginRef> {
                // Descriptors are made on first use; a panic making one must not cross.
                ::std::panic::catch_unwind($crate::plugin::builtin_models_ffi).unwrap_or_default()
            }
            $crate::plugin::library::PluginLibrary { name, backends, models }.leak_into_prefix()
        }
    };
}
