//! Native core of spark-topic-router.
//!
//! The logic lives in plain Rust modules; this file only declares them and,
//! with the `python` feature, registers the private Python module
//! `routing._native` (see [`python`]).

pub mod batch;
pub mod bulk;
pub mod codec;
pub mod cstrie;
pub mod errors;
pub mod frozen;
#[doc(hidden)]
pub mod rng;
mod short_text;
// Only in test builds and cargo-fuzz builds (which pass `--cfg fuzzing`).
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod fuzzing;
pub mod topic;

#[cfg(feature = "extension-module")]
mod allocator;
#[cfg(feature = "python")]
mod python;

#[cfg(feature = "python")]
#[pyo3::pymodule]
fn _native(module: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
    #[cfg(feature = "extension-module")]
    allocator::configure();
    python::register(module)
}
