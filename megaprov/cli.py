"""The megaprov command line: parse, call, render. Nothing else lives here."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml

from megaprov import __version__
from megaprov.cluster.runner import STRATEGIES
from megaprov.errors import ExitCode, MegaprovError, UsageError
from megaprov.output import console, envelope, print_json

PROG = "megaprov"


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message}", f"see `{self.prog} --help`")


@dataclass
class Outcome:
    """What a command returns: its JSON result, human lines already printed, and the exit code."""

    command: str
    result: Any = field(default_factory=dict)
    code: ExitCode = ExitCode.OK
    error: str | None = None
    quiet: bool = False  # the command printed its own document (no envelope)


def _extravars(values: list[str]) -> dict[str, Any]:
    from megaprov import values as typed

    out: dict[str, Any] = {}
    for raw in values:
        if raw.startswith("@"):
            path = Path(raw[1:])
            if not path.exists() and not path.is_symlink():
                raise UsageError(f"-e {raw}: file {path} does not exist", "pass -e @FILE with an existing YAML file")
            text = typed.read_text(path, f"-e {raw}: file")
            try:
                data = typed.yaml_data(text, f"-e {raw}")
            except yaml.YAMLError as exc:
                raise UsageError(f"-e {raw}: invalid YAML ({exc.__class__.__name__})", "fix the file's YAML syntax") from None
            if not isinstance(data, dict):
                raise UsageError(f"-e {raw}: must hold a mapping of name: value", "write name: value lines")
            out.update(data)  # names and values are checked with every other -e (provision.prepare)
            continue
        key, sep, value = raw.partition("=")
        if not sep or not typed.VARIABLE.fullmatch(key):
            raise UsageError(f"-e {raw!r} is not KEY=VALUE", "write -e name=value (or -e @vars.yml)")
        try:
            out[key] = yaml.safe_load(value) if value else ""
        except (yaml.YAMLError, ValueError, RecursionError):
            out[key] = value
        if not isinstance(out[key], (str, int, float, bool, list, dict)) and out[key] is not None:
            out[key] = value  # a date or a binary: the text as given
    return out


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _upto(high: int) -> Any:
    """A whole number from 1 to ``high``: every size flag is bounded by what a real cluster can have."""

    def parse(text: str) -> int:
        value = _positive(text) if len(text) <= 20 else high + 1
        if value > high:
            raise argparse.ArgumentTypeError(f"{text[:24]!r} is more than {high:,}")
        return value

    parse.__name__ = "number"
    return parse


class _Version(argparse.Action):
    """``--version``: megaprov's, the collection's it runs (and where), ansible-core's and Python's."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help="show versions and exit")

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None) -> None:
        from megaprov.selfcheck import version_lines

        print("\n".join(version_lines()))
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Provision GPU machines into a verified Megatron-LM training cluster.")
    parser.add_argument("--version", action=_Version)
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def run_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("inventory", help="INI inventory (megaprov lab up writes one)")
        p.add_argument("--limit", help="only these hosts/groups (Ansible pattern)")
        p.add_argument("-e", "--extra-vars", action="append", default=[], metavar="KEY=VALUE", help="set a variable (or @file.yml)")
        p.add_argument("--forks", type=_upto(1000), help="parallel hosts (default from ansible.cfg)")
        p.add_argument(
            "--strategy",
            choices=STRATEGIES,
            default=os.environ.get("MEGAPROV_STRATEGY", "linear"),
            help="Ansible strategy; mitogen is faster, opt-in (env MEGAPROV_STRATEGY)",
        )
        p.add_argument("--output", choices=("text", "json"), default="text")
        p.add_argument("--flush-cache", action="store_true", help="forget cached facts (after a node was reinstalled or readdressed)")
        p.add_argument("-v", "--verbose", action="count", default=0, help="more Ansible output in the artifacts")

    boot = sub.add_parser("bootstrap", help="provision and validate the cluster")
    run_flags(boot)
    boot.add_argument("--tags", default="", help="only these stages/roles (comma separated)")
    boot.add_argument("--skip-tags", default="", help="skip these stages/roles")
    boot.add_argument("--check", action="store_true", help="dry run: report what would change")
    boot.add_argument("--diff", action="store_true", help="show file differences")
    boot.add_argument(
        "--bundle",
        metavar="DIR",
        help="offline bundle (megaprov bundle build): checked against its manifest and the inventory before anything is applied",
    )
    boot.add_argument(
        "--verify", action="store_true", help="run every verification again, even those a recorded proof with unchanged inputs already passed"
    )

    pre = sub.add_parser("preflight", help="collect node facts and judge them against the requirements")
    run_flags(pre)

    selfcheck = sub.add_parser("self-check", help="check this machine's megaprov install: Python, ansible-core, the collection, ssh, podman")
    selfcheck.add_argument("--output", choices=("text", "json"), default="text")

    lab = sub.add_parser("lab", help="local container lab of cluster nodes")
    lab_sub = lab.add_subparsers(dest="lab_command", metavar="ACTION", parser_class=_Parser)
    lab_up = lab_sub.add_parser("up", help="start N nodes and write their inventory")
    lab_up.add_argument("--nodes", type=_positive, default=2)
    lab_up.add_argument("--name", default="default")
    lab_up.add_argument("--output", choices=("text", "json"), default="text")
    lab_image = lab_sub.add_parser("image", help="build the node image (cached)")
    lab_image.add_argument("--output", choices=("text", "json"), default="text")
    lab_status = lab_sub.add_parser("status", help="list lab nodes")
    lab_status.add_argument("--output", choices=("text", "json"), default="text")
    lab_inventory = lab_sub.add_parser("inventory", help="print the path of a lab's inventory (for scripts)")
    lab_inventory.add_argument("--name", default="default")
    lab_inventory.add_argument("--output", choices=("text", "json"), default="text")
    lab_down = lab_sub.add_parser("down", help="remove what lab up made")
    _job_parsers(sub)
    _bundle_parsers(sub)
    lab_down.add_argument("--name", default="default")
    lab_down.add_argument("--output", choices=("text", "json"), default="text")
    for action, text in (("stop", "stop one node (its disk and address stay)"), ("start", "start a stopped node; wait for boot and SSH")):
        lab_node = lab_sub.add_parser(action, help=text)
        lab_node.add_argument("node", metavar="NODE", help="inventory name of the node, e.g. node3")
        lab_node.add_argument("--name", default="default")
        lab_node.add_argument("--output", choices=("text", "json"), default="text")
    return parser


def _bundle_parsers(sub: Any) -> None:
    bundle = sub.add_parser("bundle", help="offline bundle for air-gapped sites: what the bootstrap fetches, with a manifest")
    bundle_sub = bundle.add_subparsers(dest="bundle_command", metavar="ACTION", parser_class=_Parser)
    build = bundle_sub.add_parser("build", help="collect what the inventory's bootstrap fetches (apt, wheels, git) into a new directory")
    build.add_argument("-i", "--inventory", required=True, help="the cluster's inventory")
    # --output names the bundle's directory here; the report's format is --format.
    build.add_argument("--output", dest="directory", required=True, metavar="DIR", help="new directory for the bundle")
    build.add_argument("--distribution", default="debian-12", help="the nodes' distribution: debian-12 (default), ubuntu-22.04, ubuntu-24.04")
    build.add_argument("--arch", default="amd64", help="the nodes' architecture: amd64 (default) or arm64")
    build.add_argument("--security-mirror", help="the distribution's security archive ('' for none; default: the distribution's own)")
    build.add_argument("--format", dest="output", choices=("text", "json"), default="text", help="json: one JSON document on stdout")
    verify = bundle_sub.add_parser("verify", help="check a bundle's files against its manifest, and its versions against an inventory")
    verify.add_argument("directory", metavar="DIR")
    verify.add_argument("-i", "--inventory", help="also check that the bundle holds the versions this inventory asks for")
    verify.add_argument("--output", choices=("text", "json"), default="text", help="json: one JSON document on stdout")


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{value} must be above 0 and at most 1")
    return value


def _job_parsers(sub: Any) -> None:
    def output(p: argparse.ArgumentParser) -> None:
        p.add_argument("--output", choices=("text", "json"), default="text", help="json: one JSON document on stdout")

    def shape(p: argparse.ArgumentParser) -> None:
        p.add_argument("-i", "--inventory", help="cluster inventory: training nodes are [gpu_nodes]")
        p.add_argument("--nodes", type=_upto(10_000), help="nodes (default: the spec's launch.nodes)")
        p.add_argument("--gpus-per-node", type=_upto(64), help="GPUs per node (default: inventory, then launch.gpus_per_node)")
        p.add_argument("--gpu", help="GPU model, e.g. H100-SXM, H200, A100-80GB (default: the inventory's megaprov_gpu_model)")

    job = sub.add_parser("job", help="job spec (schema, check) and running jobs (status, logs, stop)")
    job_sub = job.add_subparsers(dest="job_command", metavar="ACTION", parser_class=_Parser)
    for action, text in (("status", "state, progress and verdict of a job"), ("logs", "print a node's log"), ("stop", "stop a job on every node")):
        p = job_sub.add_parser(action, help=text)
        p.add_argument("name", metavar="JOB")
        p.add_argument("-i", "--inventory", help="the cluster's inventory (default: the one the job was started with)")
        if action == "logs":
            p.add_argument("--node", help="this node's log (default: the last node, where the last rank prints)")
            p.add_argument("--lines", type=_upto(1_000_000), default=50, help="last N lines")
        output(p)
    schema = job_sub.add_parser("schema", help="print the JSON Schema of gpt.yml")
    schema.add_argument("--output", choices=("json",), default="json", help=argparse.SUPPRESS)
    check = job_sub.add_parser("check", help="validate a job spec (and its fit on a cluster)")
    check.add_argument("spec", metavar="JOB.yml")
    shape(check)
    output(check)

    plan = sub.add_parser("plan", help="parallelism, parameters, FLOPs, memory per GPU and fit")
    plan.add_argument("--job", required=True, metavar="JOB.yml")
    shape(plan)
    plan.add_argument("--mfu", type=_fraction, help="model FLOPs utilisation to assume for large GEMMs (default 0.5)")
    plan.add_argument("--suggest", action="store_true", help="rank the layouts that fit by estimated throughput")
    plan.add_argument("--top", type=_upto(1000), default=10, help="layouts to list with --suggest")
    output(plan)

    train = sub.add_parser("train", help="start a training job on the cluster, follow it and judge it")
    train.add_argument("--job", metavar="JOB.yml", help="the job spec (not with --resume)")
    shape(train)
    train.add_argument("--name", help="job name (default: the spec's name)")
    train.add_argument("--resume", metavar="JOB", help="start an existing job again; it continues from its latest checkpoint")
    train.add_argument("--detach", action="store_true", help="start and return; follow later with `megaprov job status`")
    train.add_argument(
        "--stall-timeout", type=_upto(7 * 86400), default=600, help="seconds without output from any node before giving up (default 600)"
    )
    train.add_argument("--dry-run", action="store_true", help="render and print, start nothing")
    train.add_argument(
        "--exclude-unhealthy",
        action="store_true",
        help="leave out the nodes with error findings in the last `megaprov doctor -i INVENTORY` (within 24 h)",
    )
    train.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default=os.environ.get("MEGAPROV_STRATEGY", "linear"),
        help="Ansible strategy of the launch (mitogen: faster)",
    )
    output(train)

    logs = sub.add_parser("logs", help="the nodes' journals kept on the head (the observe stage), or a job's own log")
    logs.add_argument("-i", "--inventory", required=True, help="the cluster's inventory")
    logs.add_argument("--node", help="this node's journal only (an inventory host)")
    logs.add_argument("--since", help="from this time: 30m, 2h, 1d before now, or a date and time (2026-12-01 14:30)")
    logs.add_argument("--grep", help="lines matching this regular expression only")
    logs.add_argument("--lines", type=_upto(10_000), default=200, help="the last N lines (default 200)")
    logs.add_argument("--job", metavar="JOB", help="the job's own node log instead (as `megaprov job logs`), filtered by --grep")
    output(logs)

    doctor = sub.add_parser("doctor", help="cluster health checks (-i INVENTORY) and failure diagnosis of logs (--log FILE, --job NAME)")
    doctor.add_argument("-i", "--inventory", help="check this cluster's nodes (with --job: the cluster the job ran on, to find it)")
    doctor.add_argument(
        "--level", choices=("passive", "quick", "deep"), default="passive", help="passive (seconds, default), quick (a minute), deep (minutes)"
    )
    doctor.add_argument("--node", help="only these nodes (comma-separated inventory hosts)")
    doctor.add_argument(
        "--log", nargs="+", metavar="FILE", help="diagnose these logs (job or node logs, dmesg or journal output); no inventory needed"
    )
    doctor.add_argument("--job", metavar="NAME", help="diagnose this job's node logs (with its plan for the advice)")
    doctor.add_argument("--drain", action="store_true", help="drain the nodes with error findings in Slurm, their codes as the reason")
    doctor.add_argument("-e", "--extra-vars", action="append", default=[], metavar="VAR=VALUE|@FILE", help="variables (doctor_min_free_gib, ...)")
    output(doctor)

    top = sub.add_parser("top", help="live view of nodes, GPUs, running jobs and firing alerts from Prometheus (the observe stage)")
    top.add_argument("-i", "--inventory", required=True, help="the cluster's inventory")
    top.add_argument("--url", help="Prometheus's address (default: the head's, from the inventory), e.g. through an SSH tunnel")
    top.add_argument("--interval", type=_upto(3600), default=5, help="seconds between refreshes (default 5)")
    top.add_argument("--once", action="store_true", help="print one snapshot and exit")
    output(top)

    jobs = sub.add_parser("jobs", help="list training jobs")
    jobs.add_argument("-i", "--inventory", help="also list the jobs in this cluster's shared directory")
    output(jobs)

    data = sub.add_parser("data", help="dataset preparation")
    data_sub = data.add_subparsers(dest="data_command", metavar="ACTION", parser_class=_Parser)
    prep = data_sub.add_parser("prepare", help="JSONL -> Megatron .bin/.idx (megatron-core IndexedDatasetBuilder)")
    prep.add_argument("--input", nargs="+", required=True, metavar="FILE.jsonl")
    prep.add_argument("--output-prefix", required=True, help="writes PREFIX_<key>_document.bin/.idx")
    prep.add_argument("--tokenizer", choices=("byte", "gpt2-bpe", "huggingface"), default="byte")
    prep.add_argument("--vocab-file", help="GPT-2 vocab.json (gpt2-bpe)")
    prep.add_argument("--merge-file", help="GPT-2 merges.txt (gpt2-bpe)")
    prep.add_argument("--tokenizer-path", help="tokenizer.json or its directory (huggingface)")
    prep.add_argument("--eod-token", help="end-of-document token (default: <|endoftext|>, </s>, ...)")
    prep.add_argument("--json-keys", nargs="+", default=["text"], help="JSON fields to tokenise (default: text)")
    prep.add_argument("--workers", type=_upto(256), default=1, help="tokenising processes")
    prep.add_argument("--no-append-eod", dest="append_eod", action="store_false", help="do not end each document with the EOD token")
    prep.add_argument("-i", "--inventory", help="a relative --output-prefix goes into this cluster's shared directory")
    output(prep)
    corpus = data_sub.add_parser("corpus", help="generate a small synthetic JSONL corpus (the lab's quick start)")
    corpus.add_argument("--output-file", required=True, metavar="FILE.jsonl")
    corpus.add_argument("--documents", type=_upto(100_000_000), default=2000)
    corpus.add_argument("--seed", type=int, default=1234)
    output(corpus)


def _unhealthy(args: argparse.Namespace) -> tuple[str, ...]:
    """The nodes `train --exclude-unhealthy` leaves out: those with error findings in the last doctor run (24 h)."""
    if not args.exclude_unhealthy:
        return ()
    from megaprov.ops.doctor import health

    unhealthy, age = health.unhealthy_nodes(args.inventory)
    if age is None:
        raise UsageError("--exclude-unhealthy: megaprov doctor has not checked this cluster", f"run `megaprov doctor -i {args.inventory}` first")
    if age > health.FINDINGS_VALID_S:
        raise UsageError(f"--exclude-unhealthy: the last doctor run is {age / 3600:.0f} h old", f"run `megaprov doctor -i {args.inventory}` again")
    if unhealthy and args.output == "text":
        console(stderr=True).print(
            f"train: leaving out {', '.join(unhealthy)} (error findings of megaprov doctor {age / 60:.0f} min ago)", markup=False
        )
    return tuple(unhealthy)


def _spec_and_cluster(args: argparse.Namespace, path: str) -> tuple[Any, Any, list[tuple[str, str]]]:
    from megaprov.training import launch

    spec, text = launch.read(path)
    found, hosts = launch.cluster(spec, args.inventory, launch.Shape(args.nodes, args.gpus_per_node, args.gpu))
    launch.check(spec, text, path, found.world, found.gpus_per_node)
    return spec, found, hosts


def _cmd_job(args: argparse.Namespace) -> Outcome:
    from megaprov.training import jobspec, launch

    if args.job_command == "schema":
        print(json.dumps(jobspec.schema(), indent=2))
        return Outcome("job schema", None, quiet=True)
    if args.job_command == "check":
        world = None
        if args.inventory or args.nodes or args.gpus_per_node:
            spec, found, _ = _spec_and_cluster(args, args.spec)
            world = found.world
        else:
            spec, text = launch.read(args.spec)
            launch.check(spec, text, args.spec, None, None)
        if args.output == "text":
            where = f" on {world} GPUs" if world else ""
            console().print(f"{args.spec}: valid job {spec.name}{where}", markup=False)
        return Outcome("job check", {"job": spec.name, "valid": True, "world": world})
    if args.job_command in ("status", "logs", "stop"):
        return _cmd_job_running(args)
    raise UsageError("megaprov job: missing ACTION", "use `megaprov job check JOB.yml`, `job schema`, `job status|logs|stop JOB`")


def _cmd_plan(args: argparse.Namespace) -> Outcome:
    import time

    from megaprov.training import jobview, planner

    spec, found, _ = _spec_and_cluster(args, args.job)
    mfu = args.mfu or planner.default_mfu(found)
    if args.suggest:
        start = time.perf_counter()
        ranked = planner.suggest(spec, found, mfu, args.top)
        seconds = time.perf_counter() - start
        if args.output == "text":
            jobview.render_suggest(ranked, seconds)
        result = {"layouts": jobview.candidates_dict(ranked), "seconds": seconds}
        if not ranked:
            return Outcome("plan", result, ExitCode.VERDICT_FAILED, f"{spec.name}: no layout fits {found.world} x {found.gpu.name}")
        return Outcome("plan", result)
    planned = planner.plan(spec, found, mfu)
    if args.output == "text":
        jobview.render_plan(planned)
    if planned.fits is False:
        fixes = "; ".join(f.render() for f in planned.fixes) or "none alone: run megaprov plan --suggest"
        need, have = planned.memory.total / planner.GIB, planned.memory.capacity / planner.GIB
        error = f"{spec.name} needs {need:.1f} GiB per GPU, {found.gpu.name} has {have:.1f}: fixes: {fixes}"
        return Outcome("plan", jobview.plan_dict(planned), ExitCode.VERDICT_FAILED, error)
    return Outcome("plan", jobview.plan_dict(planned))


def process_started() -> float | None:
    """When this process started (epoch seconds, from /proc: its start-up and imports count), or None off Linux."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _cmd_train(args: argparse.Namespace) -> Outcome:
    import time

    from megaprov.training import jobs, jobview, launch, planner, render
    from megaprov.training.jobspec import NAME_PATTERN

    # "From megaprov train": the process's own start (interpreter, imports) counts; bounded, in case /proc says nonsense.
    now = time.time()
    since = max(process_started() or now, now - 30)
    if args.resume:
        if args.job or args.name:
            raise UsageError("--resume JOB takes the spec stored with the job", "drop --job/--name, or start a new job without --resume")
        found_job = jobs.find(args.resume, args.inventory)
        args.inventory = args.inventory or str(found_job.inventory)
        spec_path = str(found_job.local_dir / "spec.yml")
    elif not args.job:
        raise UsageError("megaprov train needs --job JOB.yml", "or --resume JOB to continue a job")
    else:
        spec_path = args.job
    if not args.inventory:
        raise UsageError("megaprov train needs -i INVENTORY", "pass the cluster's inventory (megaprov lab up writes one)")
    if args.name and not NAME_PATTERN.fullmatch(args.name):
        raise UsageError(
            f"--name {args.name!r} is not a job name", "use lowercase letters, digits, '.', '_' and '-' (up to 63), starting with a letter or digit"
        )
    spec, text = launch.read(spec_path)
    if args.name:
        spec = spec.model_copy(update={"name": args.name})
    found, hosts = launch.cluster(spec, args.inventory, launch.Shape(args.nodes, args.gpus_per_node, args.gpu, _unhealthy(args)))
    launch.check(spec, text, spec_path, found.world, found.gpus_per_node)
    planned = planner.plan(spec, found)
    if planned.fits is False:
        fixes = "; ".join(f.render() for f in planned.fixes) or "run megaprov plan --suggest"
        need, have = planned.memory.total / planner.GIB, planned.memory.capacity / planner.GIB
        error = f"{spec.name} does not fit: {need:.1f} GiB per GPU of {have:.1f}; fixes: {fixes}"
        return Outcome("train", jobview.plan_dict(planned), ExitCode.VERDICT_FAILED, error)
    rendered = render.render(spec, found, hosts, dict(os.environ))
    if args.dry_run:
        if args.output == "text":
            jobview.render_dry_run(rendered)
        return Outcome("train", {"plan": jobview.plan_dict(planned), "launch": rendered})
    if args.name:  # the stored spec carries the job's name, so that --resume finds the same job
        text = jobview.renamed(text, args.name)
    quiet = args.output == "json"
    out, err = console(), console(stderr=True)
    job = jobs.start(spec, text, found, planned, jobview.plan_dict(planned), rendered, args.inventory, bool(args.resume), quiet, args.strategy)
    launched = time.time()
    if not quiet and job.launcher == "slurm":
        err.print(
            f"train: job {job.name} submitted to Slurm as job {job.slurm_id} on {job.submit_host} (continued in a new allocation after a "
            f"failure, up to {spec.launch.max_restarts} times, and at its time limit) in {launched - since:.1f} s; job directory {job.job_dir}",
            markup=False,
        )
    elif not quiet:
        err.print(
            f"train: job {job.name} started on {', '.join(job.hosts)} (restarts: up to {spec.launch.max_restarts}, "
            f"after {jobs.RESTART_SEC} s) in {launched - since:.1f} s; job directory {job.job_dir}",
            markup=False,
        )
    if args.detach:
        if not quiet:
            out.print(
                f"job {job.name} runs detached: `megaprov job status {job.name}`, `megaprov job logs {job.name}`, `megaprov job stop {job.name}`",
                markup=False,
            )
        return Outcome("train", {"job": job.name, "job_dir": job.job_dir, "state": "running", "slurm_job_id": job.slurm_id or None})

    def progress(p: jobs.Progress) -> None:
        if not quiet:
            err.print(jobview.progress_text(p), markup=False)

    def waiting(text: str) -> None:
        if not quiet:
            err.print(f"train: {text}", markup=False)

    outcome = jobs.follow_job(
        job,
        spec.model.seq_length,
        progress,
        float(args.stall_timeout),
        log_interval=spec.train.log_interval,
        on_waiting=waiting,
        targets=jobs.metrics_targets(spec, planned),
    )
    if outcome.state == "detached":
        if not quiet:
            err.print(
                f"train: detached; job {job.name} keeps running: `megaprov job status {job.name}` or `megaprov job stop {job.name}`", markup=False
            )
        return Outcome("train", {"job": job.name, "state": "running"}, ExitCode.INTERRUPTED, None)
    timing: dict[str, Any] = {"megaprov_start_to_units_started_s": round(launched - since, 2)}
    if not args.resume:  # a resumed job's log starts with the earlier attempts
        timing.update(jobs.first_start_seconds(outcome.log, since))
    judged, report, paths = jobs.conclude(job, spec, planned, outcome, found.gpu.name != "cpu", timing)
    if not quiet:
        jobview.render_verdict(judged, report, paths)
    result = {"job": job.name, "verdict": report["verdict"], "report": {k: str(v) for k, v in paths.items()}, "checks": report["checks"]}
    if judged.passed:
        return Outcome("train", result)
    return Outcome("train", result, ExitCode.VERDICT_FAILED, f"job {job.name} failed its verdict: " + "; ".join(judged.reasons()))


def _cmd_jobs(args: argparse.Namespace) -> Outcome:
    from megaprov import values as typed
    from megaprov.training import jobs

    rows = jobs.listing(args.inventory)
    # a job that ended while nobody followed it (--detach) gets its verdict whenever its state is read
    unjudged = [r["name"] for r in rows if r["state"] in ("starting", "running") and r["verdict"] is None]
    if [name for name in unjudged if jobs.settle(jobs.find(name, args.inventory))]:
        rows = jobs.listing(args.inventory)
    if args.output == "text":
        out = console()
        if not rows:
            out.print("no jobs known here (pass -i INVENTORY to look in a cluster's shared directory)", markup=False)
        for r in rows:
            out.print(
                f"{r['name']}: {r['state']}, verdict {r['verdict'] or '-'}, {r['nodes']} node(s), started {r['started']}, "
                + (f"Slurm job {r['slurm_job_id']}, " if r.get("slurm_job_id") else "")
                + typed.printable(str(r["job_dir"])),
                markup=False,
            )
    return Outcome("jobs", {"jobs": rows})


def _cmd_logs(args: argparse.Namespace) -> Outcome:
    from megaprov import paths
    from megaprov.cluster import inventory as inv
    from megaprov.ops import logs

    quiet = args.output == "json"
    if args.job:
        from megaprov.training import jobs

        job = jobs.find(args.job, args.inventory)
        host, lines = jobs.node_log(job, args.node, args.lines, re.compile(logs.grep_arg(args.grep)) if args.grep else None)
        result: dict[str, Any] = {"job": job.name, "node": host, "lines": lines}
    else:
        found = inv.load(args.inventory, paths.roles_dir(), paths.cluster_defaults())
        query = logs.build(found, args.node, args.since, args.grep, args.lines)
        lines = logs.read(args.inventory, query, quiet)
        result = {"host": query.host, "node": args.node, "lines": lines}
    if not quiet:
        print("\n".join(lines))
    return Outcome("logs", result, quiet=not quiet)


def _cmd_doctor(args: argparse.Namespace) -> Outcome:
    from megaprov.ops import doctor
    from megaprov.ops.doctor import health
    from megaprov.ops.doctor.findings import Report

    if not (args.inventory or args.log or args.job):
        raise UsageError(
            "megaprov doctor needs -i INVENTORY, --log FILE or --job NAME",
            "e.g. megaprov doctor -i inventory.ini, or megaprov doctor --log node1.log",
        )
    if (args.drain or args.node or args.level != "passive") and (not args.inventory or args.job):
        raise UsageError("--drain, --node and --level check a cluster", "pass -i INVENTORY without --job (run the job's diagnosis on its own)")
    quiet = args.output == "json"
    report = Report()
    titles = []
    if args.inventory and not args.job:  # with --job, -i only says where the job is
        req = health.Request(args.inventory, args.level, args.node, args.drain, _extravars(args.extra_vars), quiet)
        found = health.examine(req)
        health.record(args.inventory, found, args.level)
        report.add(*found.findings)
        report.checked += found.checked
        titles.append(f"{args.level} checks of {len(found.checked)} node(s)")
    if args.job:
        found = doctor.diagnose_job(args.job, args.inventory)
        report.add(*found.findings)
        report.checked += found.checked
        titles.append(f"job {args.job}'s logs")
    if args.log:
        found = doctor.diagnose_logs(args.log)
        report.add(*found.findings)
        report.checked += found.checked
        titles.append(f"{len(args.log)} log file(s)")
    drained: dict[str, str] = {}
    if args.drain:
        drained = health.drain(req, report)
    result = {**doctor.as_json(report), "drained": drained}
    if not quiet:
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
        return Outcome("doctor", result, ExitCode.VERDICT_FAILED, f"{worst.code} on {worst.node or worst.source}: {worst.cause}")
    return Outcome("doctor", result)


def _cmd_top(args: argparse.Namespace) -> Outcome:
    from megaprov import paths
    from megaprov.cluster import inventory as inv
    from megaprov.ops import top

    found = inv.load(args.inventory, paths.roles_dir(), paths.cluster_defaults())
    url = top.prometheus_url(found, args.url)
    if args.once or args.output == "json":
        snap = top.snapshot(url)
        if args.output == "text":
            console().print(top.render(snap))
        return Outcome("top", snap.as_dict())
    from rich.live import Live

    with Live(top.render(top.snapshot(url)), console=console(), refresh_per_second=1, screen=False) as live:
        while True:
            time.sleep(args.interval)
            live.update(top.render(top.snapshot(url)))


def _cmd_job_running(args: argparse.Namespace) -> Outcome:
    from megaprov.training import jobs, jobview

    job = jobs.find(args.name, args.inventory)
    quiet = args.output == "json"
    out = console()
    if args.job_command == "stop":
        jobs.stop(job, quiet)
        where = f"Slurm job {job.slurm_id}" if job.launcher == "slurm" else ", ".join(job.hosts)
        if not quiet:
            out.print(
                f"job {job.name}: stopped on {where} (ranks save a checkpoint on SIGTERM; `megaprov train --resume {job.name}` continues)",
                markup=False,
            )
        return Outcome("job stop", {"job": job.name, "state": "stopped"})
    if args.job_command == "logs":
        host, lines = jobs.node_log(job, args.node, args.lines)
        if not quiet:
            print("\n".join(lines))
        return Outcome("job logs", {"job": job.name, "node": host, "lines": lines}, quiet=not quiet)
    meta, status = jobview.job_status(job, jobs.unit_states(job, quiet=True))
    if not quiet:
        jobview.render_job_status(meta, status)
    return Outcome("job status", {**meta, **status})


def _shared_prefix(inventory: str, prefix: str) -> str:
    """A relative --output-prefix lands in the cluster's shared directory, where this machine sees it."""
    from megaprov import values as typed
    from megaprov.training import jobs

    if prefix.startswith("/"):
        raise UsageError(f"--output-prefix {prefix} is absolute but -i puts it under the shared directory", "give a relative prefix, e.g. data/lab")
    relative = typed.relative_path(prefix, "--output-prefix")
    root = jobs.shared_view(inventory).resolve()
    path = root / relative
    # A link inside the shared directory (the cluster user can make one) must not lead the output out of it.
    parent = path.parent.resolve()
    if not typed.inside(str(parent), str(root)):
        raise UsageError(f"--output-prefix {prefix}: {path.parent} leads outside the shared directory {root}", "give a prefix inside it")
    from megaprov.owner import as_owner_of

    existing = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    try:
        with as_owner_of(existing):  # the cluster user's directories, as on the nodes (root is squashed there)
            path.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(
            f"--output-prefix {prefix}: cannot create {path.parent} ({exc.strerror})",
            "check the shared directory's permissions",
        ) from None
    return str(path)


def _cmd_data(args: argparse.Namespace) -> Outcome:
    from megaprov.training import data, jobview

    if args.data_command not in ("prepare", "corpus"):
        raise UsageError("megaprov data: missing ACTION", "use `megaprov data prepare` or `megaprov data corpus`")
    err = console(stderr=True)
    quiet = args.output == "json"
    if args.data_command == "corpus":
        size = data.synthetic_corpus(Path(args.output_file), args.documents, args.seed)
        if not quiet:
            console().print(f"data: {args.documents:,} documents, {size:,} bytes in {args.output_file}", markup=False)
        return Outcome("data corpus", {"file": args.output_file, "documents": args.documents, "bytes": size})
    data.check_arguments(args.input, args.output_prefix, args.json_keys, args.workers)  # before the slow imports
    if args.inventory:
        args.output_prefix = _shared_prefix(args.inventory, args.output_prefix)

    def progress(p: Any) -> None:
        if not quiet:
            err.print(jobview.progress_line(p), markup=False)

    spec = data.TokenizerSpec(args.tokenizer, args.vocab_file, args.merge_file, args.tokenizer_path, args.eod_token)
    result = data.prepare(args.input, args.output_prefix, spec, args.json_keys, args.workers, args.append_eod, progress, progress_every=5.0)
    if not quiet:
        jobview.render_prepare(result)
    p = result.progress
    return Outcome(
        "data prepare",
        {
            "prefixes": result.prefixes,
            "files": result.files,
            "tokenizer": result.tokenizer,
            "vocab_size": result.vocab_size,
            "eod": result.eod,
            "workers": result.workers,
            "documents": p.docs,
            "tokens": p.tokens,
            "bytes": p.bytes_in,
            "skipped_empty": p.skipped_empty,
            "seconds": p.seconds,
            "docs_per_second": p.docs_per_second,
            "tokens_per_second": p.tokens_per_second,
        },
    )


def _cmd_lab(args: argparse.Namespace) -> Outcome:
    if not args.lab_command:
        raise UsageError("megaprov lab: missing ACTION", "use `megaprov lab up`, `lab status`, `lab inventory`, `lab stop|start NODE` or `lab down`")
    import time

    from megaprov.cluster import lab
    from megaprov.paths import state_dir

    root = state_dir()
    out, err = console(), console(stderr=True)
    quiet = args.output == "json"

    def progress(message: str) -> None:
        if not quiet:
            err.print(f"lab: {message}", markup=False)

    if args.lab_command == "up":
        inventory, members = lab.up(root, args.name, args.nodes, progress)
        if not quiet:
            out.print(f"lab {args.name}: {len(members)} node(s) up; inventory: {inventory}", markup=False)
        return Outcome("lab up", {"name": args.name, "inventory": str(inventory), "nodes": members})
    if args.lab_command == "image":
        tag = lab.ensure_image(progress)
        if not quiet:
            out.print(f"lab: node image {tag}", markup=False)
        return Outcome("lab image", {"image": tag})
    if args.lab_command == "status":
        found = lab.labs()
        if not quiet:
            if not found:
                out.print("no lab is running")
            for name, members in found.items():
                out.print(f"lab {name}: " + ", ".join(f"{n.name} {n.address or '-'} {n.state}" for n in members), markup=False)
                out.print(f"  inventory: {lab.inventory_path(root, name)}", markup=False)
        # the JSON document keeps its shape (name -> nodes); `lab inventory --output json` gives the path
        return Outcome("lab status", {name: members for name, members in found.items()})
    if args.lab_command == "inventory":
        path = lab.inventory_path(root, args.name)
        if not path.is_file():
            raise UsageError(f"lab {args.name}: no inventory at {path}", f"start the lab with `megaprov lab up --name {args.name}`")
        if not quiet:
            out.print(str(path), markup=False, soft_wrap=True)
        return Outcome("lab inventory", {"name": args.name, "inventory": str(path)})
    if args.lab_command == "down":
        removed = lab.down(root, args.name, progress)
        if not quiet:
            out.print(f"lab {args.name}: removed {len(removed)} object(s)" if removed else f"lab {args.name}: nothing to remove", markup=False)
        return Outcome("lab down", {"name": args.name, "removed": removed})
    if args.lab_command in ("stop", "start"):
        began = time.monotonic()
        node = lab.stop(args.name, args.node) if args.lab_command == "stop" else lab.start(root, args.name, args.node, progress)
        seconds = round(time.monotonic() - began, 1)
        if not quiet:
            where = f" at {node.address}, host key unchanged" if args.lab_command == "start" else ""
            out.print(f"lab {args.name}: {node.name} {node.state}{where} ({seconds}s)", markup=False)
        return Outcome(f"lab {args.lab_command}", {"name": args.name, "node": node, "seconds": seconds})
    raise UsageError(f"megaprov lab: unknown ACTION {args.lab_command}", "use up, status, inventory, stop, start or down")


def _request(args: argparse.Namespace, more_vars: dict[str, Any] | None = None, **flags: Any) -> Any:
    from megaprov.cluster import provision, runner

    if args.strategy not in STRATEGIES:  # argparse does not check a default taken from the environment
        raise UsageError(f"MEGAPROV_STRATEGY={args.strategy!r} is not a strategy", "use " + ", ".join(STRATEGIES))
    options = runner.RunOptions(
        limit=args.limit,
        forks=args.forks,
        extravars={**_extravars(args.extra_vars), **(more_vars or {})},
        strategy=args.strategy,
        verbosity=args.verbose,
        flush_cache=args.flush_cache,
        **flags,
    )
    return provision.Request(inventory=Path(args.inventory), options=options, quiet=args.output == "json")


def _cmd_bundle(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster import bundle

    if args.bundle_command not in ("build", "verify"):
        raise UsageError("megaprov bundle: missing ACTION", "use `megaprov bundle build -i INVENTORY --output DIR` or `megaprov bundle verify DIR`")
    quiet = args.output == "json"
    out, err = console(), console(stderr=True)
    if args.bundle_command == "build":

        def progress(message: str) -> None:
            if not quiet:
                err.print(f"bundle: {message}", markup=False)

        dist = bundle.distribution(args.distribution)
        built = bundle.build(Path(args.inventory), Path(args.directory), dist, args.arch, args.security_mirror, progress)
        if not quiet:
            timing = ", ".join(f"{part} {seconds:.0f}s" for part, seconds in built.seconds.items())
            out.print(
                f"bundle {built.directory}: {built.files:,} files, {built.bytes / 1e6:,.1f} MB ({built.apt} packages, {built.wheels} wheels, "
                f"git: {', '.join(built.git) or 'none'}); {timing}",
                markup=False,
            )
        return Outcome("bundle build", built)
    verified = bundle.verify(Path(args.directory), Path(args.inventory) if args.inventory else None)
    if not quiet:
        against = f", and it holds what {args.inventory} asks for" if args.inventory else ""
        out.print(
            f"bundle {verified.directory}: {verified.files:,} files, {verified.bytes / 1e6:,.1f} MB match the manifest"
            f"{against} ({verified.seconds:.1f}s)",
            markup=False,
        )
    return Outcome("bundle verify", {"directory": verified.directory, "files": verified.files, "bytes": verified.bytes, "seconds": verified.seconds})


def _cmd_bootstrap(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster import provision

    request = _request(
        args,
        {"megaprov_verify": True} if args.verify else None,
        tags=tuple(t for t in args.tags.split(",") if t),
        skip_tags=tuple(t for t in args.skip_tags.split(",") if t),
        check=args.check,
        diff=args.diff,
    )
    if args.bundle:  # before anything is applied: a bundle that does not match refuses the whole run
        from megaprov.cluster import bundle

        request = bundle.bootstrap_request(request, Path(args.bundle))
    report = provision.bootstrap(request)
    if args.output == "text":
        provision.render_bootstrap(report)
    return Outcome("bootstrap", report, report.exit_code, report.error)


def _cmd_preflight(args: argparse.Namespace) -> Outcome:
    from megaprov.cluster import provision

    report = provision.preflight(_request(args))
    if args.output == "text":
        provision.render_preflight(report)
    return Outcome("preflight", report, report.exit_code, report.error)


def _cmd_self_check(args: argparse.Namespace) -> Outcome:
    from megaprov import selfcheck

    found = selfcheck.checks()
    failed = [c for c in found if c.status == selfcheck.FAIL]
    if args.output == "text":
        out = console()
        for check in found:
            out.print(f"{check.status:<4}  {check.name:<16} {check.detail}", markup=False, soft_wrap=True)
            if check.hint and check.status != selfcheck.PASS:
                out.print(f"      {'':<16} fix: {check.hint}", markup=False, soft_wrap=True)
    error = f"{failed[0].name}: {failed[0].detail} ({failed[0].hint})" if failed else None
    code = ExitCode.ENVIRONMENT if failed else ExitCode.OK
    return Outcome("self-check", {"version": __version__, "checks": found}, code, error)


HANDLERS = {
    "self-check": _cmd_self_check,
    "bootstrap": _cmd_bootstrap,
    "preflight": _cmd_preflight,
    "lab": _cmd_lab,
    "job": _cmd_job,
    "plan": _cmd_plan,
    "train": _cmd_train,
    "jobs": _cmd_jobs,
    "logs": _cmd_logs,
    "top": _cmd_top,
    "doctor": _cmd_doctor,
    "data": _cmd_data,
    "bundle": _cmd_bundle,
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    want_json = any(a == "json" and i > 0 and argv[i - 1] == "--output" for i, a in enumerate(argv)) or "--output=json" in argv
    command = next((a for a in argv if not a.startswith("-")), "")
    err = console(stderr=True)
    try:
        args = build_parser().parse_args(argv)
        if not args.command:
            build_parser().print_help()
            return int(ExitCode.USAGE)
        outcome = HANDLERS[args.command](args)
    except MegaprovError as exc:
        if debug:
            traceback.print_exc()
        if want_json:
            print_json(envelope(command, False, {"problems": [exc.one_line(), *exc.details]} if exc.details else {}, exc.one_line()))
        err.print(f"megaprov: error: {exc.one_line()}", markup=False)
        for line in exc.details:
            err.print(f"megaprov: error: {line}", markup=False)
        return int(exc.exit_code)
    except KeyboardInterrupt:
        err.print("megaprov: interrupted")
        return int(ExitCode.INTERRUPTED)
    except Exception as exc:  # a bug: one line, the traceback with --debug
        if debug:
            traceback.print_exc()
        err.print(f"megaprov: internal error: {exc.__class__.__name__}: {exc} (rerun with --debug and report it)", markup=False)
        return int(ExitCode.INTERNAL)
    if getattr(args, "output", "text") == "json" and not outcome.quiet:
        print_json(envelope(outcome.command, outcome.code == ExitCode.OK, outcome.result, outcome.error))
    if outcome.error and outcome.code != ExitCode.OK:
        err.print(f"megaprov: error: {outcome.error}", markup=False)
    return int(outcome.code)
