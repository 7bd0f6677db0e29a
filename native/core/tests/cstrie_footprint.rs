//! Heap bytes per subscription, counted by a global allocator (this test
//! binary has only this test, so nothing else allocates meanwhile). A path
//! that one pattern takes alone is a tail (one allocation), not a chain of
//! I-node, main node and table per word: this bounds what a wide node of
//! `tenant<i>.orders.#` costs, and fails if such paths go back to chains.

mod counting;

use counting::live_bytes;
use spark_topic_router_core::cstrie::CsTrie;

/// Live heap bytes per pair of a trie holding `pairs`, loaded one pair at a
/// time or in one bulk call (garbage of replaced nodes reclaimed first), and
/// the trie's I-node count.
fn bytes_per_pair(pairs: &[(String, String)], bulk: bool) -> (isize, usize) {
    spark_topic_router_core::cstrie::reclaim();
    let before = live_bytes();
    let trie = CsTrie::new();
    if bulk {
        trie.subscribe_many(pairs.iter().map(|(p, s)| (p.as_str(), s.as_str())));
    } else {
        for (pattern, subscriber) in pairs {
            trie.subscribe(pattern, subscriber);
        }
    }
    spark_topic_router_core::cstrie::reclaim();
    let grown = live_bytes() - before;
    assert_eq!(trie.len(), pairs.len());
    let inodes = trie.node_count();
    drop(trie);
    (grown / pairs.len() as isize, inodes)
}

#[test]
fn a_wide_node_costs_one_table_slot_and_one_tail_per_pattern() {
    let wide: Vec<(String, String)> = (0..50_000)
        .map(|i| (format!("tenant{i}.orders.#"), format!("tenant{i}")))
        .collect();
    for bulk in [false, true] {
        let (per_pair, inodes) = bytes_per_pair(&wide, bulk);
        eprintln!("wide node, bulk {bulk}: {per_pair} bytes per pair");
        // A root table slot (48 bytes, plus the HAMT's inner nodes) and a
        // 40-byte tail (`orders.#` after its count, length and set): 119 (143
        // with a 64-byte `Arc` tail, 166 with 72-byte slots too). As chains
        // (two I-nodes, two main nodes, a table and a wildcard record per
        // pattern) it was 467.
        assert!(per_pair < 200, "bulk {bulk}: {per_pair} bytes per pair");
        assert_eq!(inodes, 1, "bulk {bulk}: only the root is an I-node");
    }
    // One I-node per shared word when the paths do share: two patterns per tenant.
    let shared: Vec<(String, String)> = (0..20_000)
        .flat_map(|i| {
            [
                (format!("tenant{i}.orders.#"), format!("tenant{i}")),
                (format!("tenant{i}.refunds.#"), format!("tenant{i}")),
            ]
        })
        .collect();
    for bulk in [false, true] {
        let (per_pair, inodes) = bytes_per_pair(&shared, bulk);
        eprintln!("two patterns per tenant, bulk {bulk}: {per_pair} bytes per pair");
        assert_eq!(inodes, 1 + 20_000, "bulk {bulk}: an I-node per tenant, tails below it");
    }
}
