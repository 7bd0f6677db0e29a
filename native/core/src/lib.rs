//! Native core of spark-topic-router: plain Rust, no Python in it.
//!
//! The CS-trie ([`cstrie`]), the frozen matcher ([`frozen`]) and its byte
//! format ([`codec`]), batch matching over Arrow arrays ([`batch`]), bulk
//! loads from Arrow columns ([`bulk`]), the key grammar's checks ([`topic`])
//! and the one error type ([`errors`]). The Python binding (`native/python`,
//! the module `routing._native`) is a thin layer over this crate's public
//! API; a JVM binding would be another.

pub mod batch;
pub mod bulk;
pub mod codec;
pub mod cstrie;
pub mod errors;
pub mod frozen;
mod prefetch;
#[doc(hidden)]
pub mod rng;
mod short_text;
// Only in test builds and cargo-fuzz builds (which pass `--cfg fuzzing`).
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod fuzzing;
pub mod topic;
mod word_hash;
