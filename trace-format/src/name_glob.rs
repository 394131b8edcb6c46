//! The glob that names a program's lock wrappers (`--wrapper GLOB`, `wrappers = [...]` in
//! `foresight-suppressions.toml`), matched against function names: `*` matches any run of
//! characters (none too), `?` any one character, and every other character only itself.
//! `[`, `{` and `\` have no special meaning: C++ names hold them (`operator[]`,
//! `{lambda()#1}`).
//!
//! The recorder matches while it works out a call's site, inside a hook, and the analyzer
//! matches the frames of a trace: both use this one function, so that a pattern means the
//! same to `record` and to `analyze`. It allocates nothing and takes no lock, as the
//! recorder's hooks require (docs/decisions/0018-one-wrapper-glob-in-trace-format.md).

/// Whether `text` matches `pattern`, on characters; linear backtracking over the last `*`.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (mut pi, mut ti) = (0usize, 0usize);
    // After a `*`: where the pattern goes on after it, and where in the text its run ends.
    let mut star: Option<(usize, usize)> = None;
    while let Some(t) = text[ti..].chars().next() {
        match pattern[pi..].chars().next() {
            Some('*') => {
                pi += 1;
                star = Some((pi, ti));
            }
            Some(p) if p == '?' || p == t => {
                pi += p.len_utf8();
                ti += t.len_utf8();
            }
            _ => {
                // The last `*` takes one more character of the text, if there was one.
                let Some((after_star, run_end)) = star else {
                    return false;
                };
                let Some(c) = text[run_end..].chars().next() else {
                    return false;
                };
                pi = after_star;
                ti = run_end + c.len_utf8();
                star = Some((after_star, ti));
            }
        }
    }
    pattern[pi..].chars().all(|c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn stars_and_question_marks() {
        assert!(glob_match("pthreadMutexEnter", "pthreadMutexEnter"));
        assert!(glob_match("pthreadMutex*", "pthreadMutexEnter"));
        assert!(glob_match("*Mutex*", "pthreadMutexEnter"));
        assert!(glob_match("Db::lo?k", "Db::lock"));
        assert!(glob_match("lock_?", "lock_a"));
        assert!(!glob_match("lock_?", "lock_ab"));
        assert!(!glob_match("pthreadMutex", "pthreadMutexEnter"));
        assert!(!glob_match("Db::lock", "Db::lock2"));
        assert!(!glob_match("Enter", "pthreadMutexEnter"));
        assert!(glob_match("*", ""));
        assert!(glob_match("**", "x"));
        assert!(!glob_match("?", ""));
        assert!(glob_match("a*b*c", "aXbYbc"));
        assert!(!glob_match("a*b*c", "aXbYbd"));
    }

    #[test]
    fn other_characters_match_only_themselves() {
        assert!(glob_match("Table::operator[]", "Table::operator[]"));
        assert!(!glob_match("Table::operator[]", "Table::operatorX"));
        assert!(glob_match(
            "run()::{lambda()#1}*",
            "run()::{lambda()#1}::operator()"
        ));
        assert!(glob_match("a\\b", "a\\b"));
        // A `*` in the name is a character like any other: the pattern's `*` still spans it.
        assert!(glob_match("lk*", "lk(int*)"));
        assert!(glob_match("a*b", "a*xb"));
        assert!(glob_match("Grid::operator*", "Grid::operator*"));
    }

    #[test]
    fn characters_not_bytes() {
        assert!(glob_match("caf?", "café"));
        assert!(glob_match("*é", "café"));
        assert!(!glob_match("caf??", "café"));
    }
}
