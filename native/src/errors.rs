//! The one error type of the native core, and (with the `python` feature) its
//! one mapping to Python exceptions. Every fallible native operation returns
//! [`NativeError`]; nothing panics across the FFI boundary.
//!
//! | variant             | Python exception                              |
//! |---------------------|-----------------------------------------------|
//! | `Format`            | `routing._native.FrozenFormatError(ValueError)` |
//! | `BatchTooLarge`     | `routing._native.BatchLimitError(ValueError)`   |
//! | `ResultTooLarge`    | `routing._native.BatchLimitError(ValueError)`   |
//! | `UnsupportedArray`  | `TypeError`                                   |
//! | `InvalidArray`      | `ValueError`                                  |
//! | `EmptySubscriber`   | `ValueError` (the Python wrappers check first)  |
//! | `TooLarge`          | `OverflowError`                               |

use std::fmt;

use crate::frozen::BuildError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NativeError {
    /// Bytes given to the frozen-matcher decoder are not a valid, intact blob.
    Format(String),
    /// A batch has more rows than the caller's `max_rows`.
    BatchTooLarge {
        rows: usize,
        limit: usize,
    },
    /// A batch's results do not fit the output array's 32-bit offsets.
    ResultTooLarge(String),
    /// `match_batch` was given something other than a string array.
    UnsupportedArray(String),
    /// A string array whose buffers break the Arrow format (e.g. invalid UTF-8).
    InvalidArray(String),
    EmptySubscriber,
    /// More subscriptions than the 32-bit indices of the frozen layout address.
    TooLarge,
}

impl NativeError {
    pub fn format(message: impl Into<String>) -> Self {
        NativeError::Format(message.into())
    }
}

impl fmt::Display for NativeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NativeError::Format(message) => write!(f, "not a valid frozen matcher: {message}"),
            NativeError::BatchTooLarge { rows, limit } => {
                write!(f, "batch has {rows} rows, more than the limit max_batch_rows={limit}")
            }
            NativeError::ResultTooLarge(message) => write!(f, "batch result too large: {message}"),
            NativeError::UnsupportedArray(found) => {
                write!(
                    f,
                    "match_batch needs a pyarrow string or large_string array, not {found}"
                )
            }
            NativeError::InvalidArray(reason) => write!(f, "match_batch was given a malformed Arrow array: {reason}"),
            NativeError::EmptySubscriber => write!(f, "subscriber id must not be empty"),
            NativeError::TooLarge => write!(f, "too many subscriptions for the frozen matcher's 32-bit indices"),
        }
    }
}

impl std::error::Error for NativeError {}

impl From<BuildError> for NativeError {
    fn from(error: BuildError) -> Self {
        match error {
            BuildError::EmptySubscriber => NativeError::EmptySubscriber,
            BuildError::TooLarge => NativeError::TooLarge,
        }
    }
}

#[cfg(feature = "python")]
pub mod python {
    use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
    use pyo3::{create_exception, PyErr};

    use super::NativeError;

    create_exception!(
        routing._native,
        FrozenFormatError,
        PyValueError,
        "Bytes that are not an intact frozen matcher (corrupt, truncated, foreign or a newer format version)."
    );
    create_exception!(
        routing._native,
        BatchLimitError,
        PyValueError,
        "A batch over max_batch_rows, or whose results overflow the output array."
    );

    impl From<NativeError> for PyErr {
        fn from(error: NativeError) -> PyErr {
            let message = error.to_string();
            match error {
                NativeError::Format(_) => FrozenFormatError::new_err(message),
                NativeError::BatchTooLarge { .. } | NativeError::ResultTooLarge(_) => BatchLimitError::new_err(message),
                NativeError::UnsupportedArray(_) => PyTypeError::new_err(message),
                NativeError::InvalidArray(_) | NativeError::EmptySubscriber => PyValueError::new_err(message),
                NativeError::TooLarge => PyOverflowError::new_err(message),
            }
        }
    }
}
