# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""Gather the training jobs' metrics for prometheus-node-exporter's textfile collector (the node_exporter role).

``megaprov train`` follows a job and writes ``<shared>/jobs/<job>/metrics.prom`` as the cluster user. This script, run
on the head every few seconds as that user, reads the newest of those files and writes one textfile with every job's
series. The files are on the shared directory, which any cluster user can write, so each one is data: a line is kept
only when it is a ``megaprov_job_*`` sample of the job whose directory it is in, with a ``node`` label, a number as its
value and nothing else; at most MAX_BYTES of a file and MAX_JOBS files are read. Each job gets
``megaprov_job_metrics_age_seconds``, the age of its file: a follower that stopped leaves stale series, and says so.
Stdlib only (the node's system python3, 3.9+).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time

MAX_JOBS = 200
MAX_BYTES = 64 * 1024
MAX_AGE = 7 * 24 * 3600  # a job whose metrics are older than a week is left out
JOB = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
SAMPLE = re.compile(
    r'^(?P<name>megaprov_job_[a-z0-9_]{1,64})\{job="(?P<job>[A-Za-z0-9][A-Za-z0-9_.-]{0,63})",node="(?P<node>[A-Za-z0-9][A-Za-z0-9.-]{0,62})"\}'
    r" (?P<value>[-+]?(?:[0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?|NaN|Inf))$"
)
META = re.compile(r"^# (?P<kind>HELP|TYPE) (?P<name>megaprov_job_[a-z0-9_]{1,64}) (?P<text>[A-Za-z0-9 ,.:;()/%'+-]{1,200})$")
TYPES = {"gauge", "counter"}


def parse(text: str, job: str) -> tuple[dict[str, tuple[str, str]], list[tuple[str, str, str]]]:
    """The HELP/TYPE of each family and the samples (name, node, value) of ``job`` in one metrics.prom. Pure."""
    meta: dict[str, tuple[str, str]] = {}
    samples: list[tuple[str, str, str]] = []
    helps: dict[str, str] = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        m = META.match(line)
        if m:
            if m["kind"] == "HELP":
                helps[m["name"]] = m["text"]
            elif m["text"] in TYPES:
                types[m["name"]] = m["text"]
            continue
        s = SAMPLE.match(line)
        if s and s["job"] == job:
            samples.append((s["name"], s["node"], s["value"]))
    for name, _node, _value in samples:
        meta[name] = (helps.get(name, name), types.get(name, "gauge"))
    return meta, samples


def render(jobs: list[tuple[str, float, str]], now: float) -> str:
    """One textfile from each job's (name, mtime, text). Pure."""
    meta: dict[str, tuple[str, str]] = {}
    series: dict[str, list[str]] = {}
    seen: set[tuple[str, str]] = set()
    for job, mtime, text in jobs:
        found, samples = parse(text, job)
        for name, kind in found.items():
            meta.setdefault(name, kind)
        node = ""
        for name, node, value in samples:
            if (name, job) in seen:  # one sample per family and job
                continue
            seen.add((name, job))
            series.setdefault(name, []).append(f'{name}{{job="{job}",node="{node}"}} {value}')
        if samples:
            name = "megaprov_job_metrics_age_seconds"
            meta.setdefault(name, ("Seconds since megaprov train last wrote the job's metrics", "gauge"))
            series.setdefault(name, []).append(f'{name}{{job="{job}",node="{node}"}} {max(0.0, now - mtime):.1f}')
    out = []
    for name in sorted(series):
        help_text, kind = meta[name]
        out += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *series[name]]
    return "\n".join(out) + "\n" if out else ""


def collect(jobs_dir: str, now: float) -> list[tuple[str, float, str]]:
    """The newest MAX_JOBS jobs' (name, mtime, first MAX_BYTES of metrics.prom), none older than MAX_AGE."""
    found = []
    try:
        names = os.listdir(jobs_dir)
    except OSError:
        return []
    for name in names:
        if not JOB.match(name):
            continue
        path = os.path.join(jobs_dir, name, "metrics.prom")
        try:
            st = os.stat(path, follow_symlinks=False)
        except OSError:
            continue
        if not os.path.isfile(path) or os.path.islink(path) or now - st.st_mtime > MAX_AGE:
            continue
        found.append((st.st_mtime, name, path))
    out = []
    for mtime, name, path in sorted(found, reverse=True)[:MAX_JOBS]:
        try:
            with open(path, "rb") as handle:
                text = handle.read(MAX_BYTES).decode("utf-8", "replace")
        except OSError:
            continue
        out.append((name, mtime, text))
    return out


def write(path: str, text: str) -> None:
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".megaprov_jobs.", dir=directory)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs-dir", required=True, help="the jobs directory on the shared directory")
    parser.add_argument("--output", required=True, help="the textfile to write (replaced atomically)")
    args = parser.parse_args(argv)
    now = time.time()
    write(args.output, render(collect(args.jobs_dir, now), now))
    return 0


if __name__ == "__main__":
    sys.exit(main())
