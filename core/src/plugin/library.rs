//! Plugin libraries: a cdylib exports one `abi_stable` root module listing the plugins it
//! registered; the host loads it with abi_stable's version and layout checks.
//!
//! Libraries are never unloaded (abi_stable leaks them on purpose), so everything a plugin made
//! — backends, tensors, models — stays valid for the life of the process.

use std::path::Path;

use abi_stable::{
    declare_root_module_statics,
    library::{lib_header_from_path, LibraryError, RootModule},
    package_version_strings,
    sabi_types::VersionStrings,
    std_types::{RStr, RVec},
    StableAbi,
};

use crate::plugin::{BackendPlugin, ModelPlugin};
use crate::{Error, Result};

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
    pub models: extern "C" fn() -> RVec<ModelPlugin>,
}

impl RootModule for PluginLibraryRef {
    declare_root_module_statics! {PluginLibraryRef}
    const BASE_NAME: &'static str = "infer_plugin";
    const NAME: &'static str = "infer_plugin";
    // infer-core's version. abi_stable refuses a library of another major version or, in 0.x, of
    // an older minor; a newer minor goes on to the layout check.
    const VERSION_STRINGS: VersionStrings = package_version_strings!();
}

/// Everything a loaded library provides.
pub struct LoadedLibrary {
    pub name: String,
    pub backends: Vec<BackendPlugin>,
    pub models: Vec<ModelPlugin>,
}

/// Opens the plugin library at `path`, checking its ABI against this build of infer-core.
pub fn load_library(path: &Path) -> Result<LoadedLibrary> {
    if !path.exists() {
        return Err(Error::plugin(path, "file does not exist"));
    }
    let explain = |e: LibraryError| -> Error {
        let msg = match &e {
            // The dynamic loader's own reason (e.g. a library it links is missing), on one line.
            LibraryError::OpenError { err, .. } => format!("cannot open as a shared library: {err}"),
            LibraryError::GetSymbolError { .. } => {
                "not an infer plugin: it exports no abi_stable root module (use infer_core::export_plugin_library!)"
                    .to_string()
            }
            LibraryError::InvalidAbiHeader(_) => format!("built with an incompatible abi_stable: {e}"),
            // abi_stable's own text spans four lines: say it on one.
            LibraryError::IncompatibleVersionNumber { expected_version, actual_version, .. } => format!(
                "built against another infer-core version ({actual_version}; this is {expected_version}): rebuild the plugin against this infer-core"
            ),
            LibraryError::AbiInstability(_) => {
                format!(
                    "ABI mismatch: its plugin interface does not match this infer-core ({}); rebuild the plugin against this infer-core",
                    abi_mismatch_summary(&e.to_string())
                )
            }
            _ => e.to_string(),
        };
        Error::plugin(path, msg)
    };
    let header = lib_header_from_path(path).map_err(explain)?;
    let module = header.init_root_module::<PluginLibraryRef>().map_err(explain)?;
    // These entry points only copy static descriptors (export_plugin_library!): they cannot panic.
    let name = (module.name())().to_string();
    let backends = (module.backends())().into_vec();
    let models = (module.models())().into_vec();
    Ok(LoadedLibrary { name, backends, models })
}

fn first_line(s: &str) -> &str {
    s.lines().find(|l| !l.trim().is_empty()).unwrap_or(s)
}

/// The first concrete difference in abi_stable's layout report ("incompatible type size:
/// expected 48, found 56"); that report prints both whole type layouts first, hundreds of lines
/// in which the difference is hard to find.
fn abi_mismatch_summary(report: &str) -> String {
    let mut lines = report.lines().map(str::trim);
    let Some(what) = lines.find_map(|l| l.strip_prefix("Error:")) else {
        return first_line(report).to_string();
    };
    let mut value_after = |label: &str| {
        lines.by_ref().find(|l| *l == label)?;
        lines.by_ref().find(|l| !l.is_empty()).map(str::to_string)
    };
    let expected = value_after("Expected:");
    let found = value_after("Found:");
    let what = if what.is_empty() { "layout differs" } else { what };
    match (expected, found) {
        (Some(e), Some(f)) => format!("{what}: expected {e}, found {f}"),
        _ => what.to_string(),
    }
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
            extern "C" fn models() -> $crate::__private::abi_stable::std_types::RVec<$crate::plugin::ModelPlugin> {
                $crate::plugin::builtin_models().copied().collect()
            }
            $crate::plugin::library::PluginLibrary { name, backends, models }.leak_into_prefix()
        }
    };
}

#[cfg(test)]
mod tests {
    use super::abi_mismatch_summary;

    #[test]
    fn abi_report_is_summarized_to_its_first_difference() {
        // The shape of abi_stable's AbiInstabilityErrors text.
        let report = "Compared <this>:\n    --- Type Layout ---\n    type: PluginLibrary\n\nTo <other>:\n    ...\n\
                      1 error(s)inside:\n    <other>\n\n    field: cache\n\n\
                      \nError:incompatible type size\nExpected:\n    48\nFound:\n    56\n\
                      \nError:mismatched type\nExpected:\n    u8\nFound:\n    u16\n";
        assert_eq!(abi_mismatch_summary(report), "incompatible type size: expected 48, found 56");
        assert_eq!(abi_mismatch_summary("Compared <this>:\n  x"), "Compared <this>:");
    }
}
