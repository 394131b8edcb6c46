#!/usr/bin/env python3
"""Finds dependency cycles between the top-level modules of every crate in the workspace.

For each crate root of a workspace member (`src/lib.rs`, `src/main.rs`, `src/bin/*.rs`), the
top-level modules are the `mod x;` / `mod x { ... }` items of the root. Module `x` depends on
module `y` when code anywhere inside `x` (its file, its folder, its inline modules) names a path
that resolves into `y`:

  * `crate::y…` and `$crate::y…`, in `use` trees (also grouped: `use crate::{y, z::w}`) and in
    any other path (`crate::y::f()`, types, macros);
  * `super::…` and `self::…`, resolved against the module the code sits in, so `super::y` from
    `src/x.rs` and `super::super::y` from `src/x/child.rs` both mean `crate::y`;
  * `crate::Name` where `Name` is re-exported by the crate root (`pub use y::Name;`) counts as a
    reference to `y`, since that is where the code lands.

Comments (doc comments and their intra-doc links too), string and character literals are not
code and are skipped. Items under `#[cfg(test)]` (or `#[cfg(all(test, …))]`) are skipped, with
the out-of-line modules they declare: unit tests may reach across layers, the library may not.
Integration tests, examples and benches are crates of their own and are not inspected.

Every strongly connected component with more than one module is a cycle. For each, the script
prints its modules, and for every dependency inside it the shortest cycle through that
dependency, each step with the file:line of one reference, so a reader sees what to move.

Known cycles that are accepted for now are listed in `module_cycles.allow` beside this script,
one per line: `CRATE: MODULE MODULE … | REASON`. A listed cycle that is found is printed as a
note; a listed cycle that no longer exists with exactly those modules fails the check, so the
list stays true.

Exit status: 0 when every cycle found is listed, 1 otherwise, 2 on bad input.
Python 3 standard library only.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

# ----------------------------------------------------------------------------------------------
# Tokens


@dataclass
class Token:
    text: str
    line: int


IDENT = re.compile(r"(?:r#)?[A-Za-z_][A-Za-z0-9_]*")
NUMBER = re.compile(r"[0-9](?:[0-9A-Za-z_]|\.(?![.A-Za-z_]))*")  # not the `..` of a range
RAW_STRING = re.compile(r'(?:b|c)?r(#*)"')


def tokenize(source: str, path: Path) -> list[Token]:
    """Rust tokens without comments and literals; `::` is one token, `$crate` is `crate`."""
    tokens: list[Token] = []
    i, line, n = 0, 1, len(source)
    while i < n:
        c = source[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif source.startswith("//", i):
            end = source.find("\n", i)
            i = n if end < 0 else end
        elif source.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if source.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif source.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    line += source[i] == "\n"
                    i += 1
        elif m := RAW_STRING.match(source, i) if c in "bcr" else None:
            closing = '"' + m.group(1)
            end = source.find(closing, m.end())
            if end < 0:
                raise SyntaxError(f"{path}:{line}: unterminated raw string")
            line += source.count("\n", i, end)
            i = end + len(closing)
        elif c == '"' or (c in "bc" and source.startswith('"', i + 1)):
            i += 1 if c == '"' else 2
            while i < n and source[i] != '"':
                if source[i] == "\\":
                    i += 1
                line += source[i] == "\n"
                i += 1
            i += 1
        elif c == "'" or (c == "b" and source.startswith("'", i + 1)):
            start = i + (1 if c == "'" else 2)
            if source.startswith("\\", start):
                end = start + 2
                while end < n and source[end] != "'":
                    end += 1
                i = end + 1
            elif start + 1 < n and source[start + 1] == "'":
                i = start + 2
            else:  # a lifetime or a label: 'a
                m = IDENT.match(source, start)
                i = m.end() if m else start
        elif c == "$" and source.startswith("$crate", i):
            tokens.append(Token("crate", line))
            i += len("$crate")
        elif m := IDENT.match(source, i):
            text = m.group()
            tokens.append(Token(text[2:] if text.startswith("r#") else text, line))
            i = m.end()
        elif m := NUMBER.match(source, i):
            i = m.end()
        elif source.startswith("::", i):
            tokens.append(Token("::", line))
            i += 2
        else:
            tokens.append(Token(c, line))
            i += 1
    return tokens


OPEN = {"(": ")", "[": "]", "{": "}"}
CLOSE = set(OPEN.values())


def matching(tokens: list[Token], i: int) -> int:
    """Index of the bracket closing the one at `i`."""
    depth = 0
    for j in range(i, len(tokens)):
        if tokens[j].text in OPEN:
            depth += 1
        elif tokens[j].text in CLOSE:
            depth -= 1
            if depth == 0:
                return j
    return len(tokens) - 1


def is_test_only(attribute: list[str]) -> bool:
    """`cfg(test)` or `cfg(all(test, …))`: the item exists only in unit-test builds."""
    text = "".join(attribute)
    return text == "cfg(test)" or (text.startswith("cfg(all(") and "test" in split_args(text[8:-2]))


def split_args(text: str) -> list[str]:
    args, depth, current = [], 0, ""
    for c in text:
        if c == "," and depth == 0:
            args.append(current)
            current = ""
            continue
        depth += c == "("
        depth -= c == ")"
        current += c
    return args + [current]


def item_end(tokens: list[Token], i: int) -> int:
    """Index just past the item starting at `i`: through its `;` or its closing `}`."""
    while i < len(tokens):
        t = tokens[i].text
        if t == ";":
            return i + 1
        if t in CLOSE:  # the end of the enclosing block: the item was the last thing in it
            return i
        if t in OPEN:
            close = matching(tokens, i)
            if t == "{":
                return close + 1
            i = close + 1
            continue
        i += 1
    return i


# ----------------------------------------------------------------------------------------------
# Modules and references


@dataclass
class Reference:
    path: list[str]  # absolute, from the crate root
    file: Path
    line: int


@dataclass
class CrateTarget:
    name: str
    root: Path
    modules: dict[str, Path] = field(default_factory=dict)  # top-level module -> where declared
    # A name the root imports (`pub use x::Name;`) -> the first segment of its path: through it,
    # `crate::Name` is a reference into module `x`.
    root_imports: dict[str, str] = field(default_factory=dict)
    references: dict[str, list[Reference]] = field(default_factory=dict)


UseLeaf = tuple[list[str], int, str]


def parse_use_tree(tokens: list[Token], i: int, prefix: list[str], out: list[UseLeaf]) -> int:
    """Collects every leaf of the use tree at `i`: its path, the line of its first segment, and
    the name it is imported as."""
    path, line, alias = list(prefix), None, None
    while i < len(tokens):
        t = tokens[i]
        if t.text == "{":
            i += 1
            while tokens[i].text != "}":
                i = parse_use_tree(tokens, i, path, out)
                if tokens[i].text == ",":
                    i += 1
            return i + 1
        if t.text in (",", "}", ";"):
            break
        if t.text == "as":
            alias = tokens[i + 1].text
            i += 2
            continue
        if t.text != "::":
            path.append(t.text)
            line = line or t.line
        i += 1
    if len(path) > len(prefix):
        out.append((path, line, alias or path[-1]))
    return i


class Walker:
    def __init__(self, target: CrateTarget):
        self.target = target

    def walk_file(self, file: Path, module: list[str], child_dir: Path, is_root: bool) -> None:
        try:
            source = file.read_text(encoding="utf-8")
        except OSError as error:
            raise SyntaxError(f"{file}: cannot read: {error.strerror}") from error
        tokens = tokenize(source, file)
        self.walk_tokens(tokens, 0, len(tokens), file, module, child_dir, is_root)

    def walk_tokens(self, tokens, i, end, file, module, child_dir, is_root) -> None:
        while i < end:
            t = tokens[i].text
            # Attributes: `#[…]` applies to the next item, `#![…]` to the enclosing one.
            if t == "#" and i + 1 < end and tokens[i + 1].text in ("[", "!"):
                inner = tokens[i + 1].text == "!"
                open_at = i + 2 if inner else i + 1
                close = matching(tokens, open_at)
                if is_test_only([tok.text for tok in tokens[open_at + 1 : close]]):
                    if inner:
                        return  # the whole module is test-only
                    i = item_end(tokens, close + 1)
                    continue
                i = close + 1
                continue
            if t == "mod" and i + 2 < end and IDENT.fullmatch(tokens[i + 1].text):
                name = tokens[i + 1].text
                after = tokens[i + 2].text
                inner = module + [name]
                if is_root and module == []:
                    self.target.modules.setdefault(name, file)
                if after == ";":
                    path = self.module_file(child_dir, name, file, tokens[i].line)
                    nested_dir = path.parent if path.name == "mod.rs" else path.with_suffix("")
                    self.walk_file(path, inner, nested_dir, False)
                    i += 3
                    continue
                if after == "{":
                    close = matching(tokens, i + 2)
                    self.walk_tokens(tokens, i + 3, close, file, inner, child_dir / name, False)
                    i = close + 1
                    continue
            if t == "use":
                leaves: list[UseLeaf] = []
                start = i + 1
                if tokens[start].text == "::":
                    start += 1
                i = parse_use_tree(tokens, start, [], leaves)
                for leaf, line, alias in leaves:
                    self.note(leaf, module, file, line, alias)
                continue
            if t in ("crate", "super", "self") and i + 1 < end and tokens[i + 1].text == "::":
                previous = tokens[i - 1].text if i else ""
                if previous in ("::", "in") or (t == "self" and previous == "."):
                    i += 1
                    continue
                path, j = [], i
                while j < end and IDENT.fullmatch(tokens[j].text):
                    path.append(tokens[j].text)
                    if j + 1 < end and tokens[j + 1].text == "::":
                        j += 2
                    else:
                        j += 1
                        break
                self.note(path, module, file, tokens[i].line, None)
                i = j
                continue
            i += 1

    def module_file(self, directory: Path, name: str, declared_in: Path, line: int) -> Path:
        for candidate in (directory / f"{name}.rs", directory / name / "mod.rs"):
            if candidate.is_file():
                return candidate
        raise SyntaxError(f"{declared_in}:{line}: no file for `mod {name};` in {directory}")

    def note(
        self, path: list[str], module: list[str], file: Path, line: int, alias: str | None
    ) -> None:
        """Records a path named in `module`, made absolute; `alias` is the name a `use` binds."""
        is_use = alias is not None
        if path and path[-1] == "self":  # `use crate::x::{self, …}`
            path = path[:-1]
        if not path:
            return
        if path[0] == "crate":
            absolute = path[1:]
        elif path[0] in ("self", "super"):
            base = list(module)
            rest = path
            if rest[0] == "self":
                rest = rest[1:]
            while rest and rest[0] == "super":
                if not base:
                    raise SyntaxError(f"{file}:{line}: `super` above the crate root")
                base.pop()
                rest = rest[1:]
            absolute = base + rest
        elif is_use and module == []:
            absolute = path  # in the root, `use x::…` may name the crate's own module `x`
        else:
            return  # an external crate, a prelude name, or a name in scope in this module
        if module == []:
            if is_use and len(absolute) >= 2 and absolute[-1] != "*":
                self.target.root_imports[alias] = absolute[0]
            return
        self.target.references.setdefault(module[0], []).append(Reference(absolute, file, line))


def crate_targets(workspace: Path) -> list[CrateTarget]:
    manifest = (workspace / "Cargo.toml").read_text(encoding="utf-8")
    members = re.search(r"^members\s*=\s*\[(.*?)\]", manifest, re.S | re.M)
    if not members:
        raise SyntaxError(f"{workspace / 'Cargo.toml'}: no `members = [...]` in [workspace]")
    targets = []
    for member in re.findall(r'"([^"]+)"', members.group(1)):
        src = workspace / member / "src"
        roots = [src / "lib.rs", src / "main.rs"] + sorted((src / "bin").glob("*.rs"))
        for root in roots:
            if not root.is_file():
                continue
            name = member if root.name == "lib.rs" else f"{member} (bin {root.stem})"
            if root.name == "main.rs":
                name = f"{member} (bin)"
            targets.append(CrateTarget(name, root))
    return targets


def dependencies(target: CrateTarget) -> dict[str, dict[str, Reference]]:
    """Module -> module it depends on -> the first reference making it so."""
    graph: dict[str, dict[str, Reference]] = {name: {} for name in target.modules}
    for source, references in target.references.items():
        for reference in references:
            first = reference.path[0] if reference.path else None
            if first not in target.modules:
                first = target.root_imports.get(first)
                first = first if first in target.modules else None
            if first is None or first == source:
                continue
            edges = graph[source]
            known = edges.get(first)
            where = (str(reference.file), reference.line)
            if known is None or where < (str(known.file), known.line):
                edges[first] = reference
    return graph


# ----------------------------------------------------------------------------------------------
# Cycles


def strongly_connected(graph: dict[str, dict[str, Reference]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative; components of more than one module, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = counter
                    counter += 1
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    advanced = True
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def shortest_path(graph, members: set[str], start: str, goal: str) -> list[str]:
    previous = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            break
        for successor in sorted(graph[node]):
            if successor in members and successor not in previous:
                previous[successor] = node
                queue.append(successor)
    path, node = [], goal
    while node is not None:
        path.append(node)
        node = previous[node]
    return path[::-1]


def cycles_through_edges(graph, component: list[str]) -> list[list[str]]:
    """For each dependency inside the component, the shortest cycle through it; no repeats."""
    members = set(component)
    seen, cycles = set(), []
    for source in component:
        for target in sorted(graph[source]):
            if target not in members:
                continue
            cycle = [source] + shortest_path(graph, members, target, source)[:-1]
            turn = cycle.index(min(cycle))
            canonical = tuple(cycle[turn:] + cycle[:turn])
            if canonical not in seen:
                seen.add(canonical)
                cycles.append(list(canonical))
    return sorted(cycles, key=lambda c: (len(c), c))


# ----------------------------------------------------------------------------------------------
# Exceptions


@dataclass
class AcceptedCycle:
    crate: str
    modules: frozenset[str]
    reason: str
    where: str
    found: bool = False


def read_exceptions(path: Path, shown: str) -> list[AcceptedCycle]:
    if not path.exists():
        return []
    exceptions = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = raw.strip()
        if not text or text.startswith("#"):
            continue
        match = re.fullmatch(r"([^:|]+):([^|]+)\|(.+)", text)
        where = f"{shown}:{number}"
        if not match or not match.group(3).strip():
            raise SyntaxError(
                f"{where}: expected `CRATE: MODULE MODULE … | REASON`, found {text!r}"
            )
        modules = frozenset(match.group(2).split())
        if len(modules) < 2:
            raise SyntaxError(f"{where}: a cycle needs at least two modules")
        crate, reason = match.group(1).strip(), match.group(3).strip()
        exceptions.append(AcceptedCycle(crate, modules, reason, where))
    return exceptions


# ----------------------------------------------------------------------------------------------


def relative(path: Path, workspace: Path) -> str:
    try:
        return str(path.relative_to(workspace))
    except ValueError:
        return str(path)


def main() -> int:
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workspace", type=Path, default=here.parent, help="the workspace root (default: this one)"
    )
    parser.add_argument(
        "--exceptions",
        type=Path,
        default=here / "module_cycles.allow",
        help="the accepted cycles (default: %(default)s)",
    )
    parser.add_argument(
        "--graph", action="store_true", help="also print every crate's module dependencies"
    )
    args = parser.parse_args()
    workspace = args.workspace.resolve()

    try:
        shown = relative(args.exceptions.resolve(), workspace)
        exceptions = read_exceptions(args.exceptions, shown)
        targets = crate_targets(workspace)
        for target in targets:
            Walker(target).walk_file(target.root, [], target.root.parent, True)
    except SyntaxError as error:
        print(f"module_cycles: error: {error}", file=sys.stderr)
        return 2

    failed = False
    for target in targets:
        graph = dependencies(target)
        if args.graph:
            print(f"{target.name}: {len(graph)} modules")
            for source in sorted(graph):
                targets_of = ", ".join(sorted(graph[source])) or "-"
                print(f"  {source} -> {targets_of}")
        for component in strongly_connected(graph):
            exception = next(
                (e for e in exceptions if e.crate == target.name and e.modules == set(component)),
                None,
            )
            label = "note: accepted cycle" if exception else "error: module cycle"
            print(f"{label} in {target.name} ({len(component)} modules): {' '.join(component)}")
            if exception:
                exception.found = True
                print(f"  accepted by {exception.where}: {exception.reason}")
                continue
            failed = True
            for cycle in cycles_through_edges(graph, component):
                print(f"  {target.name}: {' -> '.join(cycle + [cycle[0]])}")
                for source, dest in zip(cycle, cycle[1:] + cycle[:1]):
                    reference = graph[source][dest]
                    print(
                        f"      {source} -> {dest}: "
                        f"{relative(reference.file, workspace)}:{reference.line}"
                        f" `{'::'.join(reference.path)}`"
                    )
            for e in exceptions:
                if e.crate == target.name and frozenset(component) < e.modules:
                    print(f"  the cycle accepted by {e.where} shrank to these modules: update it")

    names = {target.name for target in targets}
    for exception in exceptions:
        if exception.found:
            continue
        failed = True
        crate = "" if exception.crate in names else f" (the workspace has no `{exception.crate}`)"
        print(
            f"error: {exception.where}: the accepted cycle {exception.crate}: "
            f"{' '.join(sorted(exception.modules))} no longer exists with exactly these "
            f"modules{crate}; "
            "remove or update the line"
        )
    if not failed:
        count = sum(len(t.modules) for t in targets)
        print(
            "module_cycles: no module cycle beyond the accepted ones "
            f"({len(targets)} crates, {count} top-level modules)"
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
