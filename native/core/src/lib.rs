//! Native core of spark-topic-router: plain Rust, no Python in it.
//!
//! The CS-trie ([`cstrie`]), the frozen matcher ([`frozen`]) and its byte
//! format ([`codec`]), batch matching over Arrow arrays ([`batch`]), bulk
//! loads from Arrow columns ([`bulk`]), the key grammar's checks ([`topic`])
//! and the one error type ([`errors`]). The Python binding (`native/python`,
//! the module `routing._native`) is a thin layer over this crate's public
//! API, and the JVM binding (`native/jvm`, the real-time lane's JNI library) is
//! another.
//!
//! # Modules, bottom up
//!
//! Each uses only modules listed before it (`tests/test_native_workspace.py`
//! fails on a `use` that runs back up):
//!
//! 1. leaves: [`errors`], [`topic`] (the key grammar), `short_text`,
//!    `word_hash` (the one text hash), `prefetch`, `rng`;
//! 2. [`frozen`]: the compact read-only matcher;
//! 3. [`codec`] (its bytes) and [`batch`] (its Arrow batches);
//! 4. [`cstrie`]: the live trie, whose snapshots freeze into [`frozen`];
//! 5. [`bulk`]: Arrow columns loaded into a [`cstrie`] or a [`frozen`] matcher;
//! 6. `fuzzing`: the fuzz bodies (test and cargo-fuzz builds only).

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
