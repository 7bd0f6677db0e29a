//! Matching a whole Arrow batch of routing keys at once (the Spark hot path):
//! `string`, `large_string` or `string_view` keys in, one `list<string>` of
//! subscribers per row out, row-aligned, a null key giving a null list.
//!
//! Kafka batches repeat keys heavily, so each distinct key is matched once: a
//! hash map from key text to its result, whose subscriber ids are then spread
//! back to every row holding that key. The map is not free (every key is
//! hashed and stored, with cache misses once it is large), so it must keep
//! earning its keep: after a first warm-up window of [`PROBE_ROWS`] keys, any
//! window in which fewer than half the keys were repeats switches it off and
//! the rest of the batch is matched row by row. In a matcher too large for the
//! caches, a lookahead (`crate::lookahead`) warms them for the keys
//! `crate::lookahead::DEPTH` rows ahead, so that their cache misses overlap.
//! The output is written straight into
//! Arrow buffers (offsets, validity, UTF-8 bytes), with no per-row allocation.
//!
//! [`route_batch`] is the router's form, with its limits applied while
//! matching: a row matching more than `max_fanout` subscribers gets a null
//! list (it is dead-lettered whole, so its ids are never copied), every
//! matched row gets its subscriber count, and the result stops before the
//! first row that would take the output past `max_bytes` (Arrow buffer
//! bytes; always at least one row). The caller matches the rest of the keys
//! with further calls, so a batch of any fan-out is cut into bounded pieces
//! instead of failing on 32-bit offsets.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayAccessor, Int32Array, ListArray, StringArray};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field};
use hashbrown::hash_map::Entry;
use hashbrown::HashMap;

use crate::errors::NativeError;
use crate::frozen::{FrozenMatcher, Scratch, NONE};
use crate::layered::{Layered, LayeredScratch};
use crate::lookahead::{Lookahead, DEPTH};

/// What a batch matches with: one frozen matcher, or a base and its delta ([`Layered`]).
pub trait Matches {
    type Scratch;
    /// Lookup buffers for a batch of about `keys` keys.
    fn batch_scratch(&self, keys: usize) -> Self::Scratch;
    /// Matching subscriber ids of `key`, unique, in ascending text order.
    fn lookup_ids<'s>(&self, key: &str, scratch: &'s mut Self::Scratch) -> &'s [u32];
    /// The text of an id from [`Matches::lookup_ids`].
    fn subscriber(&self, id: u32) -> &str;
    /// Every (pattern, subscriber) pair the matcher holds.
    fn subscriptions(&self) -> Vec<(String, &str)>;
    /// The frozen matcher whose caches a batch's lookahead (`crate::lookahead`) warms: the one that holds nearly
    /// all the pairs (a layered matcher's base).
    fn lookahead_matcher(&self) -> &FrozenMatcher;
    /// The part of `scratch` that [`Matches::lookahead_matcher`]'s lookups use.
    fn lookahead_scratch(scratch: &mut Self::Scratch) -> &mut Scratch;
}

impl Matches for FrozenMatcher {
    type Scratch = Scratch;

    fn batch_scratch(&self, keys: usize) -> Scratch {
        Scratch::for_batch(keys)
    }

    fn lookup_ids<'s>(&self, key: &str, scratch: &'s mut Scratch) -> &'s [u32] {
        FrozenMatcher::lookup_ids(self, key, scratch)
    }

    fn subscriber(&self, id: u32) -> &str {
        FrozenMatcher::subscriber(self, id)
    }

    fn subscriptions(&self) -> Vec<(String, &str)> {
        FrozenMatcher::subscriptions(self)
    }

    fn lookahead_matcher(&self) -> &FrozenMatcher {
        self
    }

    fn lookahead_scratch(scratch: &mut Scratch) -> &mut Scratch {
        scratch
    }
}

impl Matches for Layered {
    type Scratch = LayeredScratch;

    fn batch_scratch(&self, keys: usize) -> LayeredScratch {
        LayeredScratch::for_batch(keys)
    }

    fn lookup_ids<'s>(&self, key: &str, scratch: &'s mut LayeredScratch) -> &'s [u32] {
        Layered::lookup_ids(self, key, scratch)
    }

    fn subscriber(&self, id: u32) -> &str {
        Layered::subscriber(self, id)
    }

    fn subscriptions(&self) -> Vec<(String, &str)> {
        Layered::subscriptions(self)
    }

    fn lookahead_matcher(&self) -> &FrozenMatcher {
        self.base()
    }

    fn lookahead_scratch(scratch: &mut LayeredScratch) -> &mut Scratch {
        scratch.base_mut()
    }
}

/// What a batch held, for introspection and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    pub rows: usize,
    pub null_rows: usize,
    /// Lookups actually performed: the distinct non-null keys while
    /// de-duplicating (always, for batches up to 2 x [`PROBE_ROWS`] keys).
    pub lookups: usize,
    /// Whether de-duplication stayed on for the whole batch.
    pub deduplicated: bool,
}

/// Non-null keys per window over which de-duplication must pay (see module docs).
pub const PROBE_ROWS: usize = 1024;

/// Output bytes a row costs besides its subscriber ids: its list offset, its fan-out count and
/// (rounded up) its two validity bits.
pub const ROW_BYTES: usize = 9;
/// Output bytes of any result: the leading list and string offsets.
pub const BASE_BYTES: usize = 8;
/// Output bytes one subscriber of a list costs besides its text: its string offset.
pub const ITEM_BYTES: usize = 4;

/// The router's limits on one [`route_batch`] call (`None`: unlimited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteLimits {
    /// Keys one call may take; more is an error before any work.
    pub max_rows: Option<usize>,
    /// Subscribers a row may have and still get its list.
    pub max_fanout: Option<usize>,
    /// Output bytes after which the result stops (at a row boundary, after at least one row).
    pub max_bytes: Option<usize>,
}

/// The result of [`route_batch`] for the first `subscribers.len()` keys.
#[derive(Debug)]
pub struct Routed {
    /// Per row: its subscribers; null for a null key or a fan-out over the limit.
    pub subscribers: ListArray,
    /// Per row: how many subscribers matched (null for a null key).
    pub fanout: Int32Array,
    pub stats: BatchStats,
    /// Arrow buffer bytes of this result (an upper bound), as [`route_batch`] counts them against `max_bytes`.
    pub bytes: usize,
}

/// Match every key of `keys`. `max_rows`, when given, is enforced before any work.
pub fn match_batch<M: Matches>(
    matcher: &M,
    keys: &dyn Array,
    max_rows: Option<usize>,
) -> Result<(ListArray, BatchStats), NativeError> {
    let limits = RouteLimits {
        max_rows,
        ..RouteLimits::default()
    };
    let routed = route_with(matcher, keys, limits, Field::new_list_field(DataType::Utf8, true))?;
    debug_assert_eq!(routed.subscribers.len(), keys.len());
    Ok((routed.subscribers, routed.stats))
}

/// Match a prefix of `keys` under the router's `limits` (see module docs); the
/// list field is named `element`, as Spark's Arrow conversion names it.
pub fn route_batch<M: Matches>(matcher: &M, keys: &dyn Array, limits: RouteLimits) -> Result<Routed, NativeError> {
    route_with(matcher, keys, limits, Field::new("element", DataType::Utf8, true))
}

/// The list type of every [`match_batch`] result: `list<item: string>`, as `pa.list_(pa.string())`.
pub fn result_type() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)))
}

fn route_with<M: Matches>(
    matcher: &M,
    keys: &dyn Array,
    limits: RouteLimits,
    item: Field,
) -> Result<Routed, NativeError> {
    if let Some(limit) = limits.max_rows {
        if keys.len() > limit {
            return Err(NativeError::BatchTooLarge {
                rows: keys.len(),
                limit,
            });
        }
    }
    match keys.data_type() {
        DataType::Utf8 => route_keys(matcher, keys.as_string::<i32>(), limits, item),
        DataType::LargeUtf8 => route_keys(matcher, keys.as_string::<i64>(), limits, item),
        DataType::Utf8View => route_keys(matcher, keys.as_string_view(), limits, item),
        other => Err(NativeError::UnsupportedArray(format!("an array of type {other}"))),
    }
}

/// One distinct lookup's result: its ids in `result_ids` (none kept when over the
/// fan-out limit), how many subscribers matched, and the text bytes of its ids.
#[derive(Clone, Copy)]
struct Found {
    start: usize,
    count: usize,
    kept: bool,
    text_bytes: usize,
}

impl Found {
    /// Output bytes of one row with this result.
    fn row_bytes(&self) -> usize {
        if self.kept {
            ROW_BYTES + self.count * ITEM_BYTES + self.text_bytes
        } else {
            ROW_BYTES
        }
    }
}

fn route_keys<'a, A, M>(matcher: &M, keys: A, limits: RouteLimits, item: Field) -> Result<Routed, NativeError>
where
    A: ArrayAccessor<Item = &'a str>,
    M: Matches,
{
    let rows = keys.len();
    let max_fanout = limits.max_fanout.unwrap_or(usize::MAX);
    let max_bytes = limits.max_bytes.unwrap_or(usize::MAX);
    let mut stats = BatchStats {
        deduplicated: true,
        ..BatchStats::default()
    };
    let mut scratch = matcher.batch_scratch(rows);
    // Per distinct key: its index in `found`.
    let mut distinct: HashMap<&'a str, u32> = HashMap::with_capacity(rows.min(PROBE_ROWS * 4));
    let mut found: Vec<Found> = Vec::new();
    let mut result_ids: Vec<u32> = Vec::new();
    let mut row_results: Vec<u32> = Vec::with_capacity(rows);
    // Keys DEPTH rows ahead, warmed in a large matcher (crate::lookahead); all null when lookahead is off.
    let mut lookahead = Lookahead::over(matcher.lookahead_matcher());
    let ahead = |row: usize| (row < rows && !keys.is_null(row)).then(|| keys.value(row));
    if let Some(lookahead) = lookahead.as_mut() {
        for row in 0..DEPTH {
            lookahead.feed(ahead(row), M::lookahead_scratch(&mut scratch));
        }
    }
    let lookup = |key: &str, found: &mut Vec<Found>, scratch: &mut M::Scratch, result_ids: &mut Vec<u32>| -> u32 {
        let ids = matcher.lookup_ids(key, scratch);
        let kept = ids.len() <= max_fanout;
        let start = result_ids.len();
        let mut text_bytes = 0;
        if kept {
            result_ids.extend_from_slice(ids);
            text_bytes = ids.iter().map(|&id| matcher.subscriber(id).len()).sum();
        }
        found.push(Found {
            start,
            count: ids.len(),
            kept,
            text_bytes,
        });
        (found.len() - 1) as u32
    };
    let mut bytes = BASE_BYTES;
    let mut list_items = 0usize;
    let mut value_bytes = 0usize;
    // Repeated keys in the current window of PROBE_ROWS non-null keys.
    let mut window_repeats = 0usize;
    let mut non_null = 0usize;
    for row in 0..rows {
        if let Some(lookahead) = lookahead.as_mut() {
            // A key the batch has matched already needs no warming.
            let key = ahead(row + DEPTH).filter(|key| !(stats.deduplicated && distinct.contains_key(key)));
            lookahead.feed(key, M::lookahead_scratch(&mut scratch));
        }
        if keys.is_null(row) {
            if !row_results.is_empty() && bytes + ROW_BYTES > max_bytes {
                break;
            }
            bytes += ROW_BYTES;
            stats.null_rows += 1;
            row_results.push(NONE);
            continue;
        }
        let key: &'a str = keys.value(row);
        let result = if stats.deduplicated {
            match distinct.entry(key) {
                Entry::Occupied(seen) => {
                    window_repeats += 1;
                    *seen.get()
                }
                Entry::Vacant(slot) => *slot.insert(lookup(key, &mut found, &mut scratch, &mut result_ids)),
            }
        } else {
            lookup(key, &mut found, &mut scratch, &mut result_ids)
        };
        let this = found[result as usize];
        if !row_results.is_empty() && bytes + this.row_bytes() > max_bytes {
            break; // the rest goes to the caller's next call
        }
        bytes += this.row_bytes();
        if this.kept {
            list_items += this.count;
            value_bytes += this.text_bytes;
        }
        row_results.push(result);
        non_null += 1;
        if stats.deduplicated && non_null.is_multiple_of(PROBE_ROWS) {
            // The first window only warms the map; later ones must repeat at least half their keys.
            if non_null > PROBE_ROWS && window_repeats * 2 < PROBE_ROWS {
                stats.deduplicated = false;
                distinct = HashMap::new();
            }
            window_repeats = 0;
        }
    }
    stats.rows = row_results.len();
    stats.lookups = found.len();
    if list_items > i32::MAX as usize || value_bytes > i32::MAX as usize {
        return Err(NativeError::ResultTooLarge(format!(
            "{list_items} subscribers / {value_bytes} bytes do not fit list<string> 32-bit offsets"
        )));
    }
    let result_ids = &result_ids;

    let mut list_offsets: Vec<i32> = Vec::with_capacity(row_results.len() + 1);
    let mut value_offsets: Vec<i32> = Vec::with_capacity(list_items + 1);
    let mut values: Vec<u8> = Vec::with_capacity(value_bytes);
    let mut fanout: Vec<i32> = Vec::with_capacity(row_results.len());
    list_offsets.push(0);
    value_offsets.push(0);
    for &result in &row_results {
        if result != NONE {
            let this = found[result as usize];
            fanout.push(i32::try_from(this.count).unwrap_or(i32::MAX));
            if this.kept {
                for &id in &result_ids[this.start..this.start + this.count] {
                    values.extend_from_slice(matcher.subscriber(id).as_bytes());
                    value_offsets.push(values.len() as i32);
                }
            }
        } else {
            fanout.push(0);
        }
        list_offsets.push((value_offsets.len() - 1) as i32);
    }
    // SAFETY: `values` is a concatenation of whole `&str`s, so valid UTF-8 at
    // every offset; offsets start at 0, never decrease (each push is the
    // current length) and end at `values.len()`, checked above to fit i32.
    let strings = unsafe {
        StringArray::new_unchecked(
            OffsetBuffer::new_unchecked(ScalarBuffer::from(value_offsets)),
            Buffer::from_vec(values),
            None,
        )
    };
    let listed = |&r: &u32| r != NONE && found[r as usize].kept;
    let has_null_list = row_results.iter().any(|r| !listed(r));
    let list_validity = has_null_list.then(|| NullBuffer::from_iter(row_results.iter().map(listed)));
    let fanout_validity = (stats.null_rows > 0).then(|| NullBuffer::from_iter(row_results.iter().map(|&r| r != NONE)));
    let list = ListArray::try_new(
        Arc::new(item),
        OffsetBuffer::new(ScalarBuffer::from(list_offsets)),
        Arc::new(strings),
        list_validity,
    )
    .map_err(|error| NativeError::ResultTooLarge(error.to_string()))?;
    Ok(Routed {
        subscribers: list,
        fanout: Int32Array::new(ScalarBuffer::from(fanout), fanout_validity),
        stats,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;
    use arrow_array::{Int32Array, LargeStringArray, StringViewArray};

    fn rows(list: &ListArray) -> Vec<Option<Vec<String>>> {
        (0..list.len())
            .map(|i| {
                (!list.is_null(i)).then(|| {
                    let value = list.value(i);
                    let strings = value.as_string::<i32>();
                    strings.iter().map(|s| s.unwrap().to_string()).collect()
                })
            })
            .collect()
    }

    fn expected(matcher: &FrozenMatcher, keys: &[Option<String>]) -> Vec<Option<Vec<String>>> {
        keys.iter()
            .map(|key| {
                key.as_ref()
                    .map(|k| matcher.lookup(k).into_iter().map(String::from).collect())
            })
            .collect()
    }

    /// Lookahead (`crate::lookahead`, on by itself in large matchers only) only warms caches: with
    /// it forced on, every batch, limited or not, plain or layered, has exactly the rows of
    /// per-key lookups, whatever the patterns (wildcards, `#` runs) and keys (nulls, empty words,
    /// keys longer than a probe follows, enough distinct keys to switch de-duplication off).
    #[test]
    fn lookahead_changes_no_row() {
        use crate::layered::DeltaBuilder;
        let mut rng = Rng(29);
        for round in 0..48 {
            let pairs: Vec<(String, String)> = (0..1 + rng.below(40))
                .map(|_| (rng.topic(true), format!("sub-{}", rng.below(9))))
                .collect();
            let base = Arc::new(FrozenMatcher::build(pairs.iter().map(|(p, s)| (p, s))).unwrap());
            let count = if round % 6 == 0 { 3 * PROBE_ROWS } else { rng.below(80) };
            let keys: Vec<Option<String>> = (0..count)
                .map(|i| match rng.below(10) {
                    0 => None,
                    1 => Some(vec!["a"; crate::lookahead::MAX_WORDS + 1 + rng.below(3)].join(".")),
                    2 => Some(format!("{}..{i}", rng.topic(false))),
                    _ => Some(rng.topic(false)),
                })
                .collect();
            let array = StringArray::from(keys.clone());
            let (plain, _) = match_batch(base.as_ref(), &array, None).unwrap();
            let (ahead, _) = crate::lookahead::always(|| match_batch(base.as_ref(), &array, None)).unwrap();
            assert_eq!(rows(&ahead), expected(&base, &keys), "round {round}");
            assert_eq!(ahead, plain);
            let limits = RouteLimits {
                max_rows: None,
                max_fanout: Some(2),
                max_bytes: Some(64 + rng.below(400)),
            };
            let cut = route_batch(base.as_ref(), &array, limits).unwrap();
            let cut_ahead = crate::lookahead::always(|| route_batch(base.as_ref(), &array, limits)).unwrap();
            assert_eq!((cut_ahead.subscribers, cut_ahead.fanout), (cut.subscribers, cut.fanout));
            // A delta that hides some base pairs and adds others.
            let mut builder = DeltaBuilder::new(base.clone()).unwrap();
            let gone: Vec<(&str, &str)> = pairs.iter().step_by(3).map(|(p, s)| (p.as_str(), s.as_str())).collect();
            builder.record(gone, false, 1);
            let added: Vec<(String, String)> = (0..rng.below(6)).map(|_| (rng.topic(true), "new".to_owned())).collect();
            builder.record(added.iter().map(|(p, s)| (p.as_str(), s.as_str())), true, 1);
            let layered = Layered::new(base.clone(), Arc::new(builder.freeze().unwrap())).unwrap();
            let (plain, _) = match_batch(&layered, &array, None).unwrap();
            let (ahead, _) = crate::lookahead::always(|| match_batch(&layered, &array, None)).unwrap();
            assert_eq!(ahead, plain, "layered, round {round}");
            let per_key: Vec<Option<Vec<String>>> = keys
                .iter()
                .map(|key| {
                    key.as_ref()
                        .map(|k| layered.lookup(k).into_iter().map(String::from).collect())
                })
                .collect();
            assert_eq!(rows(&ahead), per_key);
        }
    }

    #[test]
    fn rows_agree_with_lookup_for_every_string_type() {
        let mut rng = Rng(11);
        for _ in 0..60 {
            let pairs: Vec<(String, String)> = (0..rng.below(15))
                .map(|_| (rng.topic(true), format!("sub-{}", rng.below(6))))
                .collect();
            let matcher = FrozenMatcher::build(pairs.iter().map(|(p, s)| (p, s))).unwrap();
            let keys: Vec<Option<String>> = (0..rng.below(40))
                .map(|_| (rng.below(5) != 0).then(|| rng.topic(false)))
                .collect();
            let want = expected(&matcher, &keys);
            let utf8 = StringArray::from(keys.clone());
            let large = LargeStringArray::from(keys.clone());
            let view = StringViewArray::from(keys.iter().map(|k| k.as_deref()).collect::<Vec<_>>());
            for array in [&utf8 as &dyn Array, &large, &view] {
                let (list, stats) = match_batch(&matcher, array, None).unwrap();
                assert_eq!(list.data_type(), &result_type());
                assert_eq!(rows(&list), want);
                assert_eq!(stats.null_rows, keys.iter().filter(|k| k.is_none()).count());
                let distinct: std::collections::HashSet<_> = keys.iter().flatten().collect();
                assert!(stats.deduplicated);
                assert_eq!(stats.lookups, distinct.len());
            }
            // A slice has a non-zero offset into the same buffers.
            if keys.len() > 4 {
                let sliced = utf8.slice(2, keys.len() - 3);
                let (list, _) = match_batch(&matcher, &sliced, None).unwrap();
                assert_eq!(rows(&list), want[2..keys.len() - 1].to_vec());
            }
        }
    }

    #[test]
    fn mostly_distinct_batches_stop_deduplicating_and_stay_correct() {
        let matcher = FrozenMatcher::build([("k1.#", "a"), ("*.x", "b"), ("#", "c")]).unwrap();
        // Distinct keys for two windows, then repeats of a few (and nulls).
        let keys: Vec<Option<String>> = (0..2 * PROBE_ROWS)
            .map(|i| Some(format!("k{i}.x")))
            .chain((0..3000).map(|i| {
                if i % 7 == 0 {
                    None
                } else {
                    Some(format!("k{}.x", i % 3))
                }
            }))
            .collect();
        let (list, stats) = match_batch(&matcher, &StringArray::from(keys.clone()), None).unwrap();
        assert!(!stats.deduplicated);
        assert_eq!(stats.lookups, keys.iter().flatten().count());
        assert_eq!(rows(&list), expected(&matcher, &keys));
        // A small pool: many distinct keys while the map warms up, then mostly repeats.
        let pooled: Vec<Option<String>> = (0..6 * PROBE_ROWS)
            .map(|i| Some(format!("k{}.x", (i * 7919) % 1000)))
            .collect();
        let (list, stats) = match_batch(&matcher, &StringArray::from(pooled.clone()), None).unwrap();
        assert!(stats.deduplicated);
        assert_eq!(stats.lookups, 1000);
        assert_eq!(rows(&list), expected(&matcher, &pooled));
    }

    #[test]
    fn limits_and_types_are_errors() {
        let matcher = FrozenMatcher::build([("#", "s")]).unwrap();
        let keys = StringArray::from(vec!["a", "b", "c"]);
        assert_eq!(
            match_batch(&matcher, &keys, Some(2)).unwrap_err(),
            NativeError::BatchTooLarge { rows: 3, limit: 2 }
        );
        assert!(match_batch(&matcher, &keys, Some(3)).is_ok());
        let numbers = Int32Array::from(vec![1, 2]);
        assert!(matches!(
            match_batch(&matcher, &numbers, None),
            Err(NativeError::UnsupportedArray(_))
        ));
        let (empty, _) = match_batch(&matcher, &StringArray::from(Vec::<&str>::new()), None).unwrap();
        assert_eq!(empty.len(), 0);
    }

    /// What [`route_all`] saw: each row's list and fan-out, and the bytes of each call.
    struct RoutedAll {
        lists: Vec<Option<Vec<String>>>,
        fanouts: Vec<Option<i32>>,
        sizes: Vec<usize>,
    }

    /// Every row of `keys` through repeated `route_batch` calls.
    fn route_all(matcher: &FrozenMatcher, keys: &StringArray, limits: RouteLimits) -> RoutedAll {
        let (mut lists, mut fanouts, mut sizes) = (Vec::new(), Vec::new(), Vec::new());
        let mut start = 0;
        while start < keys.len() {
            let part = keys.slice(start, keys.len() - start);
            let routed = route_batch(matcher, &part, limits).unwrap();
            assert!(!routed.subscribers.is_empty(), "every call makes progress");
            assert_eq!(routed.subscribers.len(), routed.fanout.len());
            assert_eq!(
                routed.subscribers.data_type(),
                &DataType::List(Arc::new(Field::new("element", DataType::Utf8, true)))
            );
            lists.extend(rows(&routed.subscribers));
            fanouts.extend(routed.fanout.iter());
            sizes.push(routed.bytes);
            start += routed.subscribers.len();
        }
        RoutedAll { lists, fanouts, sizes }
    }

    #[test]
    fn route_batch_cuts_by_bytes_and_nulls_lists_over_the_fanout_limit() {
        let long = |i: usize| format!("{i:0>255}");
        let mut pairs: Vec<(String, String)> = (0..40).map(|i| ("a.#".to_string(), long(i))).collect();
        pairs.push(("b".to_string(), "only-b".to_string()));
        let matcher = FrozenMatcher::build(pairs.iter().map(|(p, s)| (p, s))).unwrap();
        let keys: Vec<Option<String>> = (0..500)
            .map(|i| match i % 4 {
                0 => Some(format!("a.{}", i % 7)),
                1 => Some("b".to_string()),
                2 => None,
                _ => Some("c".to_string()),
            })
            .collect();
        let array = StringArray::from(keys.clone());
        let row_a = ROW_BYTES + 40 * (ITEM_BYTES + 255);
        let max_bytes = 3 * row_a + 10;
        let limits = RouteLimits {
            max_rows: None,
            max_fanout: Some(40),
            max_bytes: Some(max_bytes),
        };
        let RoutedAll { lists, fanouts, sizes } = route_all(&matcher, &array, limits);
        assert_eq!(lists, expected(&matcher, &keys));
        assert!(
            sizes.len() > 1 && sizes.iter().all(|&size| size <= max_bytes),
            "{sizes:?}"
        );
        let want_fanout: Vec<Option<i32>> = keys
            .iter()
            .map(|k| k.as_ref().map(|k| matcher.lookup(k).len() as i32))
            .collect();
        assert_eq!(fanouts, want_fanout);

        // Over the fan-out limit: a null list, the count kept; the bytes of the ids are never counted.
        let limits = RouteLimits {
            max_rows: None,
            max_fanout: Some(39),
            max_bytes: Some(ROW_BYTES * 10),
        };
        let RoutedAll { lists, fanouts, sizes } = route_all(&matcher, &array, limits);
        for ((key, list), fanout) in keys.iter().zip(&lists).zip(&fanouts) {
            match key.as_deref() {
                Some(k) if k.starts_with("a.") => assert!(list.is_none() && *fanout == Some(40)),
                Some("b") => assert_eq!(list.as_deref(), Some(&["only-b".to_string()][..])),
                Some(_) => assert!(list.as_ref().is_some_and(|l| l.is_empty()) && *fanout == Some(0)),
                None => assert!(list.is_none() && fanout.is_none()),
            }
        }
        // A 'b' row is 9 + 4 + 6 bytes: several rows fit the limit, never all of them.
        assert!(sizes.iter().all(|&size| size <= ROW_BYTES * 10));

        // A single row over max_bytes still goes out, alone.
        let limits = RouteLimits {
            max_rows: None,
            max_fanout: None,
            max_bytes: Some(1),
        };
        let RoutedAll { lists, sizes, .. } = route_all(&matcher, &array, limits);
        assert_eq!(lists, expected(&matcher, &keys));
        assert_eq!(sizes.len(), keys.len());
    }

    #[test]
    fn route_batch_limits_rows_before_work() {
        let matcher = FrozenMatcher::build([("#", "s")]).unwrap();
        let keys = StringArray::from(vec!["a", "b", "c"]);
        let limits = RouteLimits {
            max_rows: Some(2),
            ..RouteLimits::default()
        };
        assert_eq!(
            route_batch(&matcher, &keys, limits).unwrap_err(),
            NativeError::BatchTooLarge { rows: 3, limit: 2 }
        );
        let empty = route_batch(&matcher, &StringArray::from(Vec::<&str>::new()), RouteLimits::default()).unwrap();
        assert_eq!(
            (empty.subscribers.len(), empty.fanout.len(), empty.bytes),
            (0, 0, BASE_BYTES)
        );
    }
}
