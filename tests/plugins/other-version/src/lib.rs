//! Pretends to be an infer plugin library built against another infer-core version: the root
//! module has infer-core's name and layout, but declares this crate's version (0.0.9), as the
//! root module of an older infer-core would.

use abi_stable::{
    declare_root_module_statics, export_root_module,
    library::RootModule,
    package_version_strings,
    prefix_type::PrefixTypeTrait,
    sabi_types::VersionStrings,
    std_types::{RStr, RVec},
    StableAbi,
};
use infer_core::plugin::{BackendPlugin, ModelPluginRef};

#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginLibraryRef)))]
#[sabi(missing_field(panic))]
pub struct PluginLibrary {
    pub name: extern "C" fn() -> RStr<'static>,
    pub backends: extern "C" fn() -> RVec<BackendPlugin>,
    #[sabi(last_prefix_field)]
    pub models: extern "C" fn() -> RVec<ModelPluginRef>,
}

impl RootModule for PluginLibraryRef {
    declare_root_module_statics! {PluginLibraryRef}
    const BASE_NAME: &'static str = "infer_plugin";
    const NAME: &'static str = "infer_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

extern "C" fn name() -> RStr<'static> {
    RStr::from_str(env!("CARGO_PKG_NAME"))
}

extern "C" fn backends() -> RVec<BackendPlugin> {
    RVec::new()
}

extern "C" fn models() -> RVec<ModelPluginRef> {
    RVec::new()
}

#[export_root_module]
fn root() -> PluginLibraryRef {
    PluginLibrary { name, backends, models }.leak_into_prefix()
}
