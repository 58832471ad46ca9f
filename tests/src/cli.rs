//! Running the `infer` binary from integration tests. The binary's path is known only to the
//! crate that defines it (`env!("CARGO_BIN_EXE_infer")` in `cli/tests`), so tests pass it in.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `infer` binary with a plugin configuration.
pub struct Infer {
    exe: PathBuf,
    config: PathBuf,
}

impl Infer {
    /// `exe` with the repository's plugins.toml: tests must not pick up a developer's own
    /// configuration.
    pub fn new(exe: &str) -> Self {
        Infer { exe: exe.into(), config: crate::repo_root().join("plugins.toml") }
    }

    /// The same binary with another plugins.toml.
    pub fn with_config(self, config: &Path) -> Self {
        Infer { config: config.to_path_buf(), ..self }
    }

    pub fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.exe)
            .args(args)
            .env("INFER_CONFIG", &self.config)
            // Libraries are found through rpaths, never through the caller's environment.
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .expect("run infer")
    }

    /// Runs `args` and asserts a clean failure: exit code 1, one `error:` line on stderr that
    /// names every `needles` item, no panic.
    pub fn assert_clean_error(&self, args: &[&str], needles: &[&str]) {
        let o = self.run(args);
        let err = stderr(&o);
        assert!(!o.status.success(), "should fail: {args:?}");
        assert_eq!(o.status.code(), Some(1), "exit code for {args:?}: {err}");
        assert!(!err.contains("panicked"), "panic for {args:?}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "one line expected for {args:?}, got: {err}");
        assert!(lines[0].starts_with("error: "), "{err}");
        for n in needles {
            assert!(lines[0].contains(n), "{args:?}: expected {n:?} in {err}");
        }
    }
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
