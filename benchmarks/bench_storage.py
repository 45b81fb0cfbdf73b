#!/usr/bin/env python3
"""Storage and fabric stages on a 3-node lab: first run and idempotent re-run (changed must be 0), then the
shared directory's throughput from a lab node through the NFS-Ganesha server on node1 (libnfs nfs-cp/nfs-cat).
Prints figures; asserts nothing about time.

    .venv/bin/python benchmarks/bench_storage.py [--nodes 3] [--mb 256]
"""

from __future__ import annotations

import argparse
import time

from labbench import megaprov, podman_exec

LAB = "benchstore"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--mb", type=int, default=256)
    args = parser.parse_args()
    megaprov("lab", "down", "--name", LAB)
    try:
        _, up = megaprov("lab", "up", "--nodes", str(args.nodes), "--name", LAB)
        inventory = up["inventory"]
        megaprov("bootstrap", "-i", inventory, "--tags", "validate,preflight,base,ssh_mesh")
        for label in ("first run", "re-run"):
            seconds, result = megaprov("bootstrap", "-i", inventory, "--tags", "storage,fabric")
            print(f"storage + fabric on {args.nodes} nodes, {label}: {seconds:.1f} s, changed={result['changed']}")
        print(f"shared directory check: {sum(c['ok'] for c in result['shared'])}/{len(result['shared'])} reads identical")
        for host, fab in sorted(result["fabric"].items()):
            print(f"fabric {host}: {fab['summary']}")
        server = up["nodes"][0]["address"]
        client = up["nodes"][1]["container"]
        url = f"nfs://{server}/shared/cache/bench?uid=2000&gid=2000"
        podman_exec(client, f"head -c {args.mb}M /dev/urandom > /tmp/bench")
        start = time.monotonic()
        podman_exec(client, f"nfs-cp /tmp/bench '{url}-$RANDOM'")
        write = time.monotonic() - start
        name = podman_exec(up["nodes"][0]["container"], "ls -t /shared/cache | grep ^bench | head -1").strip()
        start = time.monotonic()
        podman_exec(client, f"nfs-cat 'nfs://{server}/shared/cache/{name}?uid=2000&gid=2000' > /dev/null")
        read = time.monotonic() - start
        print(f"shared dir through Ganesha from {client}: write {args.mb / write:.0f} MB/s, read {args.mb / read:.0f} MB/s ({args.mb} MB)")
    finally:
        megaprov("lab", "down", "--name", LAB)


if __name__ == "__main__":
    main()
