//! The topic grammar shared by every native structure (AMQP 0-9-1 topic exchange).
//!
//! A routing key or pattern is split on every `.`: the empty text has zero
//! words, and empty words are real words (`".x"` is `["", "x"]`). In a
//! pattern, a word that is exactly `*` matches one word and a word that is
//! exactly `#` matches zero or more; glued to other characters they are
//! literals. Matching is on the exact UTF-8 text.

/// The word separator.
pub const SEPARATOR: char = '.';
/// The single-word wildcard, when it is a whole word.
pub const STAR: &str = "*";
/// The zero-or-more-words wildcard, when it is a whole word.
pub const HASH: &str = "#";

/// Split a key or pattern into words: `""` has none, `"a..b"` has three.
pub fn split_words(text: &str) -> Vec<&str> {
    if text.is_empty() {
        Vec::new()
    } else {
        text.split(SEPARATOR).collect()
    }
}

/// One word of a pattern, with the wildcards named rather than compared as text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatternWord<'a> {
    Literal(&'a str),
    Star,
    Hash,
}

impl<'a> PatternWord<'a> {
    pub fn parse(word: &'a str) -> Self {
        match word {
            STAR => PatternWord::Star,
            HASH => PatternWord::Hash,
            literal => PatternWord::Literal(literal),
        }
    }

    /// The word as written in a pattern.
    pub fn text(self) -> &'a str {
        match self {
            PatternWord::Literal(literal) => literal,
            PatternWord::Star => STAR,
            PatternWord::Hash => HASH,
        }
    }
}

/// Parse a pattern into its words.
pub fn pattern_words(pattern: &str) -> Vec<PatternWord<'_>> {
    split_words(pattern).into_iter().map(PatternWord::parse).collect()
}

/// Reference check in O(pattern words x key words): dynamic programming over
/// positions, so many `#` words never backtrack exponentially. Used by tests
/// and fuzz targets as the in-crate oracle.
pub fn words_match(pattern: &[PatternWord<'_>], key: &[&str]) -> bool {
    let n = key.len();
    let mut reachable = vec![false; n + 1];
    reachable[0] = true;
    for word in pattern {
        match word {
            PatternWord::Hash => {
                let mut seen = false;
                for slot in reachable.iter_mut() {
                    seen |= *slot;
                    *slot = seen;
                }
            }
            PatternWord::Star => {
                for j in (1..=n).rev() {
                    reachable[j] = reachable[j - 1];
                }
                reachable[0] = false;
            }
            PatternWord::Literal(literal) => {
                for j in (1..=n).rev() {
                    reachable[j] = reachable[j - 1] && key[j - 1] == *literal;
                }
                reachable[0] = false;
            }
        }
        if !reachable.iter().any(|&r| r) {
            return false;
        }
    }
    reachable[n]
}

/// Whether `pattern` matches routing `key`.
pub fn matches(pattern: &str, key: &str) -> bool {
    words_match(&pattern_words(pattern), &split_words(key))
}

/// (pattern, key, matches): the validity table every native matcher's tests
/// run. One file for pytest and Rust, `tests/validity.tsv` (its format is
/// stated at its top): a line with exactly two TABs is a case.
#[cfg(test)]
pub(crate) fn validity() -> &'static [(&'static str, &'static str, bool)] {
    static CASES: std::sync::LazyLock<Vec<(&'static str, &'static str, bool)>> = std::sync::LazyLock::new(|| {
        let cases: Vec<_> = include_str!("../../../tests/validity.tsv")
            .split('\n')
            .enumerate()
            .filter(|(_, line)| line.contains('\t'))
            .map(|(number, line)| match line.split('\t').collect::<Vec<_>>()[..] {
                [pattern, key, "true"] => (pattern, key, true),
                [pattern, key, "false"] => (pattern, key, false),
                _ => panic!(
                    "tests/validity.tsv:{}: not 'pattern<TAB>key<TAB>true|false': {line:?}",
                    number + 1
                ),
            })
            .collect();
        assert!(!cases.is_empty(), "tests/validity.tsv has no cases");
        cases
    });
    &CASES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitting() {
        assert!(split_words("").is_empty());
        assert_eq!(split_words(".x"), vec!["", "x"]);
        assert_eq!(split_words("a..b").len(), 3);
    }

    #[test]
    fn validity_table() {
        for &(pattern, key, expected) in validity() {
            assert_eq!(matches(pattern, key), expected, "{pattern:?} vs {key:?}");
        }
    }

    #[test]
    fn many_hashes_are_polynomial() {
        let pattern = vec![PatternWord::Hash; 15];
        let mut pattern = pattern;
        pattern.push(PatternWord::Literal("x"));
        let key = vec!["a"; 31];
        assert!(!words_match(&pattern, &key));
    }
}
