//! MLX errors as one-line messages.

use mlx_rs::error::Exception;

/// An op failure inside the backend; the op name and operand shapes are added by `ops::exec`.
#[derive(Debug)]
pub struct OpError(pub String);

pub type OpResult<T> = std::result::Result<T, OpError>;

impl From<Exception> for OpError {
    fn from(e: Exception) -> Self {
        OpError(one_line(e.what()))
    }
}

/// `return Err(OpError(format!(...)))` in one line.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::OpError(format!($($arg)*)))
    };
}
pub(crate) use bail;

/// MLX messages sometimes span lines (a C++ exception with context): keep them on one.
pub fn one_line(m: &str) -> String {
    m.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}
