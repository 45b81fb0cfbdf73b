#!/usr/bin/env python3
"""The planner's step-time model against published Megatron-LM runs: for each run, the estimate of its published
layout against the published TFLOP/s per GPU, and where the published (TP, PP) ranks in ``plan --suggest``.

    .venv/bin/python benchmarks/bench_planner.py [--set h100|held-out|all] [--fit]

The published figures and their sources are in ``benchmarks/published_runs.py``: Megatron-LM's H100 weak-scaling
table (the calibration set) and, kept aside for checking, its H100 strong-scaling end points and two A100 tables of
other vocabularies, sequence lengths, software and scales.

The estimate of a published run is the planner's best layout with the published tensor and pipeline sizes (and
context 1): the knobs a publication leaves out (micro-batch, virtual pipeline stages, recomputation where the source
does not fix it) are those a tuned run would choose, which is what ``--suggest`` ranks. "error" is estimated
TFLOP/s/GPU over published, minus 1 (on the source's own FLOPs formula: the same seconds per iteration). "rank" is the
position of the first layout with the published (TP, PP) in ``plan --suggest`` (one line per TP x PP x CP).

``--fit`` searches the step-time model's fitted constants (``megaprov/training/throughput.py``, ``TRAINING_SHARE`` in
the planner) on the calibration set alone, by coordinate descent from their current values, for the smallest worst
error plus how far each published split falls behind the third of ``--suggest``, and prints them; nothing is written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from published_runs import A100_2021, A100_2022, H100_STRONG, H100_WEAK, Run, job, published_seconds  # noqa: E402

from megaprov.training import jobspec, planner, throughput  # noqa: E402

SETS = {"h100": H100_WEAK, "held-out": H100_STRONG + A100_2022 + A100_2021}
SETS["all"] = SETS["h100"] + SETS["held-out"]


def cluster_of(r: Run) -> planner.Cluster:
    gpn = min(r.gpus, 8)
    return planner.Cluster(r.gpus // gpn, gpn, planner.GPUS[r.gpu])


def published_layouts(spec: jobspec.JobSpec, r: Run, cluster: planner.Cluster) -> list[planner.Layout]:
    """The published split (TP, PP, context 1) with every value of the knobs the source leaves open: micro-batch,
    virtual stages and, where the source does not fix it, recomputation. Sequence parallelism and the optimizer are
    the source's."""
    dp = r.gpus // (r.tp * r.pp)
    per_rank = r.batch // dp
    micro = [1] if r.software == "a100-2022" else [x for x in planner.divisors(per_rank) if x <= 16]
    recomputes = [spec.train.recompute] if r.software != "h100-2024" else ["none", "selective", "full"]
    p = spec.parallel
    found = []
    for mb in micro:
        interleaved = r.pp > 1 and (per_rank // mb) % r.pp == 0  # Megatron-LM's interleaved schedule needs it
        vps: list[int | None] = [None] + ([v for v in planner.divisors(r.layers // r.pp) if v > 1] if interleaved else [])
        for vp in vps:
            for rc in recomputes:
                layout = planner.Layout(r.tp, r.pp, 1, vp, mb, rc, p.sequence_parallel, p.distributed_optimizer)
                if planner.memory(spec, layout, cluster).fits:
                    found.append(layout)
    return found


def evaluate(r: Run, rank: bool = True) -> tuple[float, int | None, planner.Layout | None, planner.throughput.StepTime | None]:
    """(error of the published layout's estimate, rank of the published (TP, PP) in --suggest, the layout, its step)."""
    spec = jobspec.JobSpec.model_validate(job(r))
    cluster = cluster_of(r)
    found = [(planner.step_time(spec, lay, cluster), lay) for lay in published_layouts(spec, r, cluster)]
    if not found:
        return float("nan"), None, None, None
    step, layout = min(found, key=lambda f: f[0].total)
    error = published_seconds(r) / step.total - 1
    place = None
    if rank:
        ranked = planner.suggest(spec, cluster, top=10**6)
        place = next((i for i, c in enumerate(ranked, 1) if (c.layout.tp, c.layout.pp) == (r.tp, r.pp)), None)
    return error, place, layout, step


def table(runs: tuple[Run, ...], title: str) -> list[float]:
    print(f"\n{title}")
    print(f"{'run':<11}{'GPUs':>6}{'TP':>4}{'PP':>4}{'published':>11}{'estimate':>10}{'error':>8}{'rank':>6}  layout estimated; its largest costs")
    errors = []
    for r in runs:
        error, rank, layout, step = evaluate(r)
        errors.append(error)
        if layout is None or step is None:
            print(f"{r.name:<11}{r.gpus:>6}{r.tp:>4}{r.pp:>4}{r.tflops:>11.1f}  (the published layout does not fit)")
            continue
        est = r.tflops * (1 + error)
        shares = ", ".join(f"{k} {v:.0%}" for k, v in list(step.shares().items())[:4])
        print(f"{r.name:<11}{r.gpus:>6}{r.tp:>4}{r.pp:>4}{r.tflops:>11.1f}{est:>10.1f}{error:>+8.1%}{rank or '-':>6}  {layout.describe()}; {shares}")
    finite = [abs(e) for e in errors if e == e]
    print(f"worst |error| {max(finite):.1%}, mean |error| {sum(finite) / len(finite):.1%}")
    return errors


FRACTIONS = {"TRAINING_SHARE", "TP_EXPOSED", "P2P_EXPOSED"}  # shares: at most 1
FITTED = ("TRAINING_SHARE", "GEMM_HALF", "ELEMENT_BYTES_H", "TP_EXPOSED", "P2P_EXPOSED", "CONTENTION", "TP_CONTENTION")


def behind_third(r: Run) -> float:
    """How much faster (relative) the third split of --suggest is than the best with the published (TP, PP): 0 when the
    published split is in the top 3."""
    spec = jobspec.JobSpec.model_validate(job(r))
    ranked = planner.suggest(spec, cluster_of(r), top=10**6)
    mine = next((c for c in ranked if (c.layout.tp, c.layout.pp) == (r.tp, r.pp)), None)
    if mine is None or len(ranked) < 3:
        return 0.0 if mine else 1.0
    return max(0.0, ranked[2].tokens_per_second / mine.tokens_per_second - 1)


def fit() -> None:
    def cost() -> float:
        errs = [evaluate(r, rank=False)[0] for r in H100_WEAK]
        worst = max(abs(e) for e in errs)
        return worst + 0.2 * sum(e * e for e in errs) ** 0.5 + 2 * sum(behind_third(r) for r in H100_WEAK)

    best = cost()
    step = {name: 0.25 for name in FITTED}
    for _ in range(6):
        for name in FITTED:
            for direction in (1 + step[name], 1 / (1 + step[name])):
                where = planner if name == "TRAINING_SHARE" else throughput
                old = getattr(where, name)
                if name in FRACTIONS and old * direction > 1:
                    continue
                setattr(where, name, old * direction)
                c = cost()
                if c < best:
                    best = c
                    print(f"  {name} = {getattr(where, name):.4g}: cost {best:.4f}")
                else:
                    setattr(where, name, old)
            step[name] /= 2
    print("fitted:", ", ".join(f"{n} = {getattr(planner if n == 'TRAINING_SHARE' else throughput, n):.4g}" for n in FITTED))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--set", choices=sorted(SETS), default="all")
    ap.add_argument("--fit", action="store_true", help="fit the step-time model's constants on the H100 table and print them")
    args = ap.parse_args()
    if args.fit:
        fit()
    if args.set in ("h100", "all"):
        table(H100_WEAK, "Megatron-LM H100 weak scaling (calibration set): TFLOP/s per GPU")
    if args.set in ("held-out", "all"):
        table(H100_STRONG, "kept aside: H100 strong scaling, 177B at a batch of 1,152 (layout assumed TP 8 x PP 6)")
        table(A100_2022, "kept aside: A100, Korthikanti et al. 2022 (selective recompute, sequence parallel, DP 1)")
        table(A100_2021, "kept aside: A100, Narayanan et al. 2021 (full recompute, no flash attention; TFLOP/s with recompute)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
