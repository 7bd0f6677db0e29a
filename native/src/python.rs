//! The PyO3 classes of the private module `routing._native`. Thin: argument
//! conversion, GIL release and result conversion only; the logic is in the
//! plain Rust modules and errors map through [`crate::errors`].
//!
//! The GIL is released (`Python::detach`) around every CS-trie operation,
//! freeze, (de)serialization and batch, so Python threads run them in
//! parallel. A single frozen lookup keeps the GIL: it takes less time than
//! releasing and re-taking it.

use std::cell::RefCell;
use std::sync::Arc;

use arrow_array::{make_array, Array, ArrayRef, StructArray};
use arrow_data::ArrayData;
use arrow_pyarrow::{FromPyArrowUnchecked, ToPyArrow};
use arrow_schema::{DataType, Field};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFrozenSet};

use crate::bulk::{Column, RowLimits};
use crate::cstrie::{CsTrie, SmolStr, Snapshot};
use crate::errors::python::{BatchLimitError, BulkRowError, FrozenFormatError};
use crate::errors::NativeError;
use crate::frozen::{FrozenMatcher, Scratch};
use crate::{batch, bulk, codec};

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

/// The two columns of a bulk call, imported from pyarrow but not yet validated.
struct BulkColumns {
    patterns: ArrayData,
    subscribers: ArrayData,
    limits: Option<RowLimits>,
}

/// `(max_pattern_bytes, max_pattern_words, max_hash_words, max_subscriber_bytes)`.
type LimitsTuple = (usize, usize, usize, usize);

impl BulkColumns {
    fn import(
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
    fn run<T: Send>(
        self,
        py: Python<'_>,
        op: impl FnOnce(&dyn Array, &dyn Array, Option<&RowLimits>) -> Result<T, NativeError> + Send,
    ) -> PyResult<T> {
        let result = py.detach(|| -> Result<T, NativeError> {
            let patterns = bulk::checked_column(self.patterns, Column::Patterns)?;
            let subscribers = bulk::checked_column(self.subscribers, Column::Subscribers)?;
            op(patterns.as_ref(), subscribers.as_ref(), self.limits.as_ref())
        })?;
        Ok(result)
    }
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
        let matcher = py.detach(|| FrozenMatcher::build(pairs)).map_err(NativeError::from)?;
        Ok(PyFrozenMatcher::wrap(matcher))
    }

    /// Build from two row-aligned pyarrow string columns (GIL released);
    /// raises BulkRowError listing every bad row (see `crate::bulk`).
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
        let matcher = py.detach(|| codec::decode(data))?;
        Ok(PyFrozenMatcher::wrap(matcher))
    }

    /// `(pairs, words, subscribers, nodes)` as the header of `to_bytes` output declares them, after the
    /// checks the header alone allows (codec `header`): no checksum, no section read, so O(1).
    #[staticmethod]
    fn header(data: &[u8]) -> PyResult<(u32, u32, u32, u32)> {
        let header = codec::header(data)?;
        Ok((
            header.pair_count,
            header.word_count,
            header.subscriber_count,
            header.node_count,
        ))
    }

    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let bytes = py.detach(|| codec::encode(&self.inner));
        PyBytes::new(py, &bytes)
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
        // SAFETY: the imported buffers are validated by `validate_full` below
        // (with the GIL released) before any value is read.
        let data = unsafe { ArrayData::from_pyarrow_bound_unchecked(keys)? };
        let result = py.detach(|| -> Result<ArrayData, NativeError> {
            data.validate_full()
                .map_err(|error| NativeError::InvalidArray(error.to_string()))?;
            let array = make_array(data);
            let (list, _) = batch::match_batch(&self.inner, array.as_ref(), max_rows)?;
            Ok(list.to_data())
        })?;
        result.to_pyarrow(py)
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
        // SAFETY: validated by `validate_full` below before any value is read.
        let data = unsafe { ArrayData::from_pyarrow_bound_unchecked(keys)? };
        let limits = batch::RouteLimits {
            max_rows,
            max_fanout,
            max_bytes,
        };
        let result = py.detach(|| -> Result<ArrayData, NativeError> {
            data.validate_full()
                .map_err(|error| NativeError::InvalidArray(error.to_string()))?;
            let array = make_array(data);
            let routed = batch::route_batch(&self.inner, array.as_ref(), limits)?;
            let fields = vec![
                Field::new("subscribers", routed.subscribers.data_type().clone(), true),
                Field::new("fanout", DataType::Int32, true),
            ];
            let columns: Vec<ArrayRef> = vec![Arc::new(routed.subscribers), Arc::new(routed.fanout)];
            let routed = StructArray::try_new(fields.into(), columns, None)
                .map_err(|error| NativeError::ResultTooLarge(error.to_string()))?;
            Ok(routed.to_data())
        })?;
        result.to_pyarrow(py)
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
        py.detach(|| {
            self.inner
                .subscriptions()
                .into_iter()
                .map(|(p, s)| (p, s.to_string()))
                .collect()
        })
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

fn to_strings(subscribers: Vec<SmolStr>) -> Vec<String> {
    subscribers.iter().map(|s| s.to_string()).collect()
}

fn freeze(snapshot: &Snapshot) -> Result<FrozenMatcher, NativeError> {
    Ok(snapshot.freeze()?)
}

/// The live lock-free trie (see `routing.matchers.native.CSTrieMatcher`).
#[pyclass(frozen, module = "routing._native", name = "CsTrie")]
pub struct PyCsTrie {
    inner: CsTrie,
}

#[pymethods]
impl PyCsTrie {
    #[new]
    fn new() -> Self {
        PyCsTrie { inner: CsTrie::new() }
    }

    /// Add the pair; `True` if it was absent. An empty subscriber id is a
    /// `ValueError` (the grammar's one rule the `&str` conversion leaves).
    fn subscribe(&self, py: Python<'_>, pattern: &str, subscriber: &str) -> PyResult<bool> {
        if subscriber.is_empty() {
            return Err(NativeError::EmptySubscriber.into());
        }
        Ok(py.detach(|| self.inner.subscribe(pattern, subscriber)))
    }

    /// Remove the pair; `True` if it was present (an empty subscriber id: `ValueError`).
    fn unsubscribe(&self, py: Python<'_>, pattern: &str, subscriber: &str) -> PyResult<bool> {
        if subscriber.is_empty() {
            return Err(NativeError::EmptySubscriber.into());
        }
        Ok(py.detach(|| self.inner.unsubscribe(pattern, subscriber)))
    }

    /// Subscribe every row of two pyarrow string columns (GIL released; all
    /// rows validated before any is applied, see `crate::bulk`); returns how
    /// many pairs were new.
    #[pyo3(signature = (patterns, subscribers, limits = None))]
    fn subscribe_many(
        &self,
        py: Python<'_>,
        patterns: &Bound<'_, PyAny>,
        subscribers: &Bound<'_, PyAny>,
        limits: Option<LimitsTuple>,
    ) -> PyResult<usize> {
        BulkColumns::import(patterns, subscribers, limits)?
            .run(py, |p, s, l| bulk::subscribe_many(&self.inner, p, s, l))
    }

    /// Unsubscribe every row (as `subscribe_many`); returns how many pairs were present.
    #[pyo3(signature = (patterns, subscribers, limits = None))]
    fn unsubscribe_many(
        &self,
        py: Python<'_>,
        patterns: &Bound<'_, PyAny>,
        subscribers: &Bound<'_, PyAny>,
        limits: Option<LimitsTuple>,
    ) -> PyResult<usize> {
        BulkColumns::import(patterns, subscribers, limits)?
            .run(py, |p, s, l| bulk::unsubscribe_many(&self.inner, p, s, l))
    }

    fn lookup<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyFrozenSet>> {
        let found = py.detach(|| to_strings(self.inner.lookup(key)));
        PyFrozenSet::new(py, found)
    }

    /// Every pair, read from an O(1) snapshot so the set is consistent.
    fn subscriptions(&self, py: Python<'_>) -> Vec<(String, String)> {
        py.detach(|| {
            self.inner
                .snapshot()
                .subscriptions()
                .into_iter()
                .map(|(p, s)| (p, s.to_string()))
                .collect()
        })
    }

    fn snapshot(&self, py: Python<'_>) -> PySnapshot {
        PySnapshot {
            inner: py.detach(|| self.inner.snapshot()),
        }
    }

    /// `snapshot().freeze()`.
    fn freeze(&self, py: Python<'_>) -> PyResult<PyFrozenMatcher> {
        let matcher = py.detach(|| freeze(&self.inner.snapshot()))?;
        Ok(PyFrozenMatcher::wrap(matcher))
    }

    /// I-nodes reachable in the live trie (1 when empty): a pruning check for tests.
    fn node_count(&self, py: Python<'_>) -> usize {
        py.detach(|| self.inner.node_count())
    }

    /// Exact when no update is in flight.
    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

/// A read-only O(1) view of a CsTrie (see `routing.matchers.native.Snapshot`).
#[pyclass(frozen, module = "routing._native", name = "Snapshot")]
pub struct PySnapshot {
    inner: Snapshot,
}

#[pymethods]
impl PySnapshot {
    fn lookup<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyFrozenSet>> {
        let found = py.detach(|| to_strings(self.inner.lookup(key)));
        PyFrozenSet::new(py, found)
    }

    /// Subscribers of exactly this pattern.
    fn subscribers<'py>(&self, py: Python<'py>, pattern: &str) -> PyResult<Bound<'py, PyFrozenSet>> {
        let found = py.detach(|| to_strings(self.inner.subscribers(pattern)));
        PyFrozenSet::new(py, found)
    }

    /// Patterns held by `subscriber`.
    fn topics<'py>(&self, py: Python<'py>, subscriber: &str) -> PyResult<Bound<'py, PyFrozenSet>> {
        let found = py.detach(|| self.inner.topics(subscriber));
        PyFrozenSet::new(py, found)
    }

    fn subscriptions(&self, py: Python<'_>) -> Vec<(String, String)> {
        py.detach(|| {
            self.inner
                .subscriptions()
                .into_iter()
                .map(|(p, s)| (p, s.to_string()))
                .collect()
        })
    }

    fn freeze(&self, py: Python<'_>) -> PyResult<PyFrozenMatcher> {
        let matcher = py.detach(|| freeze(&self.inner))?;
        Ok(PyFrozenMatcher::wrap(matcher))
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        py.detach(|| self.inner.len())
    }
}

/// Register every class, exception and constant of `routing._native`.
pub fn register(module: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = module.py();
    module.add_class::<PyCsTrie>()?;
    module.add_class::<PySnapshot>()?;
    module.add_class::<PyFrozenMatcher>()?;
    module.add("FrozenFormatError", py.get_type::<FrozenFormatError>())?;
    module.add("BatchLimitError", py.get_type::<BatchLimitError>())?;
    module.add("BulkRowError", py.get_type::<BulkRowError>())?;
    module.add("FORMAT_VERSION", codec::FORMAT_VERSION)?;
    Ok(())
}
