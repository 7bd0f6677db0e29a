//! Matching a whole Arrow batch of routing keys at once (the `mapInArrow` hot
//! path): `string`, `large_string` or `string_view` keys in, one
//! `list<string>` of subscribers per row out, row-aligned, a null key giving a
//! null list.
//!
//! Kafka batches repeat keys heavily, so each distinct key is matched once: a
//! hash map from key text to its result, whose subscriber ids are then spread
//! back to every row holding that key. The map is not free (every key is
//! hashed and stored, with cache misses once it is large), so it must keep
//! earning its keep: after a first warm-up window of [`PROBE_ROWS`] keys, any
//! window in which fewer than half the keys were repeats switches it off and
//! the rest of the batch is matched row by row. The output is written straight into
//! Arrow buffers (offsets, validity, UTF-8 bytes), with no per-row allocation.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayAccessor, ListArray, StringArray};
use arrow_buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field};
use hashbrown::hash_map::Entry;
use hashbrown::HashMap;

use crate::errors::NativeError;
use crate::frozen::{FrozenMatcher, Scratch, NONE};

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

/// Match every key of `keys`. `max_rows`, when given, is enforced before any work.
pub fn match_batch(
    matcher: &FrozenMatcher,
    keys: &dyn Array,
    max_rows: Option<usize>,
) -> Result<(ListArray, BatchStats), NativeError> {
    if let Some(limit) = max_rows {
        if keys.len() > limit {
            return Err(NativeError::BatchTooLarge {
                rows: keys.len(),
                limit,
            });
        }
    }
    match keys.data_type() {
        DataType::Utf8 => match_keys(matcher, keys.as_string::<i32>()),
        DataType::LargeUtf8 => match_keys(matcher, keys.as_string::<i64>()),
        DataType::Utf8View => match_keys(matcher, keys.as_string_view()),
        other => Err(NativeError::UnsupportedArray(format!("an array of type {other}"))),
    }
}

/// The list type of every result: `list<item: string>`, as `pa.list_(pa.string())`.
pub fn result_type() -> DataType {
    DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)))
}

fn match_keys<'a, A>(matcher: &FrozenMatcher, keys: A) -> Result<(ListArray, BatchStats), NativeError>
where
    A: ArrayAccessor<Item = &'a str>,
{
    let rows = keys.len();
    let mut stats = BatchStats {
        rows,
        deduplicated: true,
        ..BatchStats::default()
    };
    let mut scratch = Scratch::default();
    // Per distinct key: its index in `result_ranges`.
    let mut distinct: HashMap<&'a str, u32> = HashMap::with_capacity(rows.min(PROBE_ROWS * 4));
    // Per result: its range in `result_ids`.
    let mut result_ranges: Vec<(u32, u32)> = Vec::new();
    let mut result_ids: Vec<u32> = Vec::new();
    let mut row_results: Vec<u32> = Vec::with_capacity(rows);
    let mut lookup = |key: &str, result_ranges: &mut Vec<(u32, u32)>| -> Result<u32, NativeError> {
        let ids = matcher.lookup_ids(key, &mut scratch);
        if result_ids.len() + ids.len() > i32::MAX as usize {
            return Err(NativeError::ResultTooLarge(format!("over {} matches", i32::MAX)));
        }
        let start = result_ids.len() as u32;
        result_ids.extend_from_slice(ids);
        result_ranges.push((start, ids.len() as u32));
        Ok((result_ranges.len() - 1) as u32)
    };
    // Repeated keys in the current window of PROBE_ROWS non-null keys.
    let mut window_repeats = 0usize;
    for row in 0..rows {
        if keys.is_null(row) {
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
                Entry::Vacant(slot) => *slot.insert(lookup(key, &mut result_ranges)?),
            }
        } else {
            lookup(key, &mut result_ranges)?
        };
        row_results.push(result);
        let seen = row + 1 - stats.null_rows;
        if stats.deduplicated && seen.is_multiple_of(PROBE_ROWS) {
            // The first window only warms the map; later ones must repeat at least half their keys.
            if seen > PROBE_ROWS && window_repeats * 2 < PROBE_ROWS {
                stats.deduplicated = false;
                distinct = HashMap::new();
            }
            window_repeats = 0;
        }
    }
    stats.lookups = result_ranges.len();
    let result_ids = &result_ids;

    // Sizes first, so each buffer is allocated once and overflow is an error.
    let mut list_items: usize = 0;
    let mut value_bytes: usize = 0;
    for &result in &row_results {
        if result != NONE {
            let (start, len) = result_ranges[result as usize];
            list_items += len as usize;
            value_bytes += result_ids[start as usize..(start + len) as usize]
                .iter()
                .map(|&id| matcher.subscriber(id).len())
                .sum::<usize>();
        }
    }
    if list_items > i32::MAX as usize || value_bytes > i32::MAX as usize {
        return Err(NativeError::ResultTooLarge(format!(
            "{list_items} subscribers / {value_bytes} bytes do not fit list<string> 32-bit offsets"
        )));
    }

    let mut list_offsets: Vec<i32> = Vec::with_capacity(rows + 1);
    let mut value_offsets: Vec<i32> = Vec::with_capacity(list_items + 1);
    let mut values: Vec<u8> = Vec::with_capacity(value_bytes);
    list_offsets.push(0);
    value_offsets.push(0);
    for &result in &row_results {
        if result != NONE {
            let (start, len) = result_ranges[result as usize];
            for &id in &result_ids[start as usize..(start + len) as usize] {
                values.extend_from_slice(matcher.subscriber(id).as_bytes());
                value_offsets.push(values.len() as i32);
            }
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
    let validity = (stats.null_rows > 0).then(|| NullBuffer::from_iter(row_results.iter().map(|&r| r != NONE)));
    let field = Arc::new(Field::new_list_field(DataType::Utf8, true));
    let list = ListArray::try_new(
        field,
        OffsetBuffer::new(ScalarBuffer::from(list_offsets)),
        Arc::new(strings),
        validity,
    )
    .map_err(|error| NativeError::ResultTooLarge(error.to_string()))?;
    Ok((list, stats))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frozen::tests::Rng;
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
}
