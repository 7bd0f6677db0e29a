//! The private Python module `routing._native`: a thin PyO3 binding of
//! `spark_topic_router_core` (`native/core`). Binding code only: argument
//! and result conversion (`columns.rs` for pyarrow columns), GIL release, and
//! one map from core errors to Python exceptions (`errors.rs`); the logic is
//! all in the core crate. `routing/_native.pyi` declares what this registers.
//!
//! The GIL is released (`Python::detach`) around every CS-trie operation,
//! freeze, (de)serialization and batch, so Python threads run them in
//! parallel. A single frozen lookup keeps the GIL: it takes less time than
//! releasing and re-taking it.

#[cfg(feature = "extension-module")]
mod allocator;
mod columns;
mod errors;
mod frozen;
mod layered;
mod trie;

use pyo3::prelude::*;
use spark_topic_router_core::codec;

use crate::errors::{BatchLimitError, BulkRowError, FrozenFormatError};
use crate::frozen::PyFrozenMatcher;
use crate::layered::{PyDeltaBuilder, PyLayeredMatcher};
use crate::trie::{PyCsTrie, PySnapshot};

/// Register every class, exception and constant of `routing._native`.
#[pymodule]
fn _native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    #[cfg(feature = "extension-module")]
    allocator::configure();
    let py = module.py();
    module.add_class::<PyCsTrie>()?;
    module.add_class::<PySnapshot>()?;
    module.add_class::<PyFrozenMatcher>()?;
    module.add_class::<PyLayeredMatcher>()?;
    module.add_class::<PyDeltaBuilder>()?;
    module.add("FrozenFormatError", py.get_type::<FrozenFormatError>())?;
    module.add("BatchLimitError", py.get_type::<BatchLimitError>())?;
    module.add("BulkRowError", py.get_type::<BulkRowError>())?;
    module.add("FORMAT_VERSION", codec::FORMAT_VERSION)?;
    Ok(())
}
