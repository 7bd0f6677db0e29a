//! `routing._native.CsTrie` and `Snapshot`: the live lock-free trie
//! (`core::cstrie`) and its O(1) read-only views.

use pyo3::prelude::*;
use pyo3::types::PyFrozenSet;
use spark_topic_router_core::bulk;
use spark_topic_router_core::cstrie::{CsTrie, SmolStr, Snapshot};
use spark_topic_router_core::errors::NativeError;

use crate::columns::{BulkColumns, LimitsTuple};
use crate::errors::raise;
use crate::frozen::PyFrozenMatcher;

fn to_strings(subscribers: Vec<SmolStr>) -> Vec<String> {
    subscribers.iter().map(|s| s.to_string()).collect()
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
            return Err(raise(NativeError::EmptySubscriber));
        }
        Ok(py.detach(|| self.inner.subscribe(pattern, subscriber)))
    }

    /// Remove the pair; `True` if it was present (an empty subscriber id: `ValueError`).
    fn unsubscribe(&self, py: Python<'_>, pattern: &str, subscriber: &str) -> PyResult<bool> {
        if subscriber.is_empty() {
            return Err(raise(NativeError::EmptySubscriber));
        }
        Ok(py.detach(|| self.inner.unsubscribe(pattern, subscriber)))
    }

    /// Subscribe every row of two pyarrow string columns (GIL released; all
    /// rows validated before any is applied, see `core::bulk`); returns how
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
        let matcher = py.detach(|| self.inner.snapshot().freeze()).map_err(raise)?;
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
        let matcher = py.detach(|| self.inner.freeze()).map_err(raise)?;
        Ok(PyFrozenMatcher::wrap(matcher))
    }

    fn __len__(&self, py: Python<'_>) -> usize {
        py.detach(|| self.inner.len())
    }
}
