#!/usr/bin/env python3
"""What another codec or block size would give: reads an uncompressed (1.x) trace, gathers
each thread's encoded events (FORMAT.md §5.1) into blocks of about BLOCK bytes, one block per
chunk (64 KiB: what the recorder writes) or several chunks per block (1 MiB), and compresses
each block alone with the `lz4` and `zstd` command-line tools. Prints bytes per event of the
compressed blocks (events prefixes and chunk headers not counted).

Usage: codec_whatif.py TRACE [BLOCK...] (default blocks 65536 1048576)."""
import struct
import subprocess
import sys
from collections import defaultdict


def bodies(path):
    b = open(path, "rb").read()
    major, _minor, hlen = struct.unpack_from("<HHI", b, 8)
    if major != 1:
        sys.exit(f"{path}: an uncompressed 1.x trace is needed (record with --compress never)")
    pos = 20 + hlen
    per_thread = defaultdict(list)
    events = 0
    while pos + 20 <= len(b):
        kind = b[pos + 4]
        (plen,) = struct.unpack_from("<I", b, pos + 8)
        payload = b[pos + 20 : pos + 20 + plen]
        if kind == 1 and plen >= 36:
            thread, seq = struct.unpack_from("<II", payload, 0)
            (count,) = struct.unpack_from("<I", payload, 16)
            per_thread[thread].append((seq, payload[36:]))
            events += count
        pos += 20 + plen
    return per_thread, events


def size(cmd, data):
    return len(subprocess.run(cmd, input=data, capture_output=True, check=True).stdout)


def main():
    path = sys.argv[1]
    blocks = [int(x) for x in sys.argv[2:]] or [65536, 1 << 20]
    per_thread, events = bodies(path)
    raw = sum(len(x) for c in per_thread.values() for _, x in c)
    print(f"{path}: {events} events, {raw / events:.3f} B/event uncompressed")
    for block in blocks:
        groups = []
        for chunks in per_thread.values():
            cur = b""
            for _, body in sorted(chunks, key=lambda c: c[0]):
                if cur and len(cur) + len(body) > block:
                    groups.append(cur)
                    cur = b""
                cur += body
            if cur:
                groups.append(cur)
        for name, cmd in [
            ("lz4 -1", ["lz4", "-1", "-c", "-BD", "-B7", "--no-frame-crc"]),
            ("zstd -3", ["zstd", "-3", "-c", "-q"]),
            ("zstd -19", ["zstd", "-19", "-c", "-q"]),
        ]:
            total = sum(size(cmd, g) for g in groups)
            print(f"  block {block:>8}  {name:<8} {total / events:8.3f} B/event  ({len(groups)} blocks)")


main()
