"""job (schema, check, status, logs, stop), plan, train and jobs: the training commands."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from megaprov import paths, untrusted
from megaprov.cluster.runner import STRATEGIES
from megaprov.commands.base import Outcome, command, family, fraction, inventory_flag, need_inventory, note, reporter, upto
from megaprov.errors import ExitCode, MegaprovError, UsageError
from megaprov.output import Reporter, console, write_lines


def _shape(p: argparse.ArgumentParser) -> None:
    inventory_flag(p, "cluster inventory: training nodes are [gpu_nodes]")
    p.add_argument("--nodes", type=upto(10_000), help="nodes (default: the spec's launch.nodes)")
    p.add_argument("--gpus-per-node", type=upto(64), help="GPUs per node (default: inventory, then launch.gpus_per_node)")
    p.add_argument("--gpu", help="GPU model, e.g. H100-SXM, H200, A100-80GB, or as nvidia-smi names it (default: the inventory's megaprov_gpu_model)")


def _spec_flag(p: argparse.ArgumentParser, required: bool = False) -> None:
    p.add_argument("-f", "--job", required=required, metavar="JOB.yml", help="the job spec")


def register(sub: Any) -> None:
    job_sub = family(
        sub,
        "job",
        "job spec (schema, check) and running jobs (status, logs, stop)",
        ["megaprov job check -f gpt.yml --gpu H100-SXM --nodes 2", "megaprov job status NAME", "megaprov job logs NAME -f"],
        "job_command",
    )
    examples = {
        "status": ["megaprov job status gpt-lab", "megaprov job status gpt-lab -o json"],
        "logs": ["megaprov job logs gpt-lab", "megaprov job logs gpt-lab --node node2 --lines 200", "megaprov job logs gpt-lab -f"],
        "stop": ["megaprov job stop gpt-lab"],
    }
    for action, text in (("status", "state, progress and verdict of a job"), ("logs", "print a node's log"), ("stop", "stop a job on every node")):
        p = command(job_sub, action, f"job {action}", text, examples[action])
        p.add_argument("name", metavar="NAME", nargs="?", help="the job's name")
        p.add_argument("--name", dest="name_flag", metavar="NAME", help=argparse.SUPPRESS)
        inventory_flag(p, "the cluster's inventory (default: the one the job was started with)")
        if action == "logs":
            p.add_argument("--node", help="this node's log (default: the last node, where the last rank prints)")
            p.add_argument("--lines", type=upto(1_000_000), default=50, help="last N lines")
            p.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the job ends (Ctrl-C stops following)")
        p.set_defaults(handler=_job_running)
    schema = command(job_sub, "schema", "job schema", "print the JSON Schema of gpt.yml", ["megaprov job schema > gpt.schema.json"])
    schema.set_defaults(handler=_job_schema)
    check = command(
        job_sub,
        "check",
        "job check",
        "validate a job spec (and, with -i, --gpu or --nodes, its fit on a cluster, as plan and train judge it)",
        [
            "megaprov job check -f gpt.yml",
            "megaprov job check -f gpt.yml -i inventory.ini",
            "megaprov job check -f llama-8b.yml --gpu A100-40GB --nodes 2",
        ],
    )
    check.add_argument("spec", metavar="JOB.yml", nargs="?", help=argparse.SUPPRESS)  # the first releases' positional form
    _spec_flag(check)
    _shape(check)
    check.set_defaults(handler=_job_check)

    plan = command(
        sub,
        "plan",
        "plan",
        "parallelism, parameters, FLOPs, memory per GPU, fit, step time and the run's length",
        [
            "megaprov plan -f gpt.yml -i inventory.ini",
            "megaprov plan -f gpt.yml --gpu 'NVIDIA H100 80GB HBM3' --nodes 4",
            "megaprov plan -f gpt.yml --gpu H200 --suggest --top 5",
        ],
    )
    _spec_flag(plan, required=True)
    _shape(plan)
    plan.add_argument(
        "--mfu",
        type=fraction,
        help="share of the per-GPU rate a large GEMM sustains in training (default 0.77 of a measured GEMM rate, else of the isolated rate)",
    )
    plan.add_argument("--suggest", action="store_true", help="rank the splits that fit by estimated step time and say why the best wins")
    plan.add_argument("--top", type=upto(1000), default=10, help="layouts to list with --suggest")
    plan.set_defaults(handler=_plan)

    train = command(
        sub,
        "train",
        "train",
        "start a training job on the cluster, follow it and judge it",
        [
            "megaprov train -f gpt.yml -i inventory.ini",
            "megaprov train -f gpt.yml -i inventory.ini --dry-run              # the plan, then node 1's launch script",
            "megaprov train -f gpt.yml -i inventory.ini --dry-run --dir out/    # every node's files into out/",
            "megaprov train -f gpt.yml -i inventory.ini --detach && megaprov job attach NAME",
            "megaprov train --resume NAME",
        ],
    )
    _spec_flag(train)
    _shape(train)
    train.add_argument("--name", help="job name (default: the spec's name)")
    train.add_argument("--resume", metavar="NAME", help="start an existing job again; it continues from its latest checkpoint")
    train.add_argument("--detach", action="store_true", help="start and return; `megaprov job attach NAME` follows it later")
    train.add_argument(
        "--stall-timeout", type=upto(7 * 86400), default=600, help="seconds without output from any node before giving up (default 600)"
    )
    train.add_argument("--dry-run", action="store_true", help="plan and render, start nothing: the plan, then one node's launch")
    train.add_argument("--node", help="with --dry-run: this node's launch (default: the first)")
    train.add_argument("--all-nodes", action="store_true", help="with --dry-run: every node's launch")
    train.add_argument("--dir", metavar="DIR", help="with --dry-run: write the plan and every node's launch files into this new directory")
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
    train.set_defaults(handler=_train)

    attach = command(
        job_sub,
        "attach",
        "job attach",
        "follow a running job's live progress again (after --detach or a lost terminal), to its verdict",
        ["megaprov job attach gpt-lab", "megaprov job attach gpt-lab -o json"],
    )
    attach.add_argument("name", metavar="NAME", help="the job's name")
    inventory_flag(attach, "the cluster's inventory (default: the one the job was started with)")
    attach.add_argument("--stall-timeout", type=upto(7 * 86400), default=600, help="seconds without output before giving up (default 600)")
    attach.set_defaults(handler=_job_attach)

    grow = command(
        job_sub,
        "grow",
        "job grow",
        "bring a job with launch.elastic back onto its nodes that returned (it saves a checkpoint and continues on more)",
        ["megaprov job grow gpt-lab"],
    )
    grow.add_argument("name", metavar="NAME", help="the job's name")
    inventory_flag(grow, "the cluster's inventory (default: the one the job was started with)")
    grow.set_defaults(handler=_job_grow)

    jobs = command(sub, "jobs", "jobs", "list training jobs", ["megaprov jobs", "megaprov jobs -i inventory.ini -o json"])
    inventory_flag(jobs, "also list the jobs in this cluster's shared directory (default: $MEGAPROV_INVENTORY or the config file's)")
    jobs.set_defaults(handler=_jobs)


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


def _spec_and_cluster(
    args: argparse.Namespace, path: str, exclude: tuple[str, ...] = (), root: Path | None = None
) -> tuple[Any, str, Any, list[tuple[str, str]]]:
    """The spec at ``path`` (below ``root``: a job's stored spec, the cluster user's file) and the cluster it runs on."""
    from megaprov.training import target

    spec, text = target.read(path, root)
    if getattr(args, "name", None) and args.command_path == "train":
        spec = spec.model_copy(update={"name": args.name})
    found, hosts = target.cluster(spec, args.inventory, target.Shape(args.nodes, args.gpus_per_node, args.gpu, exclude))
    target.check(spec, text, path, found.world, found.gpus_per_node)
    return spec, text, found, hosts


def fit_error(spec: Any, planned: Any, found: Any) -> str:
    """One line, the same in job check, plan and train: what the job needs per GPU, what the GPU has, the fixes."""
    from megaprov.training import planner

    fixes = "; ".join(f.render() for f in planned.fixes) or "none alone: run megaprov plan --suggest"
    need, have = planned.memory.total / planner.GIB, planned.memory.capacity / planner.GIB
    return f"{spec.name} does not fit {found.gpu.name}: {need:.1f} GiB per GPU of {have:.1f}; fixes: {fixes}"


def _job_schema(args: argparse.Namespace) -> Outcome:
    from megaprov.training import jobspec

    schema = jobspec.schema()
    return Outcome("job schema", schema, document=True, text=lambda: print(json.dumps(schema, indent=2)))


def _job_check(args: argparse.Namespace) -> Outcome:
    from megaprov.training import jobview, planner, target

    if args.spec and args.job and args.spec != args.job:
        raise UsageError(f"two job specs: {args.spec} and -f {args.job}", "give one, as -f JOB.yml")
    if args.spec:
        note(f"`megaprov job check JOB.yml` is deprecated and goes in the next release: write -f {args.spec}")
    path = args.job or args.spec
    if not path:
        raise UsageError("megaprov job check needs -f JOB.yml", "give the job spec to check")
    world = None
    if args.inventory or args.nodes or args.gpus_per_node or args.gpu:
        spec, _, found, _ = _spec_and_cluster(args, path)
        world = found.world
        planned = planner.plan(spec, found)
        result = {"job": spec.name, "valid": True, "world": world, "fits": planned.fits, "plan": jobview.plan_dict(planned)}
        if planned.fits is False:
            return Outcome("job check", result, ExitCode.VERDICT_FAILED, fit_error(spec, planned, found))
        fit = (
            ""
            if planned.fits is None
            else f", fits {planned.memory.total / planner.GIB:.1f} of {planned.memory.capacity / planner.GIB:.1f} GiB per {found.gpu.name}"
        )
        line = f"{path}: valid job {spec.name} on {world} GPUs{fit}"
        if planned.min_nodes is not None:
            line += "\n" + jobview.elastic_text(planned)
        return Outcome("job check", result, text=lambda: console().print(line, markup=False))
    spec, text = target.read(path)
    target.check(spec, text, path, None, None)
    return Outcome(
        "job check",
        {"job": spec.name, "valid": True, "world": None, "fits": None},
        text=lambda: console().print(
            f"{path}: valid job {spec.name} (-i INVENTORY or --gpu also checks its fit"
            + (", and the node counts launch.elastic continues on)" if spec.launch.elastic else ")"),
            markup=False,
        ),
    )


def _plan(args: argparse.Namespace) -> Outcome:
    from megaprov.training import jobview, planner

    spec, _, found, _ = _spec_and_cluster(args, args.job)
    mfu = args.mfu or planner.default_mfu(found)
    if args.suggest:
        start = time.perf_counter()
        ranked = planner.suggest(spec, found, mfu, args.top)
        seconds = time.perf_counter() - start
        result = {"layouts": jobview.candidates_dict(ranked), "seconds": seconds}
        show = lambda: jobview.render_suggest(ranked, seconds)  # noqa: E731
        if not ranked:
            return Outcome("plan", result, ExitCode.VERDICT_FAILED, f"{spec.name}: no layout fits {found.world} x {found.gpu.name}", text=show)
        return Outcome("plan", result, text=show)
    planned = planner.plan(spec, found, mfu)
    error = fit_error(spec, planned, found) if planned.fits is False else None
    return Outcome(
        "plan", jobview.plan_dict(planned), ExitCode.VERDICT_FAILED if error else ExitCode.OK, error, text=lambda: jobview.render_plan(planned)
    )


def process_started() -> float | None:
    """When this process started (epoch seconds, from /proc: its start-up and imports count), or None off Linux."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _dry_run(args: argparse.Namespace, planned: Any, rendered: Any) -> Outcome:
    from megaprov.training import jobview

    hosts = [n.host for n in rendered.nodes]
    if args.node and args.node not in hosts:
        raise UsageError(f"--node {args.node} is not a node of this job", "use one of " + ", ".join(hosts))
    written: list[str] = []
    if args.dir:
        written = [str(p) for p in jobview.write_dry_run(Path(args.dir), jobview.plan_dict(planned), rendered)]
    shown = hosts if args.all_nodes else [args.node or hosts[0]]
    result = {"plan": jobview.plan_dict(planned), "launch": rendered, "written": written}

    def show() -> None:
        jobview.render_plan(planned)
        jobview.render_dry_run(rendered, shown)
        if written:
            console().print(f"train: wrote {len(written)} file(s) into {args.dir}", markup=False)

    return Outcome("train", result, text=show)


def _container_cluster(args: argparse.Namespace, spec: Any) -> tuple[Any, str | None]:
    """The inventory, loaded once for the image probe and the checks of a job in a container, and the Slurm submit host."""
    from megaprov.cluster import inventory as inv
    from megaprov.training.launchers import slurm

    loaded = inv.load(args.inventory, paths.roles_dir(), paths.cluster_defaults())
    return loaded, slurm.submit_host(loaded) if spec.launch.launcher == "slurm" else None


def _probe_image(args: argparse.Namespace, spec: Any, found: Any, hosts: list[tuple[str, str]], submit: str | None) -> Any:
    """The cluster with the stack of the job's image, probed on its first node (once per image: it is recorded)."""
    import dataclasses

    from megaprov.training import imagefacts

    gpus = found.gpu.name != "cpu"
    stack = imagefacts.probe(spec, Path(args.inventory), found.shared_dir, hosts[0][0], gpus, submit, reporter(args))
    return dataclasses.replace(found, stack=stack)


def _check_image(args: argparse.Namespace, spec: Any, found: Any, names: list[str], loaded: Any, submit: str | None) -> None:
    """The node checks inside the job's image on every node, as the job will run (imagecheck.py); exit 6 on a problem."""
    from megaprov.training import imagecheck
    from megaprov.training.launchers import systemd

    limits = systemd.unit_limits(systemd.is_lab(loaded, names[0]))
    imagecheck.check(spec, Path(args.inventory), found.shared_dir, names, found.gpu.name != "cpu", submit, limits, reporter(args))


def _train(args: argparse.Namespace) -> Outcome:
    from megaprov.training import jobs, jobview, planner, render
    from megaprov.training.jobspec import NAME_PATTERN
    from megaprov.training.launchers import systemd

    # "From megaprov train": the process's own start (interpreter, imports) counts; bounded, in case /proc says nonsense.
    now = time.time()
    since = max(process_started() or now, now - 30)
    if (args.node or args.all_nodes or args.dir) and not args.dry_run:
        raise UsageError("--node, --all-nodes and --dir choose what --dry-run shows", "add --dry-run, or drop them")
    if args.resume:
        if args.job or args.name:
            raise UsageError("--resume NAME takes the spec stored with the job", "drop --job/--name, or start a new job without --resume")
        found_job = jobs.find(args.resume, args.inventory)
        args.inventory = args.inventory or str(found_job.inventory)
        spec_path = str(found_job.local_dir / "spec.yml")
        spec_root = untrusted.job_root(found_job.local_dir)
    elif not args.job:
        raise UsageError("megaprov train needs -f JOB.yml", "or --resume NAME to continue a job")
    else:
        spec_path, spec_root = args.job, None
    need_inventory(args)
    if args.name and not NAME_PATTERN.fullmatch(args.name):
        raise UsageError(
            f"--name {args.name!r} is not a job name", "use lowercase letters, digits, '.', '_' and '-' (up to 63), starting with a letter or digit"
        )
    spec, text, found, hosts = _spec_and_cluster(args, spec_path, _unhealthy(args), spec_root)
    boxed = _container_cluster(args, spec) if spec.launch.container is not None and not args.dry_run else None
    if boxed is not None and found.stack.source != "image":
        found = _probe_image(args, spec, found, hosts, boxed[1])
    planned = planner.plan(spec, found)
    if planned.fits is False:
        return Outcome("train", jobview.plan_dict(planned), ExitCode.VERDICT_FAILED, fit_error(spec, planned, found))
    rendered = render.render(spec, found, hosts, dict(os.environ))
    if args.dry_run:
        return _dry_run(args, planned, rendered)
    if args.name:  # the stored spec carries the job's name, so that --resume finds the same job
        text = jobview.renamed(text, args.name)
    say = reporter(args)
    if boxed is not None:
        _check_image(args, spec, found, [name for name, _ in hosts[: found.nodes]], *boxed)  # the job's nodes, as rendered
    job = jobs.start(spec, text, found, planned, jobview.plan_dict(planned), rendered, args.inventory, bool(args.resume), say, args.strategy)
    launched = time.time()
    if job.launcher == "slurm":
        say.say(
            f"train: job {job.name} submitted to Slurm as job {job.slurm_id} on {job.submit_host} (continued in a new allocation after a "
            f"failure, up to {spec.launch.max_restarts} times, and at its time limit) in {launched - since:.1f} s; job directory {job.job_dir}"
        )
    else:
        say.say(
            f"train: job {job.name} started on {', '.join(job.hosts)} (restarts: up to {spec.launch.max_restarts}, "
            f"after {systemd.RESTART_SEC} s) in {launched - since:.1f} s; job directory {job.job_dir}"
        )
    if args.detach:
        return Outcome(
            "train",
            {"job": job.name, "job_dir": job.job_dir, "state": "running", "slurm_job_id": job.slurm_id or None},
            text=lambda: console().print(
                f"job {job.name} runs detached: `megaprov job attach {job.name}` follows it, `megaprov job logs {job.name} -f`, "
                f"`megaprov job stop {job.name}`",
                markup=False,
            ),
        )
    timing: dict[str, Any] = {"megaprov_start_to_units_started_s": round(launched - since, 2)}
    return _follow(job, spec, planned, found, float(args.stall_timeout), say, timing, since if not args.resume else None, "train")


def _follow(
    job: Any, spec: Any, planned: Any, found: Any, stall: float, say: Reporter, timing: dict[str, Any], since: float | None, path: str
) -> Outcome:
    """Follow a started job to its end, judge it and report: `train` and `job attach` end the same way."""
    from megaprov.training import jobs, jobview

    def progress(p: jobs.Progress) -> None:
        say.say(jobview.progress_text(p))

    def waiting(text: str) -> None:
        say.say(f"{path}: {text}")

    from megaprov.training import elastic

    # launch.elastic under systemd: this follower continues the job on the healthy nodes (Slurm's batch script does it there)
    watch = elastic.Watch(job, spec, say, found) if spec.launch.elastic and job.launcher != "slurm" else None
    outcome = jobs.follow_job(
        job,
        spec.model.seq_length,
        progress,
        stall,
        log_interval=spec.train.log_interval,
        report=say,
        on_waiting=waiting,
        targets=jobs.metrics_targets(spec, planned),
        watch=watch,
    )
    if outcome.state == "detached":
        say.say(f"{path}: detached; job {job.name} keeps running: `megaprov job attach {job.name}` or `megaprov job stop {job.name}`")
        return Outcome(path, {"job": job.name, "state": "running"}, ExitCode.INTERRUPTED, None)
    if since is not None:  # a resumed or re-attached job's log starts with the earlier attempts
        timing.update(jobs.first_start_seconds(outcome.log, since))
    judged, report, paths = jobs.conclude(job, spec, planned, outcome, found.gpu.name != "cpu", timing, found)
    result = {"job": job.name, "verdict": report["verdict"], "report": {k: str(v) for k, v in paths.items()}, "checks": report["checks"]}
    show = lambda: jobview.render_verdict(judged, report, paths)  # noqa: E731
    if judged.passed:
        return Outcome(path, result, text=show)
    return Outcome(path, result, ExitCode.VERDICT_FAILED, f"job {job.name} failed its verdict: " + "; ".join(judged.reasons()), text=show)


def _job_attach(args: argparse.Namespace) -> Outcome:
    from megaprov.training import jobs, planner, target

    job = jobs.find(args.name, args.inventory)
    inventory = args.inventory or str(job.inventory)
    spec = jobs.job_spec(job)
    state = jobs.job_state(job)
    if state not in ("starting", "running", "submitted"):
        raise UsageError(f"job {job.name} is {state}, not running", f"`megaprov job status {job.name}` shows its verdict")
    found, _ = target.cluster(spec, inventory, target.Shape(len(job.every_host) if job.launcher != "slurm" else None))
    planned = planner.plan(spec, found)
    return _follow(job, spec, planned, found, float(args.stall_timeout), reporter(args), {}, None, "job attach")


def _job_grow(args: argparse.Namespace) -> Outcome:
    from megaprov.training import elastic, jobs, launchers

    job = jobs.find(args.name, args.inventory)
    spec = jobs.job_spec(job)
    if spec.launch.elastic is None:
        raise UsageError(
            f"job {job.name} has no launch.elastic: it runs on its {len(job.hosts)} nodes or not at all", "give a new job launch.elastic"
        )
    state = jobs.job_state(job)
    if state not in ("starting", "running", "submitted"):
        raise UsageError(f"job {job.name} is {state}, not running", f"`megaprov train --resume {job.name}` starts it again on all its nodes")
    say = reporter(args)
    if job.launcher == "slurm":
        from megaprov.training.launchers.slurm import SlurmLauncher

        launcher = launchers.of("slurm")
        assert isinstance(launcher, SlurmLauncher)
        on = launcher.log_hosts(job)
        if len(on) >= spec.launch.nodes:
            raise UsageError(f"job {job.name} runs on all {len(on)} of its nodes ({', '.join(on)})", "nothing to grow")
        now = launcher.state(job)
        if now.state != "RUNNING":
            raise UsageError(f"job {job.name}: {now.describe()}", "grow it while it runs: a waiting job gets the nodes Slurm has when it starts")
        idle = launcher.grow(job, spec.launch.slurm.partition, say)
        text = (
            f"job {job.name}: Slurm job {launcher.current_id(job)} saves a checkpoint and continues in a new allocation of "
            f"{spec.launch.elastic.min_nodes}-{spec.launch.nodes} nodes (idle now: {', '.join(idle)})"
        )
        return Outcome("job grow", {"job": job.name, "idle": idle}, text=lambda: console().print(text, markup=False))
    before, after = elastic.grow_systemd(job, spec, say)
    line = f"job {job.name}: grew from {len(before)} to {len(after)} nodes ({', '.join(after)}); it continues from its latest checkpoint"
    return Outcome("job grow", {"job": job.name, "before": before, "after": after}, text=lambda: console().print(line, markup=False))


def _jobs(args: argparse.Namespace) -> Outcome:

    from megaprov.commands.base import default_inventory
    from megaprov.training import jobs

    if not args.inventory:
        found = default_inventory()
        args.inventory = found[0] if found else None
    rows = jobs.listing(args.inventory)
    # a job that ended while nobody followed it (--detach) gets its verdict whenever its state is read
    unjudged = [r["name"] for r in rows if r["state"] in ("starting", "running") and r["verdict"] is None]
    problems: dict[str, str] = {}
    for name in unjudged:
        try:
            if jobs.settle(jobs.find(name, args.inventory)):
                problems[""] = ""  # listed again below, with the new verdict
        except MegaprovError as exc:  # one job's bad files (no spec.yml, a link) do not hide the others
            problems[name] = exc.message
    if "" in problems:
        rows = jobs.listing(args.inventory)
    for r in rows:
        if r["name"] in problems:
            r["problem"] = problems[r["name"]]

    def show() -> None:
        out = console()
        if not rows:
            out.print("no jobs known here (pass -i INVENTORY to look in a cluster's shared directory)", markup=False)
        for r in rows:
            out.print(
                f"{r['name']}: {r['state']}, verdict {r['verdict'] or '-'}, {r['nodes']} node(s), started {r['started']}, "
                + (f"Slurm job {r['slurm_job_id']}, " if r.get("slurm_job_id") else "")
                + str(r["job_dir"])
                + (f" ({r['problem']})" if r.get("problem") else ""),
            )

    return Outcome("jobs", {"jobs": rows}, text=show)


def _job_running(args: argparse.Namespace) -> Outcome:
    from megaprov.training import jobs, jobview

    name = args.name or args.name_flag
    if args.name and args.name_flag and args.name != args.name_flag:
        raise UsageError(f"two job names: {args.name} and --name {args.name_flag}", "give one")
    if not name:
        raise UsageError(f"megaprov {args.command_path} needs the job's NAME", "`megaprov jobs` lists them")
    job = jobs.find(name, args.inventory)
    say = reporter(args)
    action = args.command_path.split()[-1]
    if action == "stop":
        jobs.stop(job, say)
        where = f"Slurm job {job.slurm_id}" if job.launcher == "slurm" else ", ".join(job.hosts)
        return Outcome(
            "job stop",
            {"job": job.name, "state": "stopped"},
            text=lambda: console().print(
                f"job {job.name}: stopped on {where} (ranks save a checkpoint on SIGTERM; `megaprov train --resume {job.name}` continues)",
                markup=False,
            ),
        )
    if action == "logs":
        if args.follow:
            if not say.shown:
                raise UsageError("job logs -f prints lines as they come", "drop -o json, or drop -f for one JSON document")
            host = jobs.follow_log(job, args.node, args.lines, lambda line: write_lines([line]))
            return Outcome("job logs", {"job": job.name, "node": host}, document=True)
        host, lines = jobs.node_log(job, args.node, args.lines)
        # the lines are the job's (hostile where the job is): shown with their control characters escaped
        return Outcome("job logs", {"job": job.name, "node": host, "lines": lines}, text=lambda: write_lines(lines))
    meta, status = jobview.job_status(job, jobs.unit_states(job))
    return Outcome("job status", {**meta, **status}, text=lambda: jobview.render_job_status(meta, status))
