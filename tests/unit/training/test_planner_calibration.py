"""The planner against Megatron-LM's published runs (benchmarks/published_runs.py, sources cited there): every row of
the H100 weak-scaling table within 10 % with its published (TP, PP) among the top 3 of ``plan --suggest``, and the
runs kept aside for checking (H100 strong scaling, two A100 tables of another vocabulary, sequence and software)
within the bounds the closing note of the calibration reports."""

import pytest

from tests.conftest import ROOT, load_module

bench = load_module(ROOT / "benchmarks" / "bench_planner.py", "megaprov_bench_planner")
runs = load_module(ROOT / "benchmarks" / "published_runs.py", "published_runs")


@pytest.mark.parametrize("run", runs.H100_WEAK, ids=lambda r: r.name)
def test_each_published_h100_run_is_estimated_within_ten_percent_and_its_layout_ranks_top_three(run):
    error, rank, layout, _ = bench.evaluate(run)
    assert abs(error) <= 0.10, f"{run.name}: estimate {error:+.1%} against the published {run.tflops} TFLOP/s/GPU ({layout.describe()})"
    assert rank is not None and rank <= 3, f"{run.name}: the published TP {run.tp} x PP {run.pp} ranks {rank}"


def test_the_runs_kept_aside_hold_the_same_model():
    """Not fitted on: the H100 strong-scaling end points within 10 %; the A100 tables (vocabulary 51,200, sequence
    2,048, software of 2021 and 2022) within 20 % each and 12 % on average (measured: 17.0 % and 9.8 %)."""
    strong = [bench.evaluate(r, rank=False)[0] for r in runs.H100_STRONG]
    assert max(abs(e) for e in strong) <= 0.10, strong
    a100 = [bench.evaluate(r, rank=False)[0] for r in runs.A100_2021 + runs.A100_2022]
    assert max(abs(e) for e in a100) <= 0.20, a100
    assert sum(abs(e) for e in a100) / len(a100) <= 0.12, a100


def test_the_published_seconds_follow_each_sources_formula():
    """1.7B on H100: 12 x 192 x 4096 x 24 x 2048^2 x (2 + 4096/2048 + 4 + 131072/(2 x 24 x 2048)) FLOPs an iteration
    at 408.8 TFLOP/s on each of 48 GPUs; the A100 1T with the recomputed forward (Narayanan et al. eq. 3)."""
    small = runs.H100_WEAK[0]
    flops = 12 * 192 * 4096 * 24 * 2048**2 * (2 + 2 + 4 + 131072 / (2 * 24 * 2048))
    assert runs.published_seconds(small) == pytest.approx(flops / (48 * 408.8e12), rel=1e-12)
    big = runs.A100_2021[-1]
    flops = 96 * 3072 * 2048 * 128 * 25600**2 * (1 + 2048 / (6 * 25600) + 51200 / (16 * 128 * 25600))
    assert runs.published_seconds(big) == pytest.approx(flops / (3072 * 163e12), rel=1e-12)
