"""A job's ``job.json``, read as hostile input.

``<shared>/jobs/NAME/job.json`` lives on the shared directory, which the unprivileged cluster user can write. Its
fields decide which hosts Ansible reaches and which unit it stops, so nothing in it is trusted: the name must be
the job's own, the unit is derived from the name (never read), hosts must be host names, and every path must be
absolute and inside the shared directory. Every string goes through :mod:`megaprov.values`.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from megaprov import untrusted, values
from megaprov.errors import UsageError
from megaprov.training import render

MAX_RESUMES = 1_000_000
MAX_SEGMENTS = 1000  # changes of an elastic job's nodes kept in job.json
STATE = re.compile(r"^[a-z][a-z-]{0,31}$")
_HINT = "job.json is written by megaprov (the cluster user can change it): restore it or remove the job directory"


@dataclass(frozen=True)
class JobMeta:
    name: str
    hosts: tuple[str, ...]
    shared_dir: str
    job_dir: str
    checkpoint_dir: str
    unit: str  # derived from the name, never read from the file
    state: str
    started: str | None
    nodes: int  # the cluster shape the job was planned for
    gpus_per_node: int
    gpu: str
    raw: dict[str, Any] = field(default_factory=dict, compare=False)
    launcher: str = "systemd"
    slurm_id: str = ""  # digits only
    submit_host: str = ""  # a host name (Ansible reaches it to ask Slurm)
    resumes: int = 0  # how often `train --resume` started it again
    first_started: str | None = None
    job_hosts: tuple[str, ...] = ()  # launch.elastic: every node the job was started on (hosts: those it runs on now)
    segments: tuple[Segment, ...] = ()  # launch.elastic: each change of its nodes, in order


@dataclass(frozen=True)
class Segment:
    """One stretch of an elastic job on one set of nodes (systemd: written by the follower or `job grow`)."""

    hosts: tuple[str, ...]
    started: str
    why: str


def _check(check: Any, value: Any, where: str, *args: Any) -> Any:
    try:
        return check(value, where, *args)
    except values.BadValue as bad:
        raise UsageError(bad.message, _HINT) from None


def parse(text: str, where: str, name: str) -> JobMeta:
    """The checked fields of a job.json text for the job ``name`` (its directory name). Pure."""
    values.job_name(name, "job name")
    try:
        data = values.json_data(text, where)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not valid JSON (line {exc.lineno})", _HINT) from None
    if not isinstance(data, dict):
        raise UsageError(f"{where}: must be a JSON object", _HINT)
    recorded = _check(values.job_name, data.get("name"), f"{where}: name")
    if recorded != name:
        raise UsageError(f"{where}: name={values.shown(recorded)} is not the job's directory name {name!r}", _HINT)
    shared = _check(values.absolute_path, data.get("shared_dir"), f"{where}: shared_dir")
    if shared == "/":
        raise UsageError(f"{where}: shared_dir='/' is not a shared directory", _HINT)
    job_dir = _check(values.absolute_path, data.get("job_dir"), f"{where}: job_dir")
    if job_dir != posixpath.join(shared, "jobs", name):
        raise UsageError(f"{where}: job_dir={values.shown(job_dir)} is not {posixpath.join(shared, 'jobs', name)}", _HINT)
    checkpoint = _check(values.absolute_path, data.get("checkpoint_dir"), f"{where}: checkpoint_dir")
    if not values.inside(checkpoint, shared) or checkpoint == shared:
        raise UsageError(f"{where}: checkpoint_dir={values.shown(checkpoint)} is not inside {shared}", _HINT)
    hosts = data.get("hosts")
    if not isinstance(hosts, list) or not 1 <= len(hosts) <= values.MAX_HOSTS:
        raise UsageError(f"{where}: hosts={values.shown(hosts)} must be a list of 1 to {values.MAX_HOSTS:,} host names", _HINT)
    for index, host in enumerate(hosts):
        _check(values.host_name, host, f"{where}: hosts[{index}]")
    state = data.get("state", "unknown")
    if not isinstance(state, str) or not STATE.fullmatch(state):
        raise UsageError(f"{where}: state={values.shown(state)} is not a job state", _HINT)
    started = data.get("started")
    if started is not None:
        _check(values.text, started, f"{where}: started", 64)
    nodes = _check(values.bounded_int, data.get("nodes", len(hosts)), f"{where}: nodes", 1, values.MAX_HOSTS)
    gpus_per_node = _check(values.bounded_int, data.get("gpus_per_node", 1), f"{where}: gpus_per_node", 1, 64)
    gpu = _check(values.model_name, data.get("gpu", "cpu"), f"{where}: gpu")
    launcher = data.get("launcher", "systemd")
    if launcher not in ("systemd", "slurm"):
        raise UsageError(f"{where}: launcher={values.shown(launcher)} is not systemd or slurm", _HINT)
    slurm_id = data.get("slurm_job_id", "")
    if not isinstance(slurm_id, str) or not re.fullmatch(r"(\d{1,12})?", slurm_id):
        raise UsageError(f"{where}: slurm_job_id={values.shown(slurm_id)} is not a Slurm job id", _HINT)
    resumes = _check(values.bounded_int, data.get("resumes", 0), f"{where}: resumes", 0, MAX_RESUMES)
    first_started = data.get("first_started", started)
    if first_started is not None:
        _check(values.text, first_started, f"{where}: first_started", 64)
    job_hosts = data.get("job_hosts", hosts)
    if not isinstance(job_hosts, list) or not 1 <= len(job_hosts) <= values.MAX_HOSTS:
        raise UsageError(f"{where}: job_hosts={values.shown(job_hosts)} must be a list of 1 to {values.MAX_HOSTS:,} host names", _HINT)
    for index, host in enumerate(job_hosts):
        _check(values.host_name, host, f"{where}: job_hosts[{index}]")
    if not set(hosts) <= set(job_hosts):
        raise UsageError(f"{where}: hosts {values.shown(hosts)} are not among job_hosts {values.shown(job_hosts)}", _HINT)
    segments = data.get("segments", [])
    if not isinstance(segments, list) or len(segments) > MAX_SEGMENTS:
        raise UsageError(f"{where}: segments must be a list of at most {MAX_SEGMENTS}", _HINT)
    parsed = []
    for index, seg in enumerate(segments):
        at = f"{where}: segments[{index}]"
        if not isinstance(seg, dict) or not isinstance(seg.get("hosts"), list) or not 1 <= len(seg["hosts"]) <= values.MAX_HOSTS:
            raise UsageError(f"{at} must be an object with a list of hosts", _HINT)
        seg_hosts = tuple(_check(values.host_name, h, f"{at}.hosts") for h in seg["hosts"])
        started_at = _check(values.text, seg.get("started", ""), f"{at}.started", 64)
        parsed.append(Segment(seg_hosts, started_at, _check(values.text, seg.get("why", ""), f"{at}.why", 512)))
    submit = data.get("submit_host", "")
    if launcher == "slurm":
        submit = _check(values.host_name, submit, f"{where}: submit_host")
    return JobMeta(
        name,
        tuple(hosts),
        shared,
        job_dir,
        checkpoint,
        render.unit_name(name),
        state,
        started,
        nodes,
        gpus_per_node,
        gpu,
        data,
        launcher,
        slurm_id,
        submit if isinstance(submit, str) else "",
        resumes,
        first_started,
        tuple(job_hosts),
        tuple(parsed),
    )


def load(path: Path, name: str) -> JobMeta:
    """Read and check ``path`` (``<view>/jobs/NAME/job.json``: at most 1 MiB of UTF-8 JSON, a regular file reached
    without links below the shared directory's view, :mod:`megaprov.untrusted`)."""
    return parse(untrusted.read_text(path, "job file", values.MAX_FILE_BYTES, untrusted.job_root(path.parent)), str(path), name)
