//! `routing._native.LayeredMatcher` and `DeltaBuilder`: a base matcher plus a delta of the changes
//! since it, matched as one, and the builder of such deltas (`core::layered`).

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyFrozenSet;
use spark_topic_router_core::layered::{DeltaBuilder, Layered};
use spark_topic_router_core::{batch, bulk};

use crate::columns::{BulkColumns, LimitsTuple};
use crate::errors::raise;
use crate::frozen::{match_batch_of, route_batch_of, subscriptions_of, PyFrozenMatcher};

/// A base and a delta of it (see `routing.matchers.native.LayeredMatcher`).
#[pyclass(frozen, module = "routing._native", name = "LayeredMatcher")]
pub struct PyLayeredMatcher {
    inner: Layered,
}

#[pymethods]
impl PyLayeredMatcher {
    /// `delta` over `base`; FrozenFormatError unless the delta was built for this base.
    #[staticmethod]
    fn of(py: Python<'_>, base: &PyFrozenMatcher, delta: &PyFrozenMatcher) -> PyResult<Self> {
        let (base, delta) = (base.inner.clone(), delta.inner.clone());
        let inner = py.detach(|| Layered::new(base, delta)).map_err(raise)?;
        Ok(PyLayeredMatcher { inner })
    }

    fn lookup<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyFrozenSet>> {
        PyFrozenSet::new(py, self.inner.lookup(key))
    }

    /// As `FrozenMatcher.match_batch`.
    #[pyo3(signature = (keys, max_rows = None))]
    fn match_batch<'py>(
        &self,
        py: Python<'py>,
        keys: &Bound<'py, PyAny>,
        max_rows: Option<usize>,
    ) -> PyResult<Bound<'py, PyAny>> {
        match_batch_of(py, &self.inner, keys, max_rows)
    }

    /// As `FrozenMatcher.route_batch`.
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
        route_batch_of(py, &self.inner, keys, limits)
    }

    /// Every (pattern, subscriber) pair of the layered set.
    fn subscriptions(&self, py: Python<'_>) -> Vec<(String, String)> {
        subscriptions_of(py, &self.inner)
    }

    #[getter]
    fn base(&self) -> PyFrozenMatcher {
        PyFrozenMatcher {
            inner: self.inner.base().clone(),
        }
    }

    #[getter]
    fn delta(&self) -> PyFrozenMatcher {
        PyFrozenMatcher {
            inner: self.inner.delta().clone(),
        }
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}

/// The changes since a base, kept as a delta (see `routing.matchers.native.DeltaBuilder`).
#[pyclass(module = "routing._native", name = "DeltaBuilder")]
pub struct PyDeltaBuilder {
    inner: DeltaBuilder,
}

#[pymethods]
impl PyDeltaBuilder {
    /// No changes yet over `base` (FrozenFormatError if it is a delta).
    #[staticmethod]
    fn over(base: &PyFrozenMatcher) -> PyResult<Self> {
        let inner = DeltaBuilder::new(base.inner.clone()).map_err(raise)?;
        Ok(PyDeltaBuilder { inner })
    }

    /// Record two row-aligned pyarrow string columns of pairs as subscribed (`active`) or not as of
    /// table `version` (GIL released; every row validated first, BulkRowError listing the bad ones,
    /// nothing recorded then).
    #[pyo3(signature = (patterns, subscribers, active, version, limits = None))]
    fn record(
        &mut self,
        py: Python<'_>,
        patterns: &Bound<'_, PyAny>,
        subscribers: &Bound<'_, PyAny>,
        active: bool,
        version: u64,
        limits: Option<LimitsTuple>,
    ) -> PyResult<usize> {
        let inner = &mut self.inner;
        BulkColumns::import(patterns, subscribers, limits)?
            .run(py, |p, s, l| bulk::record_changes(inner, p, s, l, active, version))
    }

    /// Move onto `base`, frozen at table version `through`.
    fn rebase(&mut self, py: Python<'_>, base: &PyFrozenMatcher, through: u64) -> PyResult<()> {
        let (inner, base) = (&mut self.inner, base.inner.clone());
        py.detach(|| inner.rebase(base, through)).map_err(raise)
    }

    /// The delta of the changes so far (GIL released).
    fn freeze(&self, py: Python<'_>) -> PyResult<PyFrozenMatcher> {
        let delta = py.detach(|| self.inner.freeze()).map_err(raise)?;
        Ok(PyFrozenMatcher::wrap(delta))
    }

    #[getter]
    fn base(&self) -> PyFrozenMatcher {
        PyFrozenMatcher {
            inner: Arc::clone(self.inner.base()),
        }
    }

    fn __len__(&self) -> usize {
        self.inner.len()
    }
}
