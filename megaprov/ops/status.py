"""``megaprov status``: the cluster at a glance, from what megaprov recorded and what answers now.

Recorded on this machine: each node's last bootstrap result per stage (every bootstrap adds the stages it ran), the
last doctor findings, the jobs. Asked now (unless ``--recorded``): Slurm's node states (sinfo on the controller,
through Ansible) and, where the observe stage runs, Prometheus's view of the nodes and the firing alerts."""

from __future__ import annotations

from typing import Any

from megaprov import paths, values
from megaprov.cluster import inventory as inv
from megaprov.cluster.history import read_status, status_file
from megaprov.cluster.runner import epoch
from megaprov.errors import MegaprovError
from megaprov.output import Reporter

MAX_SINFO = 1 << 20


def slurm_states(found: inv.Inventory, report: Reporter) -> dict[str, dict[str, str]]:
    """node -> {state, reason} from sinfo on the Slurm controller, or {} where the cluster has no Slurm."""
    if str(found.host_var(found.head, "megaprov_scheduler", "none")) != "slurm":
        return {}
    from megaprov.ops import remote
    from megaprov.training.launchers.slurm import submit_host

    host = submit_host(found)
    text = remote.command_output(
        found.path,
        "cluster_status.yml",
        {"megaprov_status": {"host": host}},
        command="status",
        role="the Slurm controller",
        host=host,
        doing="sinfo failed",
        limit=MAX_SINFO,
        report=report,
    )
    return parse_sinfo(text)


def parse_sinfo(text: str) -> dict[str, dict[str, str]]:
    """sinfo --Node --format=%N|%T|%E lines -> node -> state, reason (a node in several partitions once). Pure."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        node, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        if node.strip() and node.strip() not in out:
            out[values.printable(node.strip())] = {"state": values.printable(state.strip()), "reason": values.printable(reason.strip())}
    return out


def gather(inventory: str, probe: bool, report: Reporter) -> dict[str, Any]:
    from megaprov.ops.doctor import health
    from megaprov.training import jobs

    found = inv.load(inventory, paths.roles_dir(), paths.cluster_defaults())
    recorded = read_status(status_file(found.path))
    stages = recorded.get("stages") or {}
    doctor = health._read_json(health.findings_file(found.path))  # noqa: SLF001 (the same file doctor writes)
    doctor = doctor if isinstance(doctor, dict) else {}  # a damaged file (a list, a number) is no doctor run
    findings = doctor.get("findings") or []
    nodes: dict[str, dict[str, Any]] = {}
    for host in found.hosts:
        nodes[host] = {
            "groups": sorted(g for g in found.hosts[host].groups if g not in ("all", "ungrouped")),
            "stages": {stage: entry["hosts"][host] for stage, entry in stages.items() if host in entry.get("hosts", {})},
            "doctor": sorted({f["code"] for f in findings if isinstance(f, dict) and f.get("node") == host and f.get("severity") == "error"}),
        }
    asked: dict[str, Any] = {}
    problems: list[str] = []
    if probe:
        try:
            slurm = slurm_states(found, report)
            for host, state in slurm.items():
                if host in nodes:
                    nodes[host]["slurm"] = state
            asked["slurm"] = bool(slurm)
        except MegaprovError as exc:
            problems.append(exc.one_line())
        if inv.as_bool(found.host_var(found.head, "megaprov_observe", False)):
            from megaprov.ops import top

            try:
                with top.prometheus(found, None) as url:
                    snap = top.snapshot(url)
                for row in snap.nodes:
                    if row.node in nodes:
                        nodes[row.node]["up"] = row.up
                asked["alerts"] = [{"name": a.name, "severity": a.severity, "where": a.where} for a in snap.alerts]
            except MegaprovError as exc:
                problems.append(exc.one_line())
    try:
        listed = jobs.listing(inventory if probe else None)  # --recorded: the jobs this machine knows, asking no host
    except MegaprovError as exc:
        listed, problems = [], [*problems, exc.one_line()]
    live = ("starting", "running", "submitted")
    errors = [f for f in findings if isinstance(f, dict) and f.get("severity") == "error"]
    return {
        "inventory": str(found.path),
        "last_bootstrap": recorded.get("last"),
        "nodes": nodes,
        # the running jobs, then the five latest of the others (by the time of their start stamp: job.json is the
        # cluster user's to write, in any ISO 8601 form; a job without one counts as oldest)
        "jobs": [j for j in listed if j.get("state") in live]
        + sorted((j for j in listed if j.get("state") not in live), key=lambda j: epoch(j.get("started")) or 0.0, reverse=True)[:5],
        "alerts": asked.get("alerts", []),
        "doctor": {"at": doctor.get("at"), "level": doctor.get("level"), "errors": len(errors)} if doctor else None,
        "asked": sorted(asked),
        "problems": problems,
    }
