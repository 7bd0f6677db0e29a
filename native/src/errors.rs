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
//! | `EmptySubscriber`   | `ValueError` (the Python wrappers then name the grammar error) |
//! | `TooLarge`          | `OverflowError`                               |
//! | `ColumnType`        | `TypeError`                                   |
//! | `MalformedColumn`   | `ValueError`                                  |
//! | `LengthMismatch`    | `ValueError`                                  |
//! | `BadRows`           | `routing._native.BulkRowError(ValueError)`, with `.rows`: `[(row, reason, detail)]` |

use std::fmt;

use crate::bulk::RowError;
use crate::frozen::BuildError;

/// Bad rows listed in a [`NativeError::BadRows`] message (all of them are in the error itself).
const LISTED_ROWS: usize = 10;

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
    /// A bulk call's column is not a string array.
    ColumnType {
        column: &'static str,
        found: String,
    },
    /// A bulk call's column breaks the Arrow format (e.g. invalid UTF-8).
    MalformedColumn {
        column: &'static str,
        reason: String,
    },
    /// A bulk call's columns are not row-aligned.
    LengthMismatch {
        patterns: usize,
        subscribers: usize,
    },
    /// A bulk call found bad rows (every one listed) and applied nothing.
    BadRows {
        rows: usize,
        errors: Vec<RowError>,
    },
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
            NativeError::ColumnType { column, found } => {
                write!(
                    f,
                    "{column} must be a pyarrow string, large_string or string_view array, not {found}"
                )
            }
            NativeError::MalformedColumn { column, reason } => {
                write!(f, "{column} is a malformed Arrow array: {reason}")
            }
            NativeError::LengthMismatch { patterns, subscribers } => {
                write!(
                    f,
                    "patterns has {patterns} rows but subscribers has {subscribers}; they must be row-aligned"
                )
            }
            NativeError::BadRows { rows, errors } => {
                write!(f, "{} of {rows} rows are invalid, nothing was applied: ", errors.len())?;
                for (i, error) in errors.iter().take(LISTED_ROWS).enumerate() {
                    let separator = if i == 0 { "" } else { "; " };
                    write!(
                        f,
                        "{separator}row {}: {} [reason={}]",
                        error.row, error.detail, error.reason
                    )?;
                }
                if errors.len() > LISTED_ROWS {
                    write!(f, "; and {} more (all in .rows)", errors.len() - LISTED_ROWS)?;
                }
                Ok(())
            }
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
    use pyo3::prelude::*;
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
        BulkRowError,
        PyValueError,
        "Bad rows in a bulk call (nothing was applied); `.rows` lists every one as (row index, reason code, detail)."
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
                NativeError::ColumnType { .. } => PyTypeError::new_err(message),
                NativeError::MalformedColumn { .. } | NativeError::LengthMismatch { .. } => {
                    PyValueError::new_err(message)
                }
                NativeError::BadRows { errors, .. } => bulk_row_error(message, errors),
            }
        }
    }

    /// A `BulkRowError` whose `rows` attribute holds every bad row.
    fn bulk_row_error(message: String, errors: Vec<super::RowError>) -> PyErr {
        // Errors are converted where the GIL is held (after `detach` returns); attach is then free.
        Python::attach(|py| {
            let error = BulkRowError::new_err(message);
            let rows: Vec<(usize, &str, String)> = errors.into_iter().map(|e| (e.row, e.reason, e.detail)).collect();
            if let Err(failed) = error.value(py).setattr("rows", rows) {
                return failed;
            }
            error
        })
    }
}
