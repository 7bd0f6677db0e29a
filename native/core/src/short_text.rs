//! Short texts compared and copied inline.
//!
//! # Why
//!
//! Bulk loads and freezes handle millions of words, patterns and subscriber
//! ids of a few to a few dozen bytes. `==` on them and `push_str` of them each
//! make a call to libc's `memcmp` or `memcpy`, whose fixed cost is most of
//! the work at these lengths: perf put 4-5% of a wide 1M bulk load in
//! `__memmove` (its copy into group order pushes two million texts; inline,
//! the load took 2-3% less). A 1M freeze had 9% there, but most of that was
//! its texts missing the cache (read in sorted order), which the freeze now
//! prefetches: inline copies and prefetches together took it 3-5% less.
//!
//! # How
//!
//! A text of `WIDTH..=2 * WIDTH` bytes is covered by its first and its last
//! `WIDTH` bytes (they overlap when it is shorter than `2 * WIDTH`). Two
//! fixed-size reads of each side compare it; two fixed-size writes copy it.
//! Fixed sizes compile to plain moves, with no call and no loop. Texts longer
//! than 64 bytes, and copies into a buffer without room, take the library
//! path.

/// `left == right`; texts of up to 64 bytes compared inline.
#[inline]
pub(crate) fn same_text(left: &str, right: &str) -> bool {
    let (left, right) = (left.as_bytes(), right.as_bytes());
    left.len() == right.len()
        && match left.len() {
            // The first, middle and last bytes are every byte.
            1..=3 => {
                let len = left.len();
                [left[0], left[len / 2], left[len - 1]] == [right[0], right[len / 2], right[len - 1]]
            }
            4..=7 => ends_equal::<4>(left, right),
            8..=15 => ends_equal::<8>(left, right),
            16..=31 => ends_equal::<16>(left, right),
            32..=64 => ends_equal::<32>(left, right),
            _ => left == right,
        }
}

/// Whether two texts of one length in `WIDTH..=2 * WIDTH` have equal first
/// and equal last `WIDTH` bytes (which together cover them).
#[inline(always)]
fn ends_equal<const WIDTH: usize>(left: &[u8], right: &[u8]) -> bool {
    let len = left.len();
    let ends = |bytes: &[u8]| -> ([u8; WIDTH], [u8; WIDTH]) {
        (
            bytes[..WIDTH].try_into().expect("len >= WIDTH"),
            bytes[len - WIDTH..].try_into().expect("len >= WIDTH"),
        )
    };
    ends(left) == ends(right)
}

/// `text.push_str(piece)`; a piece of 4 to 64 bytes is moved inline when
/// `text` already has room for it (a buffer sized up front).
#[inline]
pub(crate) fn append(text: &mut String, piece: &str) {
    let bytes = piece.as_bytes();
    let room = text.capacity() - text.len();
    match bytes.len() {
        len @ 4..=7 if len <= room => append_ends::<4>(text, bytes),
        len @ 8..=15 if len <= room => append_ends::<8>(text, bytes),
        len @ 16..=31 if len <= room => append_ends::<16>(text, bytes),
        len @ 32..=64 if len <= room => append_ends::<32>(text, bytes),
        _ => text.push_str(piece),
    }
}

/// Append `bytes` (a whole `str`, of `WIDTH..=2 * WIDTH` bytes, that fits in
/// `text`'s spare capacity) as its first and its last `WIDTH` bytes.
#[inline(always)]
fn append_ends<const WIDTH: usize>(text: &mut String, bytes: &[u8]) {
    let len = bytes.len();
    assert!((WIDTH..=2 * WIDTH).contains(&len) && len <= text.capacity() - text.len());
    let head: [u8; WIDTH] = bytes[..WIDTH].try_into().expect("len >= WIDTH");
    let tail: [u8; WIDTH] = bytes[len - WIDTH..].try_into().expect("len >= WIDTH");
    let start = text.len();
    // SAFETY: the assert above puts [start, start + len) inside `text`'s allocation (its spare capacity,
    // which nothing else reads or owns). `head` lands on [start, start + WIDTH) and `tail` on
    // [start + len - WIDTH, start + len): both inside that range (WIDTH <= len), and together they cover
    // it (len <= 2 * WIDTH); where they overlap they write the same bytes of `bytes`. So after them
    // [start, start + len) holds exactly `bytes`, a whole `str` (UTF-8), and setting the length to
    // `start + len` keeps `text` initialized and valid UTF-8 up to its length.
    unsafe {
        let vec = text.as_mut_vec();
        let to = vec.as_mut_ptr().add(start);
        to.cast::<[u8; WIDTH]>().write_unaligned(head);
        to.add(len - WIDTH).cast::<[u8; WIDTH]>().write_unaligned(tail);
        vec.set_len(start + len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Texts of every length up to 80 bytes, and each with one byte changed at every position.
    fn texts_of_every_length() -> Vec<(String, Vec<String>)> {
        (0..=80)
            .map(|len| {
                let text: String = (0..len).map(|at| (b'a' + (at * 7 % 26) as u8) as char).collect();
                let changed = (0..len)
                    .map(|at| {
                        let mut bytes = text.clone().into_bytes();
                        bytes[at] = b'.';
                        String::from_utf8(bytes).expect("ASCII")
                    })
                    .collect();
                (text, changed)
            })
            .collect()
    }

    #[test]
    fn same_text_agrees_with_equality_at_every_length_and_position() {
        let texts = texts_of_every_length();
        for (text, changed) in &texts {
            assert!(same_text(text, &text.clone()), "{text:?}");
            for other in changed {
                assert!(!same_text(text, other), "{text:?} vs {other:?}");
                assert!(!same_text(other, text), "{other:?} vs {text:?}");
            }
            // Different lengths (one a prefix of the other) differ too.
            for (shorter, _) in &texts[..text.len()] {
                assert!(!same_text(text, shorter) && !same_text(shorter, text));
            }
        }
        // Multi-byte characters: compared as bytes, like `==`.
        assert!(same_text("é.ü.ß.部署", "é.ü.ß.部署"));
        assert!(!same_text("é.ü.ß.部署", "é.ü.ß.部屋"));
    }

    #[test]
    fn append_writes_exactly_the_piece_with_or_without_room() {
        let texts = texts_of_every_length();
        let pieces: Vec<&str> = texts
            .iter()
            .map(|(text, _)| text.as_str())
            .chain(["é.ü.ß.部署.∑x"])
            .collect();
        let expected: String = pieces.concat();
        // Room for everything (the copy into group order), and no room at all (every piece pushed).
        for room in [expected.len(), 0] {
            let mut text = String::with_capacity(room);
            let mut ends = Vec::new();
            for piece in &pieces {
                append(&mut text, piece);
                ends.push(text.len());
            }
            assert_eq!(text, expected);
            let mut start = 0;
            for (piece, end) in pieces.iter().zip(ends) {
                assert_eq!(&text[start..end], *piece);
                start = end;
            }
        }
    }
}
