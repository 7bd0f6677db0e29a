//! Bulk loads from Arrow: (pattern, subscriber) pairs given as two
//! row-aligned string columns (`string`, `large_string` or `string_view`),
//! applied to a [`CsTrie`] or built into a [`FrozenMatcher`] with no
//! per-row work outside Rust.
//!
//! # Validate everything, then apply
//!
//! Every bulk operation runs in two passes:
//!
//! 1. **Validation** checks every row and applies nothing. A row is bad when
//!    its pattern or subscriber is null, its subscriber is empty (the grammar
//!    of [`crate::topic`] and `routing/topic.py`: any UTF-8 text is a
//!    pattern, a subscriber is non-empty UTF-8; the Arrow buffers themselves
//!    are fully validated, UTF-8 included, by [`checked_column`] before a
//!    value is read), or, when [`RowLimits`] are given, it breaks one of
//!    them (the same checks and reason codes as `routing.validation`). Any
//!    bad row fails the whole call with [`NativeError::BadRows`]: every bad
//!    row's index, reason code and detail, and nothing applied. Without
//!    limits, columns whose Arrow null counts are 0 and whose subscriber
//!    offsets (or views) show no empty value have no bad row, so that case
//!    is decided without reading the rows one by one.
//! 2. **Application**, only if every row passed. Subscribes go through
//!    [`CsTrie::subscribe_many`] (pairs grouped by word, one GCAS per C-node
//!    they touch); unsubscribes are applied one row at a time, in order.
//!
//! # What is atomic
//!
//! A bulk call is *all-or-nothing with respect to bad input*: either every
//! row is valid and every row is applied, or the call fails before touching
//! the trie. It is **not one linearizable step**: each pair is published by
//! its own GCAS (linearizable on its own), so a concurrent lookup or snapshot
//! can observe some of the call's pairs and not others, and concurrent
//! writers interleave with them. Once the
//! call returns, every row has been applied. Readers that need one
//! consistent state take a [`CsTrie::snapshot`] after the call returns (the
//! driver does: its trie has a single writer). A frozen matcher built by
//! [`freeze_pairs`] is a new value, so it is trivially atomic.
//!
//! Duplicate rows are harmless: subscribe and unsubscribe are idempotent,
//! and the returned counts are of pairs that actually changed.

use arrow_array::cast::AsArray;
use arrow_array::{make_array, Array, ArrayRef};
use arrow_data::ArrayData;
use arrow_schema::DataType;

use crate::cstrie::CsTrie;
use crate::errors::{NativeError, RowError};
use crate::frozen::FrozenMatcher;
use crate::layered::DeltaBuilder;
use crate::topic::{HASH, SEPARATOR};

/// Which argument a column is (for error messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    Patterns,
    Subscribers,
}

impl Column {
    pub fn name(self) -> &'static str {
        match self {
            Column::Patterns => "patterns",
            Column::Subscribers => "subscribers",
        }
    }
}

/// The policy limits a row may be checked against (all of them or none;
/// `routing.limits.Limits` has the same names and meaning).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RowLimits {
    pub max_pattern_bytes: usize,
    pub max_pattern_words: usize,
    pub max_hash_words: usize,
    pub max_subscriber_bytes: usize,
}

/// Reason codes of a bad row: those of `routing/grammar.py` (`tests/test_grammar.py` checks them).
pub mod reason {
    pub const NULL_PATTERN: &str = "null_pattern";
    pub const NULL_SUBSCRIBER: &str = "null_subscriber";
    pub const INVALID_SUBSCRIBER: &str = "invalid_subscriber";
    pub const PATTERN_TOO_LONG: &str = "pattern_too_long";
    pub const PATTERN_TOO_MANY_WORDS: &str = "pattern_too_many_words";
    pub const TOO_MANY_HASH_WORDS: &str = "too_many_hash_words";
}

/// A fully validated Arrow array from foreign (FFI-imported) buffers.
///
/// `data` may come from `from_pyarrow_bound_unchecked`; this is the one
/// place it is validated (`validate_full`: offsets, views and UTF-8) before
/// anything reads a value, so every later typed access is sound and in bounds.
pub fn checked_column(data: ArrayData, column: Column) -> Result<ArrayRef, NativeError> {
    data.validate_full().map_err(|error| NativeError::MalformedColumn {
        column: column.name(),
        reason: error.to_string(),
    })?;
    Ok(make_array(data))
}

/// A string column of any of the three Arrow string layouts.
#[derive(Clone, Copy)]
enum Strings<'a> {
    Utf8(&'a arrow_array::StringArray),
    Large(&'a arrow_array::LargeStringArray),
    View(&'a arrow_array::StringViewArray),
}

impl<'a> Strings<'a> {
    fn new(array: &'a dyn Array, column: Column) -> Result<Self, NativeError> {
        match array.data_type() {
            DataType::Utf8 => Ok(Strings::Utf8(array.as_string::<i32>())),
            DataType::LargeUtf8 => Ok(Strings::Large(array.as_string::<i64>())),
            DataType::Utf8View => Ok(Strings::View(array.as_string_view())),
            other => Err(NativeError::ColumnType {
                column: column.name(),
                found: other.to_string(),
            }),
        }
    }

    fn len(&self) -> usize {
        match self {
            Strings::Utf8(array) => array.len(),
            Strings::Large(array) => array.len(),
            Strings::View(array) => array.len(),
        }
    }

    /// Row `row` (< `len()`) of a column validated to hold no null: its
    /// text, without the null-bitmap check of [`Strings::get`].
    fn value(&self, row: usize) -> &'a str {
        match self {
            Strings::Utf8(array) => array.value(row),
            Strings::Large(array) => array.value(row),
            Strings::View(array) => array.value(row),
        }
    }

    fn null_count(&self) -> usize {
        match self {
            Strings::Utf8(array) => array.null_count(),
            Strings::Large(array) => array.null_count(),
            Strings::View(array) => array.null_count(),
        }
    }

    /// Whether any row (null or not) is the empty string, from the offsets or
    /// views alone (a view's low 32 bits are its length): no text is read.
    fn any_empty(&self) -> bool {
        match self {
            Strings::Utf8(array) => array.offsets().windows(2).any(|pair| pair[0] == pair[1]),
            Strings::Large(array) => array.offsets().windows(2).any(|pair| pair[0] == pair[1]),
            Strings::View(array) => array.views().iter().any(|&view| view as u32 == 0),
        }
    }

    /// Row `row` (< `len()`), `None` when null.
    fn get(&self, row: usize) -> Option<&'a str> {
        match self {
            Strings::Utf8(array) => array.is_valid(row).then(|| array.value(row)),
            Strings::Large(array) => array.is_valid(row).then(|| array.value(row)),
            Strings::View(array) => array.is_valid(row).then(|| array.value(row)),
        }
    }
}

/// Two validated, row-aligned columns in which every row is a good pair.
pub struct Pairs<'a> {
    patterns: Strings<'a>,
    subscribers: Strings<'a>,
}

impl<'a> Pairs<'a> {
    pub fn len(&self) -> usize {
        self.patterns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every pair, in row order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&'a str, &'a str)> + Clone + '_ {
        // Validation proved every row non-null, so no row is skipped.
        (0..self.len()).map(|row| (self.patterns.value(row), self.subscribers.value(row)))
    }
}

/// `Some((reason, "<what> (limit <name>=<limit>, got <got>)"))` when `got` is over `limit`.
fn over_limit(
    got: usize,
    limit: usize,
    reason: &'static str,
    what: &str,
    name: &str,
) -> Option<(&'static str, String)> {
    (got > limit).then(|| (reason, format!("{what} (limit {name}={limit}, got {got})")))
}

/// How many words `pattern` has and how many of them are `#`, as
/// `split_words` would split it, without collecting them: a vector per row
/// made a million-row call with limits take 1.4-1.6x as long as one without.
fn word_counts(pattern: &str) -> (usize, usize) {
    if pattern.is_empty() {
        return (0, 0);
    }
    pattern.split(SEPARATOR).fold((0, 0), |(words, hashes), word| {
        (words + 1, hashes + usize::from(word == HASH))
    })
}

/// Why one row is bad, or `None` when it is good.
fn check_row(
    pattern: Option<&str>,
    subscriber: Option<&str>,
    limits: Option<&RowLimits>,
) -> Option<(&'static str, String)> {
    let Some(pattern) = pattern else {
        return Some((reason::NULL_PATTERN, "pattern is null".to_string()));
    };
    if let Some(limits) = limits {
        let too_long = over_limit(
            pattern.len(),
            limits.max_pattern_bytes,
            reason::PATTERN_TOO_LONG,
            "pattern is too long",
            "max_pattern_bytes",
        );
        if too_long.is_some() {
            return too_long; // before splitting: a hostile pattern is not split at all
        }
        let (words, hashes) = word_counts(pattern);
        let too_many = over_limit(
            words,
            limits.max_pattern_words,
            reason::PATTERN_TOO_MANY_WORDS,
            "pattern has too many words",
            "max_pattern_words",
        );
        if too_many.is_some() {
            return too_many;
        }
        let too_many_hashes = over_limit(
            hashes,
            limits.max_hash_words,
            reason::TOO_MANY_HASH_WORDS,
            "pattern has too many '#' words",
            "max_hash_words",
        );
        if too_many_hashes.is_some() {
            return too_many_hashes;
        }
    }
    let Some(subscriber) = subscriber else {
        return Some((reason::NULL_SUBSCRIBER, "subscriber is null".to_string()));
    };
    if subscriber.is_empty() {
        return Some((
            reason::INVALID_SUBSCRIBER,
            "subscriber id must not be empty".to_string(),
        ));
    }
    limits.and_then(|limits| {
        over_limit(
            subscriber.len(),
            limits.max_subscriber_bytes,
            reason::INVALID_SUBSCRIBER,
            "subscriber id is too long",
            "max_subscriber_bytes",
        )
    })
}

/// Pass 1: check the column types and lengths and every row; apply nothing.
pub fn validate<'a>(
    patterns: &'a dyn Array,
    subscribers: &'a dyn Array,
    limits: Option<&RowLimits>,
) -> Result<Pairs<'a>, NativeError> {
    let patterns = Strings::new(patterns, Column::Patterns)?;
    let subscribers = Strings::new(subscribers, Column::Subscribers)?;
    if patterns.len() != subscribers.len() {
        return Err(NativeError::LengthMismatch {
            patterns: patterns.len(),
            subscribers: subscribers.len(),
        });
    }
    // Without limits a row can only be bad by a null or an empty subscriber; when the columns have no
    // nulls (Arrow counts them) and no empty subscriber, no row is, and the per-row pass (a tenth of a
    // million-pair load) is skipped. Otherwise it runs and reports every bad row.
    if limits.is_none() && patterns.null_count() == 0 && subscribers.null_count() == 0 && !subscribers.any_empty() {
        return Ok(Pairs { patterns, subscribers });
    }
    let errors: Vec<RowError> = (0..patterns.len())
        .filter_map(|row| {
            check_row(patterns.get(row), subscribers.get(row), limits).map(|(reason, detail)| RowError {
                row,
                reason,
                detail,
            })
        })
        .collect();
    if !errors.is_empty() {
        return Err(NativeError::BadRows {
            rows: patterns.len(),
            errors,
        });
    }
    Ok(Pairs { patterns, subscribers })
}

/// Subscribe every pair (see the module docs for what is atomic); returns
/// how many pairs were new.
pub fn subscribe_many(
    trie: &CsTrie,
    patterns: &dyn Array,
    subscribers: &dyn Array,
    limits: Option<&RowLimits>,
) -> Result<usize, NativeError> {
    let pairs = validate(patterns, subscribers, limits)?;
    // Grouped by word, one GCAS per C-node touched (`CsTrie::subscribe_many`), which reads the pairs two or
    // three times: for the common layout (two `pa.string()` columns) through an iterator of its own, not one
    // that picks the layout of both columns at every row.
    Ok(match (pairs.patterns, pairs.subscribers) {
        (Strings::Utf8(patterns), Strings::Utf8(subscribers)) => {
            trie.subscribe_many((0..pairs.len()).map(|row| (patterns.value(row), subscribers.value(row))))
        }
        _ => trie.subscribe_many(pairs.iter()),
    })
}

/// Unsubscribe every pair (see the module docs for what is atomic); returns
/// how many pairs were present.
pub fn unsubscribe_many(
    trie: &CsTrie,
    patterns: &dyn Array,
    subscribers: &dyn Array,
    limits: Option<&RowLimits>,
) -> Result<usize, NativeError> {
    let pairs = validate(patterns, subscribers, limits)?;
    Ok(pairs
        .iter()
        .filter(|&(pattern, subscriber)| trie.unsubscribe(pattern, subscriber))
        .count())
}

/// Record every pair as subscribed (`active`) or not as of table `version`, in a delta's builder
/// (every row validated first, as for the trie); returns how many rows were recorded.
pub fn record_changes(
    delta: &mut DeltaBuilder,
    patterns: &dyn Array,
    subscribers: &dyn Array,
    limits: Option<&RowLimits>,
    active: bool,
    version: u64,
) -> Result<usize, NativeError> {
    let pairs = validate(patterns, subscribers, limits)?;
    delta.record(pairs.iter(), active, version);
    Ok(pairs.len())
}

/// A frozen matcher of every pair, built straight from the columns (the
/// texts are borrowed from the Arrow buffers, never copied per row).
pub fn freeze_pairs(
    patterns: &dyn Array,
    subscribers: &dyn Array,
    limits: Option<&RowLimits>,
) -> Result<FrozenMatcher, NativeError> {
    let pairs = validate(patterns, subscribers, limits)?;
    Ok(FrozenMatcher::build(pairs.iter())?)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use arrow_array::{Int32Array, LargeStringArray, StringArray, StringViewArray};
    use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};

    use super::*;
    use crate::rng::Rng;
    use crate::topic::{matches, validity};

    fn utf8(values: &[Option<&str>]) -> ArrayRef {
        Arc::new(StringArray::from(values.to_vec()))
    }

    /// The same values in each of the three layouts.
    fn layouts(values: &[Option<&str>]) -> Vec<ArrayRef> {
        vec![
            utf8(values),
            Arc::new(LargeStringArray::from(values.to_vec())),
            Arc::new(StringViewArray::from(values.to_vec())),
        ]
    }

    fn pairs_of(trie: &CsTrie) -> BTreeSet<(String, String)> {
        trie.snapshot()
            .subscriptions()
            .into_iter()
            .map(|(p, s)| (p, s.to_string()))
            .collect()
    }

    const LIMITS: RowLimits = RowLimits {
        max_pattern_bytes: 10,
        max_pattern_words: 3,
        max_hash_words: 1,
        max_subscriber_bytes: 4,
    };

    #[test]
    fn every_layout_loads_and_matches_like_the_oracle() {
        let patterns: Vec<Option<&str>> = validity().iter().map(|&(p, _, _)| Some(p)).collect();
        let subscribers: Vec<String> = (0..patterns.len()).map(|i| format!("s{}", i % 7)).collect();
        let subscribers: Vec<Option<&str>> = subscribers.iter().map(|s| Some(s.as_str())).collect();
        for (p, s) in layouts(&patterns).iter().zip(layouts(&subscribers)) {
            let trie = CsTrie::new();
            let added = subscribe_many(&trie, p.as_ref(), s.as_ref(), None).unwrap();
            let expected: BTreeSet<(String, String)> = patterns
                .iter()
                .zip(&subscribers)
                .map(|(p, s)| (p.unwrap().to_string(), s.unwrap().to_string()))
                .collect();
            assert_eq!(added, expected.len());
            assert_eq!(pairs_of(&trie), expected);
            let frozen = freeze_pairs(p.as_ref(), s.as_ref(), None).unwrap();
            for &(_, key, _) in validity() {
                let want: BTreeSet<&str> = expected
                    .iter()
                    .filter(|(pattern, _)| matches(pattern, key))
                    .map(|(_, s)| s.as_str())
                    .collect();
                let got: BTreeSet<&str> = frozen.lookup(key).into_iter().collect();
                assert_eq!(got, want, "{key:?}");
                let live: BTreeSet<String> = trie.lookup(key).iter().map(|s| s.to_string()).collect();
                assert_eq!(live, want.iter().map(|s| s.to_string()).collect(), "{key:?}");
            }
        }
    }

    #[test]
    fn unsubscribe_many_counts_what_was_present() {
        let trie = CsTrie::new();
        let p = utf8(&[Some("a.#"), Some("b"), Some("a.#")]);
        let s = utf8(&[Some("x"), Some("y"), Some("z")]);
        assert_eq!(subscribe_many(&trie, p.as_ref(), s.as_ref(), None).unwrap(), 3);
        // Duplicates and absent pairs are no-ops.
        let p = utf8(&[Some("a.#"), Some("a.#"), Some("nope")]);
        let s = utf8(&[Some("x"), Some("x"), Some("x")]);
        assert_eq!(unsubscribe_many(&trie, p.as_ref(), s.as_ref(), None).unwrap(), 1);
        let left: BTreeSet<(String, String)> = [("a.#", "z"), ("b", "y")]
            .iter()
            .map(|&(p, s)| (p.to_string(), s.to_string()))
            .collect();
        assert_eq!(pairs_of(&trie), left);
    }

    #[test]
    fn bad_rows_are_all_reported_and_nothing_is_applied() {
        let trie = CsTrie::new();
        assert!(trie.subscribe("keep", "k"));
        let long = "a".repeat(11);
        let p = [
            Some("ok"),
            None,
            Some("ok"),
            Some(long.as_str()),
            Some("a.b.c.d"),
            Some("#.x.#"),
            Some("ok"),
            Some("ok"),
        ];
        let s = [
            Some("s"),
            Some("s"),
            None,
            Some("s"),
            Some("s"),
            Some("s"),
            Some(""),
            Some("toolong"),
        ];
        let expected = vec![
            (1, reason::NULL_PATTERN),
            (2, reason::NULL_SUBSCRIBER),
            (3, reason::PATTERN_TOO_LONG),
            (4, reason::PATTERN_TOO_MANY_WORDS),
            (5, reason::TOO_MANY_HASH_WORDS),
            (6, reason::INVALID_SUBSCRIBER),
            (7, reason::INVALID_SUBSCRIBER),
        ];
        for (pa, sa) in layouts(&p).iter().zip(layouts(&s)) {
            for op in [subscribe_many, unsubscribe_many] {
                match op(&trie, pa.as_ref(), sa.as_ref(), Some(&LIMITS)) {
                    Err(NativeError::BadRows { rows, errors }) => {
                        assert_eq!(rows, 8);
                        let got: Vec<(usize, &str)> = errors.iter().map(|e| (e.row, e.reason)).collect();
                        assert_eq!(got, expected);
                    }
                    other => panic!("expected BadRows, got {other:?}"),
                }
                assert_eq!(pairs_of(&trie).len(), 1, "nothing applied");
            }
            assert!(matches!(
                freeze_pairs(pa.as_ref(), sa.as_ref(), Some(&LIMITS)),
                Err(NativeError::BadRows { .. })
            ));
        }
        // Without limits only the grammar applies: nulls and the empty subscriber.
        let pa = utf8(&p);
        let sa = utf8(&s);
        match subscribe_many(&trie, pa.as_ref(), sa.as_ref(), None) {
            Err(NativeError::BadRows { errors, .. }) => {
                let rows: Vec<usize> = errors.iter().map(|e| e.row).collect();
                assert_eq!(rows, vec![1, 2, 6]);
            }
            other => panic!("expected BadRows, got {other:?}"),
        }
        assert_eq!(pairs_of(&trie).len(), 1);
    }

    /// Columns without nulls skip the per-row pass when no limits are given,
    /// so the empty subscriber must still be found (in every layout, and only
    /// within a slice's own rows).
    #[test]
    fn an_empty_subscriber_without_nulls_or_limits_is_still_reported() {
        let p = [Some("a"), Some("b"), Some("c"), Some("d")];
        let s = [Some("x"), Some("y"), Some(""), Some("z")];
        for (pa, sa) in layouts(&p).iter().zip(layouts(&s)) {
            assert_eq!((pa.null_count(), sa.null_count()), (0, 0));
            let trie = CsTrie::new();
            match subscribe_many(&trie, pa.as_ref(), sa.as_ref(), None) {
                Err(NativeError::BadRows { errors, .. }) => {
                    let got: Vec<(usize, &str)> = errors.iter().map(|e| (e.row, e.reason)).collect();
                    assert_eq!(got, vec![(2, reason::INVALID_SUBSCRIBER)], "{:?}", sa.data_type());
                }
                other => panic!("expected BadRows for {:?}, got {other:?}", sa.data_type()),
            }
            assert!(pairs_of(&trie).is_empty(), "nothing applied");
            // The empty row is outside both slices: each loads whole.
            for (offset, length) in [(0, 2), (3, 1)] {
                let (ps, ss) = (pa.slice(offset, length), sa.slice(offset, length));
                assert_eq!(subscribe_many(&trie, ps.as_ref(), ss.as_ref(), None), Ok(length));
            }
            assert_eq!(pairs_of(&trie).len(), 3);
            // A slice that holds it fails.
            let (ps, ss) = (pa.slice(1, 2), sa.slice(1, 2));
            assert!(matches!(
                subscribe_many(&trie, ps.as_ref(), ss.as_ref(), None),
                Err(NativeError::BadRows { .. })
            ));
        }
    }

    #[test]
    fn word_counts_agree_with_split_words() {
        for pattern in [
            "", ".", "..", "a", "a.b", "a..b", ".a", "a.", "#", "#.#", "a.#.b", "##", "a#", "#a.#", "*.#.*",
        ] {
            let words = crate::topic::split_words(pattern);
            let hashes = words.iter().filter(|&&word| word == HASH).count();
            assert_eq!(word_counts(pattern), (words.len(), hashes), "{pattern:?}");
        }
    }

    #[test]
    fn limits_are_inclusive() {
        let trie = CsTrie::new();
        let p = utf8(&[Some("#.bb.cccc")]); // 9 bytes, 3 words, 1 hash
        let s = utf8(&[Some("abcd")]);
        assert_eq!(subscribe_many(&trie, p.as_ref(), s.as_ref(), Some(&LIMITS)).unwrap(), 1);
    }

    #[test]
    fn column_errors() {
        let trie = CsTrie::new();
        let p = utf8(&[Some("a")]);
        let two = utf8(&[Some("s"), Some("t")]);
        assert!(matches!(
            subscribe_many(&trie, p.as_ref(), two.as_ref(), None),
            Err(NativeError::LengthMismatch {
                patterns: 1,
                subscribers: 2
            })
        ));
        let ints: ArrayRef = Arc::new(Int32Array::from(vec![1]));
        assert!(matches!(
            subscribe_many(&trie, p.as_ref(), ints.as_ref(), None),
            Err(NativeError::ColumnType {
                column: "subscribers",
                ..
            })
        ));
        // Invalid UTF-8 is caught by full validation, before any read.
        let offsets = OffsetBuffer::new(ScalarBuffer::from(vec![0i32, 2]));
        let data = ArrayData::builder(DataType::Utf8)
            .len(1)
            .add_buffer(offsets.into_inner().into_inner())
            .add_buffer(Buffer::from(&[0xffu8, 0xfe][..]));
        // SAFETY: deliberately unvalidated, exactly as an FFI import is; only
        // `checked_column` (which validates fully) ever sees it.
        let data = unsafe { data.build_unchecked() };
        assert!(matches!(
            checked_column(data, Column::Patterns),
            Err(NativeError::MalformedColumn { column: "patterns", .. })
        ));
        assert!(pairs_of(&trie).is_empty());
    }

    #[test]
    fn sliced_columns_and_random_pairs_agree_with_one_at_a_time() {
        let mut rng = Rng(0x5eed);
        let pats: Vec<String> = (0..500).map(|_| rng.topic(true)).collect();
        let subs: Vec<String> = (0..500).map(|_| format!("s{}", rng.below(20))).collect();
        let p: ArrayRef = Arc::new(StringArray::from(
            pats.iter().map(|s| Some(s.as_str())).collect::<Vec<_>>(),
        ));
        let s: ArrayRef = Arc::new(StringArray::from(
            subs.iter().map(|s| Some(s.as_str())).collect::<Vec<_>>(),
        ));
        let (p, s) = (p.slice(100, 300), s.slice(100, 300));
        let bulk = CsTrie::new();
        subscribe_many(&bulk, p.as_ref(), s.as_ref(), None).unwrap();
        let single = CsTrie::new();
        for i in 100..400 {
            single.subscribe(&pats[i], &subs[i]);
        }
        assert_eq!(pairs_of(&bulk), pairs_of(&single));
        let frozen = freeze_pairs(p.as_ref(), s.as_ref(), None).unwrap();
        let from_pairs: BTreeSet<(String, String)> = frozen
            .subscriptions()
            .into_iter()
            .map(|(p, s)| (p, s.to_string()))
            .collect();
        assert_eq!(from_pairs, pairs_of(&single));
    }
}
