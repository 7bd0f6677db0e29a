//! Fuzz target bodies, shared by the cargo-fuzz targets in `native/fuzz/`
//! (nightly, coverage-guided) and by the bounded "fuzz smoke" unit tests
//! below, which `cargo test` (stable) runs on every `make test`.
//!
//! Each body must return normally on every input: a panic is a finding.

use arrow_array::cast::AsArray;
use arrow_array::{Array, StringArray};

use crate::codec;
use crate::cstrie::CsTrie;
use crate::frozen::FrozenMatcher;
use crate::topic::matches;

/// Words the structured targets build topics from: tiny, so matches are frequent.
const WORDS: &[&str] = &["a", "b", "", "*", "#", "a*", "é", "x#"];

/// Reads fuzz bytes as small numbers; exhausted input reads as zero.
struct Cursor<'a> {
    data: &'a [u8],
    position: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> u8 {
        let byte = self.data.get(self.position).copied().unwrap_or(0);
        self.position += 1;
        byte
    }

    fn below(&mut self, bound: u8) -> usize {
        (self.byte() % bound) as usize
    }

    fn topic(&mut self) -> String {
        let count = self.below(7);
        (0..count)
            .map(|_| WORDS[self.below(WORDS.len() as u8)])
            .collect::<Vec<_>>()
            .join(".")
    }

    fn exhausted(&self) -> bool {
        self.position >= self.data.len()
    }
}

/// `from_bytes` on arbitrary bytes: an error or a matcher that works and
/// round-trips, never a panic.
pub fn decode_arbitrary(data: &[u8]) {
    for verify_checksum in [true, false] {
        if let Ok(matcher) = codec::decode_with(data, verify_checksum) {
            for key in ["", "a", "a.b", "é.x#", "a..b", "*.#"] {
                let found = matcher.lookup(key);
                assert!(
                    found.windows(2).all(|pair| pair[0] < pair[1]),
                    "results sorted and unique"
                );
            }
            let pairs = matcher.subscriptions();
            assert_eq!(pairs.len(), matcher.len());
            let again =
                codec::decode_with(&codec::encode(&matcher), verify_checksum).expect("re-encoded matcher decodes");
            assert_eq!(again.len(), matcher.len());
        }
    }
}

/// The model's answer: the distinct subscribers of the pairs whose pattern matches `key` (the regex
/// oracle), ascending.
pub(crate) fn expected<'a>(pairs: impl IntoIterator<Item = &'a (String, String)>, key: &str) -> Vec<&'a str> {
    let mut found: Vec<&str> = pairs
        .into_iter()
        .filter(|(pattern, _)| matches(pattern, key))
        .map(|(_, subscriber)| subscriber.as_str())
        .collect();
    found.sort_unstable();
    found.dedup();
    found
}

/// Pairs and keys derived from the bytes: the CS-trie (live and snapshot), the
/// frozen matcher, its decoded bytes and a batch all agree with `matches`.
pub fn lookups_agree(data: &[u8]) {
    let mut cursor = Cursor { data, position: 0 };
    let pair_count = cursor.below(16);
    let pairs: Vec<(String, String)> = (0..pair_count)
        .map(|_| (cursor.topic(), format!("s{}", cursor.below(4))))
        .collect();
    let trie = CsTrie::new();
    for (pattern, subscriber) in &pairs {
        trie.subscribe(pattern, subscriber);
    }
    // Unsubscribe a few, so pruned tries are exercised too. The model: every
    // subscribed pair minus every unsubscribed one (all subscribes came first).
    let mut removed: Vec<&(String, String)> = Vec::new();
    for pair in &pairs {
        if cursor.below(4) == 0 {
            trie.unsubscribe(&pair.0, &pair.1);
            removed.push(pair);
        }
    }
    let held: Vec<&(String, String)> = pairs.iter().filter(|pair| !removed.contains(pair)).collect();
    let snapshot = trie.snapshot();
    let frozen = FrozenMatcher::build(snapshot.subscriptions()).expect("non-empty subscribers");
    let thawed = codec::decode(&codec::encode(&frozen)).expect("round trip");
    let mut keys = Vec::new();
    while !cursor.exhausted() && keys.len() < 32 {
        keys.push(cursor.topic());
    }
    keys.push(String::new());
    for key in &keys {
        let expected = expected(held.iter().copied(), key);
        assert_eq!(frozen.lookup(key), expected, "frozen lookup {key:?}");
        assert_eq!(thawed.lookup(key), expected, "decoded lookup {key:?}");
        let from_snapshot: Vec<String> = snapshot.lookup(key).iter().map(|s| s.to_string()).collect();
        assert_eq!(from_snapshot, expected, "snapshot lookup {key:?}");
        let live: Vec<String> = trie.lookup(key).iter().map(|s| s.to_string()).collect();
        assert_eq!(live, expected, "live lookup {key:?}");
    }
    let array = StringArray::from(keys.iter().map(|k| Some(k.as_str())).chain([None]).collect::<Vec<_>>());
    let (list, stats) = crate::batch::match_batch(&frozen, &array, None).expect("batch");
    assert_eq!(list.len(), keys.len() + 1);
    assert!(list.is_null(keys.len()));
    assert_eq!(stats.null_rows, 1);
    // With lookahead (on in large matchers only): the same rows, each as `expected`.
    let (ahead, _) = crate::lookahead::always(|| crate::batch::match_batch(&frozen, &array, None)).expect("batch");
    assert_eq!(ahead, list);
    for (row, key) in keys.iter().enumerate() {
        let value = ahead.value(row);
        let got: Vec<&str> = value
            .as_string::<i32>()
            .iter()
            .map(|s| s.expect("no null subscriber"))
            .collect();
        assert_eq!(got, expected(held.iter().copied(), key), "batch {key:?}");
    }
}

/// Arbitrary text keys (split on NUL, lossily decoded) through lookup and a batch.
pub fn arbitrary_keys(data: &[u8]) {
    let frozen =
        FrozenMatcher::build([("#", "all"), ("*.*", "two"), ("a.#.b", "ab"), ("#.#.#.x", "x")]).expect("valid pairs");
    let text = String::from_utf8_lossy(data);
    let keys: Vec<&str> = text.split('\0').collect();
    for key in &keys {
        let found = frozen.lookup(key);
        assert!(found.contains(&"all"));
        assert_eq!(found.contains(&"two"), matches("*.*", key));
        assert_eq!(found.contains(&"x"), matches("#.#.#.x", key));
    }
    let array = StringArray::from(keys.clone());
    let (list, _) = crate::batch::match_batch(&frozen, &array, Some(keys.len())).expect("batch");
    assert_eq!(list.len(), keys.len());
    let (ahead, _) =
        crate::lookahead::always(|| crate::batch::match_batch(&frozen, &array, Some(keys.len()))).expect("batch");
    assert_eq!(ahead, list);
}

/// A base and changes derived from the bytes: the layered matcher of the base and the builder's delta agrees
/// with `matches` over the changed pair set. The rest of the bytes then mutate the delta's bytes (re-signed, so
/// the structural checks and the layering's own are what must hold): an error, or a layered matcher whose
/// lookups run, never a panic.
pub fn deltas_agree(data: &[u8]) {
    use std::sync::Arc;

    use crate::layered::{DeltaBuilder, Layered};

    let mut cursor = Cursor { data, position: 0 };
    let pool: Vec<(String, String)> = (0..1 + cursor.below(12))
        .map(|_| (cursor.topic(), format!("s{}", cursor.below(4))))
        .collect();
    let mut model: Vec<(String, String)> = pool.iter().filter(|_| cursor.below(2) == 0).cloned().collect();
    model.sort();
    model.dedup();
    let base = Arc::new(FrozenMatcher::build(model.iter().map(|(p, s)| (p, s))).expect("valid pairs"));
    let mut builder = DeltaBuilder::new(base.clone()).expect("a base");
    for version in 1..=3u64 {
        let mut last: Vec<(usize, bool)> = Vec::new();
        for _ in 0..cursor.below(6) {
            let (pair, active) = (cursor.below(pool.len() as u8), cursor.below(2) == 0);
            last.retain(|&(other, _)| other != pair);
            last.push((pair, active));
        }
        for &(pair, active) in &last {
            let (pattern, subscriber) = &pool[pair];
            builder.record([(pattern.as_str(), subscriber.as_str())], active, version);
            model.retain(|held| held != &pool[pair]);
            if active {
                model.push(pool[pair].clone());
            }
        }
    }
    let delta = builder.freeze().expect("a delta");
    let layered = Layered::new(base.clone(), Arc::new(delta.clone())).expect("its own base");
    assert_eq!(layered.len(), model.len());
    let mut keys = Vec::new();
    while !cursor.exhausted() && keys.len() < 16 {
        keys.push(cursor.topic());
    }
    for key in &keys {
        let expected = expected(&model, key);
        assert_eq!(layered.lookup(key), expected, "layered lookup {key:?}");
    }
    // Mutations of the delta's bytes, each (position, value) from what is left of the input.
    let mut bytes = codec::encode(&delta);
    let trailer = bytes.len() - crate::layout::TRAILER_LEN;
    let rest = &data[cursor.position.min(data.len())..];
    for pair in rest.chunks_exact(3).take(8) {
        let at = u16::from_le_bytes([pair[0], pair[1]]) as usize % trailer;
        bytes[at] = pair[2];
    }
    let crc = crate::layout::crc32(&bytes[..trailer]);
    bytes[trailer..trailer + 4].copy_from_slice(&crc.to_le_bytes());
    if let Ok(mutated) = codec::decode(&bytes) {
        if let Ok(layered) = Layered::new(base, Arc::new(mutated)) {
            for key in &keys {
                let found = layered.lookup(key);
                assert!(
                    found.windows(2).all(|pair| pair[0] < pair[1]),
                    "results sorted and unique"
                );
            }
            let _ = layered.subscriptions();
        }
    }
}

#[cfg(test)]
mod smoke {
    //! Bounded random-input runs of every fuzz body (deterministic seeds).
    use super::*;
    use crate::rng::Rng;

    const ITERATIONS: usize = 3000;

    fn inputs(seed: u64, max_len: usize) -> impl Iterator<Item = Vec<u8>> {
        let mut rng = Rng(seed);
        (0..ITERATIONS).map(move |_| {
            let length = rng.below(max_len);
            (0..length).map(|_| rng.next_u64() as u8).collect()
        })
    }

    #[test]
    fn decode_arbitrary_smoke() {
        let valid =
            codec::encode(&FrozenMatcher::build([("a.*.b", "s1"), ("#", "s2"), ("x.#.y", "s1"), ("", "s3")]).unwrap());
        let mut rng = Rng(77);
        for garbage in inputs(1, 120) {
            decode_arbitrary(&garbage);
            // Mutate a valid blob: the interesting inputs are the near-valid ones.
            let mut mutated = valid.clone();
            for _ in 0..1 + rng.below(4) {
                let index = rng.below(mutated.len());
                mutated[index] = rng.next_u64() as u8;
            }
            if rng.below(3) == 0 {
                mutated.truncate(rng.below(mutated.len() + 1));
            }
            if rng.below(3) == 0 {
                mutated.extend_from_slice(&garbage[..garbage.len().min(8)]);
            }
            decode_arbitrary(&mutated);
        }
    }

    #[test]
    fn lookups_agree_smoke() {
        for data in inputs(2, 160).take(1500) {
            lookups_agree(&data);
        }
    }

    #[test]
    fn deltas_agree_smoke() {
        for data in inputs(4, 200).take(1500) {
            deltas_agree(&data);
        }
    }

    #[test]
    fn arbitrary_keys_smoke() {
        for data in inputs(3, 200) {
            arbitrary_keys(&data);
        }
    }
}
