//! Text that came from a trace, a pack or the file system (thread names, symbols, member
//! names, paths, commands) is shown on a terminal: its control characters (C0, DEL, C1 —
//! `ESC` and `CSI` among them) are shown escaped (`\u{1b}`, as Rust's `escape_debug` writes
//! them) so that a hostile string cannot move the cursor, rewrite what is on the screen, set
//! the window title or answer back through the terminal; so are the invisible format
//! characters (bidirectional overrides and isolates, zero-width characters: `\u{202e}`), which
//! make a name read as another. JSON and SARIF escape through serde
//! already; the text report, `stats`, `dump`, `graph` and every message of the command line go
//! through here.

use std::borrow::Cow;
use std::io::{self, Write};

/// `s` with every control character but the line end escaped: a message of several lines.
pub fn controls_keep_lines(s: &str) -> Cow<'_, str> {
    escape(s, true)
}

/// Characters a terminal does not show but acts on or hides behind: the Unicode format
/// characters (general category Cf: the bidirectional embeddings, overrides and isolates,
/// which reorder what follows them on the line so that a name reads as another; zero-width
/// spaces and joiners; the byte order mark; invisible operators; tags) and the line and
/// paragraph separators, which some terminals and editors take as line ends.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{890}'..='\u{891}'
            | '\u{8e2}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{110bd}'
            | '\u{110cd}'
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0001}'
            | '\u{e0020}'..='\u{e007f}'
    )
}

/// Whether `c` is shown as it is: neither a control character nor an invisible one.
fn shown(c: char) -> bool {
    !c.is_control() && !invisible(c)
}

fn push_escaped(out: &mut String, c: char) {
    if c.is_control() {
        out.extend(c.escape_debug());
    } else {
        out.push_str(&format!("\\u{{{:x}}}", c as u32));
    }
}

fn escape(s: &str, keep_lines: bool) -> Cow<'_, str> {
    let shown_as_is = |c: char| shown(c) || (keep_lines && c == '\n');
    if s.chars().all(shown_as_is) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if shown_as_is(c) {
            out.push(c);
        } else {
            push_escaped(&mut out, c);
        }
    }
    Cow::Owned(out)
}

/// A writer that escapes every control and invisible character in what goes through it, line
/// ends and tabs excepted (the report's own layout): wrapped around a whole text report, so that no
/// field of it can be missed. What goes through is UTF-8 (Rust strings), but a character may
/// arrive split over two writes: the bytes of an unfinished one wait for the next write. A
/// byte that is not UTF-8 is shown as `\x..`.
pub struct Escaping<W: Write> {
    inner: W,
    /// The first bytes of a character the last write ended in the middle of.
    pending: Vec<u8>,
    buf: String,
}

impl<W: Write> Escaping<W> {
    /// Escapes what is written before it reaches `inner`.
    pub fn new(inner: W) -> Self {
        Self {
            inner,
            pending: Vec::new(),
            buf: String::new(),
        }
    }

    fn push_text(&mut self, text: &str) {
        for c in text.chars() {
            if shown(c) || c == '\n' || c == '\t' {
                self.buf.push(c);
            } else {
                push_escaped(&mut self.buf, c);
            }
        }
    }
}

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        // Printable ASCII, line ends and tabs: most of a report.
        let plain = |b: u8| matches!(b, b'\t' | b'\n' | 0x20..=0x7e);
        if self.pending.is_empty() && bytes.iter().all(|&b| plain(b)) {
            self.inner.write_all(bytes)?;
            return Ok(bytes.len());
        }
        let mut data = std::mem::take(&mut self.pending);
        data.extend_from_slice(bytes);
        self.buf.clear();
        let mut rest = &data[..];
        while !rest.is_empty() {
            match std::str::from_utf8(rest) {
                Ok(text) => {
                    self.push_text(text);
                    break;
                }
                Err(e) => {
                    let (good, bad) = rest.split_at(e.valid_up_to());
                    self.push_text(std::str::from_utf8(good).expect("checked as UTF-8"));
                    match e.error_len() {
                        // A character cut by the end of this write.
                        None => {
                            self.pending = bad.to_vec();
                            break;
                        }
                        Some(n) => {
                            for b in &bad[..n] {
                                self.buf.push_str(&format!("\\x{b:02x}"));
                            }
                            rest = &bad[n..];
                        }
                    }
                }
            }
        }
        self.inner.write_all(self.buf.as_bytes())?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `s` with every control character escaped, line ends and tabs included: one field on one
    /// line.
    fn controls(s: &str) -> Cow<'_, str> {
        escape(s, false)
    }

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
    fn invisible_format_characters_are_escaped() {
        // `lock_user\u{202e}nimda\u{202c}` shows as "lock_useradmin" on a terminal.
        assert_eq!(
            controls("lock_user\u{202e}nimda\u{202c}"),
            "lock_user\\u{202e}nimda\\u{202c}"
        );
        for c in [
            '\u{202a}',
            '\u{202b}',
            '\u{202d}',
            '\u{2066}',
            '\u{2067}',
            '\u{2068}',
            '\u{2069}',
            '\u{200b}',
            '\u{200d}',
            '\u{200e}',
            '\u{200f}',
            '\u{61c}',
            '\u{feff}',
            '\u{2028}',
            '\u{2029}',
            '\u{ad}',
            '\u{e0041}',
        ] {
            let s = format!("a{c}b");
            assert_eq!(
                controls(&s),
                format!("a\\u{{{:x}}}b", c as u32),
                "U+{:04X}",
                c as u32
            );
        }
        // Letters of right-to-left scripts and combining marks are text, shown as they are.
        assert_eq!(controls("שלום مرحبا e\u{301}"), "שלום مرحبا e\u{301}");
    }

    #[test]
    fn the_writer_escapes_as_the_function_does_whatever_the_splits() {
        let text =
            "thread \u{1b}[2J\u{9b}31m é\tx\u{85}\n\u{0}\u{7f}a\u{202e}b\u{2069}日\u{e0041}end\n";
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

    #[test]
    fn the_writer_shows_bytes_that_are_not_utf8_in_hex() {
        let mut out = Vec::new();
        let mut w = Escaping::new(&mut out);
        w.write_all(b"a\x9b2Jb\xffc\n").unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "a\\x9b2Jb\\xffc\n");
    }
}
