//! Memory under churn, counted by a global allocator (this test binary has
//! only this test, so nothing else allocates meanwhile): subscribe/unsubscribe
//! cycles must leave the live heap within a small constant of where an empty
//! trie started, however many cycles ran. Counting bytes instead of reading RSS
//! makes the bound exact and independent of the allocator's caching.

mod counting;

use counting::live_bytes;
use spark_topic_router_core::cstrie::CsTrie;

fn cycles(trie: &CsTrie, count: usize) {
    for _ in 0..count {
        assert!(trie.subscribe("a.b.c", "s"));
        assert!(trie.unsubscribe("a.b.c", "s"));
    }
}

#[test]
fn churn_returns_memory_to_an_empty_trie() {
    let trie = CsTrie::new();
    // Warm up: thread-local epoch state and its first garbage bags.
    cycles(&trie, 10_000);
    spark_topic_router_core::cstrie::reclaim();
    let baseline = live_bytes();
    // 2M cycles in an optimised build. A debug build is ~20x slower, so plain
    // `cargo test` runs a fortieth of them; `make native-test` asks for all 2M
    // there (CHURN_CYCLES, ~30 s) rather than build the tests again with LTO.
    let default = if cfg!(debug_assertions) { 50_000 } else { 2_000_000 };
    let total: usize = std::env::var("CHURN_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default);
    cycles(&trie, total);
    spark_topic_router_core::cstrie::reclaim();
    let grown = live_bytes() - baseline;
    assert_eq!(trie.len(), 0);
    assert_eq!(trie.node_count(), 1);
    eprintln!("{total} cycles: live heap grew by {grown} bytes");
    assert!(grown < 64 * 1024, "{total} cycles left {grown} bytes live");

    // The same for a shared set (`idset.rs`, any set of two ids or more), in this test
    // because the allocator counts the whole process: a window of 200 ids of
    // one pattern slides (each cycle removes its oldest id and adds a new
    // one), so levels are created, emptied, tombed and compressed throughout.
    let baseline = live_bytes();
    let id = |i: usize| format!("subscriber-{i}");
    for i in 0..200 {
        assert!(trie.subscribe("audit.#", &id(i)));
    }
    spark_topic_router_core::cstrie::reclaim();
    let with_window = live_bytes();
    let slides = total / 4;
    for i in 0..slides {
        assert!(trie.unsubscribe("audit.#", &id(i)));
        assert!(trie.subscribe("audit.#", &id(i + 200)));
    }
    spark_topic_router_core::cstrie::reclaim();
    let after_slides = live_bytes();
    for i in slides..slides + 200 {
        assert!(trie.unsubscribe("audit.#", &id(i)));
    }
    spark_topic_router_core::cstrie::reclaim();
    let grown = live_bytes() - baseline;
    eprintln!(
        "shared set: 200 ids hold {} bytes; {slides} slides moved that by {} bytes; emptied, {grown} bytes are left",
        with_window - baseline,
        after_slides - with_window
    );
    assert_eq!(trie.len(), 0);
    assert_eq!(trie.node_count(), 1, "the emptied set was dropped from its holder");
    assert!(
        (after_slides - with_window).abs() < 64 * 1024,
        "{slides} slides of a 200-id window moved the heap by {} bytes",
        after_slides - with_window
    );
    assert!(grown < 64 * 1024, "an emptied shared set left {grown} bytes live");
}
