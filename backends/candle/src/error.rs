//! candle errors as one-line messages.

/// The message of a candle error without the backtrace candle attaches when `RUST_BACKTRACE`
/// is set (it would otherwise end up inside every infer error message).
pub fn message(e: &candle_core::Error) -> String {
    use candle_core::Error as E;
    match e {
        E::WithBacktrace { inner, .. } => message(inner),
        E::Context { inner, context } => format!("{context}: {}", message(inner)),
        E::WithPath { inner, path } => format!("{}: {}", path.display(), message(inner)),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn strips_backtraces() {
        let e = candle_core::Error::Msg("boom".into());
        let e = candle_core::Error::WithBacktrace {
            inner: Box::new(e),
            backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
        };
        assert_eq!(super::message(&e), "boom");
    }
}
