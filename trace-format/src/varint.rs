//! LEB128 variable-length integers, the unit of the event encoding.

/// Bytes a `u64` takes at most.
pub const MAX_LEN: usize = 10;

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
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[inline]
pub fn unzigzag(v: u64) -> i64 {
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
            // A non-minimal encoding (trailing zero groups) would decode to the same value and
            // break bit-exact round trips; reject it.
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
    fn zigzag_is_an_involution() {
        for v in [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
    }
}
