//! One line of RAPID's STD text format: `THREAD|OP(TARGET)|LOCATION`, where OP is `acq`,
//! `rel` (a lock), `r`, `w` (a variable), `fork`, `join` (a thread), `req` (a lock, requested
//! before a blocking `acq`: what deadlock tools add), or `begin`/`end` without a target (a
//! region: an atomic block, a transaction). RAPID splits the line at `|` into exactly three
//! fields and takes the target between the first `(` and the closing `)` that ends the field;
//! so does this parser, byte for byte: nothing is trimmed, and names may hold any byte but `|`
//! and the line end (they must be UTF-8).

/// What a line does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// `acq(L)`: lock `L` acquired.
    Acquire,
    /// `rel(L)`: lock `L` released.
    Release,
    /// `r(V)`: variable `V` read.
    Read,
    /// `w(V)`: variable `V` written.
    Write,
    /// `fork(T)`: thread `T` created.
    Fork,
    /// `join(T)`: thread `T` joined.
    Join,
    /// `begin`: an atomic region begins.
    Begin,
    /// `end`: the atomic region ends.
    End,
    /// `req(L)`: lock `L` requested (the thread may block).
    Request,
}

impl Op {
    /// The word STD writes.
    pub fn keyword(self) -> &'static str {
        match self {
            Op::Acquire => "acq",
            Op::Release => "rel",
            Op::Read => "r",
            Op::Write => "w",
            Op::Fork => "fork",
            Op::Join => "join",
            Op::Begin => "begin",
            Op::End => "end",
            Op::Request => "req",
        }
    }

    /// Whether the operation names a target in parentheses.
    pub fn has_target(self) -> bool {
        !matches!(self, Op::Begin | Op::End)
    }

    /// The operation a word names. By length and bytes (slice patterns), without a call to
    /// compare memory: this runs on every line.
    #[inline(always)]
    pub(super) fn from_keyword(word: &[u8]) -> Option<Op> {
        Some(match *word {
            [b'r'] => Op::Read,
            [b'w'] => Op::Write,
            [b'a', b'c', b'q'] => Op::Acquire,
            [b'r', b'e', b'l'] => Op::Release,
            [b'r', b'e', b'q'] => Op::Request,
            [b'e', b'n', b'd'] => Op::End,
            [b'f', b'o', b'r', b'k'] => Op::Fork,
            [b'j', b'o', b'i', b'n'] => Op::Join,
            [b'b', b'e', b'g', b'i', b'n'] => Op::Begin,
            _ => return None,
        })
    }
}

/// The fields of one line, borrowed from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Line<'a> {
    /// The thread's name.
    pub thread: &'a [u8],
    /// The operation.
    pub op: Op,
    /// Empty for `begin` and `end`.
    pub target: &'a [u8],
    /// The location's name.
    pub location: &'a [u8],
}

/// Why a line is not STD, and where: `column` counts bytes from 1.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// Where the line stops being STD.
    pub column: usize,
    /// What was expected there.
    pub message: String,
}

const SHAPE: &str = "an STD line is THREAD|OP(TARGET)|LOCATION";
const OPS: &str = "acq, rel, r, w, fork, join, req, begin or end";

fn error(column: usize, message: impl Into<String>) -> ParseError {
    ParseError {
        column,
        message: message.into(),
    }
}

/// The first `byte` in `s`: a plain loop, as the fields of a line are a few bytes long and
/// a vectorised search costs more to set up than it saves on them.
#[inline]
fn find(byte: u8, s: &[u8]) -> Option<usize> {
    s.iter().position(|&b| b == byte)
}

/// The high bit of each byte of `w` that equals `byte`, and of no other (the exact form of the
/// zero-byte test: no false hits next to a true one).
#[inline]
pub(super) fn bytes_equal(w: u64, byte: u8) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let x = w ^ (0x0101_0101_0101_0101 * byte as u64);
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// Bit `i` of the first mask is set when `block[i]` is `\n`, of the second when it is `|`:
/// what the one-scan reader looks for, 64 bytes at a time (SSE2 compares on x86-64, which
/// every x86-64 processor has; eight bytes at a time elsewhere).
#[inline(always)]
#[allow(unsafe_code)]
pub(super) fn newlines_and_bars(block: &[u8; 64]) -> (u64, u64) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{
            __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8,
        };
        // SAFETY: SSE2 is part of x86-64 (every such processor has it, and the compiler
        // assumes it); the four loads read bytes 0..16, .., 48..64 of the 64-byte array, and
        // `loadu` needs no alignment.
        unsafe {
            let p = block.as_ptr() as *const __m128i;
            let (nl, bar) = (_mm_set1_epi8(b'\n' as i8), _mm_set1_epi8(b'|' as i8));
            let (mut newlines, mut bars) = (0u64, 0u64);
            for k in 0..4 {
                let v = _mm_loadu_si128(p.add(k));
                let m = |b| _mm_movemask_epi8(_mm_cmpeq_epi8(v, b)) as u64 & 0xffff;
                newlines |= m(nl) << (16 * k);
                bars |= m(bar) << (16 * k);
            }
            (newlines, bars)
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        newlines_and_bars_by_words(block)
    }
}

/// The same, eight bytes at a time.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline(always)]
fn newlines_and_bars_by_words(block: &[u8; 64]) -> (u64, u64) {
    // The high bit of each matching byte, gathered into the low eight bits (each byte's bit
    // lands on its own bit of the top byte, with no carries).
    let gather = |m: u64| (m >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56;
    let (mut newlines, mut bars) = (0, 0);
    for k in 0..8 {
        let w = u64::from_le_bytes(block[8 * k..8 * k + 8].try_into().expect("eight bytes"));
        newlines |= gather(bytes_equal(w, b'\n')) << (8 * k);
        bars |= gather(bytes_equal(w, b'|')) << (8 * k);
    }
    (newlines, bars)
}

/// Parses one line (without its line end).
#[inline]
pub fn parse(line: &[u8]) -> Result<Line<'_>, ParseError> {
    // One scan for the two `|` and the `(` of the operation, eight bytes at a time; anything
    // unusual is left to the careful parse, which says what is wrong.
    let mut bars = [0usize; 2];
    let mut found = 0;
    let mut open = usize::MAX;
    let mut chunks = line.chunks_exact(8);
    let mut base = 0;
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("eight bytes"));
        let mut hits = bytes_equal(w, b'|') | bytes_equal(w, b'(');
        while hits != 0 {
            let i = base + (hits.trailing_zeros() / 8) as usize;
            hits &= hits - 1;
            if line[i] == b'|' {
                if found == 2 {
                    return parse_checked(line);
                }
                bars[found] = i;
                found += 1;
            } else if found == 1 && open == usize::MAX {
                open = i;
            }
        }
        base += 8;
    }
    for (i, &b) in chunks.remainder().iter().enumerate() {
        let i = base + i;
        if b == b'|' {
            if found == 2 {
                return parse_checked(line);
            }
            bars[found] = i;
            found += 1;
        } else if b == b'(' && found == 1 && open == usize::MAX {
            open = i;
        }
    }
    if found != 2 || bars[0] == 0 {
        return parse_checked(line);
    }
    let [bar1, bar2] = bars;
    let word = &line[bar1 + 1..open.min(bar2)];
    let Some(op) = Op::from_keyword(word) else {
        return parse_checked(line);
    };
    let target = if op.has_target() {
        if open > bar2 || open + 2 >= bar2 || line[bar2 - 1] != b')' {
            return parse_checked(line);
        }
        &line[open + 1..bar2 - 1]
    } else {
        if open < bar2 {
            return parse_checked(line);
        }
        &line[..0]
    };
    Ok(Line {
        thread: &line[..bar1],
        op,
        target,
        location: &line[bar2 + 1..],
    })
}

/// The same, field by field, with an error that says what is wrong and where.
#[cold]
fn parse_checked(line: &[u8]) -> Result<Line<'_>, ParseError> {
    let Some(bar1) = find(b'|', line) else {
        return Err(error(
            line.len() + 1,
            format!("no `|` after the thread: {SHAPE}"),
        ));
    };
    let thread = &line[..bar1];
    if thread.is_empty() {
        return Err(error(1, format!("the thread is empty: {SHAPE}")));
    }
    let rest = &line[bar1 + 1..];
    let Some(bar2) = find(b'|', rest) else {
        return Err(error(
            line.len() + 1,
            format!("no `|` before the location: {SHAPE}"),
        ));
    };
    let op_field = &rest[..bar2];
    let op_column = bar1 + 2;
    let location = &rest[bar2 + 1..];
    if let Some(extra) = find(b'|', location) {
        return Err(error(
            bar1 + bar2 + 3 + extra,
            format!("a fourth field: {SHAPE}"),
        ));
    }
    let (op, target) = parse_op(op_field, op_column)?;
    Ok(Line {
        thread,
        op,
        target,
        location,
    })
}

fn parse_op(field: &[u8], column: usize) -> Result<(Op, &[u8]), ParseError> {
    let open = find(b'(', field);
    let word = &field[..open.unwrap_or(field.len())];
    let Some(op) = Op::from_keyword(word) else {
        let shown = String::from_utf8_lossy(word);
        return Err(error(
            column,
            if word.is_empty() {
                format!("the operation is empty (expected {OPS})")
            } else {
                format!("unknown operation `{shown}` (expected {OPS})")
            },
        ));
    };
    match (op.has_target(), open) {
        (false, None) => Ok((op, &field[..0])),
        (false, Some(at)) => Err(error(
            column + at,
            format!("`{}` takes no target", op.keyword()),
        )),
        (true, None) => Err(error(
            column + field.len(),
            format!("`{0}` needs a target: {0}(NAME)", op.keyword()),
        )),
        (true, Some(at)) => {
            if field.last() != Some(&b')') || field.len() < at + 2 {
                return Err(error(
                    column + field.len(),
                    format!(
                        "`{}(` is not closed by a `)` ending the field",
                        op.keyword()
                    ),
                ));
            }
            let target = &field[at + 1..field.len() - 1];
            if target.is_empty() {
                return Err(error(
                    column + at + 1,
                    format!("the target of `{}` is empty", op.keyword()),
                ));
            }
            Ok((op, target))
        }
    }
}

/// Whether `bytes` (the start of a file) read as STD: its first line that is not blank parses
/// (a line cut by the end of `bytes` is not looked at unless it is the only one).
pub fn looks_like_std(bytes: &[u8]) -> bool {
    let mut lines = bytes.split(|&b| b == b'\n').peekable();
    while let Some(line) = lines.next() {
        let complete = lines.peek().is_some();
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            if complete {
                continue;
            }
            return false;
        }
        return parse(line).is_ok() && (complete || bytes.len() < 4096);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation() {
        let l = parse(b"T0|acq(L34)|120").unwrap();
        assert_eq!(
            (l.thread, l.op, l.target, l.location),
            (&b"T0"[..], Op::Acquire, &b"L34"[..], &b"120"[..])
        );
        for (text, op) in [
            ("rel(a)", Op::Release),
            ("r(V234.23[0])", Op::Read),
            ("w(x)", Op::Write),
            ("fork(T2)", Op::Fork),
            ("join(T2)", Op::Join),
            ("req(m)", Op::Request),
            ("begin", Op::Begin),
            ("end", Op::End),
        ] {
            let line = format!("T1|{text}|Foo.java:12");
            let l = parse(line.as_bytes()).unwrap();
            assert_eq!(l.op, op, "{line}");
            assert_eq!(l.location, b"Foo.java:12");
        }
        // As RAPID reads it: the target runs to the `)` that ends the field.
        assert_eq!(parse(b"T|acq(f()::m)|1").unwrap().target, b"f()::m");
        // Empty location: kept as it is.
        assert_eq!(parse(b"T|w(x)|").unwrap().location, b"");
    }

    #[test]
    fn errors_name_the_column() {
        let cases: &[(&[u8], usize, &str)] = &[
            (b"T0 acq(l) 1", 12, "no `|` after the thread"),
            (b"|acq(l)|1", 1, "the thread is empty"),
            (b"T0|acq(l)", 10, "no `|` before the location"),
            (b"T0|acq(l)|1|2", 12, "a fourth field"),
            (b"T0|lock(l)|1", 4, "unknown operation `lock`"),
            (b"T0||1", 4, "the operation is empty"),
            (b"T0|acq|1", 7, "`acq` needs a target"),
            (b"T0|acq(l|1", 9, "`acq(` is not closed"),
            (b"T0|acq(l|1|", 11, "a fourth field"),
            (b"T0|acq()|1", 8, "the target of `acq` is empty"),
            (b"T0|begin(x)|1", 9, "`begin` takes no target"),
        ];
        for &(line, column, message) in cases {
            let e = parse(line).unwrap_err();
            assert!(
                e.message.contains(message) && e.column == column,
                "{}: got column {} {:?}",
                String::from_utf8_lossy(line),
                e.column,
                e.message
            );
        }
    }

    #[test]
    fn the_fast_scan_agrees_with_the_careful_parse() {
        let lines: &[&[u8]] = &[
            b"T0|acq(L34)|120",
            b"a-long-thread-name|w(some.variable[12])|File.java:1234",
            b"T|acq(f()::m)|1",
            b"T|begin|12345678",
            b"T1|r(x)|",
            b"T1|r(x)|a|b",
            b"T1|r(x|a",
            b"T1|r()|1",
            b"T1|rr(x)|1",
            b"|r(x)|1",
            b"T1|end(x)|1",
            b"T1|w(x)y)|1",
            b"12345678|w(12345678)|12345678",
        ];
        for &l in lines {
            assert_eq!(parse(l), parse_checked(l), "{}", String::from_utf8_lossy(l));
        }
        for b in 0..=255u8 {
            let w = u64::from_le_bytes([b, b'|', b'(', 0x80, 0xfc, b'|' ^ 0x80, b'|' + 1, 0]);
            let want: u64 = (0..8)
                .filter(|&i| w.to_le_bytes()[i] == b'|')
                .map(|i| 0x80 << (8 * i))
                .sum();
            assert_eq!(bytes_equal(w, b'|'), want, "{b}");
        }
    }

    #[test]
    fn newline_and_bar_masks() {
        let mut block = [0u8; 64];
        for seed in 0..2000u32 {
            let mut x = seed.wrapping_mul(2_654_435_761) | 1;
            for b in block.iter_mut() {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                *b = [b'\n', b'|', b'(', b'a', 0x80 | b'|', 0xff, b'\n' + 1, 0][(x % 8) as usize];
            }
            let want = |byte: u8| {
                (0..64)
                    .filter(|&i| block[i] == byte)
                    .map(|i| 1u64 << i)
                    .sum::<u64>()
            };
            let want = (want(b'\n'), want(b'|'));
            assert_eq!(newlines_and_bars(&block), want, "{block:?}");
            assert_eq!(newlines_and_bars_by_words(&block), want, "{block:?}");
        }
    }

    #[test]
    fn sniffing() {
        assert!(looks_like_std(b"T0|fork(T1)|1\nT1|w(x)|2\n"));
        assert!(looks_like_std(b"\n\nT0|begin|1\n"));
        assert!(looks_like_std(b"T0|w(x)|1"));
        assert!(!looks_like_std(b"\x7fFSTRACE\x01\x00"));
        assert!(!looks_like_std(b"hello world\n"));
        assert!(!looks_like_std(b""));
    }
}
