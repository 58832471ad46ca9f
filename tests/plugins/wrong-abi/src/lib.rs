//! Pretends to be an infer plugin library (same root module name and version) with a root
//! module of a different layout, as a plugin built against an older interface would be.

use abi_stable::{
    declare_root_module_statics, export_root_module, library::RootModule, package_version_strings,
    prefix_type::PrefixTypeTrait, sabi_types::VersionStrings, StableAbi,
};

#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = OldPluginRef)))]
#[sabi(missing_field(panic))]
pub struct OldPlugin {
    #[sabi(last_prefix_field)]
    pub count: extern "C" fn() -> u32,
}

impl RootModule for OldPluginRef {
    declare_root_module_statics! {OldPluginRef}
    const BASE_NAME: &'static str = "infer_plugin";
    const NAME: &'static str = "infer_plugin";
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

extern "C" fn count() -> u32 {
    0
}

#[export_root_module]
fn root() -> OldPluginRef {
    OldPlugin { count }.leak_into_prefix()
}
