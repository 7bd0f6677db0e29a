//! Reading a frozen matcher from bytes that trust nothing: a copy ([`decode`]) or a mapped snapshot
//! file ([`open`]), in the layout of [`crate::layout`] (the format is the matcher's memory, so
//! [`encode`] is a copy of it).
//!
//! # Validation
//!
//! One sequential pass, then the matcher is read in place; nothing is rebuilt. In order:
//!
//! 1. the header: magic, version, reserved fields, and counts whose layout is exactly the bytes'
//!    length (so no count can promise more than the bytes hold);
//! 2. the CRC-32 of everything before the trailer (skippable for fuzzing only, to reach the checks
//!    behind it, which must hold on their own);
//! 3. the texts: UTF-8, every end offset in order and on a character boundary, strictly ascending
//!    (so unique), no separator or wildcard in a word, no empty subscriber;
//! 4. the nodes: edge and subscriber ranges that tile their sections in order, ids in range and
//!    strictly ascending, every child after its parent and every node but the root claimed by
//!    exactly one parent (a bitset of N bits), so the nodes are a tree and a lookup's walk visits
//!    each `(node, key position)` at most once;
//! 5. the indices: canonical sizes, every slot empty or in range, as many entries as the table
//!    indexes; and the padding and the hidden pairs.
//!
//! **Cost**: O(bytes) for the checksum (hardware CRC, several GB/s) plus O(nodes + edges + texts)
//! sequential reads, and N/8 bytes of memory. It is not lazy per section: a matcher is either wholly
//! valid or refused with [`NativeError::Format`], never half-used.
//!
//! **What is and is not proven.** Every check that memory safety, termination or the tree's
//! polynomial walk depends on is made. Two properties are not re-derived, because they would cost a
//! hash and a random read per entry and only a writer that bypasses [`crate::layout::write`] could
//! break them: that each index entry is reachable from its home slot, and that no entry repeats. A
//! bytes-valid file that breaks them can only make a lookup miss a word or a wide child: the walk
//! accepts an index slot only after checking it against the tree, so it can never crash, loop or
//! leave the tree. The CRC makes an accidental break as unlikely as any other corruption.

use std::path::Path;
use std::sync::Arc;

use crate::errors::NativeError;
use crate::frozen::FrozenMatcher;
use crate::layout::{
    read_counts, slots_for, Counts, Edge, Layout, Node, Views, EMPTY, HEADER_LEN, NONE, TRAILER_LEN, WIDE_FANOUT,
};
use crate::storage::Storage;
use crate::topic::{HASH, SEPARATOR, STAR};

pub use crate::layout::{crc32, FORMAT_VERSION, MAGIC};

/// What a header declares: its counts, for a caller that wants them without the full decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub word_count: u32,
    pub subscriber_count: u32,
    pub node_count: u32,
    pub pair_count: u32,
    /// A delta's base ([`crate::layout::base_id`]); 0 in a base.
    pub base: u64,
    layout: Layout,
}

/// The bytes of `matcher` (deterministic: equal pairs give equal bytes).
pub fn encode(matcher: &FrozenMatcher) -> Vec<u8> {
    matcher.bytes().to_vec()
}

/// The header of `bytes`, checked as far as it goes without reading the sections: length, magic,
/// format version, reserved fields, and counts whose layout is exactly the length. Neither the
/// checksum nor anything behind the header is read, so bytes that pass may still fail [`decode`];
/// a caller that already holds a stronger digest of the bytes (a snapshot file's SHA-256) learns
/// their counts and whether this build reads their format without the full decode.
pub fn header(bytes: &[u8]) -> Result<Header, NativeError> {
    if bytes.len() < HEADER_LEN + TRAILER_LEN {
        return Err(NativeError::format(format!(
            "{} bytes is shorter than the {}-byte header and trailer",
            bytes.len(),
            HEADER_LEN + TRAILER_LEN
        )));
    }
    if bytes[..8] != MAGIC {
        return Err(NativeError::format("wrong magic bytes (not a frozen matcher)"));
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version != FORMAT_VERSION {
        return Err(NativeError::format(format!(
            "format version {version}, this build reads version {FORMAT_VERSION}"
        )));
    }
    if bytes[10..16].iter().chain(&bytes[96..HEADER_LEN]).any(|&b| b != 0) {
        return Err(NativeError::format("reserved header field is not zero"));
    }
    let (counts, _, base, total) = read_counts(&bytes[..HEADER_LEN]);
    let layout = Layout::of(counts)
        .filter(|layout| layout.total == bytes.len() && total == bytes.len() as u64)
        .ok_or_else(|| {
            NativeError::format(format!(
                "the header's counts and length ({total}) do not lay out the {} bytes given",
                bytes.len()
            ))
        })?;
    Ok(Header {
        word_count: counts.word_count,
        subscriber_count: counts.subscriber_count,
        node_count: counts.node_count,
        pair_count: counts.pair_count,
        base,
        layout,
    })
}

/// Decode and verify bytes produced by [`encode`] (copied once, into an aligned buffer).
pub fn decode(bytes: &[u8]) -> Result<FrozenMatcher, NativeError> {
    decode_with(bytes, true)
}

/// [`decode`], optionally skipping the checksum: fuzzing uses that to reach the structural checks
/// behind it (which must hold on their own).
pub fn decode_with(bytes: &[u8], verify_checksum: bool) -> Result<FrozenMatcher, NativeError> {
    // The header first, so garbage is refused before it is copied.
    header(bytes)?;
    validated(Arc::new(Storage::copy_of(bytes)), verify_checksum)
}

/// The matcher in the file at `path` from byte `offset` (a multiple of 8) to its end, validated and
/// then read in place from a shared read-only mapping: processes that open one file share its pages.
pub fn open(path: &Path, offset: u64) -> Result<FrozenMatcher, NativeError> {
    let storage =
        Storage::map(path, offset).map_err(|error| NativeError::Io(format!("{}: {error}", path.display())))?;
    validated(Arc::new(storage), true)
}

fn validated(storage: Arc<Storage>, verify_checksum: bool) -> Result<FrozenMatcher, NativeError> {
    let bytes = storage.bytes();
    let Header { layout, base, .. } = header(bytes)?;
    if verify_checksum {
        let stored = u32::from_le_bytes(bytes[layout.trailer..layout.trailer + 4].try_into().expect("4 bytes"));
        if crc32(&bytes[..layout.trailer]) != stored {
            return Err(NativeError::format("checksum mismatch (corrupt or truncated)"));
        }
    }
    if bytes[layout.trailer + 4..].iter().any(|&b| b != 0) {
        return Err(NativeError::format("reserved trailer field is not zero"));
    }
    check_padding(bytes, &layout)?;
    let views = Views::of(&storage, &layout);
    let counts = layout.counts;
    check_texts(&views.word_text, &views.word_ends, "words", |word| {
        if word == STAR || word == HASH {
            Err("wildcard stored as a literal word")
        } else if word.contains(SEPARATOR) {
            Err("word contains the separator")
        } else {
            Ok(())
        }
    })?;
    check_texts(
        &views.subscriber_text,
        &views.subscriber_ends,
        "subscribers",
        |subscriber| {
            if subscriber.is_empty() {
                Err("empty subscriber id")
            } else {
                Ok(())
            }
        },
    )?;
    let wide_edges = check_nodes(&views.nodes, &views.edges, &views.pairs, &counts)?;
    if Some(counts.word_slots) != slots_for(counts.word_count) {
        return Err(NativeError::format(
            "word index size is not the one its word count gives",
        ));
    }
    check_index(&views.word_index, counts.word_count, counts.word_count, "word index")?;
    let wide_slots = if wide_edges == 0 {
        Some(0)
    } else {
        slots_for(wide_edges)
    };
    if Some(counts.wide_slots) != wide_slots {
        return Err(NativeError::format(
            "wide index size is not the one its wide nodes give",
        ));
    }
    check_index(&views.wide, counts.edge_count, wide_edges, "wide index")?;
    if !views.hidden.windows(2).all(|pair| pair[0] < pair[1]) {
        return Err(NativeError::format("hidden pairs not strictly ascending"));
    }
    if !views.hidden.is_empty() && base == 0 {
        return Err(NativeError::format("hidden pairs without a base"));
    }
    drop(views);
    Ok(FrozenMatcher::view(storage, &layout))
}

/// The bytes between sections (up to the next multiple of 8) are zero.
fn check_padding(bytes: &[u8], layout: &Layout) -> Result<(), NativeError> {
    let c = &layout.counts;
    let sections = [
        (layout.nodes, c.node_count as usize * 24, layout.edges),
        (layout.edges, c.edge_count as usize * 8, layout.wide),
        (layout.wide, c.wide_slots as usize * 4, layout.pairs),
        (layout.pairs, c.pair_count as usize * 4, layout.hidden),
        (layout.hidden, c.hidden_count as usize * 8, layout.word_ends),
        (layout.word_ends, c.word_count as usize * 4, layout.word_index),
        (layout.word_index, c.word_slots as usize * 4, layout.subscriber_ends),
        (
            layout.subscriber_ends,
            c.subscriber_count as usize * 4,
            layout.word_text,
        ),
        (layout.word_text, c.word_text_len as usize, layout.subscriber_text),
        (layout.subscriber_text, c.subscriber_text_len as usize, layout.trailer),
    ];
    for (start, len, next) in sections {
        if bytes[start + len..next].iter().any(|&b| b != 0) {
            return Err(NativeError::format(format!("non-zero padding at byte {}", start + len)));
        }
    }
    Ok(())
}

/// Texts `text[end(i-1) .. end(i)]`: UTF-8, ends in order on character boundaries and covering the
/// text exactly, strictly ascending, each passing `check`.
fn check_texts(
    text: &[u8],
    ends: &[u32],
    section: &str,
    check: impl Fn(&str) -> Result<(), &'static str>,
) -> Result<(), NativeError> {
    let text = std::str::from_utf8(text)
        .map_err(|error| NativeError::format(format!("invalid UTF-8 in {section} at byte {}", error.valid_up_to())))?;
    let mut start = 0usize;
    let mut previous: Option<&str> = None;
    for (id, &end) in ends.iter().enumerate() {
        let end = end as usize;
        if end < start || end > text.len() || !text.is_char_boundary(end) {
            return Err(NativeError::format(format!(
                "{section} {id}: end offset out of order or off a character boundary"
            )));
        }
        let current = &text[start..end];
        check(current).map_err(|rule| NativeError::format(format!("{section} {id}: {rule}")))?;
        if previous.is_some_and(|p| p >= current) {
            return Err(NativeError::format(format!(
                "{section} {id}: texts not strictly ascending"
            )));
        }
        previous = Some(current);
        start = end;
    }
    if start != text.len() {
        return Err(NativeError::format(format!("{section}: text bytes past the last text")));
    }
    Ok(())
}

/// The tree (see the module docs); returns how many edges the wide nodes hold.
fn check_nodes(nodes: &[Node], edges: &[Edge], pairs: &[u32], counts: &Counts) -> Result<u32, NativeError> {
    let n = nodes.len();
    if n == 0 {
        return Err(NativeError::format("no nodes (not even the root)"));
    }
    let node_error = |index: usize, what: &str| NativeError::format(format!("node {index}: {what}"));
    let mut claimed = vec![0u64; n.div_ceil(64)];
    let mut claims = 0usize;
    let mut claim = |parent: usize, child: u32| -> Result<(), NativeError> {
        let child = child as usize;
        if child <= parent || child >= n {
            return Err(node_error(parent, "child index not after its parent or past the nodes"));
        }
        let (word, bit) = (child / 64, 1u64 << (child % 64));
        if claimed[word] & bit != 0 {
            return Err(node_error(child, "more than one parent"));
        }
        claimed[word] |= bit;
        claims += 1;
        Ok(())
    };
    let (mut next_edge, mut next_pair, mut wide_edges) = (0usize, 0usize, 0u64);
    for (index, node) in nodes.iter().enumerate() {
        if node.first_edge as usize != next_edge || node.subs_start as usize != next_pair {
            return Err(node_error(index, "edges or subscribers not in node order"));
        }
        let edge_end = next_edge + node.edge_count as usize;
        let pair_end = next_pair + node.subs_len as usize;
        if edge_end > edges.len() || pair_end > pairs.len() {
            return Err(node_error(index, "edges or subscribers past their section"));
        }
        let mut previous: Option<u32> = None;
        for edge in &edges[next_edge..edge_end] {
            if edge.word >= counts.word_count || previous.is_some_and(|p| p >= edge.word) {
                return Err(node_error(index, "edge word out of range or not strictly ascending"));
            }
            previous = Some(edge.word);
            claim(index, edge.child)?;
        }
        for wildcard in [node.star, node.hash] {
            if wildcard != NONE {
                claim(index, wildcard)?;
            }
        }
        let mut previous: Option<u32> = None;
        for &id in &pairs[next_pair..pair_end] {
            if id >= counts.subscriber_count || previous.is_some_and(|p| p >= id) {
                return Err(node_error(
                    index,
                    "subscriber id out of range or not strictly ascending",
                ));
            }
            previous = Some(id);
        }
        // A childless, subscriber-less node other than the root is never built and would only
        // waste lookups: refuse it to keep the format canonical.
        if index > 0 && !node.has_children() && node.subs_len == 0 {
            return Err(node_error(index, "empty leaf"));
        }
        if node.edge_count > WIDE_FANOUT {
            wide_edges += u64::from(node.edge_count);
        }
        next_edge = edge_end;
        next_pair = pair_end;
    }
    if next_edge != edges.len() || next_pair != pairs.len() {
        return Err(NativeError::format("edges or subscribers that no node holds"));
    }
    // Every claim is of a distinct node after the root, so n - 1 claims cover them all.
    if claims != n - 1 {
        return Err(NativeError::format("nodes that no parent holds (not a tree)"));
    }
    u32::try_from(wide_edges).map_err(|_| NativeError::format("wide nodes hold more edges than fit"))
}

/// An index of `slots` holding `entries` values below `bound` and [`EMPTY`] elsewhere.
fn check_index(slots: &[u32], bound: u32, entries: u32, what: &str) -> Result<(), NativeError> {
    let mut held = 0u64;
    for &slot in slots {
        if slot != EMPTY {
            if slot >= bound {
                return Err(NativeError::format(format!("{what}: entry out of range")));
            }
            held += 1;
        }
    }
    if held != u64::from(entries) {
        return Err(NativeError::format(format!(
            "{what}: {held} entries, {entries} expected"
        )));
    }
    Ok(())
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn sample() -> FrozenMatcher {
        FrozenMatcher::build([
            ("stock.*.msft", "alice"),
            ("stock.#", "bob"),
            ("forex.usd", "alice"),
            ("#.#", "carol"),
            ("", "dave"),
            ("a*.x#", "erin"),
        ])
        .unwrap()
    }

    /// A matcher with a wide node (past WIDE_FANOUT literal children), so the wide index is non-empty.
    fn wide_sample() -> FrozenMatcher {
        let pairs: Vec<(String, String)> = (0..80).map(|i| (format!("t{i}.x"), format!("s{}", i % 3))).collect();
        FrozenMatcher::build(pairs.iter().map(|(p, s)| (p, s))).unwrap()
    }

    fn assert_same(a: &FrozenMatcher, b: &FrozenMatcher) {
        assert_eq!(a.nodes[..], b.nodes[..]);
        assert_eq!(a.edges[..], b.edges[..]);
        assert_eq!(a.subscriber_ids[..], b.subscriber_ids[..]);
        assert!(a.words.iter().eq(b.words.iter()));
        assert!(a.subscribers.iter().eq(b.subscribers.iter()));
        assert_eq!(a.bytes(), b.bytes());
    }

    /// `bytes` with its checksum recomputed, so only the structural checks can refuse them.
    fn resigned(mut bytes: Vec<u8>) -> Vec<u8> {
        let trailer = bytes.len() - TRAILER_LEN;
        let crc = crc32(&bytes[..trailer]);
        bytes[trailer..trailer + 4].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    #[test]
    fn round_trip() {
        for matcher in [sample(), wide_sample(), FrozenMatcher::empty()] {
            let bytes = encode(&matcher);
            let back = decode(&bytes).unwrap();
            assert_same(&matcher, &back);
            assert_eq!(encode(&back), bytes);
        }
        let mut rng = Rng(42);
        for _ in 0..100 {
            let pairs: Vec<(String, String)> = (0..rng.below(30))
                .map(|_| (rng.topic(true), format!("s{}", rng.below(5))))
                .collect();
            let matcher = FrozenMatcher::build(pairs.iter().map(|(p, s)| (p, s))).unwrap();
            let back = decode(&encode(&matcher)).unwrap();
            assert_same(&matcher, &back);
            let key = rng.topic(false);
            assert_eq!(matcher.lookup(&key), back.lookup(&key));
        }
    }

    #[test]
    fn unaligned_bytes_decode_through_an_aligned_copy() {
        let bytes = encode(&sample());
        let mut shifted = vec![0u8; 1];
        shifted.extend_from_slice(&bytes);
        let back = decode(&shifted[1..]).unwrap();
        assert_eq!(back.lookup("stock.nyse.msft"), sample().lookup("stock.nyse.msft"));
    }

    #[test]
    fn a_mapped_file_is_validated_and_read_in_place() {
        let dir = std::env::temp_dir().join(format!("codec-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("snapshot.frozen");
        let matcher = wide_sample();
        // A 16-byte prefix stands for a sealed file's head.
        let mut file = vec![7u8; 16];
        file.extend_from_slice(&encode(&matcher));
        std::fs::write(&path, &file).unwrap();
        let mapped = open(&path, 16).unwrap();
        assert!(mapped.is_mapped());
        assert_same(&matcher, &mapped);
        for key in ["t7.x", "t79.x", "t80.x", "t1"] {
            assert_eq!(mapped.lookup(key), matcher.lookup(key), "{key:?}");
        }
        assert!(
            matches!(open(&path, 8), Err(NativeError::Format(_))),
            "the prefix is not a matcher"
        );
        file[16 + HEADER_LEN + 1] ^= 1;
        std::fs::write(&path, &file).unwrap();
        assert!(matches!(open(&path, 16), Err(NativeError::Format(m)) if m.contains("checksum")));
        assert!(matches!(open(&dir.join("absent"), 0), Err(NativeError::Io(_))));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = encode(&sample());
        for length in 0..bytes.len() {
            assert!(decode(&bytes[..length]).is_err(), "truncated to {length}");
            assert!(
                decode_with(&bytes[..length], false).is_err(),
                "truncated to {length}, unchecked"
            );
        }
    }

    #[test]
    fn every_byte_flip_is_an_error() {
        for bytes in [encode(&sample()), encode(&wide_sample())] {
            for index in 0..bytes.len() {
                for mask in [0x01u8, 0x80, 0xFF] {
                    let mut corrupt = bytes.clone();
                    corrupt[index] ^= mask;
                    assert!(decode(&corrupt).is_err(), "flip {mask:#x} at {index}");
                    // Behind the checksum the structural checks must not panic either.
                    let _ = decode_with(&corrupt, false);
                }
            }
        }
    }

    #[test]
    fn wrong_magic_and_version() {
        let mut bytes = encode(&sample());
        bytes[0] = b'X';
        assert!(matches!(decode(&bytes), Err(NativeError::Format(m)) if m.contains("magic")));
        let mut bytes = encode(&sample());
        bytes[8] = 3;
        let bytes = resigned(bytes);
        assert!(matches!(decode(&bytes), Err(NativeError::Format(m)) if m.contains("version 3")));
        // Format 1 (varint-coded, before the in-place layout) is refused with the same error.
        let mut bytes = encode(&sample());
        bytes[8] = 1;
        assert!(matches!(decode(&resigned(bytes)), Err(NativeError::Format(m)) if m.contains("version 1")));
    }

    #[test]
    fn the_header_declares_what_the_decode_finds() {
        let matcher = sample();
        let bytes = encode(&matcher);
        let header = header(&bytes).unwrap();
        let decoded = decode(&bytes).unwrap();
        assert_eq!(header.pair_count as usize, decoded.len());
        assert_eq!(header.pair_count as usize, matcher.len());
        assert_eq!(header.word_count as usize, decoded.word_count());
        assert_eq!(header.subscriber_count as usize, decoded.subscriber_count());
        assert_eq!(header.node_count as usize, decoded.node_count());
        assert_eq!(header.base, 0);
    }

    #[test]
    fn the_header_alone_rejects_what_it_can_see() {
        let bytes = encode(&sample());
        // Every truncation changes the length, which the counts must lay out exactly.
        for length in 0..bytes.len() {
            assert!(header(&bytes[..length]).is_err(), "truncated to {length}");
        }
        let flipped = |index: usize| {
            let mut corrupt = bytes.clone();
            corrupt[index] ^= 0x01;
            corrupt
        };
        // Magic, version, reserved fields and the declared total length: a flip in any of them is seen.
        for index in (0..16).chain(88..HEADER_LEN) {
            assert!(header(&flipped(index)).is_err(), "flip at {index}");
        }
        // Behind the header nothing is read (decode's checksum and structure checks see it).
        for index in HEADER_LEN..bytes.len() {
            assert!(header(&flipped(index)).is_ok(), "flip at {index}");
            assert!(decode(&flipped(index)).is_err(), "flip at {index}, decoded");
        }
    }

    #[test]
    fn random_garbage_is_an_error() {
        let mut rng = Rng(3);
        let valid = encode(&sample());
        for round in 0..3000 {
            let length = rng.below(400);
            let mut garbage: Vec<u8> = (0..length).map(|_| rng.next_u64() as u8).collect();
            if round % 2 == 0 && length > 12 {
                // Keep a valid header prefix so the section checks are reached.
                let keep = length.min(HEADER_LEN);
                garbage[..keep].copy_from_slice(&valid[..keep]);
            }
            assert!(decode(&garbage).is_err());
            let _ = decode_with(&garbage, false);
        }
    }

    /// The structure is checked on its own: a re-signed matcher whose node 2 has two parents.
    #[test]
    fn a_node_with_two_parents_is_refused_behind_a_valid_checksum() {
        let matcher = FrozenMatcher::build([("a.b", "s"), ("a.c", "t")]).unwrap();
        let bytes = encode(&matcher);
        // Nodes in preorder: 0 root, 1 a, 2 b, 3 c; edges: (a -> 1), (b -> 2), (c -> 3).
        let layout = crate::layout::layout_of(&bytes).unwrap();
        let third_child = layout.edges + 2 * 8 + 4;
        assert_eq!(
            u32::from_le_bytes(bytes[third_child..third_child + 4].try_into().unwrap()),
            3
        );
        let mut corrupt = bytes.clone();
        corrupt[third_child..third_child + 4].copy_from_slice(&2u32.to_le_bytes());
        assert!(
            matches!(decode(&resigned(corrupt)), Err(NativeError::Format(m)) if m.contains("more than one parent"))
        );
    }

    #[test]
    fn structural_checks_hold_without_the_checksum() {
        // Re-sign every corruption so only the structural checks can catch it;
        // whatever decodes must be a working matcher.
        for bytes in [encode(&sample()), encode(&wide_sample())] {
            let trailer = bytes.len() - TRAILER_LEN;
            for index in HEADER_LEN..trailer {
                for value in [0u8, 1, 2, 3, 0x7F, 0x80, 0xFF] {
                    let mut corrupt = bytes.clone();
                    corrupt[index] = value;
                    if let Ok(matcher) = decode(&resigned(corrupt)) {
                        for key in ["", "stock.nyse.msft", "a*.x#", "forex.usd", "x", "t7.x", "t70.x"] {
                            let _ = matcher.lookup(key);
                        }
                        let _ = matcher.subscriptions();
                        assert_eq!(decode(&encode(&matcher)).map(|m| m.len()).ok(), Some(matcher.len()));
                    }
                }
            }
        }
    }
}
