"""``megaprov doctor``: cluster health checks (``health``) and failure diagnosis of logs (``signatures``).

Findings carry a stable code from ``findings.CODES``; the README's troubleshooting section lists every code."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.table import Table

from megaprov import untrusted, values
from megaprov.errors import UsageError
from megaprov.ops.doctor import signatures
from megaprov.ops.doctor.findings import Finding, Report, finding
from megaprov.output import styled

MAX_LOG_FILES = 256


def diagnose_logs(files: list[str]) -> Report:
    """Findings in log files given by the user (job logs, node logs, saved dmesg or journal output)."""
    if len(files) > MAX_LOG_FILES:
        raise UsageError(f"--log: {len(files)} files", f"give at most {MAX_LOG_FILES}")
    report = Report(checked=list(files))
    for name in files:
        report.add(*signatures.scan_file(Path(name)))
    return report


def diagnose_job(name: str, inventory: str | None) -> Report:
    """Findings in a megaprov job's node logs (``jobs/NAME/logs/NODE.log``) and Slurm's batch output
    (``logs/slurm-JOBID.out``: what srun and its plugins say before a node script runs, pyxis's image import among it),
    with the job's plan for its advice."""
    from megaprov.training import jobs

    job = jobs.find(name, inventory)
    root = untrusted.job_root(job.local_dir)
    logs_dir = job.local_dir / "logs"
    listed = untrusted.entries(logs_dir, root)  # one listing: the logs, the GPU samples and what stands in their place
    ours = {n: kind for n, kind in listed.items() if _is_log(n) or (n.startswith("gpu-") and n.endswith(".csv"))}
    logs = [logs_dir / n for n, kind in ours.items() if kind == "file" and _is_log(n)]
    samples = [logs_dir / n for n, kind in ours.items() if kind == "file" and n.endswith(".csv")]
    if not logs:
        raise UsageError(f"job {job.name} has no node logs yet in {logs_dir}", "wait for the job to start, or give --log FILE")
    context = job_context(job.local_dir)
    report = Report(checked=[str(p) for p in logs])
    # A log or a GPU sample file that is a link, a FIFO or a directory is not read, and said so: its node was not checked.
    for name, kind in list(ours.items())[: 2 * MAX_LOG_FILES]:
        if kind != "file":
            report.add(unreadable(logs_dir / name, "is a directory" if kind == "dir" else "is not a regular file (a link, a FIFO or a device)"))
    found = []
    for path in logs[:MAX_LOG_FILES]:
        try:
            found += signatures.scan_file(path, node=path.stem, job=context, root=root)
        except untrusted.BadEntry as exc:  # this node's log is reported; the others are still read
            report.add(unreadable(path, exc.problem))
    report.add(*signatures.explained(found))  # across the job's nodes: a peer lost because another node's rank was killed
    from megaprov.training.follow import gpu_samples

    for path in samples[:MAX_LOG_FILES]:
        try:
            report.add(*signatures.gpu_utilisation(gpu_samples(path, root), path.stem.removeprefix("gpu-"), str(path)))
        except untrusted.BadEntry as exc:
            report.add(unreadable(path, exc.problem))
    return report


def _is_log(name: str) -> bool:
    """A node's log, or Slurm's output of the job's batch script (render.py: --output=logs/slurm-%j.out)."""
    return name.endswith(".log") or (name.startswith("slurm-") and name.endswith(".out") and name[6:-4].isdigit())


def unreadable(path: Path, problem: str) -> Finding:
    """A file of the job that megaprov refused to read (a link, a FIFO, too large): a finding for that file."""
    return finding("JOB_FILE_REFUSED", path.stem.removeprefix("gpu-"), f"{path.name} {problem}", source=str(path))


def job_context(job_dir: Path) -> dict[str, Any]:
    """What the OOM advice needs from a job directory: the planner's memory estimate and the single layout changes
    that bring it to 80 % of that estimate (the estimate was too low: the job ran out of memory). Best effort: a job
    directory without a readable spec or plan gives the generic advice."""
    from megaprov.training import planner, target

    try:
        # Only the three fields the estimate needs, each typed (the rest of job.json is no concern of the advice).
        meta = untrusted.read_json(job_dir / "job.json", "job file", values.MAX_FILE_BYTES, untrusted.job_root(job_dir))
        if not isinstance(meta, dict):
            return {}
        nodes = values.bounded_int(meta.get("nodes"), "nodes", 1, values.MAX_HOSTS)
        per_node = values.bounded_int(meta.get("gpus_per_node"), "gpus_per_node", 1, 64)
        gpu = planner.gpu_named(values.model_name(meta.get("gpu", ""), "gpu"))
        if gpu is None or gpu.memory_gib <= 0:
            return {}
        spec, _ = target.read(str(job_dir / "spec.yml"), untrusted.job_root(job_dir))
        cluster = planner.Cluster(nodes, per_node, gpu)
        estimate = planner.memory(spec, planner.Layout.of(spec), cluster).total / planner.GIB
    except (OSError, ValueError, KeyError, TypeError, UsageError):
        return {}
    tighter = replace(cluster, gpu=replace(gpu, memory_gib=0.8 * estimate))
    changes = planner.fixes(spec, tighter)[:3]
    context: dict[str, Any] = {"memory": {"per_gpu_gib": round(estimate, 1), "gpu_gib": gpu.memory_gib}}
    if changes:
        context["memory_fix"] = (
            f"the planner put this layout at {estimate:.1f} GiB per GPU of {gpu.memory_gib:g} GiB; changes that lower it by a fifth: "
            + "; ".join(f"{c.field}: {c.value} ({c.memory_gib:.1f} GiB)" for c in changes)
            + " (`megaprov plan` with the changed spec shows the fit)"
        )
    return context


STYLES = {"error": "bold red", "warn": "yellow", "info": "dim"}


def render(report: Report, title: str) -> Table | None:
    rows = report.sorted()
    if not rows:
        return None
    table = Table(title=title, title_justify="left", show_lines=True)
    for column in ("severity", "code", "node", "evidence", "cause", "fix"):
        table.add_column(column, overflow="fold")
    for f in rows:
        where = f"{f.source}:{f.line}: " if f.line else ""
        table.add_row(styled(f.severity, STYLES.get(f.severity, "")), f.code, f.node or "-", where + f.evidence, f.cause, f.fix)
    return table


def as_json(report: Report) -> dict[str, Any]:
    found = report.sorted()
    return {
        "ok": not report.wrong,
        "checked": report.checked,
        "counts": {s: sum(1 for f in found if f.severity == s) for s in ("error", "warn", "info")},
        "findings": [f.as_dict() for f in found],
    }


__all__ = ["Finding", "Report", "as_json", "diagnose_job", "diagnose_logs", "job_context", "render"]
