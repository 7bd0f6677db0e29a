//! The extension's heap: mimalloc, as polars and pydantic-core ship theirs.
//!
//! # Why
//!
//! A CS-trie write is allocation-bound: a subscribe path-copies a few small
//! HAMT nodes and frees as many old ones, and a bulk load of a million pairs
//! allocates hundreds of thousands of nodes beside scratch vectors of a
//! hundred megabytes. Under glibc's malloc, `perf` put 13-16% of a
//! one-pair subscribe into a million-id set in `_int_malloc`, `_int_free`
//! and `malloc_consolidate`, and a bulk load's first touches of fresh memory
//! into the kernel's page clearing. mimalloc's size-class free lists make
//! the small allocations cheap, and its arenas, allowed large (2 MiB) OS
//! pages (transparent huge pages where the kernel has them), take 512 times
//! fewer faults than base pages.
//!
//! Only the Rust side of the extension uses it: Python objects come from
//! CPython's allocator, and Arrow buffers handed to pyarrow are released
//! through their FFI callbacks, which free them here, where they came from.
//! The core crate's tests and the fuzz targets never link this crate, so they
//! keep the system allocator (the memory tests count allocations through a
//! global allocator of their own).
//!
//! Measured on a million pairs (three interleaved rounds of three builds,
//! process CPU time, best of 3 loads each; `bulk` is one `subscribe_many`,
//! `single` a Python loop of `subscribe` into one `audit.#` set):
//!
//! | allocator | bulk wide | bulk hot | bulk realistic | single hot |
//! |---|---|---|---|---|
//! | glibc malloc | 570-598 ms | 173-177 ms | 753-782 ms | 2.72-2.81 s |
//! | mimalloc | 466-481 ms | 199-224 ms | 709-770 ms | 2.42-2.50 s |
//! | mimalloc, large OS pages | 460-482 ms | 161-165 ms | 686-719 ms | 2.50 s |
//!
//! Without large pages the hot bulk load (one set of a million ids: its
//! scratch and nodes are fresh memory) was slower than under glibc.
//!
//! The environment still decides: `MIMALLOC_ALLOW_LARGE_OS_PAGES=0` turns
//! the large pages off, `MIMALLOC_PURGE_DECOMMITS=1` brings decommitting
//! purges back, and mimalloc's other `MIMALLOC_*` options apply as mimalloc
//! documents them.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_decommits` of the pinned mimalloc's `mimalloc.h` (v3 `mi_option_e`: the sixth
/// option). libmimalloc-sys exports no constant for it, so Cargo.toml pins that crate's exact version,
/// whose vendored header this index is read from.
const MI_OPTION_PURGE_DECOMMITS: libmimalloc_sys::mi_option_t = 5;

/// Set the extension's allocator defaults; called once, when the module is imported.
///
/// * Large OS pages (see the module docs).
/// * Purges that reset freed memory (`MADV_FREE`) instead of decommitting it: a driver that drops a
///   churned trie and loads the next one (a refresh's rebuild, or the benchmark's rounds) otherwise had
///   the kernel clear every page of the new one again. A million-pair bulk load right after a million
///   single subscribes took 1.0-1.6 s so, and 0.47-0.75 s with resets. The kernel still takes reset
///   pages back when it needs them.
pub(crate) fn configure() {
    // mimalloc has read its options by now (at its first allocation), so a default set here would be
    // ignored: each option is set outright, unless the environment names it.
    let options = [
        (
            "MIMALLOC_ALLOW_LARGE_OS_PAGES",
            libmimalloc_sys::mi_option_large_os_pages,
            1,
        ),
        ("MIMALLOC_PURGE_DECOMMITS", MI_OPTION_PURGE_DECOMMITS, 0),
    ];
    for (variable, option, value) in options {
        if std::env::var_os(variable).is_none() {
            // SAFETY: mi_option_set only stores an option value in mimalloc's option table (a static it
            // reads with relaxed atomics when it next maps or purges OS memory); it takes no pointer and
            // cannot fail; `option` is an index of the pinned header's mi_option_e.
            unsafe { libmimalloc_sys::mi_option_set(option, value) };
        }
    }
}

/// Rows of a bulk call above which its freed scratch is handed back to the OS ([`release_freed`]).
pub(crate) const RELEASE_AFTER_ROWS: usize = 100_000;

/// Free what a bulk call left behind and decommit the pages this thread's heap has free, so the process's
/// RSS drops by them now.
///
/// A bulk load of millions of pairs frees scratch vectors of hundreds of megabytes, and one into a large
/// trie retires the tables it path-copied (garbage the epoch frees only over later pins). mimalloc purges
/// freed pages only on a later allocation, and by reset (`MADV_FREE`, above), which the kernel counts in
/// the RSS until it needs the pages: a driver that loaded 1M pairs kept ~2x the trie's live bytes
/// resident. This runs the retired nodes' destructors this thread can ([`cstrie::reclaim`]), then
/// decommits once, for this call, and leaves the option as it was for every other purge.
///
/// [`cstrie::reclaim`]: spark_topic_router_core::cstrie::reclaim
pub(crate) fn release_freed() {
    spark_topic_router_core::cstrie::reclaim();
    // SAFETY: mi_option_get/set read and store an option value (see `configure`); mi_collect(true) frees
    // and purges the calling thread's heap's empty pages and abandoned segments, touching no live block.
    unsafe {
        let previous = libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DECOMMITS);
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DECOMMITS, 1);
        libmimalloc_sys::mi_collect(true);
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DECOMMITS, previous);
    }
}
