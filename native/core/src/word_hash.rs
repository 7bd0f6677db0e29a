//! The one text hash of the process: every table of the CS-trie (`cstrie/hamt.rs`,
//! `cstrie/idset.rs`) and the frozen matcher's word and id indices hash a
//! word or subscriber id with [`hash_word`]. A leaf module, below both.
//!
//! # Hashing
//!
//! `foldhash` with a seed drawn once per process: hostile keys cannot be
//! aimed at one chain without knowing the seed, and within a process a
//! word always hashes the same, so callers may hash a key word once and
//! probe many tables with it.

use std::hash::BuildHasher;
use std::sync::OnceLock;

/// A stand-in for [`hash_word`] (tests only).
#[cfg(test)]
type WordHash = fn(&str) -> u64;

#[cfg(test)]
thread_local! {
    /// A stand-in for [`hash_word`] on this thread (tests only): collisions a
    /// real 64-bit hash never shows, for the paths that must then compare texts.
    static FORCED_HASH: std::cell::Cell<Option<WordHash>> = const { std::cell::Cell::new(None) };
}

/// Run `body` with [`hash_word`] replaced by `hash` on this thread (tests
/// only; the trie must not be touched from other threads meanwhile).
#[cfg(test)]
pub(crate) fn with_forced_hash<R>(hash: WordHash, body: impl FnOnce() -> R) -> R {
    struct Restore(Option<WordHash>);
    impl Drop for Restore {
        fn drop(&mut self) {
            FORCED_HASH.with(|forced| forced.set(self.0));
        }
    }
    let _restore = Restore(FORCED_HASH.with(|forced| forced.replace(Some(hash))));
    body()
}

/// The hash every table in this process uses for `word`.
pub(crate) fn hash_word(word: &str) -> u64 {
    #[cfg(test)]
    if let Some(forced) = FORCED_HASH.with(std::cell::Cell::get) {
        return forced(word);
    }
    static STATE: OnceLock<foldhash::fast::FixedState> = OnceLock::new();
    STATE
        .get_or_init(|| {
            let seed = std::collections::hash_map::RandomState::new().hash_one(0x5eed_u64);
            foldhash::fast::FixedState::with_seed(seed)
        })
        .hash_one(word)
}
