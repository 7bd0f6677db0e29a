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
//!    `word_hash` (the one text hash of a process), [`siphash`] (the format's
//!    keyed hash), [`storage`] (aligned or mapped bytes and typed views),
//!    `prefetch`, `rng`;
//! 2. [`layout`]: the frozen matcher's bytes, which are its memory, and
//!    [`groups`]: which member of a subscriber group gets a message;
//! 3. [`frozen`]: the compact read-only matcher, read in place, and
//!    `lookahead` (a batch warming the caches for the keys it matches next);
//! 4. [`codec`] (validating reads of bytes and files) and [`layered`] (a
//!    base and a delta of the changes since, matched as one, and the delta's
//!    builder);
//! 5. [`batch`]: Arrow batches through either;
//! 6. [`cstrie`]: the live trie, whose snapshots freeze into [`frozen`];
//! 7. [`bulk`]: Arrow columns loaded into a [`cstrie`], a [`frozen`] matcher or a delta;
//! 8. `fuzzing`: the fuzz bodies (test and cargo-fuzz builds only).

pub mod batch;
pub mod bulk;
pub mod codec;
pub mod cstrie;
pub mod errors;
pub mod frozen;
pub mod groups;
pub mod layered;
pub mod layout;
mod lookahead;
mod prefetch;
#[doc(hidden)]
pub mod rng;
mod short_text;
pub mod siphash;
pub mod storage;
// Only in test builds and cargo-fuzz builds (which pass `--cfg fuzzing`).
#[cfg(any(test, fuzzing))]
#[doc(hidden)]
pub mod fuzzing;
pub mod topic;
mod word_hash;
