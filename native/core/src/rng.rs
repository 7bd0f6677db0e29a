//! The one seeded random generator of the tests, fuzz smoke runs and the
//! workload benchmark (SplitMix64): tiny, deterministic, so a failure
//! reproduces from its seed and the crate needs no `rand` dependency.
//! Not part of the matcher; public only so integration tests and
//! `src/bin` can share it.

/// SplitMix64. Any seed works (0 included).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform-ish in `0..bound` (`bound > 0`; the modulo bias is irrelevant here).
    pub fn below(&mut self, bound: usize) -> usize {
        (self.next_u64() % bound as u64) as usize
    }

    /// A non-negative int63, like Go's `rand.Int()` on 64-bit platforms.
    pub fn int63(&mut self) -> u64 {
        self.next_u64() >> 1
    }

    /// Up to `max_words` words drawn from `alphabet`, joined with dots.
    pub fn text(&mut self, alphabet: &[&str], max_words: usize) -> String {
        let count = self.below(max_words + 1);
        (0..count)
            .map(|_| alphabet[self.below(alphabet.len())])
            .collect::<Vec<_>>()
            .join(".")
    }

    /// A pattern (with `*` and `#` when `wildcards`) or key of up to five
    /// words over a tiny alphabet (empty and glued-wildcard words included),
    /// so that collisions and wildcard interplay are frequent.
    pub fn topic(&mut self, wildcards: bool) -> String {
        const WORDS: &[&str] = &["a", "b", "", "a*", "x#"];
        let count = self.below(6);
        let mut words = Vec::new();
        for _ in 0..count {
            let roll = self.below(10);
            words.push(match roll {
                0 | 1 if wildcards => "*",
                2 | 3 if wildcards => "#",
                _ => WORDS[self.below(WORDS.len())],
            });
        }
        words.join(".")
    }
}
