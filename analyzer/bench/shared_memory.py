#!/usr/bin/env python3
"""How many of a trace's memory accesses touch memory that more than one thread touches.

A race needs two threads on the same bytes, so an access whose memory no other thread touches
anywhere in the trace can never be one side of a race. This counts, for units of 2^SHIFT bytes
(3: the race pass's 8-byte granules; 6: cache lines; 12: pages), which units more than one
thread reads, writes or frees, and how many accesses touch at least one such unit: the share
of the race pass's work that a first pass over the trace could not spare it
(docs/perf/analysis-speed-and-memory.md, "Memory one thread alone touches").

Reads the output of `foresight dump TRACE` (one event a line: seq, key, thread, event, kind,
object as ADDRESS/SIZE, site). Frees count as accesses of the block by the freeing thread.

Usage: foresight dump TRACE > T.dump; analyzer/bench/shared_memory.py T.dump [SHIFT ...]
(default shifts: 3 6 12). Slow (pure Python): a few minutes for 10^7 events.
"""

import sys

ACCESS_KINDS = {
    "read",
    "write",
    "atomic-load",
    "atomic-store",
    "atomic-rmw",
    "atomic-cas",
    "atomic-cas-failed",
    "free",
}


def accesses(path):
    """(thread, address, size) of every access and free of the dump."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            fields = line.split(None, 6)
            if len(fields) < 6 or fields[4] not in ACCESS_KINDS:
                continue
            address, _, size = fields[5].partition("/")
            try:
                yield fields[2], int(address, 16), max(int(size or "1"), 1)
            except ValueError:
                continue


def measure(path, shift):
    """(accesses, accesses touching a shared unit, units, shared units)."""
    owner = {}  # unit -> the one thread that touches it, or None once a second one does
    spans = []
    for thread, address, size in accesses(path):
        first, last = address >> shift, (address + size - 1) >> shift
        for unit in range(first, last + 1):
            seen = owner.get(unit, thread)
            owner[unit] = thread if seen == thread else None
        spans.append((first, last))
    shared = sum(
        1
        for first, last in spans
        if any(owner[u] is None for u in range(first, last + 1))
    )
    units_shared = sum(1 for t in owner.values() if t is None)
    return len(spans), shared, len(owner), units_shared


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    shifts = [int(s) for s in sys.argv[2:]] or [3, 6, 12]
    for shift in shifts:
        n, shared, units, units_shared = measure(path, shift)
        share = shared / n if n else 0.0
        print(
            f"{path}: units of {1 << shift} bytes: {shared} of {n} accesses touch a shared unit"
            f" ({share:.1%}); {units_shared} of {units} units shared"
        )


if __name__ == "__main__":
    main()
