"""What `megaprov top`'s queries mean, checked by Prometheus's own engine (promtool test rules, promql_expr_test): from
series shaped as the node exporter, megaprov's GPU collector and the training follower write them (every series has
``node``; GPU series carry the running job's name as ``job``, which honor_labels keeps), each query answers what the
view says it shows. The answers then fold into the rows the operator reads."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from megaprov.ops import top
from tests.helpers.promtool import promtool

NODE1 = 'node="node1",instance="10.0.0.1:9100"'
NODE2 = 'node="node2",instance="10.0.0.2:9100"'
# Series over 10 minutes, one sample a minute (promtool's expanding notation: "1x10" is 1 eleven times).
SERIES = [
    (f'up{{job="node",{NODE1}}}', "1x10"),
    (f'up{{job="node",{NODE2}}}', "1x5 0x5"),  # went down at minute 6
    ('up{job="prometheus",node="node1",instance="10.0.0.1:9090"}', "1x10"),  # another job's target: not a node row
    (f'node_load1{{job="node",{NODE1}}}', "3.5x10"),
    *[(f'node_cpu_seconds_total{{job="node",{NODE1},cpu="{c}",mode="{m}"}}', "0+1x10") for c in range(4) for m in ("idle", "user")],
    (f'node_memory_MemAvailable_bytes{{job="node",{NODE1}}}', "25x10"),
    (f'node_memory_MemTotal_bytes{{job="node",{NODE1}}}', "100x10"),
    ('megaprov_node_gpus_expected{job="node",node="node1"}', "2x10"),
    ('megaprov_node_gpus_expected{job="node",node="node2"}', "2x10"),
    # GPU 1 shows under two job labels for a moment (the job on the node changed between two scrapes): still one GPU
    ('megaprov_gpu_info{job="gpt",node="node1",gpu="0",uuid="GPU-a",name="H100"}', "1x10"),
    ('megaprov_gpu_info{job="gpt",node="node1",gpu="1",uuid="GPU-b",name="H100"}', "1x10"),
    ('megaprov_gpu_info{job="node",node="node1",gpu="1",uuid="GPU-b",name="H100"}', "1x10"),
    ('megaprov_gpu_utilization_ratio{job="gpt",node="node1",gpu="0"}', "0.5x10"),
    ('megaprov_gpu_utilization_ratio{job="gpt",node="node1",gpu="1"}', "1x10"),
    ('megaprov_gpu_memory_used_bytes{job="gpt",node="node1",gpu="0"}', "10x10"),
    ('megaprov_gpu_memory_used_bytes{job="gpt",node="node1",gpu="1"}', "30x10"),
    ('megaprov_gpu_memory_total_bytes{job="gpt",node="node1",gpu="0"}', "80x10"),
    ('megaprov_gpu_memory_total_bytes{job="gpt",node="node1",gpu="1"}', "80x10"),
    ('megaprov_job_running{job="gpt",node="node1"}', "1x10"),
    ('megaprov_job_running{job="old",node="node2"}', "1x3 0x7"),  # ended at minute 4: not running
    ('megaprov_job_iteration{job="gpt",node="node1"}', "0+10x10"),
    ('megaprov_job_train_iterations{job="gpt",node="node1"}', "1000x10"),
    ('megaprov_job_loss{job="gpt",node="node1"}', "9-0.25x10"),
    ('megaprov_job_tokens_per_second{job="gpt",node="node1"}', "9000x10"),
    ('megaprov_job_expected_tokens_per_second{job="gpt",node="node1"}', "10000x10"),
    ('megaprov_job_last_progress_timestamp_seconds{job="gpt",node="node1"}', "540x10"),  # last progress at 9:00
    ('megaprov_job_restarts_total{job="gpt",node="node1"}', "0x5 1x5"),
    ('ALERTS{alertname="NodeDown",alertstate="firing",severity="critical",job="node",node="node2"}', "1x10"),
    ('ALERTS{alertname="GpuMissing",alertstate="pending",severity="critical",job="node",node="node1"}', "1x10"),
]
AT = "10m"
# query name -> [(labels as promtool writes them, value)] at minute 10
EXPECTED: dict[str, list[tuple[str, float]]] = {
    "up": [(f'up{{job="node",{NODE1}}}', 1), (f'up{{job="node",{NODE2}}}', 0)],
    "load1": [(f'node_load1{{job="node",{NODE1}}}', 3.5)],
    "cpus": [('{node="node1"}', 4)],
    "mem_used": [(f'{{job="node",{NODE1}}}', 0.75)],
    "gpus_expected": [
        ('megaprov_node_gpus_expected{job="node",node="node1"}', 2),
        ('megaprov_node_gpus_expected{job="node",node="node2"}', 2),
    ],
    "gpus": [('{node="node1"}', 2)],
    "gpu_util": [('{node="node1"}', 0.75)],
    "gpu_mem": [('{node="node1"}', 0.25)],
    # the job queries that select one metric answer it with its labels: the running job "gpt" on node1
    **{
        name: [(f'{metric}{{job="gpt",node="node1"}}', value)]
        for name, metric, value in (
            ("job_running", "megaprov_job_running", 1),
            ("job_iteration", "megaprov_job_iteration", 100),
            ("job_total", "megaprov_job_train_iterations", 1000),
            ("job_loss", "megaprov_job_loss", 6.5),
            ("job_tokens", "megaprov_job_tokens_per_second", 9000),
            ("job_expected", "megaprov_job_expected_tokens_per_second", 10000),
            ("job_since", "", 60),  # time() - ...: the labels without the name
            ("job_restarts", "megaprov_job_restarts_total", 1),
        )
    },
    "alerts": [('ALERTS{alertname="NodeDown",alertstate="firing",severity="critical",job="node",node="node2"}', 1)],
}


def test_every_query_of_top_is_checked_here():
    assert set(EXPECTED) == set(top.QUERIES)


def test_each_query_means_what_the_view_shows(tmp_path: Path):
    tests = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in SERIES],
                "promql_expr_test": [
                    {"expr": top.QUERIES[name], "eval_time": AT, "exp_samples": [{"labels": labels, "value": value} for labels, value in samples]}
                    for name, samples in EXPECTED.items()
                ],
            }
        ],
    }
    path = tmp_path / "top.test.yml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    proc = subprocess.run([str(promtool()), "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "SUCCESS" in proc.stdout


def _answers() -> dict[str, list[dict[str, Any]]]:
    """The expected samples as the query API returns them (instant vectors)."""

    def labels(text: str) -> dict[str, str]:
        inside = text[text.index("{") + 1 : text.rindex("}")]
        return dict((k, json.loads(v)) for k, v in (pair.split("=", 1) for pair in inside.split(",") if pair))

    return {name: [{"metric": labels(lb), "value": [600.0, str(v)]} for lb, v in samples] for name, samples in EXPECTED.items()}


def test_the_checked_answers_fold_into_the_rows_the_operator_reads():
    snap = top.fold("http://p:9090", _answers())
    rows = {n.node: n for n in snap.nodes}
    assert set(rows) == {"node1", "node2"}  # Prometheus's own target is no node row
    one, two = rows["node1"], rows["node2"]
    assert (one.up, one.load1, one.cpus, one.mem_used, one.gpus, one.gpus_expected, one.gpu_util, one.gpu_mem) == (
        True,
        3.5,
        4,
        0.75,
        2,
        2,
        0.75,
        0.25,
    )
    assert (two.up, two.gpus, two.gpus_expected) == (False, 0, 2)
    (job,) = snap.jobs  # the ended one is not listed
    assert (job.job, job.node, job.iteration, job.total, job.loss, job.since_progress, job.restarts) == ("gpt", "node1", 100, 1000, 6.5, 60.0, 1)
    assert [(a.name, a.severity, a.where) for a in snap.alerts] == [("NodeDown", "critical", "node=node2")]  # a pending alert is not firing
