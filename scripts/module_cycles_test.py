#!/usr/bin/env python3
"""Tests of `module_cycles.py`, run as CI runs it, on small workspaces written for each case.

Run: python3 scripts/module_cycles_test.py
"""

import subprocess
import sys
import tempfile
import textwrap
import unittest
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent / "module_cycles.py"


class ModuleCycles(unittest.TestCase):
    def check(self, files: dict[str, str], allow: str = "") -> tuple[int, str]:
        """Writes a workspace of one crate `demo` and runs the checker on it."""
        with tempfile.TemporaryDirectory() as root:
            root = Path(root)
            (root / "Cargo.toml").write_text('[workspace]\nmembers = ["demo"]\n')
            for name, text in files.items():
                path = root / "demo" / "src" / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(textwrap.dedent(text))
            (root / "allow").write_text(textwrap.dedent(allow))
            run = subprocess.run(
                [sys.executable, SCRIPT, "--workspace", root, "--exceptions", root / "allow"],
                capture_output=True,
                text=True,
            )
            return run.returncode, run.stdout + run.stderr

    def test_a_grouped_use_and_a_super_path_make_a_cycle_with_the_lines_to_move(self):
        code, out = self.check(
            {
                "lib.rs": "mod a;\nmod b;\nmod c;\n",
                "a.rs": "use crate::{c, b::{Thing, Other}};\n",
                "b.rs": "fn f() {\n    super::a::g();\n}\n",
                "c.rs": "",
            }
        )
        self.assertEqual(code, 1, out)
        self.assertIn("error: module cycle in demo (2 modules): a b\n", out)
        self.assertIn("demo: a -> b -> a", out)
        self.assertIn("a -> b: demo/src/a.rs:1 `b::Thing`", out)
        self.assertIn("b -> a: demo/src/b.rs:2 `a::g`", out)

    def test_unit_tests_comments_and_strings_are_not_dependencies(self):
        code, out = self.check(
            {
                "lib.rs": "pub mod a;\npub mod b;\n",
                "a.rs": "pub fn g() { crate::b::h() }\n",
                "b.rs": """\
                    pub fn h() {}
                    // crate::a::g() in a comment, /* crate::a */ and "crate::a::g" in a string
                    /// [`crate::a::g`] in a doc link
                    const S: &str = r#"crate::a"#;
                    const C: char = '"';
                    #[cfg(test)]
                    mod tests {
                        use crate::a::g;
                    }
                    #[cfg(all(test, unix))]
                    use crate::a::g as also;
                    #[cfg(test)]
                    mod more_tests;
                """,
                "b/more_tests.rs": "use crate::a;\n",
            }
        )
        self.assertEqual(code, 0, out)
        self.assertIn("no module cycle", out)

    def test_a_child_module_and_a_root_reexport_resolve_to_the_module_they_name(self):
        code, out = self.check(
            {
                "lib.rs": "mod a;\nmod b;\npub use b::Thing as Renamed;\n",
                "a/mod.rs": "mod child;\n",
                "a/child.rs": "fn f() -> super::super::b::Thing { todo!() }\n",
                "b.rs": "pub struct Thing;\nfn g(_: crate::Renamed) {}\nfn h() { crate::a::f() }\n",
            }
        )
        self.assertEqual(code, 1, out)
        self.assertIn("a -> b: demo/src/a/child.rs:1 `b::Thing`", out)
        self.assertIn("b -> a: demo/src/b.rs:3 `a::f`", out)

    def test_a_listed_cycle_is_a_note_and_a_stale_one_fails(self):
        files = {
            "lib.rs": "mod a;\nmod b;\n",
            "a.rs": "use crate::b;\n",
            "b.rs": "use crate::a;\n",
        }
        code, out = self.check(files, "# known\ndemo: b a | to be split later\n")
        self.assertEqual(code, 0, out)
        self.assertIn("note: accepted cycle in demo (2 modules): a b", out)
        self.assertIn("to be split later", out)

        files["b.rs"] = ""
        code, out = self.check(files, "demo: a b | to be split later\n")
        self.assertEqual(code, 1, out)
        self.assertIn("allow:1: the accepted cycle demo: a b no longer exists", out)

    def test_an_exception_without_a_reason_is_bad_input(self):
        code, out = self.check({"lib.rs": ""}, "demo: a b\n")
        self.assertEqual(code, 2, out)
        self.assertIn("allow:1: expected `CRATE: MODULE MODULE … | REASON`", out)

    def test_a_module_without_its_file_is_bad_input(self):
        code, out = self.check({"lib.rs": "mod gone;\n"})
        self.assertEqual(code, 2, out)
        self.assertIn("lib.rs:1: no file for `mod gone;`", out)


if __name__ == "__main__":
    unittest.main()
