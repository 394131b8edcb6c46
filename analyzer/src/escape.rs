//! Text that came from a trace, a pack or the file system (thread names, symbols, member
//! names, paths, commands) is shown on a terminal: its control characters (C0, DEL, C1 —
//! `ESC` and `CSI` among them) are shown escaped (`\u{1b}`, as Rust's `escape_debug` writes
//! them) so that a hostile string cannot move the cursor, rewrite what is on the screen, set
//! the window title or answer back through the terminal. JSON and SARIF escape through serde
//! already; the text report, `stats`, `dump`, `graph` and every message of the command line go
//! through here.

use std::borrow::Cow;
use std::io::{self, Write};

/// `s` with every control character escaped, line ends and tabs included: one field on one
/// line.
pub fn controls(s: &str) -> Cow<'_, str> {
    escape(s, false)
}

/// `s` with every control character but the line end escaped: a message of several lines.
pub fn controls_keep_lines(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

fn escape(s: &str, keep_lines: bool) -> Cow<'_, str> {
    let shown_as_is = |c: char| !c.is_control() || (keep_lines && c == '\n');
    if s.chars().all(shown_as_is) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if shown_as_is(c) {
            out.push(c);
        } else {
            out.extend(c.escape_debug());
        }
    }
    Cow::Owned(out)
}

/// A writer that escapes the control characters of what goes through it, line ends and tabs
/// excepted (the report's own layout): wrapped around a whole text report, so that no field of
/// it can be missed. What goes through is UTF-8 (Rust strings); a C1 character is the two
/// bytes `C2 80`..`C2 9F`, which may arrive in two writes.
pub struct Escaping<W: Write> {
    inner: W,
    /// The last write ended with `C2`, the first byte of a character in U+0080..U+00BF.
    pending_c2: bool,
    buf: Vec<u8>,
}

impl<W: Write> Escaping<W> {
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            pending_c2: false,
            buf: Vec::new(),
        }
    }
}

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let plain = |b: u8| !matches!(b, 0..=0x08 | 0x0a..=0x1f | 0x7f | 0xc2) || b == b'\n';
        if !self.pending_c2 && bytes.iter().all(|&b| plain(b)) {
            self.inner.write_all(bytes)?;
            return Ok(bytes.len());
        }
        self.buf.clear();
        for &b in bytes {
            if std::mem::take(&mut self.pending_c2) {
                if (0x80..=0x9f).contains(&b) {
                    self.buf
                        .extend_from_slice(format!("\\u{{{b:x}}}").as_bytes());
                    continue;
                }
                self.buf.push(0xc2);
            }
            match b {
                0xc2 => self.pending_c2 = true,
                b if plain(b) => self.buf.push(b),
                b => self
                    .buf
                    .extend((b as char).escape_debug().to_string().as_bytes()),
            }
        }
        self.inner.write_all(&self.buf)?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(controls("plain é ü 日本"), "plain é ü 日本");
        assert_eq!(
            controls("a\u{1b}]0;pwned\u{7}b\u{9b}2Jc\u{7f}\n\t"),
            "a\\u{1b}]0;pwned\\u{7}b\\u{9b}2Jc\\u{7f}\\n\\t"
        );
        assert_eq!(controls_keep_lines("one\ntwo\u{1b}"), "one\ntwo\\u{1b}");
    }

    #[test]
    fn the_writer_escapes_as_the_function_does_whatever_the_splits() {
        let text = "thread \u{1b}[2J\u{9b}31m é\tx\u{85}\n\u{0}\u{7f}end\n";
        let bytes = text.as_bytes();
        for split in 0..=bytes.len() {
            let mut out = Vec::new();
            let mut w = Escaping::new(&mut out);
            w.write_all(&bytes[..split]).unwrap();
            w.write_all(&bytes[split..]).unwrap();
            let expected: String = text
                .split('\n')
                .map(|l| controls(l).into_owned())
                .collect::<Vec<_>>()
                .join("\n")
                .replace("\\t", "\t");
            assert_eq!(
                String::from_utf8(out).unwrap(),
                expected,
                "split at {split}"
            );
        }
    }
}
