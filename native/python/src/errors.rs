//! The one map from the core's errors to Python exceptions: every binding
//! method turns a [`NativeError`] (or a [`BuildError`], through it) into a
//! `PyErr` with [`raise`], and nowhere else. The message is the core's, as it is.
//!
//! | variant             | Python exception                              |
//! |---------------------|-----------------------------------------------|
//! | `Format`            | `routing._native.FrozenFormatError(ValueError)` |
//! | `Io`                | `OSError` (a snapshot file that cannot be opened or mapped) |
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
//!
//! A function, not `impl From<NativeError> for PyErr`: both types belong to
//! other crates, so the orphan rule leaves that impl to neither binding.
//!
//! [`BuildError`]: spark_topic_router_core::errors::BuildError

use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use spark_topic_router_core::errors::{NativeError, RowError};

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

/// The Python exception for a core error (see the table above).
pub(crate) fn raise(error: impl Into<NativeError>) -> PyErr {
    let error = error.into();
    let message = error.to_string();
    match error {
        NativeError::Format(_) => FrozenFormatError::new_err(message),
        NativeError::Io(_) => PyOSError::new_err(message),
        NativeError::BatchTooLarge { .. } | NativeError::ResultTooLarge(_) => BatchLimitError::new_err(message),
        NativeError::UnsupportedArray(_) => PyTypeError::new_err(message),
        NativeError::InvalidArray(_) | NativeError::EmptySubscriber => PyValueError::new_err(message),
        NativeError::TooLarge => PyOverflowError::new_err(message),
        NativeError::ColumnType { .. } => PyTypeError::new_err(message),
        NativeError::MalformedColumn { .. } | NativeError::LengthMismatch { .. } => PyValueError::new_err(message),
        NativeError::BadRows { errors, .. } => bulk_row_error(message, errors),
    }
}

/// A `BulkRowError` whose `rows` attribute holds every bad row.
fn bulk_row_error(message: String, errors: Vec<RowError>) -> PyErr {
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
