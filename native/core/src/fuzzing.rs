//! Fuzz target bodies, shared by the cargo-fuzz targets in `native/fuzz/`
//! (nightly, coverage-guided) and by the bounded "fuzz smoke" unit tests
//! below, which `cargo test` (stable) runs on every `make test`.
//!
//! Each body must return normally on every input: a panic is a finding.

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
            let again = codec::decode(&codec::encode(&matcher)).expect("re-encoded matcher decodes");
            assert_eq!(again.len(), matcher.len());
        }
    }
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
        let mut expected: Vec<&str> = held
            .iter()
            .filter(|(p, _)| matches(p, key))
            .map(|(_, s)| s.as_str())
            .collect();
        expected.sort_unstable();
        expected.dedup();
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
    fn arbitrary_keys_smoke() {
        for data in inputs(3, 200) {
            arbitrary_keys(&data);
        }
    }
}
