//! Loading plugin libraries: the root module a library exports
//! ([`infer_sdk::plugin::library::PluginLibrary`]) opened with abi_stable's version and layout
//! checks, every refusal said in one line.
//!
//! Libraries are never unloaded (abi_stable leaks them on purpose), so everything a plugin made
//! — backends, tensors, models — stays valid for the life of the process.

use std::path::Path;

use abi_stable::library::{lib_header_from_path, LibraryError};

pub use infer_sdk::plugin::library::{PluginLibrary, PluginLibraryRef};

use crate::plugin::{BackendPlugin, ModelPluginRef};
use crate::{Error, Result};

/// Everything a loaded library provides.
pub struct LoadedLibrary {
    pub name: String,
    pub backends: Vec<BackendPlugin>,
    pub models: Vec<ModelPluginRef>,
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
