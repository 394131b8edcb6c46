//! LEB128 variable-length integers, the unit of the event encoding.

/// Bytes a `u64` takes at most.
pub(crate) const MAX_LEN: usize = 10;

/// Appends `v` to `out`. `out` must have `MAX_LEN` bytes of spare capacity for the writer's
/// no-reallocation promise to hold; correctness does not depend on it.
#[inline]
pub fn put(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
pub(crate) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
pub(crate) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Why a varint could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VarintError {
    /// The input ended inside the number.
    Truncated,
    /// More than 64 bits.
    Overflow,
}

/// Reads a `u64` at `*pos`, advancing it.
#[inline]
pub fn get(buf: &[u8], pos: &mut usize) -> Result<u64, VarintError> {
    // Eight bytes at once when the buffer has them: a number of up to eight bytes (56 bits,
    // every delta-coded address of a process) is then read without a loop over its bytes.
    if let Some(bytes) = buf.get(*pos..*pos + 8) {
        let word = u64::from_le_bytes(bytes.try_into().expect("eight bytes"));
        let ends = !word & 0x8080_8080_8080_8080;
        if ends != 0 {
            let len = (ends.trailing_zeros() / 8 + 1) as usize;
            // A non-minimal encoding (a trailing zero group) would decode to the same value
            // and break bit-exact round trips; reject it.
            if len > 1 && (word >> (8 * (len - 1))) as u8 == 0 {
                return Err(VarintError::Overflow);
            }
            let bits = if len == 8 {
                word
            } else {
                word & ((1u64 << (8 * len)) - 1)
            };
            *pos += len;
            return Ok(gather_groups(bits));
        }
    }
    get_bytewise(buf, pos)
}

/// The number at the start of `word` (eight bytes, little-endian) and its length, when it ends
/// within them and is minimal; `None` otherwise (longer, or not minimal: [`get`] tells which).
#[inline(always)]
pub(crate) fn from_word(word: u64) -> Option<(u64, usize)> {
    if word & 0x80 == 0 {
        return Some((word & 0x7f, 1));
    }
    let ends = !word & 0x8080_8080_8080_8080;
    if ends == 0 {
        return None;
    }
    // The lowest set bit of `ends` is bit 7 of the last byte: the bits up to it are the
    // number's (bit 7 of the last byte is clear).
    let end = ends.trailing_zeros();
    let bits = word & (ends ^ (ends - 1));
    // A non-minimal encoding ends with a zero group.
    if bits >> (end - 7) == 0 {
        return None;
    }
    Some((gather_groups(bits), (end as usize + 1) / 8))
}

/// The 7-bit groups of up to eight varint bytes (little-endian in `word`, continuation bits
/// ignored) as one number: pairs of groups, then pairs of pairs, then the two halves.
#[inline]
fn gather_groups(word: u64) -> u64 {
    let x = word & 0x7f7f_7f7f_7f7f_7f7f;
    let x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
    let x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
    (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
}

/// The byte-by-byte reading: numbers near the end of the buffer, and those of nine or ten
/// bytes.
fn get_bytewise(buf: &[u8], pos: &mut usize) -> Result<u64, VarintError> {
    let Some(&first) = buf.get(*pos) else {
        return Err(VarintError::Truncated);
    };
    if first < 0x80 {
        *pos += 1;
        return Ok(first as u64);
    }
    let mut value = (first & 0x7f) as u64;
    let mut shift = 7;
    let mut i = *pos + 1;
    loop {
        let Some(&b) = buf.get(i) else {
            return Err(VarintError::Truncated);
        };
        i += 1;
        if shift == 63 && b > 1 {
            return Err(VarintError::Overflow);
        }
        value |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            // As above: no trailing zero group.
            if b == 0 {
                return Err(VarintError::Overflow);
            }
            *pos = i;
            return Ok(value);
        }
        shift += 7;
        if shift > 63 {
            return Err(VarintError::Overflow);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_edges() {
        for v in [0u64, 1, 127, 128, 255, 300, 1 << 32, u64::MAX - 1, u64::MAX] {
            let mut buf = Vec::new();
            put(&mut buf, v);
            let mut pos = 0;
            assert_eq!(get(&buf, &mut pos), Ok(v));
            assert_eq!(pos, buf.len());
        }
    }

    #[test]
    fn rejects_overlong_and_truncated() {
        let mut pos = 0;
        assert_eq!(get(&[0x80], &mut pos), Err(VarintError::Truncated));
        assert_eq!(get(&[0x80, 0x00], &mut 0), Err(VarintError::Overflow));
        assert_eq!(get(&[0xff; 11], &mut 0), Err(VarintError::Overflow));
        let mut max = vec![0xff; 9];
        max.push(0x02);
        assert_eq!(get(&max, &mut 0), Err(VarintError::Overflow));
    }

    #[test]
    fn the_word_at_a_time_path_reads_what_the_bytewise_one_reads() {
        // Every length, with bytes after the number (the word path) and without (bytewise),
        // and the non-minimal and truncated forms of each.
        let mut x: u64 = 0x243f_6a88_85a3_08d3;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let v = x >> (x % 64);
            let mut buf = Vec::new();
            put(&mut buf, v);
            let n = buf.len();
            buf.extend_from_slice(&[0xff; 9]);
            let mut pos = 0;
            assert_eq!(get(&buf, &mut pos), Ok(v));
            assert_eq!(pos, n);
            let mut pos = 0;
            assert_eq!(get_bytewise(&buf, &mut pos), Ok(v));
            assert_eq!(pos, n);
            if n < MAX_LEN {
                // The same number with a trailing zero group.
                let mut long = buf[..n].to_vec();
                long[n - 1] |= 0x80;
                long.push(0);
                long.extend_from_slice(&[0x55; 9]);
                assert_eq!(get(&long, &mut 0), Err(VarintError::Overflow), "{v:#x}");
                // Cut short: only the bytewise path can see the end.
                long.truncate(n);
                assert_eq!(get(&long, &mut 0), Err(VarintError::Truncated));
            }
        }
    }

    #[test]
    fn from_word_reads_what_get_reads_or_declines() {
        let mut x: u64 = 0x1319_8a2e_0370_7344;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Every length: clear the continuation bit of one byte (or none).
            let word = match x % 9 {
                8 => x | 0x8080_8080_8080_8080,
                n => (x | 0x8080_8080_8080_8080) & !(0x80 << (8 * n)),
            };
            let mut bytes = word.to_le_bytes().to_vec();
            bytes.extend_from_slice(&[0; 8]);
            let mut pos = 0;
            let got = get(&bytes, &mut pos);
            match from_word(word) {
                Some((v, len)) => assert_eq!((got, pos), (Ok(v), len), "{word:#x}"),
                // Declined: longer than eight bytes, or not minimal.
                None => assert!(x % 9 == 8 || got == Err(VarintError::Overflow), "{word:#x}"),
            }
        }
        assert_eq!(from_word(0x7f), Some((0x7f, 1)));
        assert_eq!(from_word(0x01_80), Some((0x80, 2)));
        assert_eq!(from_word(0x00_80), None);
        assert_eq!(from_word(0x00_80_80), None);
        assert_eq!(from_word(u64::MAX), None);
    }

    #[test]
    fn gather_groups_joins_the_groups_of_every_byte() {
        let mut x: u64 = 0x0bad_cafe_dead_beef;
        for i in 0..100_000u32 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // Every group value in every byte, over the runs, and all-ones and zeros.
            let word = match i {
                0 => u64::MAX,
                1 => 0,
                _ => x,
            };
            let want = (0..8).fold(0u64, |v, b| v | ((word >> (8 * b)) & 0x7f) << (7 * b));
            assert_eq!(gather_groups(word), want, "{word:#x}");
        }
    }

    #[test]
    fn zigzag_is_an_involution() {
        for v in [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }
}
