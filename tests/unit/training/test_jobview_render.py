"""What `megaprov plan` prints and `plan -o json` holds (megaprov.training.jobview, issue 36): every row of the plan
table, the elastic line, the warnings and fixes under it, and every key and value of plan_dict, for real plans of the
example jobs (examples/jobs, through jobspec.parse and planner.plan) on real GPU clusters (nodefacts.KnownCluster
with planner.GPUS' H100-SXM, A10, L40S, A100-40GB, and the CPU lab): fitting, not fitting with and without a
single-change fix, with virtual stages, with measured node rates, with launch.elastic; plus the run lengths and SI
numbers at their boundaries, `plan --suggest` of a real search, `train --dry-run` printing paths and hosts as they
are, `job status` of a Slurm job whose requeue count is not known, and the launch directory's mode.

Nothing is stood in but the terminal (pytest's capsys, a 300-column terminal, colour off unless a test turns it on);
the planner, the throughput model and the renderers are real. A few plans are a real plan with one field replaced
(dataclasses.replace) where no example reaches the case (a share of exactly 0.5 %, a mix of continuations)."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from megaprov.cluster.rates import NodeRate
from megaprov.training import jobview, nodefacts, planner, render
from megaprov.training.jobspec import parse
from megaprov.training.throughput import StepTime

ROOT = Path(__file__).resolve().parents[3]
JOBS = ROOT / "examples" / "jobs"
GIB = 1024**3


@pytest.fixture(autouse=True)
def terminal(monkeypatch):
    """A wide terminal without colour, whatever the environment running the tests says."""
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)


def lines(capsys) -> list[str]:
    return capsys.readouterr().out.splitlines()


def cells(text_lines: list[str]) -> list[list[str]]:
    """The rows of a rich table as printed: each line with column separators, split into its stripped cells."""
    return [[c.strip() for c in re.split("[│┃]", line)[1:-1]] for line in text_lines if len(re.findall("[│┃]", line)) >= 2]


def after_table(text_lines: list[str]) -> list[str]:
    """The lines printed after the table's bottom border."""
    end = max(i for i, line in enumerate(text_lines) if line.startswith("└"))
    return text_lines[end + 1 :]


def spec_of(example: str, **changes) -> object:
    """An example job, with top-level sections updated (``parallel={"virtual_stages": 3}``)."""
    doc = yaml.safe_load((JOBS / example).read_text())
    for section, values in changes.items():
        doc[section] = {**doc.get(section, {}), **values}
    return parse(yaml.safe_dump(doc))


def cluster(nodes: int, gpus: int, gpu: str, rates: tuple[NodeRate, ...] = ()) -> nodefacts.KnownCluster:
    hosts = tuple(f"node{i + 1}" for i in range(nodes))
    return nodefacts.KnownCluster(nodes, gpus, planner.GPUS[gpu], "/shared", hosts, rates, stack=nodefacts.ROLE_DEFAULTS)


def plan_of(example: str, nodes: int, gpus: int, gpu: str, rates: tuple[NodeRate, ...] = (), **changes) -> planner.Plan:
    spec = spec_of(example, **changes)
    assert planner.spec_problems(spec, nodes * gpus, gpus) == []
    return planner.plan(spec, cluster(nodes, gpus, gpu, rates))


def printed(capsys, plan: planner.Plan) -> tuple[str, list[list[str]], list[str]]:
    """The plan as printed: its title, its rows (label, value), the lines after the table."""
    jobview.render_plan(plan)
    out = lines(capsys)
    return out[0].strip(), cells(out), after_table(out)


PUBLISHED_H100 = "published peak of H100-SXM, 989.0 TFLOP/s bf16 (no measured rate: run megaprov bootstrap or preflight)"
RATES = (
    NodeRate("node1", 700.5, 8, "torch-cuda", "bfloat16", "2026-12-01T10:00:00Z"),
    NodeRate("node2", 650.25, 8, "torch-cuda", "bfloat16", "2026-12-01T10:05:00Z"),
    NodeRate("node9", 1.0, 8, "torch-cuda", "bfloat16", "elsewhere"),  # not one of the job's nodes
)


def elastic_llama(nodes: int, gpu: str, rates: tuple[NodeRate, ...] = ()) -> planner.Plan:
    return plan_of("llama-8b-2nodes.yml", nodes, 8, gpu, rates, launch={"nodes": nodes, "elastic": {"min_nodes": 1}})


# ---- the plan table, row by row


def test_a_fitting_plan_on_one_h100_node_prints_every_row(capsys):
    title, rows, rest = printed(capsys, plan_of("gpt-345m-1node.yml", 1, 8, "H100-SXM"))
    assert title == "plan: gpt-345m on 1 x 8 H100-SXM (8 ranks)"
    assert rows == [
        ["parallelism", "TP 1 x PP 1 x CP 1 x DP 8 + distributed optimizer"],
        ["batch", "micro 8 x 4 micro-batches x DP 8 = 256 sequences, 262,144 tokens"],
        ["parameters", "354,871,296 (354.87 M); padded vocabulary 50,304"],
        ["FLOPs per iteration", "595.59 TFLOP (Megatron-LM's formula)"],
        ["memory per GPU", "2.5 GiB weights+grads+optimizer, 6.4 GiB activations, 1.6 GiB logits, 3.0 GiB reserved = 13.4 GiB"],
        ["verdict", "fits: 13.4 of 79.6 GiB"],
        ["estimate", "MFU 31.3 %, 0.241 s per iteration, 1.09 M tokens/s"],
        [
            "where the time goes",
            "GEMMs 52%, logits and loss 20%, memory-bound kernels 18%, attention 9%, data-parallel communication 1%, optimizer 1%",
        ],
        ["run", "500,000 iterations: 33.4 h, 268 GPU-hours (training steps only)"],
        ["rate behind it", PUBLISHED_H100],
    ]
    assert rest == []  # no elastic line, no warning, nothing to fix


def test_virtual_stages_sequence_parallel_and_an_exa_scale_iteration(capsys):
    title, rows, rest = printed(capsys, plan_of("gpt3-175b-128nodes.yml", 128, 8, "H100-SXM", parallel={"virtual_stages": 3}))
    assert title == "plan: gpt3-175b on 128 x 8 H100-SXM (1024 ranks)"
    assert rows == [
        ["parallelism", "TP 8 x PP 16 x VP 3 x CP 1 x DP 8 + sequence parallel + distributed optimizer"],
        ["batch", "micro 1 x 192 micro-batches x DP 8 = 1536 sequences, 3,145,728 tokens"],
        ["parameters", "174,615,846,912 (174.62 G); padded vocabulary 51,200"],
        ["FLOPs per iteration", "3.34 EFLOP (Megatron-LM's formula)"],
        ["memory per GPU", "10.2 GiB weights+grads+optimizer, 12.6 GiB activations, 0.1 GiB logits, 3.0 GiB reserved = 25.8 GiB"],
        ["verdict", "fits: 25.8 of 79.6 GiB"],
        ["estimate", "MFU 40.1 %, 8.23 s per iteration, 382.18 k tokens/s"],
        [
            "where the time goes",
            "GEMMs 75%, tensor-parallel communication 10%, logits and loss 5%, pipeline bubble 2%, memory-bound kernels 2%, attention 2%, "
            "pipeline sends 2%, communication contention 1%, recomputation 1%",
        ],
        ["run", "500,000 iterations: 47.6 days, 1,170,627 GPU-hours (training steps only)"],
        ["rate behind it", PUBLISHED_H100],
    ]
    assert rest == []


def test_a_plan_that_does_not_fit_names_every_single_change_that_does(capsys):
    title, rows, rest = printed(capsys, plan_of("llama-8b-2nodes.yml", 2, 8, "L40S"))
    assert title == "plan: llama-8b on 2 x 8 L40S (16 ranks)"
    assert rows == [
        ["parallelism", "TP 2 x PP 1 x CP 1 x DP 8 + sequence parallel + distributed optimizer"],
        ["batch", "micro 1 x 16 micro-batches x DP 8 = 128 sequences, 1,048,576 tokens"],
        ["parameters", "8,030,261,248 (8.03 G); padded vocabulary 128,256"],
        ["FLOPs per iteration", "53.97 PFLOP (Megatron-LM's formula)"],
        ["memory per GPU", "28.0 GiB weights+grads+optimizer, 19.5 GiB activations, 2.0 GiB logits, 3.0 GiB reserved = 52.6 GiB"],
        ["verdict", "DOES NOT FIT: 52.6 of 44.4 GiB"],
        ["estimate", "MFU 33.8 %, 27.6 s per iteration, 38.05 k tokens/s"],
        [
            "where the time goes",
            "GEMMs 50%, tensor-parallel communication 17%, attention 15%, memory-bound kernels 7%, logits and loss 6%, recomputation 4%, "
            "communication contention 1%",
        ],
        ["run", "100,000 iterations: 31.9 days, 12,247 GPU-hours (training steps only)"],
        ["rate behind it", "published peak of L40S, 362.0 TFLOP/s bf16 (no measured rate: run megaprov bootstrap or preflight)"],
    ]
    assert rest == ["fixes (any one fits): parallel.tensor=4 (30.6 GiB); train.recompute=full (34.7 GiB); parallel.pipeline=2 (41.3 GiB)"]


def test_a_plan_no_single_change_rescues_points_at_suggest(capsys):
    title, rows, rest = printed(capsys, plan_of("llama-8b-2nodes.yml", 1, 8, "A10"))
    assert title == "plan: llama-8b on 1 x 8 A10 (8 ranks)"
    assert dict(rows)["verdict"] == "DOES NOT FIT: 58.2 of 22.0 GiB"
    assert dict(rows)["estimate"] == "MFU 40.5 %, 133 s per iteration, 7.88 k tokens/s"
    assert dict(rows)["run"] == "100,000 iterations: 154.1 days, 29,584 GPU-hours (training steps only)"
    assert rest == ["no single change fits: run `megaprov plan --suggest` for layouts that do"]


def test_a_plan_on_measured_nodes_with_elastic_says_the_rate_and_the_counts_it_continues_on(capsys):
    title, rows, rest = printed(capsys, elastic_llama(4, "H100-SXM", RATES))
    assert title == "plan: llama-8b on 4 x 8 H100-SXM (32 ranks)"
    assert rows == [
        ["parallelism", "TP 2 x PP 1 x CP 1 x DP 16 + sequence parallel + distributed optimizer"],
        ["batch", "micro 1 x 8 micro-batches x DP 16 = 128 sequences, 1,048,576 tokens"],
        ["parameters", "8,030,261,248 (8.03 G); padded vocabulary 128,256"],
        ["FLOPs per iteration", "53.97 PFLOP (Megatron-LM's formula)"],
        ["memory per GPU", "25.2 GiB weights+grads+optimizer, 19.5 GiB activations, 2.0 GiB logits, 3.0 GiB reserved = 49.8 GiB"],
        ["verdict", "fits: 49.8 of 79.6 GiB"],
        ["estimate", "MFU 53.4 %, 4.85 s per iteration, 216.06 k tokens/s"],
        [
            "where the time goes",
            "GEMMs 61%, attention 18%, logits and loss 6%, memory-bound kernels 5%, recomputation 5%, tensor-parallel communication 3%",
        ],
        ["run", "100,000 iterations: 5.6 days, 4,314 GPU-hours (training steps only)"],
        [
            "rate behind it",
            "measured rate of node2, 650.2 TFLOP/s per rank (bfloat16 GEMM, torch-cuda, 2026-12-01T10:05:00Z), the slowest of 2 measured node(s); "
            "not measured: node3, node4",
        ],
    ]
    assert rest == [
        "elastic: runs on 4 nodes (DP 16 x 8 micro-batches); after a node is lost continues on 2 (DP 8 x 16, ~108.31 k tokens/s), "
        "1 (DP 4 x 32, ~57.98 k tokens/s), the global batch 128 kept; not on 3 (the layout cannot keep the global batch there)"
    ]


def test_a_cpu_lab_plan_is_not_checked_for_memory_and_says_its_elastic_counts(capsys):
    title, rows, rest = printed(capsys, plan_of("lab-elastic.yml", 3, 1, "cpu"))
    assert title == "plan: lab-elastic on 3 x 1 cpu (3 ranks)"
    assert rows == [
        ["parallelism", "TP 1 x PP 1 x CP 1 x DP 3"],
        ["batch", "micro 2 x 2 micro-batches x DP 3 = 12 sequences, 1,536 tokens"],
        ["parameters", "132,864 (132.86 k); padded vocabulary 384"],
        ["FLOPs per iteration", "1.28 GFLOP (Megatron-LM's formula)"],
        ["memory per GPU", "0.0 GiB weights+grads+optimizer, 0.0 GiB activations, 0.0 GiB logits, 0.0 GiB reserved = 0.0 GiB"],
        ["verdict", "not checked (CPU nodes)"],
        ["estimate", "MFU 0.4 %, 1.03 s per iteration, 1.50 k tokens/s"],
        ["run", "200 iterations: 3 min, 0 GPU-hours (training steps only)"],
        ["rate behind it", "nominal CPU peak 100.0 GFLOP/s (no measured rate: run megaprov bootstrap, whose python stage measures it)"],
    ]
    assert rest == [
        "elastic: runs on 3 nodes (DP 3 x 2 micro-batches); after a node is lost continues on 2 (DP 2 x 3, ~997.31 tokens/s), "
        "the global batch 12 kept"
    ]


def test_a_share_of_exactly_half_a_percent_is_shown_one_below_is_not(capsys):
    base = plan_of("gpt-345m-1node.yml", 1, 8, "H100-SXM")
    names = ("gemm", "attention", "elementwise", "logits", "recompute", "tensor_parallel", "context_parallel", "bubble")
    names += ("pipeline_sends", "data_parallel", "contention", "optimizer")
    shares = {"gemm": 0.991, "attention": 0.004, "optimizer": 0.005}
    planned = replace(base, time=StepTime(**{n: shares.get(n, 0.0) for n in names}))
    assert planned.time.shares()["optimizer"] == 0.005  # exactly 0.5 %; attention 0.4 %
    _, rows, _ = printed(capsys, planned)
    assert dict(rows)["where the time goes"] == "GEMMs 99%, optimizer 0%"


def test_a_plan_without_time_shares_or_a_peak_leaves_those_rows_out(capsys):
    _, rows, _ = printed(capsys, replace(plan_of("gpt-345m-1node.yml", 1, 8, "H100-SXM"), time=None, peak=None))
    assert [r[0] for r in rows] == ["parallelism", "batch", "parameters", "FLOPs per iteration", "memory per GPU", "verdict", "estimate", "run"]


def test_the_warnings_follow_the_elastic_line_and_come_before_the_fixes(capsys):
    planned = replace(elastic_llama(4, "A100-40GB"), warnings=("first [b]one[/b]", "second"))
    _, _, rest = printed(capsys, planned)
    assert rest == [
        "elastic: runs on 4 nodes (DP 16 x 8 micro-batches); after a node is lost continues on no smaller count, the global batch 128 kept; "
        "not on 3 (the layout cannot keep the global batch there); not on 2, 1 (does not fit memory)",
        "warning: first [b]one[/b]",
        "warning: second",
        *[f"fixes (any one fits): {'; '.join(f.render() for f in planned.fixes)}"],
    ]
    assert planned.fixes  # the 40 GB A100 needs one


def test_the_labels_of_the_plan_table_are_bold_and_their_values_plain(capsys, monkeypatch):
    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    jobview.render_plan(plan_of("gpt-345m-1node.yml", 1, 8, "H100-SXM"))
    out = capsys.readouterr().out
    labels = re.findall(r"\x1b\[1m(\w[^\x1b]*?) *\x1b\[0m", out)
    assert labels == ["parallelism", "batch", "parameters", "FLOPs per iteration", "memory per GPU", "verdict", "estimate"] + [
        "where the time goes",
        "run",
        "rate behind it",
    ]
    assert "│ TP 1 x PP 1 x CP 1 x DP 8 + distributed optimizer " in out  # the value: no escape around it


# ---- the elastic line


def test_elastic_names_each_count_it_continues_on_and_each_it_cannot_keep_the_batch_on():
    assert jobview.elastic_text(elastic_llama(8, "H100-SXM")) == (
        "elastic: runs on 8 nodes (DP 32 x 4 micro-batches); after a node is lost continues on 4 (DP 16 x 8, ~251.41 k tokens/s), "
        "2 (DP 8 x 16, ~126.09 k tokens/s), 1 (DP 4 x 32, ~63.16 k tokens/s), the global batch 128 kept; "
        "not on 3, 5, 6, 7 (the layout cannot keep the global batch there)"
    )


def test_elastic_where_no_smaller_count_fits_memory_says_so():
    assert jobview.elastic_text(elastic_llama(8, "A100-40GB")) == (
        "elastic: runs on 8 nodes (DP 32 x 4 micro-batches); after a node is lost continues on no smaller count, the global batch 128 kept; "
        "not on 3, 5, 6, 7 (the layout cannot keep the global batch there); not on 4, 2, 1 (does not fit memory)"
    )


def test_elastic_uses_the_counts_that_fit_and_names_those_that_do_not():
    planned = elastic_llama(8, "H100-SXM")
    four, two, one = planned.continuations
    mixed = replace(planned, continuations=(four, replace(two, fits=False), replace(one, fits=False)))
    assert jobview.elastic_text(mixed) == (
        "elastic: runs on 8 nodes (DP 32 x 4 micro-batches); after a node is lost continues on 4 (DP 16 x 8, ~251.41 k tokens/s), "
        "the global batch 128 kept; not on 3, 5, 6, 7 (the layout cannot keep the global batch there); not on 2, 1 (does not fit memory)"
    )


# ---- plan -o json


MECHANISMS_ELASTIC = {
    "GEMMs": 2.982316,
    "attention": 0.889503,
    "memory-bound kernels": 0.263339,
    "logits and loss": 0.286997,
    "recomputation": 0.254144,
    "tensor-parallel communication": 0.143166,
    "context-parallel communication": 0.0,
    "pipeline bubble": 0.0,
    "pipeline sends": 0.0,
    "data-parallel communication": 0.00125,
    "communication contention": 0.020723,
    "optimizer": 0.011836,
}


def test_plan_json_of_a_measured_elastic_plan_holds_every_figure():
    planned = elastic_llama(4, "H100-SXM", RATES)
    tps = [c.tokens_per_second for c in planned.continuations]
    assert jobview.plan_dict(planned) == {
        "job": "llama-8b",
        "cluster": {"nodes": 4, "gpus_per_node": 8, "gpu": "H100-SXM", "world": 32},
        "layout": {
            "tensor": 2,
            "pipeline": 1,
            "context": 1,
            "virtual_stages": None,
            "data": 16,
            "micro_batch": 1,
            "microbatches_per_step": 8,
            "recompute": "selective",
            "sequence_parallel": True,
            "distributed_optimizer": True,
        },
        "parameters": 8_030_261_248,
        "padded_vocab": 128_256,
        "flops_per_iteration": planned.flops_per_iteration,
        "tokens_per_iteration": 1_048_576,
        "memory_gib": {
            "weights_grads_optimizer": 25.242,
            "activations": 19.5,
            "logits": 2.02,
            "reserved": 3.0,
            "total": 49.761,
            "capacity": 79.6,
        },
        "fits": True,
        "estimate": {
            "mfu": 0.5344,
            "step_seconds": planned.step_seconds,
            "tokens_per_second": planned.tokens_per_second,
            "peak_tflops_per_rank": 650.25,
            "peak_source": "measured",
            "peak": "measured rate of node2, 650.2 TFLOP/s per rank (bfloat16 GEMM, torch-cuda, 2026-12-01T10:05:00Z), the slowest of 2 measured "
            "node(s); not measured: node3, node4",
            "iterations": 100_000,
            "run_seconds": 485327.3,
            "gpu_hours": 4314.0,
            "seconds_by_mechanism": MECHANISMS_ELASTIC,
        },
        "measured_rates": {
            "node1": {"tflops_per_device": 700.5, "dtype": "bfloat16", "backend": "torch-cuda", "measured_at": "2026-12-01T10:00:00Z"},
            "node2": {"tflops_per_device": 650.25, "dtype": "bfloat16", "backend": "torch-cuda", "measured_at": "2026-12-01T10:05:00Z"},
        },
        "fixes": [],
        "warnings": [],
        "min_nodes": 1,
        "continues_on": [
            {
                "nodes": 2,
                "data_parallel": 8,
                "microbatches_per_step": 16,
                "tokens_per_second": tps[0],
                "fits": True,
            },
            {
                "nodes": 1,
                "data_parallel": 4,
                "microbatches_per_step": 32,
                "tokens_per_second": tps[1],
                "fits": True,
            },
        ],
    }
    assert 4.85 < planned.step_seconds < 4.86 and 216_000 < planned.tokens_per_second < 216_100
    assert planned.flops_per_iteration == pytest.approx(5.397062776101274e16)


def test_plan_json_rounds_memory_to_a_thousandth_of_a_gib_and_the_run_to_a_tenth():
    planned = elastic_llama(4, "H100-SXM", RATES)
    odd = replace(
        planned.memory,
        weights_and_optimizer=1.23456 * GIB,
        activations=2.34567 * GIB,
        logits=3.45678 * GIB,
        reserved=4.56789 * GIB,
        capacity=80.12345 * GIB,
    )
    doc = jobview.plan_dict(replace(planned, memory=odd))
    assert doc["memory_gib"] == {
        "weights_grads_optimizer": 1.235,
        "activations": 2.346,
        "logits": 3.457,
        "reserved": 4.568,
        "total": 11.605,
        "capacity": 80.123,
    }
    assert (doc["estimate"]["run_seconds"], doc["estimate"]["gpu_hours"]) == (485327.3, 4314.0)
    assert planned.run_seconds != 485327.3 and planned.gpu_hours != 4314.0  # the document rounds them


def test_plan_json_of_a_plan_that_does_not_fit_lists_its_fixes_and_warnings():
    planned = plan_of("llama-8b-2nodes.yml", 2, 8, "L40S")
    doc = jobview.plan_dict(replace(planned, warnings=("w1", "w2")))
    assert doc["fits"] is False
    assert doc["fixes"] == [
        {"field": "parallel.tensor", "value": 4, "memory_gib": 30.595},
        {"field": "train.recompute", "value": "full", "memory_gib": 34.675},
        {"field": "parallel.pipeline", "value": 2, "memory_gib": 41.347},
    ]
    assert doc["warnings"] == ["w1", "w2"]
    assert (doc["min_nodes"], doc["continues_on"], doc["measured_rates"]) == (None, [], {})
    assert doc["estimate"]["peak_source"] == "published"
    assert doc["estimate"]["peak_tflops_per_rank"] == 362.0


def test_plan_json_of_a_cpu_plan_without_a_peak_or_time_shares_says_none():
    planned = replace(plan_of("lab-elastic.yml", 3, 1, "cpu"), peak=None, time=None)
    doc = jobview.plan_dict(planned)
    tps = [c.tokens_per_second for c in planned.continuations]
    assert doc["fits"] is None
    assert doc["estimate"] == {
        "mfu": 0.0042,
        "step_seconds": planned.step_seconds,
        "tokens_per_second": planned.tokens_per_second,
        "peak_tflops_per_rank": None,
        "peak_source": None,
        "peak": None,
        "iterations": 200,
        "run_seconds": 205.4,
        "gpu_hours": 0.2,
        "seconds_by_mechanism": None,
    }
    assert doc["memory_gib"] == {
        "weights_grads_optimizer": 0.002,
        "activations": 0.005,
        "logits": 0.0,
        "reserved": 0.0,
        "total": 0.007,
        "capacity": 0.0,
    }
    assert doc["continues_on"] == [{"nodes": 2, "data_parallel": 2, "microbatches_per_step": 3, "tokens_per_second": tps[0], "fits": None}]
    assert doc["min_nodes"] == 2
    assert doc["layout"]["distributed_optimizer"] is False and doc["layout"]["sequence_parallel"] is False


# ---- plan --suggest of a real search


def test_suggest_of_a_real_search_prints_each_layout_and_the_reasons(capsys):
    spec = spec_of("gpt-345m-1node.yml")
    found = planner.suggest(spec, cluster(1, 8, "H100-SXM"), top=3)
    jobview.render_suggest(found, 0.2345)
    out = lines(capsys)
    assert out[0].strip() == "layouts that fit, best estimated throughput first (234 ms)"
    assert cells(out)[1:] == [
        ["1", "1", "1", "-", "1", "8", "16", "none", "yes", "21.4", "31.5 %", "0.239", "1.10 M"],
        ["2", "2", "1", "-", "1", "4", "16", "none", "yes", "12.4", "27.6 %", "0.273", "961.13 k"],
        ["3", "1", "2", "6", "1", "4", "8", "none", "yes", "13.2", "25.4 %", "0.297", "883.49 k"],
    ]
    assert after_table(out) == planner.why(found)
    [first] = jobview.candidates_dict(found[:1])
    assert (first["memory_gib"], first["mfu"], first["seconds_by_mechanism"]["GEMMs"]) == (21.362, 0.3147, 0.124706)


# ---- numbers and run lengths at their edges


@pytest.mark.parametrize(
    ("value", "said"),
    [(1e6, "1.00 M"), (1e9, "1.00 G"), (1e12, "1.00 T"), (1e15, "1.00 P"), (1e18, "1.00 E"), (1e3, "1.00 k"), (999_999_999_999, "1000.00 G")],
)
def test_a_value_of_exactly_a_prefix_takes_that_prefix(value, said):
    assert jobview._si(value) == said


@pytest.mark.parametrize(("seconds", "said"), [(10_981, "3.1 h"), (177_122, "2.1 days"), (36_000, "10.0 h"), (864_000, "10.0 days")])
def test_hours_and_days_are_exact_divisions(seconds, said):
    assert jobview.duration(seconds) == said


# ---- train --dry-run


def test_the_dry_run_prints_paths_and_hosts_as_they_are(capsys):
    nodes = (render.NodeLaunch("[b]gpu1[/b]", 0, (), (), "echo 0\n"), render.NodeLaunch("gpu[2]", 1, (), (), "echo [i]1[/i]\n"))
    rendered = render.Rendered("lab-tiny", "/shared/[b]jobs[/b]/lab-tiny", "/shared/[i]ck[/i]", ("--a",), nodes, "#SBATCH [b]\n")
    jobview.render_dry_run(rendered)
    assert capsys.readouterr().out == (
        "\n# job lab-tiny: job directory /shared/[b]jobs[/b]/lab-tiny, checkpoints /shared/[i]ck[/i]\n"
        "\n# ---- [b]gpu1[/b] (node rank 0)\necho 0\n"
        "\n# ---- gpu[2] (node rank 1)\necho [i]1[/i]\n"
        "\n# ---- launch/job.sbatch (submitted on the Slurm controller)\n#SBATCH [b]\n"
    )


def test_the_dry_run_adds_no_line_of_its_own_after_a_script(capsys):
    nodes = (render.NodeLaunch("node1", 0, (), (), "no newline at the end"),)
    jobview.render_dry_run(render.Rendered("j", "/d", "/c", (), nodes, "sbatch without newline", slurm_node=None))
    out = capsys.readouterr().out
    assert out == (
        "\n# job j: job directory /d, checkpoints /c\n\n# ---- node1 (node rank 0)\nno newline at the end"
        "\n# ---- launch/job.sbatch (submitted on the Slurm controller)\nsbatch without newline"
    )
    jobview.render_dry_run(render.Rendered("j", "/d", "/c", (), nodes, None, slurm_node="srun line"))
    assert capsys.readouterr().out.endswith("(srun runs it on every node of the allocation)\nsrun line")


def test_the_launch_directory_is_not_writable_by_others_whatever_the_umask(tmp_path):
    umask = os.umask(0)
    try:
        jobview.write_dry_run(tmp_path / "out", {}, render.Rendered("j", "/d", "/c", (), (render.NodeLaunch("n", 0, (), (), "x\n"),), None))
    finally:
        os.umask(umask)
    assert os.stat(tmp_path / "out" / "launch").st_mode & 0o777 == 0o755
    assert os.stat(tmp_path / "out" / "launch" / "n.sh").st_mode & 0o777 == 0o755
    assert os.stat(tmp_path / "out" / "plan.json").st_mode & 0o777 == 0o644


# ---- job status of a Slurm job


def test_a_running_slurm_job_without_a_requeue_count_claims_no_requeue(capsys):
    slurm = {"slurm_job_id": "7", "state": "RUNNING", "reason": "None", "nodes": "node[1-2]", "restarts": "", "position": "", "pending": ""}
    status = {"iteration": 3, "total": 60, "loss": None, "checkpoint": 0, "restarts": 0, "nodes": {}, "verdict": None, "errors": []}
    jobview.render_job_status({"name": "j", "state": "running", "job_dir": "/d"}, {**status, "slurm": slurm})
    assert lines(capsys) == [
        "job j: running, iteration 3/60, checkpoint -, restarts 0, verdict -",
        "  slurm job 7 RUNNING on node[1-2]",
        "  job directory: /d",
    ]
