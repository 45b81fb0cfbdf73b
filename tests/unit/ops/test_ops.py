"""megaprov logs and megaprov top: argument checks, the query they build, and Prometheus answers folded into a view."""

from __future__ import annotations

import io
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from megaprov.cluster import inventory as inv
from megaprov.errors import HostsUnreachable, RunFailed, UsageError
from megaprov.ops import logs, top


def inventory(tmp_path: Path, observe: bool = True, extra: str = "") -> inv.Inventory:
    path = tmp_path / "inventory.ini"
    path.write_text(f"[head]\nhead1 ansible_host=10.0.0.1\n\n[gpu_nodes]\nnode1\nnode2\n\n[all:vars]\nmegaprov_observe={observe}\n{extra}")
    return inv.Inventory(path, *_parsed(path))


def _parsed(path: Path) -> tuple[Any, Any, Any]:
    hosts, groups, group_vars, _ = inv.parse_ini(path.read_text(), str(path))
    return hosts, groups, group_vars


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("30m", "-30min"),
        ("2h", "-2h"),
        ("1d", "-1d"),
        ("45s", "-45s"),
        ("2w", "-2weeks"),
        ("2026-12-01 14:30", "2026-12-01 14:30"),
        ("2026-12-01T14:30:05", "2026-12-01 14:30:05"),
        ("yesterday", "yesterday"),
    ],
)
def test_since_becomes_what_journalctl_takes(given: str, expected: str) -> None:
    assert logs.since_arg(given) == expected


@pytest.mark.parametrize("bad", ["", "1 hour", "-1h", "$(id)", "2026-13", "now; rm -rf /", "1y"])
def test_a_since_that_is_no_time_is_refused_naming_the_flag(bad: str) -> None:
    with pytest.raises(UsageError, match="--since"):
        logs.since_arg(bad)


@pytest.mark.parametrize("bad", ["(", "a" * 201, "x\ny", "[z-a]"])
def test_a_grep_that_is_no_expression_is_refused(bad: str) -> None:
    with pytest.raises(UsageError, match="--grep"):
        logs.grep_arg(bad)


def test_the_query_names_the_head_and_checked_arguments(tmp_path: Path) -> None:
    found = inventory(tmp_path)
    query = logs.build(found, "node2", "2h", "NCCL (WARN|ERROR)", 500)
    assert query.vars() == {"host": "head1", "node": "node2", "since": "-2h", "grep": "NCCL (WARN|ERROR)", "lines": 500}
    assert logs.build(found, None, None, None, 200).vars() == {"host": "head1", "node": "", "since": "", "grep": "", "lines": 200}
    with pytest.raises(UsageError, match="--node node9 is not a host"):
        logs.build(found, "node9", None, None, 200)
    with pytest.raises(UsageError, match="--lines 0"):
        logs.build(found, None, None, None, 0)
    with pytest.raises(UsageError, match="observe stage is off"):
        logs.build(inventory(tmp_path, observe=False), None, None, None, 200)


def test_prometheus_is_found_from_the_inventory_or_the_flag(tmp_path: Path) -> None:
    assert top.prometheus_url(inventory(tmp_path), None) == "http://10.0.0.1:9090"
    assert top.prometheus_url(inventory(tmp_path, extra="prometheus_port=9999\nprometheus_listen_address=fd00::1\n"), None) == "http://[fd00::1]:9999"
    assert top.prometheus_url(inventory(tmp_path, observe=False), "http://localhost:9090/") == "http://localhost:9090"
    with pytest.raises(UsageError, match="observe stage is off"):
        top.prometheus_url(inventory(tmp_path, observe=False), None)
    with pytest.raises(UsageError, match="--url"):
        top.prometheus_url(inventory(tmp_path), "file:///etc/passwd")


def sample(value: str, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [1700000000.0, value]}


ANSWERS: dict[str, list[dict[str, Any]]] = {
    "up": [sample("1", node="node1", job="node"), sample("0", node="node2", job="node")],
    "load1": [sample("3.5", node="node1")],
    "cpus": [sample("16", node="node1")],
    "mem_used": [sample("0.25", node="node1")],
    "gpus_expected": [sample("8", node="node1"), sample("8", node="node2")],
    "gpus": [sample("7", node="node1")],
    "gpu_util": [sample("0.93", node="node1")],
    "gpu_mem": [sample("0.5", node="node1")],
    "job_running": [sample("1", job="gpt", node="node1")],
    "job_iteration": [sample("120", job="gpt", node="node1"), sample("60", job="done", node="node2")],
    "job_total": [sample("1000", job="gpt", node="node1")],
    "job_loss": [sample("NaN", job="gpt", node="node1")],
    "job_tokens": [sample("9000", job="gpt", node="node1")],
    "job_expected": [sample("10000", job="gpt", node="node1")],
    "job_since": [sample("4.2", job="gpt", node="node1")],
    "job_restarts": [sample("2", job="gpt", node="node1")],
    "alerts": [
        sample("1", alertname="GpuMissing", severity="critical", node="node1", job="node"),
        sample("1", alertname="NodeDown", severity="critical", node="node2", job="node"),
        sample("1", alertname="TrainingThroughputBelowPlan", severity="warning", node="node1", job="gpt"),
        sample("1", alertname="[bold]x[/bold]", severity="warning"),
    ],
}


def test_the_answers_fold_into_nodes_jobs_and_alerts() -> None:
    snap = top.fold("http://p:9090", ANSWERS)
    one, two = snap.nodes
    assert (one.node, one.up, one.load1, one.cpus, one.mem_used, one.gpus, one.gpus_expected, one.gpu_util) == (
        "node1",
        True,
        3.5,
        16,
        0.25,
        7,
        8,
        0.93,
    )
    assert (two.node, two.up, two.gpus, two.gpus_expected, two.gpu_util) == ("node2", False, 0, 8, None)
    (job,) = snap.jobs  # the finished job is not running
    assert (job.job, job.iteration, job.total, job.tokens_per_second, job.expected, job.since_progress, job.restarts) == (
        "gpt",
        120,
        1000,
        9000.0,
        10000.0,
        4.2,
        2,
    )
    assert job.loss is not None and job.loss != job.loss  # nan stays nan: the view shows it
    assert [(a.name, a.where) for a in snap.alerts] == [
        ("GpuMissing", "node=node1"),
        ("NodeDown", "node=node2"),
        ("TrainingThroughputBelowPlan", "node=node1, job=gpt"),
        ("[bold]x[/bold]", ""),
    ]
    text = io.StringIO()
    Console(file=text, width=160, color_system=None).print(top.render(snap))
    out = text.getvalue()
    assert "DOWN" in out and "7/8" in out and "93%" in out and "120/1000" in out and "90%" in out and "nan" in out
    assert "[bold]x[/bold]" in out  # a label is text, never markup
    assert json.loads(json.dumps(snap.as_dict()))["jobs"][0]["job"] == "gpt"


def serve(answer: Any) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = answer(self.path) if callable(answer) else answer
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_a_snapshot_asks_every_query_over_http() -> None:
    asked: list[str] = []

    def answer(path: str) -> bytes:
        asked.append(path)
        return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [sample("1", node="n1", job="node")]}}).encode()

    server, url = serve(answer)
    try:
        snap = top.snapshot(url)
    finally:
        server.shutdown()
    assert len(asked) == len(top.QUERIES) and all(p.startswith("/api/v1/query?query=") for p in asked)
    assert [n.node for n in snap.nodes] == ["n1"]


def test_what_is_not_prometheus_is_one_clear_error() -> None:
    server, url = serve(b"<html>login</html>")
    try:
        with pytest.raises(RunFailed, match="does not answer as Prometheus does"):
            top.ask(url, "up")
    finally:
        server.shutdown()
    with pytest.raises(HostsUnreachable, match="does not answer") as info:  # exit 4, as an unreachable host everywhere
        top.ask("http://127.0.0.1:1", "up")
    assert info.value.exit_code == 4


def test_a_job_s_node_log_is_read_from_its_last_node_filtered_and_bounded(tmp_path: Path) -> None:
    import re

    from megaprov.training import jobs

    job = jobs.Job("j", tmp_path / "inventory.ini", ["n1", "n2"], "/shared", "/shared/jobs/j", tmp_path, "/shared/checkpoints/j", "u.service")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "n2.log").write_text("".join(f"line {i} {'NCCL WARN' if i % 2 else 'ok'}\n" for i in range(10)))
    assert jobs.node_log(job, None, 3) == ("n2", ["line 7 NCCL WARN", "line 8 ok", "line 9 NCCL WARN"])
    assert jobs.node_log(job, "n2", 2, re.compile("WARN")) == ("n2", ["line 7 NCCL WARN", "line 9 NCCL WARN"])
    assert jobs.node_log(job, "n1", 5) == ("n1", [])  # no log yet
    with pytest.raises(UsageError, match="--node n3 is not a node of job j"):
        jobs.node_log(job, "n3", 5)
