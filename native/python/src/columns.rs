//! The two row-aligned pyarrow string columns of a bulk call (`subscribe_many`,
//! `unsubscribe_many`, `FrozenMatcher.from_arrow`): imported without copying,
//! validated in full with the GIL released, then handed to `core::bulk`.

use arrow_array::Array;
use arrow_data::ArrayData;
use arrow_pyarrow::FromPyArrowUnchecked;
use pyo3::prelude::*;
use spark_topic_router_core::bulk::{self, Column, RowLimits};
use spark_topic_router_core::errors::NativeError;

use crate::errors::raise;

/// The two columns of a bulk call, imported from pyarrow but not yet validated.
pub(crate) struct BulkColumns {
    patterns: ArrayData,
    subscribers: ArrayData,
    limits: Option<RowLimits>,
}

/// `(max_pattern_bytes, max_pattern_words, max_hash_words, max_subscriber_bytes)`.
pub(crate) type LimitsTuple = (usize, usize, usize, usize);

impl BulkColumns {
    pub(crate) fn import(
        patterns: &Bound<'_, PyAny>,
        subscribers: &Bound<'_, PyAny>,
        limits: Option<LimitsTuple>,
    ) -> PyResult<Self> {
        // SAFETY: `from_pyarrow_bound_unchecked` skips validation; these
        // `ArrayData` are private to `BulkColumns`, whose only reader is
        // `run`, which passes each through `bulk::checked_column`
        // (`validate_full`) before any value is read.
        let (patterns, subscribers) = unsafe {
            (
                ArrayData::from_pyarrow_bound_unchecked(patterns)?,
                ArrayData::from_pyarrow_bound_unchecked(subscribers)?,
            )
        };
        let limits = limits.map(
            |(pattern_bytes, pattern_words, hash_words, subscriber_bytes)| RowLimits {
                max_pattern_bytes: pattern_bytes,
                max_pattern_words: pattern_words,
                max_hash_words: hash_words,
                max_subscriber_bytes: subscriber_bytes,
            },
        );
        Ok(BulkColumns {
            patterns,
            subscribers,
            limits,
        })
    }

    /// Validate both columns fully, then run `op` on them, with the GIL released.
    pub(crate) fn run<T: Send>(
        self,
        py: Python<'_>,
        op: impl FnOnce(&dyn Array, &dyn Array, Option<&RowLimits>) -> Result<T, NativeError> + Send,
    ) -> PyResult<T> {
        let result = py.detach(|| -> Result<T, NativeError> {
            let patterns = bulk::checked_column(self.patterns, Column::Patterns)?;
            let subscribers = bulk::checked_column(self.subscribers, Column::Subscribers)?;
            #[cfg(feature = "extension-module")]
            let rows = patterns.len();
            let done = op(patterns.as_ref(), subscribers.as_ref(), self.limits.as_ref());
            drop((patterns, subscribers));
            #[cfg(feature = "extension-module")]
            if rows > crate::allocator::RELEASE_AFTER_ROWS {
                crate::allocator::release_freed();
            }
            done
        });
        result.map_err(raise)
    }
}
