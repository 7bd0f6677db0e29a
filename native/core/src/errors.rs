//! The error types of the native core: [`NativeError`], which every fallible
//! operation a binding calls returns (nothing panics across an FFI boundary),
//! and the two it is built from, [`BuildError`] and [`RowError`]. A leaf
//! module: it depends on no other module of the crate, so every module may
//! return its errors.
//!
//! The messages are the bindings' messages: a binding maps each variant to an
//! exception of its own (the Python one: `native/python/src/errors.rs`) and
//! keeps the text as it is. Some name pyarrow types, because that is what a
//! caller of `routing._native` passed.

use std::fmt;

/// Bad rows listed in a [`NativeError::BadRows`] message (all of them are in the error itself).
const LISTED_ROWS: usize = 10;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NativeError {
    /// Bytes given to the frozen-matcher decoder are not a valid, intact blob.
    Format(String),
    /// A snapshot file could not be opened or mapped (the message names it and the OS error).
    Io(String),
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
            NativeError::Io(message) => write!(f, "cannot read the frozen matcher file {message}"),
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

/// Why [`FrozenMatcher::build`](crate::frozen::FrozenMatcher::build) (or a
/// snapshot's freeze) refused its input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BuildError {
    EmptySubscriber,
    /// More nodes, edges, ids or text bytes than `u32` indices can address.
    TooLarge,
}

/// One bad row of a bulk call ([`crate::bulk`]): its index in the columns, a
/// stable reason code ([`crate::bulk::reason`]) and a detail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowError {
    pub row: usize,
    pub reason: &'static str,
    pub detail: String,
}

impl From<BuildError> for NativeError {
    fn from(error: BuildError) -> Self {
        match error {
            BuildError::EmptySubscriber => NativeError::EmptySubscriber,
            BuildError::TooLarge => NativeError::TooLarge,
        }
    }
}
