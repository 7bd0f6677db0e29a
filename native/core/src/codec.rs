//! The frozen matcher's binary format: how a [`FrozenMatcher`] travels from
//! the driver to executors (a Spark broadcast of bytes).
//!
//! ```text
//! header   magic "TOPICFRZ" | version u16 | reserved u16 (0)
//!          word_count u32 | subscriber_count u32 | node_count u32 | pair_count u32
//!          words_len u64 | subscribers_len u64 | nodes_len u64      (section byte lengths)
//! words        word_count x (varint length, UTF-8 bytes), strictly ascending, unique
//! subscribers  subscriber_count x (varint length, UTF-8 bytes), non-empty, strictly ascending
//! nodes        node_count records in trie preorder:
//!              flags u8 (bit 0: has star child, bit 1: has hash child)
//!              varint edge_count, edge word ids (first, then gap - 1: strictly ascending)
//!              varint subs_count, subscriber ids (same gap coding)
//! trailer  CRC-32 (IEEE) of everything before it, u32
//! ```
//! All integers little-endian; varints are LEB128 of at most 5 bytes.
//! A node's children are the records that follow it in preorder (literal
//! children in edge order, then star, then hash), so child indices are not
//! stored at all: about 5 bytes per node plus the interned texts.
//!
//! Decoding trusts nothing: the checksum is verified first, then every count
//! is capped by the bytes that could encode it before anything is allocated,
//! every id is range-checked and every ordering invariant of
//! [`crate::frozen`] is re-established, so hostile bytes give
//! [`NativeError::Format`], never a panic, out-of-bounds read or huge allocation.

use crate::errors::NativeError;
use crate::frozen::{Edge, FrozenMatcher, Index, Interned, Node, NONE};
use crate::topic::{HASH, SEPARATOR, STAR};

pub const MAGIC: [u8; 8] = *b"TOPICFRZ";
pub const FORMAT_VERSION: u16 = 1;
const HEADER_LEN: usize = 8 + 2 + 2 + 4 * 4 + 8 * 3;
const TRAILER_LEN: usize = 4;
const STAR_FLAG: u8 = 1;
const HASH_FLAG: u8 = 2;
/// Smallest node record: flags, edge count, subscriber count.
const MIN_NODE_RECORD: usize = 3;

// ---------------------------------------------------------------- checksum

const fn crc32_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

static CRC32_TABLE: [u32; 256] = crc32_table();

/// CRC-32 (IEEE 802.3, as zlib's `crc32`).
pub fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc = CRC32_TABLE[((crc ^ byte as u32) & 0xFF) as usize] ^ (crc >> 8);
    }
    !crc
}

// ---------------------------------------------------------------- encoding

fn put_varint(out: &mut Vec<u8>, mut value: u32) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn put_texts<'a>(out: &mut Vec<u8>, texts: impl Iterator<Item = &'a str>) {
    for text in texts {
        put_varint(out, text.len() as u32);
        out.extend_from_slice(text.as_bytes());
    }
}

fn put_ascending(out: &mut Vec<u8>, ids: impl Iterator<Item = u32>) {
    let mut previous: Option<u32> = None;
    for id in ids {
        put_varint(out, previous.map_or(id, |p| id - p - 1));
        previous = Some(id);
    }
}

/// Serialize `matcher` (deterministic: equal matchers give equal bytes).
pub fn encode(matcher: &FrozenMatcher) -> Vec<u8> {
    let mut words = Vec::with_capacity(matcher.words.text_len() + matcher.words.len());
    put_texts(&mut words, matcher.words.iter());
    let mut subscribers = Vec::with_capacity(matcher.subscribers.text_len() + matcher.subscribers.len());
    put_texts(&mut subscribers, matcher.subscribers.iter());
    let mut nodes = Vec::with_capacity(matcher.nodes.len() * 5 + matcher.subscriber_ids.len() * 2);
    for node in &matcher.nodes {
        let flags = if node.star != NONE { STAR_FLAG } else { 0 } | if node.hash != NONE { HASH_FLAG } else { 0 };
        nodes.push(flags);
        let edges = &matcher.edges[node.first_edge as usize..(node.first_edge + node.edge_count) as usize];
        put_varint(&mut nodes, node.edge_count);
        put_ascending(&mut nodes, edges.iter().map(|edge| edge.word));
        let subs = &matcher.subscriber_ids[node.subs_start as usize..(node.subs_start + node.subs_len) as usize];
        put_varint(&mut nodes, node.subs_len);
        put_ascending(&mut nodes, subs.iter().copied());
    }

    let mut out = Vec::with_capacity(HEADER_LEN + words.len() + subscribers.len() + nodes.len() + TRAILER_LEN);
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    for count in [
        matcher.words.len(),
        matcher.subscribers.len(),
        matcher.nodes.len(),
        matcher.subscriber_ids.len(),
    ] {
        out.extend_from_slice(&(count as u32).to_le_bytes());
    }
    for section in [&words, &subscribers, &nodes] {
        out.extend_from_slice(&(section.len() as u64).to_le_bytes());
    }
    out.extend_from_slice(&words);
    out.extend_from_slice(&subscribers);
    out.extend_from_slice(&nodes);
    let checksum = crc32(&out);
    out.extend_from_slice(&checksum.to_le_bytes());
    out
}

// ---------------------------------------------------------------- decoding

/// A bounds-checked reader over one section.
struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
    section: &'static str,
}

impl<'a> Reader<'a> {
    fn new(bytes: &'a [u8], section: &'static str) -> Self {
        Reader {
            bytes,
            position: 0,
            section,
        }
    }

    fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    fn error(&self, what: &str) -> NativeError {
        NativeError::format(format!("{what} in {} section at byte {}", self.section, self.position))
    }

    fn take(&mut self, count: usize) -> Result<&'a [u8], NativeError> {
        if count > self.remaining() {
            return Err(self.error("truncated"));
        }
        let slice = &self.bytes[self.position..self.position + count];
        self.position += count;
        Ok(slice)
    }

    fn u8(&mut self) -> Result<u8, NativeError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, NativeError> {
        let bytes = self.take(2)?;
        Ok(u16::from_le_bytes([bytes[0], bytes[1]]))
    }

    fn u32(&mut self) -> Result<u32, NativeError> {
        let bytes = self.take(4)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn u64(&mut self) -> Result<u64, NativeError> {
        let mut value = [0u8; 8];
        value.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(value))
    }

    fn varint(&mut self) -> Result<u32, NativeError> {
        let mut value: u64 = 0;
        for shift in (0..35).step_by(7) {
            let byte = self.u8()?;
            value |= u64::from(byte & 0x7F) << shift;
            if byte & 0x80 == 0 {
                return u32::try_from(value).map_err(|_| self.error("varint overflows u32"));
            }
        }
        Err(self.error("varint longer than 5 bytes"))
    }

    /// A count of items that each take at least `min_item_bytes`, capped by what is left.
    fn count(&mut self, min_item_bytes: usize, what: &str) -> Result<usize, NativeError> {
        let count = self.varint()? as usize;
        if count.saturating_mul(min_item_bytes) > self.remaining() {
            return Err(self.error(&format!("{what} count {count} exceeds the remaining bytes")));
        }
        Ok(count)
    }

    /// `count` strictly ascending ids below `bound`, gap-coded.
    fn ascending(&mut self, count: usize, bound: u32, out: &mut Vec<u32>, what: &str) -> Result<(), NativeError> {
        let mut previous: Option<u32> = None;
        for _ in 0..count {
            let coded = self.varint()?;
            let id = match previous {
                None => Some(coded),
                Some(p) => p.checked_add(coded).and_then(|v| v.checked_add(1)),
            };
            match id {
                Some(id) if id < bound => {
                    out.push(id);
                    previous = Some(id);
                }
                _ => return Err(self.error(&format!("{what} id out of range"))),
            }
        }
        Ok(())
    }

    fn finish(&self) -> Result<(), NativeError> {
        if self.remaining() != 0 {
            return Err(self.error("trailing bytes"));
        }
        Ok(())
    }
}

fn read_texts(
    bytes: &[u8],
    count: u32,
    section: &'static str,
    index: Index,
    check: impl Fn(&str) -> Result<(), &'static str>,
) -> Result<Interned, NativeError> {
    let mut reader = Reader::new(bytes, section);
    // Every text takes at least its one-byte length prefix.
    if count as usize > bytes.len() {
        return Err(reader.error("count exceeds the section length"));
    }
    let mut interned = Interned::with_capacity(count as usize, bytes.len(), index);
    let mut previous: Option<&str> = None;
    for _ in 0..count {
        let length = reader.varint()? as usize;
        let raw = reader.take(length)?;
        let text = std::str::from_utf8(raw).map_err(|_| reader.error("invalid UTF-8"))?;
        check(text).map_err(|rule| reader.error(rule))?;
        if previous.is_some_and(|p| p >= text) {
            return Err(reader.error("texts not strictly ascending"));
        }
        if !interned.push(text) {
            return Err(reader.error("texts exceed the u32 offsets"));
        }
        previous = Some(text);
    }
    reader.finish()?;
    Ok(interned)
}

/// What a header declares: the counts of each section and the sections' byte lengths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub word_count: u32,
    pub subscriber_count: u32,
    pub node_count: u32,
    pub pair_count: u32,
    /// Byte lengths of the words, subscribers and nodes sections; they add up to the payload's.
    section_lengths: [usize; 3],
}

/// The header of bytes produced by [`encode`], checked as far as it goes
/// without reading the sections: length, magic, format version, the
/// reserved field, and section lengths that add up to the payload. Neither
/// the checksum nor anything behind the header is read, so bytes that pass
/// may still fail [`decode`]; a caller that already holds a stronger digest
/// of the bytes (a snapshot file's SHA-256) learns their counts and whether
/// this build reads their format without the full decode.
pub fn header(bytes: &[u8]) -> Result<Header, NativeError> {
    read_header(bytes, false)
}

fn read_header(bytes: &[u8], verify_checksum: bool) -> Result<Header, NativeError> {
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
    let (body, trailer) = bytes.split_at(bytes.len() - TRAILER_LEN);
    let mut header = Reader::new(body, "header");
    header.take(8)?;
    let version = header.u16()?;
    if version != FORMAT_VERSION {
        return Err(NativeError::format(format!(
            "format version {version}, this build reads version {FORMAT_VERSION}"
        )));
    }
    if verify_checksum {
        let stored = u32::from_le_bytes([trailer[0], trailer[1], trailer[2], trailer[3]]);
        if crc32(body) != stored {
            return Err(NativeError::format("checksum mismatch (corrupt or truncated)"));
        }
    }
    if header.u16()? != 0 {
        return Err(NativeError::format("reserved header field is not zero"));
    }
    let word_count = header.u32()?;
    let subscriber_count = header.u32()?;
    let node_count = header.u32()?;
    let pair_count = header.u32()?;
    let mut section_lengths = [0usize; 3];
    for length in &mut section_lengths {
        *length = usize::try_from(header.u64()?).map_err(|_| NativeError::format("section length overflows"))?;
    }
    let total = section_lengths.iter().try_fold(0usize, |sum, &l| sum.checked_add(l));
    if total != Some(body.len() - HEADER_LEN) {
        return Err(NativeError::format(
            "section lengths do not add up to the payload length",
        ));
    }
    Ok(Header {
        word_count,
        subscriber_count,
        node_count,
        pair_count,
        section_lengths,
    })
}

/// Decode and verify bytes produced by [`encode`].
pub fn decode(bytes: &[u8]) -> Result<FrozenMatcher, NativeError> {
    decode_with(bytes, true)
}

/// [`decode`], optionally skipping the checksum: fuzzing uses that to reach
/// the structural checks behind it (which must hold on their own).
pub fn decode_with(bytes: &[u8], verify_checksum: bool) -> Result<FrozenMatcher, NativeError> {
    let Header {
        word_count,
        subscriber_count,
        node_count,
        pair_count,
        section_lengths,
    } = read_header(bytes, verify_checksum)?;
    let payload = &bytes[HEADER_LEN..bytes.len() - TRAILER_LEN];
    let (words_bytes, rest) = payload.split_at(section_lengths[0]);
    let (subscriber_bytes, node_bytes) = rest.split_at(section_lengths[1]);

    let words = read_texts(words_bytes, word_count, "words", Index::Hashed, |word| {
        if word == STAR || word == HASH {
            Err("wildcard stored as a literal word")
        } else if word.contains(SEPARATOR) {
            Err("word contains the separator")
        } else {
            Ok(())
        }
    })?;
    let subscribers = read_texts(
        subscriber_bytes,
        subscriber_count,
        "subscribers",
        Index::Sorted,
        |subscriber| {
            if subscriber.is_empty() {
                Err("empty subscriber id")
            } else {
                Ok(())
            }
        },
    )?;
    let (nodes, edges, subscriber_ids) = read_nodes(node_bytes, node_count, word_count, subscriber_count)?;
    if subscriber_ids.len() != pair_count as usize {
        return Err(NativeError::format("pair count does not match the nodes"));
    }
    Ok(FrozenMatcher::assemble(
        nodes,
        edges,
        subscriber_ids,
        words,
        subscribers,
    ))
}

/// One node whose children are still being read: `next` of `total` slots filled.
struct Pending {
    node: u32,
    next: u32,
    total: u32,
}

#[allow(clippy::type_complexity)]
fn read_nodes(
    bytes: &[u8],
    node_count: u32,
    word_count: u32,
    subscriber_count: u32,
) -> Result<(Vec<Node>, Vec<Edge>, Vec<u32>), NativeError> {
    let mut reader = Reader::new(bytes, "nodes");
    if node_count == 0 || node_count as usize > bytes.len() / MIN_NODE_RECORD {
        return Err(reader.error("node count is zero or exceeds the section length"));
    }
    let mut nodes: Vec<Node> = Vec::with_capacity(node_count as usize);
    let mut edges: Vec<Edge> = Vec::new();
    let mut subscriber_ids: Vec<u32> = Vec::new();
    let mut word_ids: Vec<u32> = Vec::new();
    let mut pending: Vec<Pending> = Vec::new();

    loop {
        // Read the record of the next node in preorder.
        let index = nodes.len() as u32;
        let flags = reader.u8()?;
        if flags & !(STAR_FLAG | HASH_FLAG) != 0 {
            return Err(reader.error("unknown node flags"));
        }
        let edge_count = reader.count(1, "edge")?;
        word_ids.clear();
        reader.ascending(edge_count, word_count, &mut word_ids, "word")?;
        let first_edge = edges.len() as u32;
        edges.extend(word_ids.iter().map(|&word| Edge { word, child: NONE }));
        let subs_count = reader.count(1, "subscriber")?;
        let subs_start = subscriber_ids.len() as u32;
        reader.ascending(subs_count, subscriber_count, &mut subscriber_ids, "subscriber")?;
        let star = if flags & STAR_FLAG != 0 { 0 } else { NONE }; // placeholder until read
        let hash = if flags & HASH_FLAG != 0 { 0 } else { NONE };
        nodes.push(Node {
            first_edge,
            edge_count: edge_count as u32,
            star,
            hash,
            subs_start,
            subs_len: subs_count as u32,
        });
        if let Some(parent) = pending.last_mut() {
            let slot = parent.next;
            parent.next += 1;
            let node = &mut nodes[parent.node as usize];
            if slot < node.edge_count {
                edges[(node.first_edge + slot) as usize].child = index;
            } else if slot == node.edge_count && node.star != NONE {
                node.star = index;
            } else {
                node.hash = index;
            }
        }
        let total = edge_count as u32 + u32::from(flags & STAR_FLAG != 0) + u32::from(flags & HASH_FLAG != 0);
        if total > 0 {
            if nodes.len() >= node_count as usize {
                return Err(reader.error("a node's children lie past the declared node count"));
            }
            pending.push(Pending {
                node: index,
                next: 0,
                total,
            });
        }
        while pending.last().is_some_and(|p| p.next == p.total) {
            pending.pop();
        }
        if pending.is_empty() {
            break;
        }
        if nodes.len() >= node_count as usize {
            return Err(reader.error("more children than declared nodes"));
        }
    }
    if nodes.len() != node_count as usize {
        return Err(reader.error("fewer nodes in the tree than declared"));
    }
    reader.finish()?;
    // A childless, subscriber-less node other than the root is never built
    // and would only waste lookups: refuse it to keep the format canonical.
    if nodes
        .iter()
        .skip(1)
        .any(|node| !node.has_children() && node.subs_len == 0)
    {
        return Err(NativeError::format("empty leaf node"));
    }
    Ok((nodes, edges, subscriber_ids))
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

    fn assert_same(a: &FrozenMatcher, b: &FrozenMatcher) {
        assert_eq!(a.nodes, b.nodes);
        assert_eq!(a.edges, b.edges);
        assert_eq!(a.subscriber_ids, b.subscriber_ids);
        assert!(a.words.iter().eq(b.words.iter()));
        assert!(a.subscribers.iter().eq(b.subscribers.iter()));
    }

    #[test]
    fn crc32_matches_the_standard_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn round_trip() {
        for matcher in [sample(), FrozenMatcher::empty()] {
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
        let bytes = encode(&sample());
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

    #[test]
    fn wrong_magic_and_version() {
        let mut bytes = encode(&sample());
        bytes[0] = b'X';
        assert!(matches!(decode(&bytes), Err(NativeError::Format(m)) if m.contains("magic")));
        let mut bytes = encode(&sample());
        bytes[8] = 2;
        let body = bytes.len() - 4;
        let checksum = crc32(&bytes[..body]);
        bytes[body..].copy_from_slice(&checksum.to_le_bytes());
        assert!(matches!(decode(&bytes), Err(NativeError::Format(m)) if m.contains("version 2")));
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
    }

    #[test]
    fn the_header_alone_rejects_what_it_can_see_and_only_that() {
        let bytes = encode(&sample());
        // Every truncation changes the payload's length, which the section lengths must add up to.
        for length in 0..bytes.len() {
            assert!(header(&bytes[..length]).is_err(), "truncated to {length}");
        }
        let flipped = |index: usize| {
            let mut corrupt = bytes.clone();
            corrupt[index] ^= 0x01;
            corrupt
        };
        // Magic, version, reserved field and section lengths: a flip in any of them is seen.
        for index in (0..12).chain(HEADER_LEN - 24..HEADER_LEN) {
            assert!(header(&flipped(index)).is_err(), "flip at {index}");
        }
        // A flip in the counts or behind the header is not (decode's checksum and structure checks are).
        for index in (12..HEADER_LEN - 24).chain(HEADER_LEN..bytes.len()) {
            assert!(header(&flipped(index)).is_ok(), "flip at {index}");
            assert!(decode(&flipped(index)).is_err(), "flip at {index}, decoded");
        }
    }

    #[test]
    fn random_garbage_is_an_error() {
        let mut rng = Rng(3);
        let valid = encode(&sample());
        for round in 0..3000 {
            let length = rng.below(200);
            let mut garbage: Vec<u8> = (0..length).map(|_| rng.next_u64() as u8).collect();
            if round % 2 == 0 && length > 12 {
                // Keep a valid header prefix so the section parsers are reached.
                let keep = length.min(HEADER_LEN);
                garbage[..keep].copy_from_slice(&valid[..keep]);
            }
            assert!(decode(&garbage).is_err());
            let _ = decode_with(&garbage, false);
        }
    }

    #[test]
    fn structural_checks_hold_without_the_checksum() {
        // Re-sign every corruption so only the structural checks can catch it;
        // whatever decodes must be a working matcher.
        let bytes = encode(&sample());
        let body = bytes.len() - 4;
        for index in HEADER_LEN..body {
            for value in [0u8, 1, 2, 3, 0x7F, 0x80, 0xFF] {
                let mut corrupt = bytes.clone();
                corrupt[index] = value;
                let checksum = crc32(&corrupt[..body]);
                corrupt[body..].copy_from_slice(&checksum.to_le_bytes());
                if let Ok(matcher) = decode(&corrupt) {
                    for key in ["", "stock.nyse.msft", "a*.x#", "forex.usd", "x"] {
                        let _ = matcher.lookup(key);
                    }
                    let _ = matcher.subscriptions();
                    assert_eq!(decode(&encode(&matcher)).map(|m| m.len()).ok(), Some(matcher.len()));
                }
            }
        }
    }
}
