//! Errors of the framework: one enum for the host, one FFI-safe twin for plugin boundaries.

use abi_stable::{std_types::RString, StableAbi};
use std::path::{Path, PathBuf};

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure carries what went wrong and where (file, tensor, plugin library).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Config { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Checkpoint { path: PathBuf, message: String },
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("no model plugin handles model_type `{model_type}` (known: {known})")]
    UnknownModelType { model_type: String, known: String },
    #[error("unknown backend `{name}` (known: {known})")]
    UnknownBackend { name: String, known: String },
    #[error("plugin library {library}: {message}")]
    Plugin { library: PathBuf, message: String },
    #[error("backend: {0}")]
    Backend(String),
    #[error("shape: {0}")]
    Shape(String),
    #[error("invalid input: {0}")]
    InvalidInput(String),
    #[error("unsupported: {0}")]
    Unsupported(String),
    #[error("panic inside {0}")]
    Panic(String),
    /// A third-party reader of untrusted bytes (an audio decoder, a pickle reader) panicked and
    /// [`catch_panic`] caught it: a bad input, told apart from the reader's ordinary refusals.
    /// `input` says what was read and what it is not ("x.wav: not a readable audio file"),
    /// `panic` what panicked and its message. Made by [`Error::into_reader_panic`].
    #[error("{input} ({panic})")]
    ReaderPanic { input: String, panic: String },
    #[error("cancelled")]
    Cancelled,
    /// An error rebuilt from the FFI form: its message already names the place.
    #[error("{0}")]
    Located(String),
}

impl Error {
    pub fn io(path: impl AsRef<Path>, source: std::io::Error) -> Self {
        Error::Io { path: path.as_ref().to_path_buf(), source }
    }
    pub fn config(path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        Error::Config { path: path.as_ref().to_path_buf(), message: message.into() }
    }
    pub fn checkpoint(path: impl AsRef<Path>, message: impl Into<String>) -> Self {
        Error::Checkpoint { path: path.as_ref().to_path_buf(), message: message.into() }
    }
    pub fn plugin(library: impl AsRef<Path>, message: impl Into<String>) -> Self {
        Error::Plugin { library: library.as_ref().to_path_buf(), message: message.into() }
    }
    pub fn backend(message: impl std::fmt::Display) -> Self {
        Error::Backend(message.to_string())
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::InvalidInput(message.into())
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Error::Unsupported(message.into())
    }
    /// For the result of [`catch_panic`] around a reader of untrusted input: its caught
    /// [`Error::Panic`] becomes [`Error::ReaderPanic`] on `input` (called only then); any other
    /// error is returned as it is.
    pub fn into_reader_panic(self, input: impl FnOnce() -> String) -> Self {
        match self {
            Error::Panic(panic) => Error::ReaderPanic { input: input(), panic },
            other => other,
        }
    }
}

/// Coarse error class that survives an FFI crossing.
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, StableAbi)]
pub enum ErrorKind {
    Io,
    Config,
    Checkpoint,
    Tokenizer,
    UnknownModelType,
    UnknownBackend,
    Plugin,
    Backend,
    Shape,
    InvalidInput,
    Unsupported,
    Panic,
    Cancelled,
}

/// The error type of every `extern "C"` / sabi-trait function: kind plus the full message.
#[repr(C)]
#[derive(Debug, Clone, StableAbi)]
pub struct FfiError {
    pub kind: ErrorKind,
    pub message: RString,
}

impl From<Error> for FfiError {
    fn from(e: Error) -> Self {
        let kind = match &e {
            Error::Io { .. } => ErrorKind::Io,
            Error::Config { .. } => ErrorKind::Config,
            Error::Checkpoint { .. } => ErrorKind::Checkpoint,
            Error::Tokenizer(_) => ErrorKind::Tokenizer,
            Error::UnknownModelType { .. } => ErrorKind::UnknownModelType,
            Error::UnknownBackend { .. } => ErrorKind::UnknownBackend,
            Error::Plugin { .. } => ErrorKind::Plugin,
            Error::Backend(_) => ErrorKind::Backend,
            Error::Shape(_) => ErrorKind::Shape,
            Error::InvalidInput(_) => ErrorKind::InvalidInput,
            Error::Unsupported(_) => ErrorKind::Unsupported,
            Error::Panic(_) => ErrorKind::Panic,
            // The input was bad; the reader survived.
            Error::ReaderPanic { .. } => ErrorKind::InvalidInput,
            Error::Cancelled => ErrorKind::Cancelled,
            Error::Located(_) => ErrorKind::Checkpoint,
        };
        // Variants whose Display only adds a class prefix cross as their bare message, so the
        // prefix is not repeated when the error is rebuilt on the other side.
        let message = match e {
            Error::Backend(m)
            | Error::Shape(m)
            | Error::InvalidInput(m)
            | Error::Unsupported(m)
            | Error::Tokenizer(m) => m,
            other => other.to_string(),
        };
        FfiError { kind, message: message.into() }
    }
}

impl From<FfiError> for Error {
    /// The message already names what and where, so the variant only keeps the class.
    fn from(e: FfiError) -> Self {
        let m = e.message.into_string();
        match e.kind {
            ErrorKind::Io | ErrorKind::Config | ErrorKind::Checkpoint | ErrorKind::Plugin => Error::Located(m),
            ErrorKind::Tokenizer => Error::Tokenizer(m),
            ErrorKind::Shape => Error::Shape(m),
            ErrorKind::InvalidInput => Error::InvalidInput(m),
            ErrorKind::Unsupported => Error::Unsupported(m),
            ErrorKind::Panic => Error::Panic(m),
            ErrorKind::Cancelled => Error::Cancelled,
            _ => Error::Backend(m),
        }
    }
}

/// Runs `f`, turning a panic into an error: nothing may unwind across an FFI boundary.
pub fn catch_panic<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic payload".into());
            Err(Error::Panic(format!("{what}: {msg}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_readers_caught_panic_is_its_own_kind() {
        let read = |fail: bool| {
            catch_panic("the decoder panicked", || {
                if fail {
                    panic!("shift overflow")
                } else {
                    Err::<(), _>(Error::invalid("x"))
                }
            })
            .map_err(|e| e.into_reader_panic(|| "x.wav: not a readable audio file".into()))
        };
        let Err(err) = read(true) else { unreachable!() };
        assert!(matches!(err, Error::ReaderPanic { .. }), "{err:?}");
        assert_eq!(err.to_string(), "x.wav: not a readable audio file (the decoder panicked: shift overflow)");
        let ffi = FfiError::from(err);
        assert_eq!(
            (ffi.kind, ffi.message.as_str()),
            (ErrorKind::InvalidInput, "x.wav: not a readable audio file (the decoder panicked: shift overflow)")
        );
        // The reader's own errors are left as they are.
        assert!(matches!(read(false), Err(Error::InvalidInput(m)) if m == "x"));
    }
}
