"""logs, doctor and top: operating a running cluster."""

from __future__ import annotations

import argparse
import re
import time
from typing import Any

from megaprov.commands.base import Outcome, command, extravars, inventory_flag, need_inventory, note, reporter, upto
from megaprov.errors import ExitCode, UsageError
from megaprov.output import console, write_lines


def register(sub: Any) -> None:
    logs = command(
        sub,
        "logs",
        "logs",
        "the nodes' journals kept on the head (the observe stage), or a job's own log",
        [
            "megaprov logs -i inventory.ini --node gpu01 --since 2h --grep 'Xid|NVRM'",
            "megaprov logs -i inventory.ini --name gpt-lab --grep 'iteration'",
        ],
    )
    inventory_flag(logs)
    logs.add_argument("--node", help="this node's journal only (an inventory host)")
    logs.add_argument("--since", help="from this time: 30m, 2h, 1d before now, or a date and time (2026-12-01 14:30)")
    logs.add_argument("--grep", help="lines matching this regular expression only")
    logs.add_argument("--lines", type=upto(10_000), default=200, help="the last N lines (default 200)")
    logs.add_argument("--name", metavar="NAME", help="the job's own node log instead (as `megaprov job logs`), filtered by --grep")
    logs.add_argument("--job", dest="job_deprecated", metavar="NAME", help=argparse.SUPPRESS)
    logs.set_defaults(handler=_logs)

    doctor = command(
        sub,
        "doctor",
        "doctor",
        "cluster health checks (-i INVENTORY) and failure diagnosis of logs (--log FILE, --name JOB)",
        [
            "megaprov doctor -i inventory.ini                  # passive: seconds",
            "megaprov doctor -i inventory.ini --level deep --node gpu03",
            "megaprov doctor --log node1.log dmesg.txt",
            "megaprov doctor --name gpt-lab                    # a job's logs, with its plan",
        ],
    )
    from megaprov.ops.doctor.findings import LOG_BOUNDS

    doctor.epilog = f"{doctor.epilog}\n\nlogs (--log, --name): {LOG_BOUNDS}"
    inventory_flag(doctor, "check this cluster's nodes (with --name: the cluster the job ran on, to find it)")
    doctor.add_argument(
        "--level", choices=("passive", "quick", "deep"), default="passive", help="passive (seconds, default), quick (a minute), deep (minutes)"
    )
    doctor.add_argument("--node", help="only these nodes (comma-separated inventory hosts)")
    doctor.add_argument(
        "--log", nargs="+", metavar="FILE", help="diagnose these logs (job or node logs, dmesg or journal output); no inventory needed"
    )
    doctor.add_argument("--name", metavar="NAME", help="diagnose this job's node logs (with its plan for the advice)")
    doctor.add_argument("--job", dest="job_deprecated", metavar="NAME", help=argparse.SUPPRESS)
    doctor.add_argument("--drain", action="store_true", help="drain the nodes with error findings in Slurm, their codes as the reason")
    doctor.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VAR=VALUE|@FILE", help="variables (doctor_min_free_gib, ...)")
    doctor.set_defaults(handler=_doctor)

    top = command(
        sub,
        "top",
        "top",
        "live view of nodes, GPUs, running jobs and firing alerts from Prometheus (the observe stage)",
        [
            "megaprov top -i inventory.ini",
            "megaprov top -i inventory.ini --once -o json",
            "megaprov top -i inventory.ini --url http://localhost:9090",
        ],
    )
    inventory_flag(top)
    top.add_argument("--url", help="Prometheus's address (default: the head's, through an SSH tunnel to the head when it cannot be reached directly)")
    top.add_argument("--interval", type=upto(3600), default=5, help="seconds between refreshes (default 5)")
    top.add_argument("--once", action="store_true", help="print one snapshot and exit")
    top.set_defaults(handler=_top)

    status = command(
        sub,
        "status",
        "status",
        "the cluster at a glance: each node's last bootstrap per stage, Slurm's node states, jobs, alerts, doctor's findings",
        [
            "megaprov status -i inventory.ini",
            "megaprov status --recorded          # only what this machine recorded: asks no host",
            "megaprov status -o json",
        ],
    )
    inventory_flag(status)
    status.add_argument("--recorded", action="store_true", help="what this machine recorded only (no Slurm or Prometheus question)")
    status.set_defaults(handler=_status)


def _status(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster.stages import STAGES
    from megaprov.ops import status

    path = need_inventory(args)
    found = status.gather(path, probe=not args.recorded, report=reporter(args))

    def show() -> None:
        from rich.table import Table

        out = console()
        last = found["last_bootstrap"]
        if last:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(last["at"]))
            out.print(f"last bootstrap: {when}, {'ok' if last['ok'] else 'failed: ' + str(last['error'])}", markup=False)
        else:
            out.print("last bootstrap: none recorded on this machine", markup=False)
        order = [stage for stage, _ in STAGES]
        table = Table(title=f"status of {found['inventory']}", title_justify="left")
        for column in ("node", "groups", "stages (last bootstrap)", "slurm", "up", "doctor"):
            table.add_column(column)
        for node, row in found["nodes"].items():
            stages = row["stages"]
            bad = [f"{s} {stages[s]}" for s in order if stages.get(s, "ok") != "ok"]
            done = [s for s in order if stages.get(s) == "ok"]
            text = ("; ".join(bad) + ("; " if bad and done else "")) if bad else ""
            text += f"{len(done)} ok" if done else ("" if bad else "-")
            slurm = row.get("slurm")
            table.add_row(
                node,
                ",".join(row["groups"]),
                text,
                f"{slurm['state']}" + (f" ({slurm['reason']})" if slurm and slurm["reason"] not in ("", "none") else "") if slurm else "-",
                {True: "up", False: "DOWN"}.get(row.get("up"), "-"),
                ",".join(row["doctor"]) or "-",
            )
        out.print(table)
        for job in found["jobs"]:
            out.print(f"job {job['name']}: {job['state']}, verdict {job['verdict'] or '-'}, started {job['started']}", markup=False)
        for alert in found["alerts"]:
            out.print(f"alert {alert['name']} ({alert['severity']}) {alert['where']}", markup=False)
        if found["doctor"]:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(found["doctor"]["at"]))
            out.print(f"doctor: {found['doctor']['errors']} error finding(s) at {when} ({found['doctor']['level']})", markup=False)
        for problem in found["problems"]:
            out.print(f"not asked: {problem}", markup=False)

    return Outcome("status", found, text=show)


def _job_name(args: argparse.Namespace) -> str | None:
    """--name NAME, or the first releases' --job NAME (with a note)."""
    if args.job_deprecated:
        if args.name and args.name != args.job_deprecated:
            raise UsageError(f"two job names: --name {args.name} and --job {args.job_deprecated}", "give --name NAME")
        note(f"`--job NAME` here is deprecated and goes in the next release (--job is a spec file elsewhere): write --name {args.job_deprecated}")
        return str(args.job_deprecated)
    return str(args.name) if args.name else None


def _logs(args: argparse.Namespace) -> Outcome:
    from megaprov import paths
    from megaprov.cluster import inventory as inv
    from megaprov.ops import logs

    name = _job_name(args)
    if name:
        from megaprov.training import jobs

        job = jobs.find(name, args.inventory)
        host, lines = jobs.node_log(job, args.node, args.lines, re.compile(logs.grep_arg(args.grep)) if args.grep else None)
        result: dict[str, Any] = {"job": job.name, "node": host, "lines": lines}
    else:
        path = need_inventory(args, " (or --name JOB for a job's log)")
        found = inv.load(path, paths.roles_dir(), paths.cluster_defaults())
        query = logs.build(found, args.node, args.since, args.grep, args.lines)
        lines = logs.read(path, query, reporter(args))
        result = {"host": query.host, "node": args.node, "lines": lines}
    return Outcome("logs", result, text=lambda: write_lines(lines))


def _doctor(args: argparse.Namespace) -> Outcome:
    from megaprov.ops import doctor
    from megaprov.ops.doctor import health
    from megaprov.ops.doctor.findings import Report

    name = _job_name(args)
    if not (args.inventory or args.log or name):
        from megaprov.commands.base import default_inventory

        found_default = default_inventory()
        if found_default is None:
            raise UsageError(
                "megaprov doctor needs -i INVENTORY, --log FILE or --name JOB",
                "e.g. megaprov doctor -i inventory.ini, or megaprov doctor --log node1.log",
            )
        args.inventory = found_default[0]
    if (args.drain or args.node or args.level != "passive") and (not args.inventory or name):
        raise UsageError("--drain, --node and --level check a cluster", "pass -i INVENTORY without --name (run the job's diagnosis on its own)")
    report = Report()
    titles = []
    if args.inventory and not name:  # with --name, -i only says where the job is
        req = health.Request(args.inventory, args.level, args.node, args.drain, extravars(args.extra_vars), reporter(args))
        found = health.examine(req)
        health.record(args.inventory, found, args.level)
        report.add(*found.findings)
        report.checked += found.checked
        titles.append(f"{args.level} checks of {len(found.checked)} node(s)")
    if name:
        found = doctor.diagnose_job(name, args.inventory)
        report.add(*found.findings)
        report.checked += found.checked
        titles.append(f"job {name}'s logs")
    if args.log:
        found = doctor.diagnose_logs(args.log)
        report.add(*found.findings)
        report.checked += found.checked
        titles.append(f"{len(args.log)} log file(s)")
    drained: dict[str, str] = {}
    if args.drain:
        drained = health.drain(req, report)
    result = {**doctor.as_json(report), "drained": drained}

    def show() -> None:
        out = console()
        table = doctor.render(report, "megaprov doctor: " + ", ".join(titles))
        if table is None:
            out.print(f"megaprov doctor: nothing wrong ({', '.join(titles)})", markup=False)
        else:
            out.print(table)
            counts = result["counts"]
            out.print(f"{counts['error']} error(s), {counts['warn']} warning(s), {counts['info']} note(s)", markup=False)
        for node, reason in drained.items():
            out.print(f"drained {node} in Slurm: {reason}", markup=False)

    if report.wrong:
        worst = report.sorted()[0]
        # the same cause, the same code in every command: a node that does not answer is exit 4, as in bootstrap
        unreachable = any(f.code == "NODE_UNREACHABLE" for f in report.findings)
        code = ExitCode.UNREACHABLE if unreachable else ExitCode.VERDICT_FAILED
        return Outcome("doctor", result, code, f"{worst.code} on {worst.node or worst.source}: {worst.cause}", text=show)
    return Outcome("doctor", result, text=show)


def _top(args: argparse.Namespace) -> Outcome:
    from megaprov import paths
    from megaprov.cluster import inventory as inv
    from megaprov.ops import top

    path = need_inventory(args)
    found = inv.load(path, paths.roles_dir(), paths.cluster_defaults())
    with top.prometheus(
        found, args.url, lambda text: console(stderr=True).print(f"top: {text}", markup=False) if args.output == "text" else None
    ) as url:
        if args.once or args.output == "json":
            snap = top.snapshot(url)
            return Outcome("top", snap.as_dict(), text=lambda: console().print(top.render(snap)))
        from rich.live import Live

        with Live(top.render(top.snapshot(url)), console=console(), refresh_per_second=1, screen=False) as live:
            while True:
                time.sleep(args.interval)
                live.update(top.render(top.snapshot(url)))
