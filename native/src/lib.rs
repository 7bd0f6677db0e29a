//! Native core of spark-topic-router.
//!
//! The logic lives in plain Rust modules; this file only declares them (and,
//! once bound, registers the private Python module `routing._native`).

pub mod topic;
