//! libtorch errors as one-line messages.

use tch::TchError;

/// An op failure inside the backend; the op name and operand shapes are added by `ops::exec`.
#[derive(Debug)]
pub struct OpError(pub String);

pub type OpResult<T> = std::result::Result<T, OpError>;

impl From<TchError> for OpError {
    fn from(e: TchError) -> Self {
        OpError(message(&e))
    }
}

/// `return Err(OpError(format!(...)))` in one line.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::OpError(format!($($arg)*)))
    };
}
pub(crate) use bail;

/// The message of a libtorch error without the C++ frame dump and "Exception raised from ..."
/// trailer libtorch appends, on one line.
pub fn message(e: &TchError) -> String {
    match e {
        TchError::Torch(m) => one_line(m),
        other => one_line(&other.to_string()),
    }
}

fn one_line(m: &str) -> String {
    let m = m.split("Exception raised from").next().unwrap_or(m);
    let lines: Vec<&str> = m.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    lines.join(" ")
}

#[cfg(test)]
mod tests {
    #[test]
    fn strips_the_cpp_trailer() {
        let e = tch::TchError::Torch(
            "shape '[3]' is invalid for input of size 4\nException raised from infer_size_impl at x.cpp:1\nframe #0"
                .into(),
        );
        assert_eq!(super::message(&e), "shape '[3]' is invalid for input of size 4");
    }
}
