//! `routing._native.FrozenMatcher`: the compact read-only matcher
//! (`core::frozen`), its bytes (`core::codec`) and its batches
//! (`core::batch`) over pyarrow arrays.

use std::cell::RefCell;
use std::sync::Arc;

use arrow_array::{make_array, Array, ArrayRef, StructArray};
use arrow_data::ArrayData;
use arrow_pyarrow::{FromPyArrowUnchecked, ToPyArrow};
use arrow_schema::{DataType, Field};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFrozenSet};
use spark_topic_router_core::batch::Matches;
use spark_topic_router_core::errors::NativeError;
use spark_topic_router_core::frozen::{FrozenMatcher, Scratch};
use spark_topic_router_core::{batch, bulk, codec};

use crate::columns::{BulkColumns, LimitsTuple};
use crate::errors::raise;

/// Every (pattern, subscriber) pair of `matcher`, collected with the GIL released.
pub(crate) fn subscriptions_of<M: Matches + Sync>(py: Python<'_>, matcher: &M) -> Vec<(String, String)> {
    py.detach(|| {
        matcher
            .subscriptions()
            .into_iter()
            .map(|(pattern, subscriber)| (pattern, subscriber.to_string()))
            .collect()
    })
}

/// `batch::match_batch` of a pyarrow array (validated with the GIL released) with any matcher.
pub(crate) fn match_batch_of<'py, M: Matches + Sync>(
    py: Python<'py>,
    matcher: &M,
    keys: &Bound<'py, PyAny>,
    max_rows: Option<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: the imported buffers are validated by `validate_full` below
    // (with the GIL released) before any value is read.
    let data = unsafe { ArrayData::from_pyarrow_bound_unchecked(keys)? };
    let result = py.detach(|| -> Result<ArrayData, NativeError> {
        data.validate_full()
            .map_err(|error| NativeError::InvalidArray(error.to_string()))?;
        let array = make_array(data);
        let (list, _) = batch::match_batch(matcher, array.as_ref(), max_rows)?;
        Ok(list.to_data())
    });
    result.map_err(raise)?.to_pyarrow(py)
}

/// `batch::route_batch` of a pyarrow array with any matcher, as a `struct<subscribers, fanout>` array.
pub(crate) fn route_batch_of<'py, M: Matches + Sync>(
    py: Python<'py>,
    matcher: &M,
    keys: &Bound<'py, PyAny>,
    limits: batch::RouteLimits,
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: validated by `validate_full` below before any value is read.
    let data = unsafe { ArrayData::from_pyarrow_bound_unchecked(keys)? };
    let result = py.detach(|| -> Result<ArrayData, NativeError> {
        data.validate_full()
            .map_err(|error| NativeError::InvalidArray(error.to_string()))?;
        let array = make_array(data);
        let routed = batch::route_batch(matcher, array.as_ref(), limits)?;
        let fields = vec![
            Field::new("subscribers", routed.subscribers.data_type().clone(), true),
            Field::new("fanout", DataType::Int32, true),
        ];
        let columns: Vec<ArrayRef> = vec![Arc::new(routed.subscribers), Arc::new(routed.fanout)];
        let routed = StructArray::try_new(fields.into(), columns, None)
            .map_err(|error| NativeError::ResultTooLarge(error.to_string()))?;
        Ok(routed.to_data())
    });
    result.map_err(raise)?.to_pyarrow(py)
}

thread_local! {
    /// Lookup buffers reused across calls on this thread.
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Matching subscribers of `key` as a Python frozenset.
fn frozen_lookup<'py>(py: Python<'py>, matcher: &FrozenMatcher, key: &str) -> PyResult<Bound<'py, PyFrozenSet>> {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut scratch) => {
            let ids = matcher.lookup_ids(key, &mut scratch);
            let found = PyFrozenSet::new(py, ids.iter().map(|&id| matcher.subscriber(id)));
            scratch.trim();
            found
        }
        // Only reachable by re-entrance; a fresh buffer keeps it correct.
        Err(_) => PyFrozenSet::new(py, matcher.lookup(key)),
    })
}

/// Compact read-only matcher (see `routing.matchers.native.FrozenMatcher`).
#[pyclass(frozen, module = "routing._native", name = "FrozenMatcher")]
pub struct PyFrozenMatcher {
    pub(crate) inner: Arc<FrozenMatcher>,
}

impl PyFrozenMatcher {
    pub(crate) fn wrap(inner: FrozenMatcher) -> Self {
        PyFrozenMatcher { inner: Arc::new(inner) }
    }
}

#[pymethods]
impl PyFrozenMatcher {
    /// The matcher with no subscriptions.
    #[new]
    fn new() -> Self {
        PyFrozenMatcher::wrap(FrozenMatcher::empty())
    }

    /// Build from (pattern, subscriber) pairs.
    #[staticmethod]
    fn build(py: Python<'_>, pairs: Vec<(String, String)>) -> PyResult<Self> {
        let matcher = py.detach(|| FrozenMatcher::build(pairs)).map_err(raise)?;
        Ok(PyFrozenMatcher::wrap(matcher))
    }

    /// Build from two row-aligned pyarrow string columns (GIL released);
    /// raises BulkRowError listing every bad row (see `core::bulk`).
    #[staticmethod]
    #[pyo3(signature = (patterns, subscribers, limits = None))]
    fn from_arrow(
        py: Python<'_>,
        patterns: &Bound<'_, PyAny>,
        subscribers: &Bound<'_, PyAny>,
        limits: Option<LimitsTuple>,
    ) -> PyResult<Self> {
        let matcher = BulkColumns::import(patterns, subscribers, limits)?.run(py, bulk::freeze_pairs)?;
        Ok(PyFrozenMatcher::wrap(matcher))
    }

    /// Decode bytes from `to_bytes`; raises FrozenFormatError on anything else.
    #[staticmethod]
    fn from_bytes(py: Python<'_>, data: &[u8]) -> PyResult<Self> {
        let matcher = py.detach(|| codec::decode(data)).map_err(raise)?;
        Ok(PyFrozenMatcher::wrap(matcher))
    }

    /// Validate and map the matcher stored in the file at `path` from byte `offset` (a multiple of 8)
    /// to its end (GIL released). The matcher is read in place from a read-only shared mapping, so
    /// every process that opens one file shares its pages; raises FrozenFormatError on bytes that are
    /// not an intact matcher and OSError on a file that cannot be opened or mapped.
    #[staticmethod]
    #[pyo3(signature = (path, offset = 0))]
    fn open(py: Python<'_>, path: std::path::PathBuf, offset: u64) -> PyResult<Self> {
        let matcher = py.detach(|| codec::open(&path, offset)).map_err(raise)?;
        Ok(PyFrozenMatcher::wrap(matcher))
    }

    /// `(pairs, words, subscribers, nodes)` as the header of `to_bytes` output declares them, after the
    /// checks the header alone allows (codec `header`): no checksum, no section read, so O(1).
    #[staticmethod]
    fn header(data: &[u8]) -> PyResult<(u32, u32, u32, u32)> {
        let header = codec::header(data).map_err(raise)?;
        Ok((
            header.pair_count,
            header.word_count,
            header.subscriber_count,
            header.node_count,
        ))
    }

    /// The matcher's bytes: the format is its memory, so this is one copy.
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.inner.bytes())
    }

    /// Whether the matcher is read from a mapped file (`open`) rather than from its own heap copy.
    #[getter]
    fn is_mapped(&self) -> bool {
        self.inner.is_mapped()
    }

    fn lookup<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyFrozenSet>> {
        frozen_lookup(py, &self.inner, key)
    }

    /// Match a pyarrow string/large_string/string_view array; returns a
    /// row-aligned `list<string>` array (null key -> null row).
    #[pyo3(signature = (keys, max_rows = None))]
    fn match_batch<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
        max_rows: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match_batch_of(py, self.inner.as_ref(), keys, max_rows)
    }

    /// The router's form of `match_batch` (see `batch::route_batch`): a
    /// `struct<subscribers: list<element: string>, fanout: int32>` array for
    /// a prefix of `keys`, cut before `max_bytes` output bytes; a row over
    /// `max_fanout` has a null list and its count.
    #[pyo3(signature = (keys, max_rows = None, max_fanout = None, max_bytes = None))]
    fn route_batch<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
        max_rows: Option<usize>,
        max_fanout: Option<usize>,
        max_bytes: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let limits = batch::RouteLimits {
            max_rows,
            max_fanout,
            max_bytes,
        };
        route_batch_of(py, self.inner.as_ref(), keys, limits)
    }

    /// Benchmark hook: look up every key `rounds` times (GIL released), so
    /// `bench/native.py` can time lookups without Python call overhead.
    /// Returns the total number of matches, which keeps the work observable.
    fn _lookup_many(&self, py: Python<'_>, keys: Vec<String>, rounds: usize) -> usize {
        py.detach(|| {
            let mut scratch = Scratch::default();
            let mut total = 0;
            for _ in 0..rounds {
                for key in &keys {
                    total += self.inner.lookup_ids(key, &mut scratch).len();
                }
            }
            total
        })
    }

    /// The `(node, key position)` states a lookup of `key` visits: the matching work the
    /// subscription limits bound, as a count (tests and benchmarks; no timing involved).
    fn lookup_states(&self, py: Python<'_>, key: &str) -> usize {
        py.detach(|| {
            let mut scratch = Scratch::default();
            self.inner.lookup_ids(key, &mut scratch);
            scratch.states_visited()
        })
    }

    /// Every (pattern, subscriber) pair.
    fn subscriptions(&self, py: Python<'_>) -> Vec<(String, String)> {
        subscriptions_of(py, &*self.inner)
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }

    #[getter]
    fn subscriber_count(&self) -> usize {
        self.inner.subscriber_count()
    }

    #[getter]
    fn pattern_count(&self) -> usize {
        self.inner.pattern_count()
    }

    #[getter]
    fn node_count(&self) -> usize {
        self.inner.node_count()
    }

    #[getter]
    fn word_count(&self) -> usize {
        self.inner.word_count()
    }
}
