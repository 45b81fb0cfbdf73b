"""Human rendering of plans, layout suggestions, dry runs and data preparation (JSON goes through the envelope)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.table import Table

from megaprov.errors import UsageError
from megaprov.output import console
from megaprov.training.planner import GIB, Candidate, Plan, why
from megaprov.training.throughput import StepTime

if TYPE_CHECKING:
    from megaprov.training.data import PrepareResult, Progress
    from megaprov.training.jobs import Job
    from megaprov.training.jobs import Progress as TrainProgress
    from megaprov.training.render import Rendered
    from megaprov.training.verdict import Verdict


def _si(value: float, unit: str = "") -> str:
    for factor, prefix in ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:.2f} {unit}".rstrip()


def plan_dict(plan: Plan) -> dict[str, Any]:
    m = plan.memory
    return {
        "job": plan.job,
        "cluster": {"nodes": plan.nodes, "gpus_per_node": plan.gpus_per_node, "gpu": plan.gpu, "world": plan.world},
        "layout": {
            "tensor": plan.layout.tp,
            "pipeline": plan.layout.pp,
            "context": plan.layout.cp,
            "virtual_stages": plan.layout.vp,
            "data": plan.data_parallel,
            "micro_batch": plan.layout.micro_batch,
            "microbatches_per_step": plan.microbatches_per_step,
            "recompute": plan.layout.recompute,
            "sequence_parallel": plan.layout.sequence_parallel,
            "distributed_optimizer": plan.layout.distributed_optimizer,
        },
        "parameters": plan.parameters,
        "padded_vocab": plan.padded_vocab,
        "flops_per_iteration": plan.flops_per_iteration,
        "tokens_per_iteration": plan.tokens_per_iteration,
        "memory_gib": {
            "weights_grads_optimizer": round(m.weights_and_optimizer / GIB, 3),
            "activations": round(m.activations / GIB, 3),
            "logits": round(m.logits / GIB, 3),
            "reserved": round(m.reserved / GIB, 3),
            "total": round(m.total / GIB, 3),
            "capacity": round(m.capacity / GIB, 3),
        },
        "fits": plan.fits,
        "estimate": {
            "mfu": round(plan.mfu_assumed, 4),
            "step_seconds": plan.step_seconds,
            "tokens_per_second": plan.tokens_per_second,
            "peak_tflops_per_rank": plan.peak.tflops if plan.peak else None,
            "peak_source": plan.peak.source if plan.peak else None,
            "peak": plan.peak.text if plan.peak else None,
            "iterations": plan.iterations,
            "run_seconds": round(plan.run_seconds, 1),
            "gpu_hours": round(plan.gpu_hours, 1),
            "seconds_by_mechanism": _mechanisms(plan.time),
        },
        "measured_rates": {
            r.host: {"tflops_per_device": r.tflops_per_device, "dtype": r.dtype, "backend": r.backend, "measured_at": r.measured_at}
            for r in plan.rates
        },
        "fixes": [{"field": f.field, "value": f.value, "memory_gib": round(f.memory_gib, 3)} for f in plan.fixes],
        "warnings": list(plan.warnings),
        "min_nodes": plan.min_nodes,
        "continues_on": [
            {
                "nodes": c.nodes,
                "data_parallel": c.data_parallel,
                "microbatches_per_step": c.microbatches_per_step,
                "tokens_per_second": c.tokens_per_second,
                "fits": c.fits,
            }
            for c in plan.continuations
        ],
    }


def elastic_text(plan: Plan) -> str:
    """One line on what launch.elastic does for this plan: the node counts the job continues on, each with the
    gradient accumulation that keeps the global batch (those that do not fit memory are named and left out)."""
    usable = [c for c in plan.continuations if c.fits is not False]
    steps = [f"{plan.nodes} nodes (DP {plan.data_parallel} x {plan.microbatches_per_step} micro-batches)"] + [
        f"{c.nodes} (DP {c.data_parallel} x {c.microbatches_per_step}, ~{_si(c.tokens_per_second)} tokens/s)" for c in usable
    ]
    unfit = [str(c.nodes) for c in plan.continuations if c.fits is False]
    skipped = [n for n in range(plan.min_nodes or plan.nodes, plan.nodes) if n not in {c.nodes for c in plan.continuations}]
    text = f"elastic: runs on {steps[0]}; after a node is lost continues on " + (", ".join(steps[1:]) if usable else "no smaller count")
    text += f", the global batch {plan.layout.micro_batch * plan.microbatches_per_step * plan.data_parallel} kept"
    if skipped:
        text += f"; not on {', '.join(map(str, skipped))} (the layout cannot keep the global batch there)"
    if unfit:
        text += f"; not on {', '.join(unfit)} (does not fit memory)"
    return text


def _mechanisms(time: StepTime | None) -> dict[str, float] | None:
    return None if time is None else {name: round(seconds, 6) for name, seconds in time.seconds().items()}


def duration(seconds: float) -> str:
    """A run's length as an operator reads it: 45 s, 12 min, 3.2 h, 57 days."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    if seconds < 48 * 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def render_plan(plan: Plan) -> None:
    out = console()
    m, lay = plan.memory, plan.layout
    table = Table(title=f"plan: {plan.job} on {plan.nodes} x {plan.gpus_per_node} {plan.gpu} ({plan.world} ranks)", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    vp = f" x VP {lay.vp}" if lay.vp else ""
    table.add_row(
        "parallelism",
        f"TP {lay.tp} x PP {lay.pp}{vp} x CP {lay.cp} x DP {plan.data_parallel}"
        f"{' + sequence parallel' if lay.sequence_parallel else ''}{' + distributed optimizer' if lay.distributed_optimizer else ''}",
    )
    table.add_row(
        "batch",
        f"micro {lay.micro_batch} x {plan.microbatches_per_step} micro-batches x DP {plan.data_parallel}"
        f" = {lay.micro_batch * plan.microbatches_per_step * plan.data_parallel} sequences, {plan.tokens_per_iteration:,} tokens",
    )
    table.add_row("parameters", f"{plan.parameters:,} ({_si(plan.parameters)}); padded vocabulary {plan.padded_vocab:,}")
    table.add_row("FLOPs per iteration", f"{_si(plan.flops_per_iteration, 'FLOP')} (Megatron-LM's formula)")
    table.add_row(
        "memory per GPU",
        f"{m.weights_and_optimizer / GIB:.1f} GiB weights+grads+optimizer, {m.activations / GIB:.1f} GiB activations, "
        f"{m.logits / GIB:.1f} GiB logits, {m.reserved / GIB:.1f} GiB reserved = {m.total / GIB:.1f} GiB",
    )
    if plan.fits is None:
        verdict = "not checked (CPU nodes)"
    else:
        verdict = f"{'fits' if plan.fits else 'DOES NOT FIT'}: {m.total / GIB:.1f} of {m.capacity / GIB:.1f} GiB"
    table.add_row("verdict", verdict)
    table.add_row("estimate", f"MFU {100 * plan.mfu_assumed:.1f} %, {plan.step_seconds:.3g} s per iteration, {_si(plan.tokens_per_second)} tokens/s")
    if plan.time:
        table.add_row("where the time goes", ", ".join(f"{name} {share:.0%}" for name, share in plan.time.shares().items() if share >= 0.005))
    table.add_row("run", f"{plan.iterations:,} iterations: {duration(plan.run_seconds)}, {plan.gpu_hours:,.0f} GPU-hours (training steps only)")
    if plan.peak:
        table.add_row("rate behind it", plan.peak.text)
    out.print(table)
    if plan.min_nodes is not None:
        out.print(elastic_text(plan), markup=False)
    for w in plan.warnings:
        out.print(f"warning: {w}", markup=False)
    if plan.fits is False:
        if plan.fixes:
            out.print("fixes (any one fits): " + "; ".join(f.render() for f in plan.fixes), markup=False)
        else:
            out.print("no single change fits: run `megaprov plan --suggest` for layouts that do", markup=False)


def candidates_dict(found: list[Candidate]) -> list[dict[str, Any]]:
    return [
        {
            "tensor": c.layout.tp,
            "pipeline": c.layout.pp,
            "context": c.layout.cp,
            "virtual_stages": c.layout.vp,
            "data": c.data_parallel,
            "micro_batch": c.layout.micro_batch,
            "recompute": c.layout.recompute,
            "sequence_parallel": c.layout.sequence_parallel,
            "distributed_optimizer": c.layout.distributed_optimizer,
            "memory_gib": round(c.memory_gib, 3),
            "mfu": round(c.mfu, 4),
            "step_seconds": c.step_seconds,
            "tokens_per_second": c.tokens_per_second,
            "seconds_by_mechanism": _mechanisms(c.time),
        }
        for c in found
    ]


def render_suggest(found: list[Candidate], seconds: float) -> None:
    out = console()
    table = Table(title=f"layouts that fit, best estimated throughput first ({seconds * 1000:.0f} ms)")
    for col in ("#", "TP", "PP", "VP", "CP", "DP", "micro", "recompute", "dist-opt", "GiB/GPU", "est. MFU", "s/iter", "tokens/s"):
        table.add_column(col, justify="right")
    for i, c in enumerate(found, 1):
        lay = c.layout
        table.add_row(
            str(i),
            str(lay.tp),
            str(lay.pp),
            str(lay.vp or "-"),
            str(lay.cp),
            str(c.data_parallel),
            str(lay.micro_batch),
            lay.recompute,
            "yes" if lay.distributed_optimizer else "no",
            f"{c.memory_gib:.1f}",
            f"{100 * c.mfu:.1f} %",
            f"{c.step_seconds:.3g}",
            _si(c.tokens_per_second),
        )
    out.print(table)
    for line in why(found):
        out.print(line, markup=False)
    if not found:
        out.print("no layout fits: use more GPUs, a GPU with more memory, or a smaller model / sequence", markup=False)


def render_dry_run(rendered: Rendered, hosts: list[str] | None = None) -> None:
    """The launch `train --dry-run` shows: ``hosts``' scripts (default: every node's), the Slurm batch script."""
    out = console()
    out.print(f"\n# job {rendered.job}: job directory {rendered.job_dir}, checkpoints {rendered.checkpoint_dir}", markup=False)
    if rendered.slurm_node:  # launcher slurm: one node script for whatever nodes Slurm allocates
        out.print("\n# ---- launch/slurm-node.sh (srun runs it on every node of the allocation)", markup=False)
        out.print(rendered.slurm_node, markup=False, end="")
    else:
        chosen = [n for n in rendered.nodes if hosts is None or n.host in hosts]
        for node in chosen:
            out.print(f"\n# ---- {node.host} (node rank {node.node_rank})", markup=False)
            out.print(node.script, markup=False, end="")
        if len(chosen) < len(rendered.nodes):
            out.print(
                f"\n# ({len(rendered.nodes) - len(chosen)} more node(s) differ in their node rank: --all-nodes shows them, --dir DIR writes them)",
                markup=False,
            )
    if rendered.sbatch:
        out.print("\n# ---- launch/job.sbatch (submitted on the Slurm controller)", markup=False)
        out.print(rendered.sbatch, markup=False, end="")


def write_dry_run(directory: Path, plan: dict[str, Any], rendered: Rendered) -> list[Path]:
    """`train --dry-run --dir DIR`: plan.json and every launch file into a new directory (never over another)."""
    import os

    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise UsageError(f"--dir {directory} exists and is not empty", "give a new directory")
    if not directory.parent.is_dir():
        raise UsageError(f"--dir {directory}: {directory.parent} does not exist", "create the parent directory first")
    files = {"plan.json": json.dumps(plan, indent=2) + "\n", "megatron-args.txt": "\n".join(rendered.megatron_args) + "\n"}
    if rendered.slurm_node:
        files["launch/slurm-node.sh"] = rendered.slurm_node
    else:
        files.update({f"launch/{n.host}.sh": n.script for n in rendered.nodes})
    if rendered.sbatch:
        files["launch/job.sbatch"] = rendered.sbatch
    (directory / "launch").mkdir(parents=True, mode=0o755)
    written = []
    for relative, text in files.items():
        target = directory / relative
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755 if relative.endswith(".sh") else 0o644)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        written.append(target)
    return written


def progress_line(p: Progress) -> str:
    return (
        f"data: {p.docs:,} docs, {p.tokens:,} tokens, {p.bytes_in / 1e6:.1f} MB in {p.seconds:.1f} s "
        f"({p.docs_per_second:,.0f} docs/s, {p.tokens_per_second:,.0f} tokens/s"
        + (f" after {p.startup_seconds:.1f} s of start-up)" if p.steady else ")")
    )


def render_prepare(result: PrepareResult) -> None:
    out = console()
    p = result.progress
    out.print(progress_line(p), markup=False)
    if p.skipped_empty:
        out.print(f"data: skipped {p.skipped_empty:,} empty document(s)", markup=False)
    for key, prefix in result.prefixes.items():
        out.print(f"data: {key}: prefix {prefix} (list it under data.prefixes)", markup=False)


def renamed(text: str, name: str) -> str:
    """The spec text with its top-level ``name:`` replaced (kept as the job's spec.yml)."""
    return re.sub(r"^name:.*$", f"name: {name}", text, count=1, flags=re.MULTILINE)


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def progress_text(p: TrainProgress) -> str:
    parts = [f"{p.job}: iteration {p.iteration}/{p.total}"]
    if p.loss is not None:
        parts.append(f"loss {p.loss:.4f}")
    if p.tokens_per_second is not None:
        parts.append(f"{p.tokens_per_second:,.0f} tokens/s")
    if p.tflops_per_gpu is not None:
        parts.append(f"{p.tflops_per_gpu:.1f} TFLOP/s/GPU")
    if p.eta_seconds is not None:
        parts.append(f"ETA {_duration(p.eta_seconds)}")
    parts.append(f"checkpoint {p.checkpoint or '-'}")
    if p.restarts:
        parts.append(f"restarts {p.restarts}")
    return " | ".join(parts)


def render_verdict(judged: Verdict, report: dict[str, Any], paths: dict[str, Path]) -> None:
    out = console()
    name = report["job"]["name"]
    out.print(f"verdict for job {name}: {'PASSED' if judged.passed else 'FAILED'}", markup=False)
    for check in judged.checks:
        out.print(f"  {check.status:7s} {check.name}: {check.detail}", markup=False)
    for r in report["restarts"]:
        out.print(
            f"  restart: failed after iteration {r['last_iteration']}, resumed from {r['resumed_from']} ({r['lost_iterations']} iteration(s) lost, "
            f"{r['seconds_to_resumed_iteration']} s to the resumed iteration)",
            markup=False,
        )
    out.print(f"report: {paths['markdown']} (also {paths['json'].name}, {paths['plot'].name})", markup=False)


def job_status(job: Job, units: dict[str, dict[str, str]]) -> tuple[dict[str, Any], dict[str, Any]]:
    from megaprov.training import jobmeta, jobs

    jobs.settle(job, units)  # a job that ended while nobody followed it gets its verdict now
    meta = jobmeta.load(job.local_dir / "job.json", job.name).raw  # checked: the cluster user can write it
    spec = jobs.job_spec(job)
    log = jobs.read_log(job, spec.model.seq_length, spec.train.log_interval)
    last = log.iterations.get(log.furthest)
    report = job.local_dir / "report.json"
    status = {
        "iteration": log.furthest,
        "total": log.total,
        "loss": last.loss if last else None,
        "checkpoint": max(log.saves, default=0),
        "restarts": len(log.restarts),
        "nodes": {h: {"log": log.node_state(h), **units.get(h, {})} for h in job.hosts},
        **({"slurm": units["slurm"]} if "slurm" in units else {}),
        "verdict": jobs.report_verdict(report),
        "errors": log.errors,
    }
    return meta, status


def render_job_status(meta: dict[str, Any], status: dict[str, Any]) -> None:
    out = console()
    loss = f", loss {status['loss']:.4f}" if status["loss"] is not None else ""
    out.print(
        f"job {meta['name']}: {meta.get('state', '?')}, iteration {status['iteration']}/{status['total']}{loss}, "
        f"checkpoint {status['checkpoint'] or '-'}, restarts {status['restarts']}, verdict {status['verdict'] or '-'}",
        markup=False,
    )
    if "slurm" in status:
        from megaprov.training.launchers.slurm import SlurmState

        sl = status["slurm"]
        position = int(sl["position"]) if sl.get("position") else None
        found = SlurmState(sl["slurm_job_id"], sl["state"], sl["reason"], sl["nodes"], int(sl["restarts"] or 0), position, int(sl["pending"] or 0))
        out.print(f"  {found.describe()}", markup=False)
    for host, node in status["nodes"].items():
        if "slurm" in status:
            out.print(f"  {host}: torchrun {node['log']}", markup=False)
            continue
        unit = f"unit {node.get('ActiveState', '?')}/{node.get('SubState', '?')}, {node.get('NRestarts', '?')} unit restart(s)"
        out.print(f"  {host}: torchrun {node['log']}, {unit}", markup=False)
    for line in status["errors"][-3:]:
        out.print(f"  error in the logs: {line}", markup=False)
    out.print(f"  job directory: {meta['job_dir']}", markup=False)
