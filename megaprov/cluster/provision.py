"""Bootstrap and preflight: validate everything locally, run the playbook, judge the result."""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from megaprov import paths
from megaprov.cluster import history, runner
from megaprov.cluster import inventory as inv
from megaprov.cluster.stages import KNOWN_TAGS, STAGES
from megaprov.errors import ExitCode, UsageError
from megaprov.output import SHOWN, Reporter, console, host_table, verdict_table
from megaprov.paths import fact_cache_dir, state_dir

FACTS_ACTION = "megaprov.cluster.node_facts"
MESH_ACTION = "megaprov.cluster.ssh_check"
SHARED_ACTION = "megaprov.cluster.shared_check"
FABRIC_ACTION = "megaprov.cluster.rdma_facts"
GPU_ACTION = "megaprov.cluster.gpu_state"
NCCL_ACTION = "megaprov.cluster.nccl_check"
SLURM_ACTION = "megaprov.cluster.slurm_check"
# The observe stage's summary: the prometheus role's one debug message, "observe: ..." (its role names it: the role
# may be named with its collection)
OBSERVE_ROLE = "prometheus"
COMPUTE_ACTION = "megaprov.cluster.compute_rate"
PROOF_ACTION = "megaprov.cluster.proof"


@dataclass(frozen=True)
class Request:
    inventory: Path
    options: runner.RunOptions = field(default_factory=runner.RunOptions)
    report: Reporter = SHOWN


@dataclass
class Report:
    inventory: str
    playbook: str
    ok: bool
    changed: int
    seconds: float
    artifacts: str
    hosts: list[runner.HostStats]
    failures: list[runner.Failure]
    checks: list[dict[str, Any]] = field(default_factory=list)
    nodes: dict[str, Any] = field(default_factory=dict)
    mesh: list[dict[str, Any]] = field(default_factory=list)
    mesh_left_out: list[str] = field(default_factory=list)  # mesh hosts not tried: Ansible found them unreachable
    shared: list[dict[str, Any]] = field(default_factory=list)  # reader, writer, ok, error
    fabric: dict[str, dict[str, Any]] = field(default_factory=dict)  # host -> summary, ports, nccl_env
    gpu: dict[str, str] = field(default_factory=dict)  # host -> what the driver stage found
    nccl: list[str] = field(default_factory=list)  # one line per all_reduce_perf run
    slurm: list[str] = field(default_factory=list)  # the scheduler stage's check, from the controller
    observe: list[str] = field(default_factory=list)  # the observe stage's summary, from the head
    compute: dict[str, str] = field(default_factory=dict)  # host -> its measured GEMM rate (stored and this run's)
    stages: list[dict[str, Any]] = field(default_factory=list)  # stage, seconds: where the time went, in order
    proofs: list[dict[str, Any]] = field(default_factory=list)  # host, name, valid, reason, verified_at: each proof asked
    verify: bool = False  # --verify: every proof ran again
    exit_code: ExitCode = ExitCode.OK
    error: str | None = None


def check_limit(limit: str, inventory: inv.Inventory) -> None:
    """Reject a --limit that names no known host or group, or whose wildcard or ~regex matches none: Ansible would
    only stop later with "no hosts matched" (exit 3)."""
    from megaprov import values

    values.text(limit, "--limit", 10_000, empty=False)
    if limit.startswith("@"):  # a retry file: Ansible reads the host names from it
        return
    names = [*inventory.hosts, *inventory.groups, "all"]
    for part in re.split(r"[,:]", limit):
        name = part.lstrip("!&")
        if not name:
            continue
        if name.startswith("~"):
            try:
                pattern = re.compile(name[1:])
            except re.error as exc:
                raise UsageError(f"--limit {limit}: {name!r} is not a regular expression ({exc})", "fix the pattern after ~") from None
            matched = any(pattern.match(n) for n in names)
        elif any(c in name for c in "*?["):
            matched = any(fnmatch.fnmatchcase(n, name) for n in names)
        else:
            matched = name in inventory.hosts or name in inventory.groups or name == "all"
        if not matched:
            what = "matches no host or group" if name[:1] == "~" or any(c in name for c in "*?[") else "is neither a host nor a group"
            raise UsageError(f"--limit {limit}: {name!r} {what} of {inventory.path.name}", "use host or group names from the inventory")


def check_tags(flag: str, tags: tuple[str, ...]) -> None:
    for tag in tags:
        if tag not in KNOWN_TAGS:
            from megaprov.values import close

            guess = close(tag, KNOWN_TAGS - {"never", "always"})
            stages = ", ".join(tag for tag, _ in STAGES)
            hint = f"did you mean {guess!r}? (stages: {stages}; roles are tags too)" if guess else f"use a stage ({stages}) or a role's name"
            raise UsageError(f"{flag} {tag!r} is not a stage or role", hint)


def prepare(request: Request, playbook: str, label: str) -> tuple[runner.RunSpec, inv.Inventory]:
    """Everything that can be checked without a host; raises before anything is contacted."""
    inventory = inv.load(request.inventory, paths.roles_dir(), defaults=paths.cluster_defaults())
    opts = request.options
    specs, prefixes = inv.all_specs(paths.roles_dir())
    inv.validate_vars(opts.extravars, "-e", specs, prefixes)
    runner.as_data(dict(opts.extravars), "-e")  # names and types Ansible can take, checked before a run directory exists
    if opts.extravars:  # -e cuda_version=... must not slip past the checks the inventory's own values passed
        inv.gpu_stack_checks(inv.with_extra_vars(inventory, dict(opts.extravars)), paths.roles_dir())
    check_tags("--tags", opts.tags)
    check_tags("--skip-tags", opts.skip_tags)
    if opts.limit:
        check_limit(opts.limit, inventory)
    spec = runner.RunSpec(
        playbook=paths.playbook(playbook),
        inventories=(inventory.path,),
        private_data_dir=runner.new_private_dir(state_dir(), label),
        collections_root=paths.collections_root(),
        fact_cache_dir=fact_cache_dir(inventory.path),
        options=opts,
    )
    return spec, inventory


def _judge(result: runner.RunResult) -> tuple[ExitCode, str | None]:
    if result.ok:
        return ExitCode.OK, None
    if not result.failures:
        why = result.error_line or f"ansible-playbook ended with status {result.status} (rc {result.rc})"
        return ExitCode.RUN_FAILED, f"{why}; see {result.artifacts}/stdout"
    first = result.failures[0]
    more = f" (and {len(result.failures) - 1} more failure(s))" if len(result.failures) > 1 else ""
    if any(f.unreachable for f in result.failures):
        down = sorted({f.host for f in result.failures if f.unreachable})
        return ExitCode.UNREACHABLE, f"host(s) {', '.join(down)} unreachable: {first.message}{more}; check the address, SSH key and that sshd runs"
    return ExitCode.RUN_FAILED, f"{first.host}: task '{first.task}' failed: {first.message}{more}"


def _execute(request: Request, spec: runner.RunSpec, inventory: inv.Inventory, collect: tuple[str, ...] = ()) -> runner.RunResult:
    progress = request.report.run(len(inventory.hosts))
    try:
        return runner.run(spec, progress, collect)
    finally:
        progress.stop()


def _report(inventory: inv.Inventory, playbook: str, result: runner.RunResult, code: ExitCode, error: str | None, **found: Any) -> Report:
    return Report(
        inventory=str(inventory.path),
        playbook=playbook,
        ok=code == ExitCode.OK,
        changed=result.changed,
        seconds=result.seconds,
        artifacts=str(result.artifacts),
        hosts=result.hosts,
        failures=result.failures,
        exit_code=code,
        error=error,
        **found,
    )


def stage_plays(playbooks: Path) -> dict[str, str]:
    """Play name -> stage, from the stage playbooks (each stage is one playbook of plays)."""
    import yaml

    out: dict[str, str] = {}
    for stage, _ in STAGES:
        path = playbooks / f"{stage}.yml"
        plays = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
        for play in plays or []:
            if isinstance(play, dict) and isinstance(play.get("name"), str):
                out.setdefault(play["name"], stage)
    return out


def stage_seconds(plays: list[tuple[str, float]], stage_of: dict[str, str], ended: float) -> list[dict[str, Any]]:
    """Elapsed seconds per stage from the start times of its plays: a stage runs from its first play's start to the
    start of the next stage's first play (the last one to the end of the run). Pure."""
    starts: list[tuple[str, float]] = []
    for name, at in plays:
        stage = stage_of.get(name)
        if stage is None:
            continue
        if not starts or starts[-1][0] != stage:
            starts.append((stage, at))
    out = []
    for i, (stage, at) in enumerate(starts):
        end = starts[i + 1][1] if i + 1 < len(starts) else ended
        out.append({"stage": stage, "seconds": round(max(0.0, end - at), 1)})
    return out


def expand_proofs(results: list[runner.TaskResult], actions: tuple[str, ...]) -> tuple[list[runner.TaskResult], list[dict[str, Any]]]:
    """The proofs the run asked (host, name, valid, reason, verified_at), and the results with each cached proof's
    recorded result put in its place as the result of the module it came from (one of ``actions``), marked with
    ``cached`` (the words for the report), so a cached check is reported as the check it stands for.

    A role may run a check on every host although some hosts' proofs held (a peer's inputs changed: each host is
    the other end of its peers' pairs): when the check itself reports for that host before its next proof, the
    recorded result is dropped and the proof counts as run. Pure."""
    out: list[runner.TaskResult | None] = []
    proofs: list[dict[str, Any]] = []
    pending: dict[tuple[str, str], tuple[int, int]] = {}  # (host, action) -> (index in out, index in proofs)
    for item in results:
        if item.action != PROOF_ACTION:
            held = pending.pop((item.host, item.action), None)
            if held is not None:
                out[held[0]] = None
                proofs[held[1]] = {**proofs[held[1]], "valid": False, "reason": "ran with its peers, whose inputs changed"}
            out.append(item)
            continue
        if item.res.get("recorded") or "valid" not in item.res:
            continue
        name = str(item.res.get("name", ""))
        for key in [k for k in pending if k[0] == item.host and proofs[pending[k][1]]["name"] == name]:
            del pending[key]  # asked again (a later stage): the earlier cached result stays as it was
        valid = bool(item.res["valid"])
        proofs.append(
            {
                "host": item.host,
                "name": str(item.res.get("name", "")),
                "valid": valid,
                "reason": str(item.res.get("reason", "")),
                "verified_at": str(item.res.get("verified_at", "")),
            }
        )
        recorded = item.res.get("result")
        action = str(item.res.get("action", ""))
        if valid and action in actions and isinstance(recorded, dict) and recorded:
            cached = f"verified at {item.res.get('verified_at', '?')}, inputs unchanged; --verify re-proves"
            pending[(item.host, action)] = (len(out), len(proofs) - 1)
            out.append(runner.TaskResult(item.host, item.task, action, {**recorded, "cached": cached}))
    return [item for item in out if item is not None], proofs


def _step_note(host: str, proofs: list[dict[str, Any]]) -> str:
    """The words for Slurm's srun step when its proof held on the controller (the state and Gres are read every run). Pure."""
    held = [p for p in proofs if p["name"] == "slurm_step" and p["host"] == host and p["valid"]]
    return f"; srun step verified at {held[-1]['verified_at']}, inputs unchanged; --verify re-proves" if held else ""


def proof_lines(proofs: list[dict[str, Any]], verify: bool) -> list[str]:
    """One line per proof name: where its recorded result stood (inputs unchanged) and where it ran, and why. Pure."""
    lines = []
    names = sorted({p["name"] for p in proofs})
    for name in names:
        mine = [p for p in proofs if p["name"] == name]
        cached = sorted({p["host"] for p in mine if p["valid"]})
        parts = []
        if cached:
            oldest = min(p["verified_at"] for p in mine if p["valid"])
            parts.append(f"cached on {', '.join(cached)} (verified at {oldest} or later, inputs unchanged; --verify re-proves)")
        ran: dict[str, list[str]] = {}
        for p in mine:
            if not p["valid"]:
                ran.setdefault(p["reason"], []).append(p["host"])
        for reason, hosts in sorted(ran.items()):
            parts.append(f"proved this run on {', '.join(sorted(set(hosts)))} ({reason})")
        lines.append(f"proof {name}: " + "; ".join(parts))
    if verify:
        lines.append("--verify: every proof ran again" + ("" if proofs else " (no proof was asked: were the stages with checks skipped?)"))
    return lines


def bootstrap(request: Request) -> Report:
    spec, inventory = prepare(request, "bootstrap.yml", "bootstrap")
    collect = (
        FACTS_ACTION,
        MESH_ACTION,
        SHARED_ACTION,
        FABRIC_ACTION,
        GPU_ACTION,
        NCCL_ACTION,
        COMPUTE_ACTION,
        SLURM_ACTION,
        "ansible.builtin.debug",
    )
    result = _execute(request, spec, inventory, (*collect, PROOF_ACTION))
    expanded, proofs = expand_proofs(result.results, collect)
    result = dataclasses.replace(result, results=expanded)
    stage_of = stage_plays(spec.playbook.parent)
    stages = stage_seconds(result.plays, stage_of, time.time())
    code, error = _judge(result)
    checks, nodes = _preflight_rows(result)
    gpu = {item.host: gpu_summary(item.res) for item in result.results if item.action == GPU_ACTION and "action" in item.res}
    nccl = [
        f"{item.host}: {item.res['summary']}" + (f" ({item.res['cached']})" if item.res.get("cached") else "")
        for item in result.results
        if item.action == NCCL_ACTION and "summary" in item.res
    ]
    slurm = [
        str(item.res["summary"]) + _step_note(item.host, proofs) for item in result.results if item.action == SLURM_ACTION and "summary" in item.res
    ]
    observe = [
        str(item.res["msg"]).removeprefix("observe: ")
        for item in result.results
        if item.action == "ansible.builtin.debug" and item.role.rpartition(".")[2] == OBSERVE_ROLE and isinstance(item.res.get("msg"), str)
    ]
    mesh = sorted(
        ({**pair, "cached": item.res.get("cached", "")} for item in _of(result, MESH_ACTION) for pair in item.res.get("pairs", [])),
        key=lambda p: (p["source"], p["peer"]),
    )
    mesh_left_out = sorted({host for item in result.results if item.action == MESH_ACTION for host in item.res.get("left_out", [])})
    shared = sorted(
        (
            {"reader": item.host, **check, "cached": item.res.get("cached", "")}
            for item in result.results
            if item.action == SHARED_ACTION
            for check in item.res.get("checks", [])
        ),
        key=lambda c: (c["reader"], c["writer"]),
    )
    fabric = {
        item.host: {k: item.res.get(k) for k in ("summary", "ports", "gpus", "nccl_env")}
        for item in result.results
        if item.action == FABRIC_ACTION and "summary" in item.res
    }
    report = _report(
        inventory,
        "bootstrap.yml",
        result,
        code,
        error,
        checks=checks,
        nodes=nodes,
        mesh=mesh,
        mesh_left_out=mesh_left_out,
        shared=shared,
        fabric=fabric,
        gpu=gpu,
        nccl=nccl,
        slurm=slurm,
        observe=observe,
        compute=_compute(inventory, result),
        stages=stages,
        proofs=proofs,
        verify=bool(spec.options.extravars.get("megaprov_verify")),
    )
    history.record_bootstrap(inventory.path, report, stage_of, request.options.check)  # for `megaprov status`
    return report


def _of(result: runner.RunResult, action: str) -> list[runner.TaskResult]:
    return [item for item in result.results if item.action == action]


def mesh_lines(mesh: list[dict[str, Any]], left_out: list[str]) -> list[str]:
    """The ssh mesh part of the bootstrap report: the count, each failed pair, the hosts left out. Pure."""
    lines = []
    if mesh:
        bad = [p["line"] for p in mesh if not p["ok"]]
        slowest = max(p["seconds"] for p in mesh)
        among = sorted({p["source"] for p in mesh} | {p["peer"] for p in mesh})
        cached = sorted({p["cached"] for p in mesh if p.get("cached")})
        note = f" ({cached[0]})" if cached and all(p.get("cached") for p in mesh) else " (some pairs cached: " + cached[0] + ")" if cached else ""
        counts = f"{len(mesh) - len(bad)}/{len(mesh)}"
        lines.append(f"ssh mesh: {counts} pairs among {', '.join(among)} connect without a prompt (slowest {slowest:.2f}s){note}")
        lines += [f"  {line}" for line in bad]
    if left_out:
        lines.append(f"ssh mesh: left out as unreachable (no pair with them was tried): {', '.join(left_out)}")
    return lines


def gpu_summary(state: dict[str, Any]) -> str:
    """One line for the driver state the nvidia_driver role read last on a host. Pure."""
    action = state.get("action")
    installed = state.get("installed_version") or "none"
    if action == "no_gpu":
        return "skipped: no GPU on the PCI bus" + (f" (driver package {installed} installed)" if state.get("installed_version") else "")
    if action == "none":
        smi = state.get("smi") or []
        fm = f", Fabric Manager {state['fabricmanager_version']}" if state.get("fabricmanager_version") else ""
        return f"driver {state.get('loaded_version')} loaded, {len(smi)} GPU(s) in nvidia-smi{fm}"
    if action == "reboot":
        return f"driver {installed} installed but {state.get('loaded_version')} loaded: reboot needed"
    return f"driver {installed} installed, not loaded yet" if action == "load" else "no driver installed"


def _preflight_rows(result: runner.RunResult) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    nodes: dict[str, Any] = {}
    for item in result.results:
        if item.action != FACTS_ACTION:
            continue
        nodes[item.host] = item.res.get("node", {})
        for check in item.res.get("checks", []):
            rows.append({"host": item.host, **check})
    rows.sort(key=lambda r: r["host"])
    return rows, nodes


def preflight(request: Request) -> Report:
    spec, inventory = prepare(request, "preflight.yml", "preflight")
    # megaprov judges the verdict itself and prints the whole table, so the play must not stop at the first failure.
    options = dataclasses.replace(spec.options, extravars={**spec.options.extravars, "preflight_enforce": False})
    spec = dataclasses.replace(spec, options=options)
    result = _execute(request, spec, inventory, (FACTS_ACTION, COMPUTE_ACTION))
    code, error = _judge(result)
    rows, nodes = _preflight_rows(result)
    if code == ExitCode.OK:
        failed = [r for r in rows if r["status"] == "fail"]
        if failed:
            code = ExitCode.VERDICT_FAILED
            error = "; ".join(f"{r['host']}: {r['check']}: {r['reason']}" for r in failed[:5])
    return _report(inventory, "preflight.yml", result, code, error, checks=rows, nodes=nodes, compute=_compute(inventory, result))


def _compute(inventory: inv.Inventory, result: runner.RunResult) -> dict[str, str]:
    """The compute rates the nodes reported (the last report per host wins), recorded for megaprov plan and train."""
    from megaprov.cluster import rates

    lines: dict[str, str] = {}
    stored: dict[str, dict[str, Any]] = {}
    for item in result.results:
        if item.action != COMPUTE_ACTION or "summary" not in item.res:
            continue
        if item.res.get("cached"):  # the recorded measurement: no fresh rate this run
            lines[item.host] = str(item.res["summary"]).split("; this run ")[0] + f"; {item.res['cached']}"
        else:
            lines[item.host] = str(item.res["summary"]) + (f"; warning: {item.res['warning']}" if item.res.get("warning") else "")
        if isinstance(item.res.get("stored"), dict):
            stored[item.host] = item.res["stored"]
    if stored:
        rates.record(inventory.path, stored)
    return lines


def _render_failures(report: Report) -> None:
    err = console(stderr=True)
    for failure in report.failures:
        kind = "unreachable" if failure.unreachable else "failed"
        err.print(f"{failure.host}: {kind} in [{failure.play}] '{failure.task}': {failure.message}", markup=False)


def render_bootstrap(report: Report) -> None:
    out = console()
    out.print(host_table(report.hosts, f"bootstrap: {report.inventory}"))
    if report.checks:
        out.print(
            verdict_table([r for r in report.checks if r["status"] != "pass"], "preflight warnings and failures")
            if any(r["status"] != "pass" for r in report.checks)
            else "preflight: every check passed"
        )
    for line in mesh_lines(report.mesh, report.mesh_left_out):
        out.print(line, markup=False)
    if report.shared:
        bad_reads = [f"{c['reader']} <- {c['writer']}: {c['error']}" for c in report.shared if not c["ok"]]
        readers = len({c["reader"] for c in report.shared})
        cached = sorted({c["cached"] for c in report.shared if c.get("cached")})
        note = f"; {cached[0]}" if cached else ""
        counts = f"{len(report.shared) - len(bad_reads)}/{len(report.shared)}"
        out.print(f"shared directory: {counts} reads identical ({readers} writers x {readers} readers{note})", markup=False)
        for line in bad_reads:
            out.print(f"  {line}", markup=False)
    for host, fab in sorted(report.fabric.items()):
        out.print(f"fabric: {host}: {fab['summary']}", markup=False)
    for host, line in sorted(report.gpu.items()):
        out.print(f"gpu: {host}: {line}", markup=False)
    for line in report.nccl:
        out.print(f"nccl: {line}", markup=False)
    for line in report.slurm:
        out.print(f"slurm: {line}", markup=False)
    for line in report.observe:
        out.print(f"observe: {line}", markup=False)
    for host, line in sorted(report.compute.items()):
        out.print(f"compute: {host}: {line}", markup=False)
    for line in proof_lines(report.proofs, report.verify):
        out.print(line, markup=False)
    if report.stages:
        out.print("time per stage: " + ", ".join(f"{s['stage']} {s['seconds']:.0f}s" for s in report.stages), markup=False)
    _render_failures(report)
    verdict = "ok" if report.ok else "FAILED"
    out.print(f"bootstrap {verdict}: {report.changed} change(s) in {report.seconds:.1f}s; artifacts: {report.artifacts}", markup=False)


def render_preflight(report: Report) -> None:
    out = console()
    if report.checks:
        out.print(verdict_table(report.checks, f"preflight: {report.inventory}"))
    for host, line in sorted(report.compute.items()):
        out.print(f"compute: {host}: {line}", markup=False)
    _render_failures(report)
    counts = {s: sum(1 for r in report.checks if r["status"] == s) for s in ("pass", "warn", "fail")}
    out.print(
        f"preflight: {counts['pass']} pass, {counts['warn']} warn, {counts['fail']} fail on {len(report.nodes)} node(s); "
        f"artifacts: {report.artifacts}",
        markup=False,
    )
