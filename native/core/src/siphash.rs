//! SipHash (Aumasson and Bernstein), the keyed hash of the frozen format's in-file indices.
//!
//! The indices are read in place by whichever build maps the file, so their hash is part of the
//! format and must never change with a dependency's version: hence this fixed, specified function
//! rather than a hasher crate's (whose output may change between releases) or `std`'s `DefaultHasher`
//! (documented as unstable). SipHash-1-3 (one compression round, three finalization rounds) is what
//! Rust's standard hash maps use against HashDoS; [`sip24`] is the paper's SipHash-2-4, tested against
//! `std`'s own implementation to pin the shared code.
//!
//! Little-endian throughout: the message is read as little-endian 64-bit words, the last one padded
//! with zeros and the length (mod 256) in its top byte.

#[inline(always)]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13);
    v[1] ^= v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16);
    v[3] ^= v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21);
    v[3] ^= v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17);
    v[1] ^= v[2];
    v[2] = v[2].rotate_left(32);
}

#[inline(always)]
fn siphash<const C: usize, const D: usize>(key: [u64; 2], message: &[u8]) -> u64 {
    let mut v = [
        key[0] ^ 0x736f_6d65_7073_6575,
        key[1] ^ 0x646f_7261_6e64_6f6d,
        key[0] ^ 0x6c79_6765_6e65_7261,
        key[1] ^ 0x7465_6462_7974_6573,
    ];
    let mut chunks = message.chunks_exact(8);
    for chunk in &mut chunks {
        let m = u64::from_le_bytes(chunk.try_into().expect("chunks of 8"));
        v[3] ^= m;
        for _ in 0..C {
            round(&mut v);
        }
        v[0] ^= m;
    }
    let mut last = [0u8; 8];
    let tail = chunks.remainder();
    last[..tail.len()].copy_from_slice(tail);
    last[7] = message.len() as u8;
    let m = u64::from_le_bytes(last);
    v[3] ^= m;
    for _ in 0..C {
        round(&mut v);
    }
    v[0] ^= m;
    v[2] ^= 0xFF;
    for _ in 0..D {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// SipHash-1-3 of `message` under `key`: the format's hash.
pub fn sip13(key: [u64; 2], message: &[u8]) -> u64 {
    siphash::<1, 3>(key, message)
}

/// SipHash-2-4, the paper's variant (tests pin the shared code with it).
pub fn sip24(key: [u64; 2], message: &[u8]) -> u64 {
    siphash::<2, 4>(key, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::Hasher;

    #[test]
    fn sip24_matches_the_papers_vector_and_std() {
        // Appendix A of the paper: key 00..0f, message 00..0e.
        let key = [
            u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]),
            u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]),
        ];
        let message: Vec<u8> = (0..15).collect();
        assert_eq!(sip24(key, &message), 0xa129_ca61_49be_45e5);
        for length in 0..64 {
            let message: Vec<u8> = (0..length as u8).map(|b| b.wrapping_mul(37)).collect();
            #[allow(deprecated)]
            let mut std_hasher = std::hash::SipHasher::new_with_keys(key[0], key[1]);
            std_hasher.write(&message);
            assert_eq!(sip24(key, &message), std_hasher.finish(), "length {length}");
        }
    }

    #[test]
    fn sip13_depends_on_the_key_and_every_byte() {
        let a = sip13([1, 2], b"stock.nasdaq");
        assert_ne!(a, sip13([1, 3], b"stock.nasdaq"));
        assert_ne!(a, sip13([1, 2], b"stock.nasdaq\0"));
        assert_ne!(a, sip13([1, 2], b"stock.nasdaQ"));
        assert_eq!(a, sip13([1, 2], b"stock.nasdaq"));
    }
}
