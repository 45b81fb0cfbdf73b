#!/usr/bin/env python3
"""Run a command, then write to FILE its wall seconds and the CPU seconds of it and the processes it waited for
(pytest, molecule, ansible and their forks; not the lab's containers, whose processes are podman's), as one line:
`wall CPU`. scripts/test.sh runs each part of the suite under it. `partcpu.py --machine` prints the busy CPU
seconds of the whole machine since boot (/proc/stat), to take the difference over a run.

    partcpu.py FILE COMMAND [ARG...]
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time


def machine_busy_seconds() -> float:
    fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def main(argv: list[str]) -> int:
    if argv == ["--machine"]:
        print(f"{machine_busy_seconds():.0f}")
        return 0
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out, command = argv[0], argv[1:]
    start = time.monotonic()
    rc = subprocess.call(command)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    with open(out, "w") as f:
        f.write(f"{time.monotonic() - start:.0f} {usage.ru_utime + usage.ru_stime:.0f}\n")
    return rc


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
