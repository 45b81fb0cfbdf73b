"""Bytes fetched from outside the cluster with the head's package cache, per node count.

For each LAB:N it starts the lab (`megaprov lab up --nodes N --name LAB`; the lab turns megaprov_package_cache on),
runs `megaprov bootstrap -i INV --tags preflight,cache,base` (base installs the distribution packages on every node,
through the head's apt-cacher-ng), then reads apt-cacher-ng's log on the head: an `I` line is what the cache fetched
from the mirror (with the node whose request missed), an `O` line what it sent to a node. Without the cache every
node fetches what it was sent, so the sum of `O` is what the same bootstrap would download from outside without it.
The goal: the `I` sum constant in N. Not in the log: what the head downloaded before its cache existed (the cache
stage's own packages and the head's apt lists), the same in every run.

    MEGAPROV_STATE=/tmp/h3/state python benchmarks/bench_cache.py h3b:1 h3:3 [--keep]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks.labbench import megaprov, podman_exec  # noqa: E402 (after the path insert)

LOG = "/var/log/apt-cacher-ng/apt-cacher.log"


@dataclass
class Tally:
    fetched: int = 0  # bytes apt-cacher-ng fetched from outside (I lines)
    sent: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # client address -> bytes sent (O lines)
    missed: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # client whose request was a miss -> bytes fetched
    files_fetched: int = 0
    files_sent: int = 0


def tally(text: str) -> Tally:
    """apt-cacher-ng's log (time|kind|bytes|client|path) summed. Pure."""
    out = Tally()
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 5 or not fields[2].isdigit():
            continue
        if fields[1] == "I":
            out.fetched += int(fields[2])
            out.missed[fields[3]] += int(fields[2])
            out.files_fetched += 1
        elif fields[1] == "O":
            out.sent[fields[3]] += int(fields[2])
            out.files_sent += 1
    return out


def mb(n: int) -> str:
    return f"{n / 1e6:.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("labs", nargs="+", help="LAB:NODES, e.g. h3b:1 h3:3")
    parser.add_argument("--keep", action="store_true", help="leave the labs up")
    args = parser.parse_args()
    rows = []
    for spec in args.labs:
        name, _, count = spec.partition(":")
        _, up = megaprov("lab", "up", "--nodes", count, "--name", name)
        inventory = str(up["inventory"])
        seconds, _ = megaprov("bootstrap", "-i", inventory, "--tags", "preflight,cache,base")
        t = tally(podman_exec(f"megaprov-{name}-node1", f"cat {LOG}"))
        without = sum(t.sent.values())
        rows.append((int(count), t, without, seconds))
        print(
            f"{name}: {count} node(s): fetched from outside {mb(t.fetched)} ({t.files_fetched} files); sent to nodes {mb(without)}"
            f" ({t.files_sent} files; what the nodes would fetch without the cache); per node: "
            + ", ".join(f"{c} {mb(b)} (misses {mb(t.missed.get(c, 0))})" for c, b in sorted(t.sent.items()))
            + f"; bootstrap --tags preflight,cache,base {seconds:.0f} s",
            flush=True,
        )
        if not args.keep:
            megaprov("lab", "down", "--name", name)
    if len(rows) > 1:
        (n1, t1, w1, _), (n2, t2, w2, _) = rows[0], rows[-1]
        print(f"outside bytes {n2} vs {n1} node(s): with the cache {t2.fetched / max(t1.fetched, 1):.2f}x, without {w2 / max(w1, 1):.2f}x")


if __name__ == "__main__":
    main()
