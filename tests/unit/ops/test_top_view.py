"""megaprov top, what the operator reads: Prometheus answers folded into rows (every field, NaN, infinities, missing
series, order), the tables rendered cell by cell, the one HTTP query against a local server that answers as
Prometheus does (or does not), where Prometheus is found in the inventory, and the SSH tunnel opened when it does not
answer here (ssh and the port check stood in for, the clock too)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.style import Style
from rich.table import Table
from rich.text import Text

from megaprov.cluster import inventory as inv
from megaprov.errors import HostsUnreachable, RunFailed, UsageError
from megaprov.ops import top

NAN = float("nan")
INF = float("inf")


def sample(value: Any, **labels: Any) -> dict[str, Any]:
    return {"metric": labels, "value": [1700000000.0, value]}


def inventory(tmp_path: Path, head: str = "head1 ansible_host=10.0.0.1", all_vars: str = "megaprov_observe=true\n") -> inv.Inventory:
    path = tmp_path / "inventory.ini"
    path.write_text(f"[head]\n{head}\n\n[gpu_nodes]\nnode1\nnode2\n\n[all:vars]\n{all_vars}")
    hosts, groups, group_vars, _ = inv.parse_ini(path.read_text(), str(path))
    return inv.Inventory(path, hosts, groups, group_vars)


# ---- the small conversions


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (sample("3.5"), 3.5),
        (sample(2), 2.0),
        (sample("-0.25"), -0.25),
        (sample("+Inf"), None),  # an infinity is no reading
        (sample("-Inf"), None),
        (sample("x"), None),
        (sample(None), None),
        ({"value": [1700000000.0]}, None),
        ({"value": None}, None),
        ({"metric": {}}, None),
    ],
)
def test_a_sample_s_value_is_its_number_or_none(given: dict[str, Any], expected: float | None) -> None:
    assert top._value(given) == expected


def test_a_nan_sample_stays_nan() -> None:
    got = top._value(sample("NaN"))
    assert got is not None and math.isnan(got)


@pytest.mark.parametrize(
    ("given", "expected"),
    [(None, 0), (NAN, 0), (INF, 0), (-INF, 0), (-1.0, 0), (0.0, 0), (0.5, 0), (7.9, 7), (16.0, 16), (1e12 - 1, 999_999_999_999), (1e12, 0)],
)
def test_a_count_is_a_whole_finite_non_negative_number_below_a_trillion(given: float | None, expected: int) -> None:
    got = top._count(given)
    assert got == expected and type(got) is int


def test_samples_are_keyed_by_their_labels_and_a_missing_label_is_empty() -> None:
    results = [
        sample("1", job="gpt", node="node1", gpu="0"),
        sample("NaN", node="node2"),
        {"value": [0, "4"]},  # no labels at all
        {"metric": {"job": 7, "node": "node3"}, "value": [0, "+Inf"]},
    ]
    got = top._by(results, "job", "node")
    assert list(got) == [("gpt", "node1"), ("", "node2"), ("", ""), ("7", "node3")]
    assert got[("gpt", "node1")] == 1.0 and got[("", "")] == 4.0 and got[("7", "node3")] is None
    assert math.isnan(got[("", "node2")])  # type: ignore[arg-type]
    assert top._by([sample("5", node="n1")], "node") == {("n1",): 5.0}
    assert top._by([], "node") == {}


@pytest.mark.parametrize(
    ("given", "expected"), [(None, "-"), (NAN, "-"), (0.0, "0%"), (0.004, "0%"), (0.934, "93%"), (0.935, "94%"), (1.0, "100%"), (1.5, "150%")]
)
def test_a_share_shows_as_a_whole_percent(given: float | None, expected: str) -> None:
    assert top._pct(given) == expected


@pytest.mark.parametrize(
    ("given", "fmt", "expected"),
    [
        (None, None, "-"),
        (NAN, None, "nan"),
        (INF, None, "inf"),
        (0.0, None, "0"),
        (1234567.6, None, "1,234,568"),
        (-2500.0, None, "-2,500"),
        (3.14159, "{:.1f}", "3.1"),
        (NAN, "{:.1f}", "nan"),
        (NAN, "{:.0%}", "nan"),  # NaN is "nan" whatever the format would make of it
        (None, "{:.3f}", "-"),
    ],
)
def test_a_number_shows_with_its_format_and_a_dash_when_missing(given: float | None, fmt: str | None, expected: str) -> None:
    assert (top._num(given) if fmt is None else top._num(given, fmt)) == expected


# ---- folding answers into rows

ANSWERS: dict[str, list[dict[str, Any]]] = {
    # node3 first and node1 last: the rows come sorted by name
    "up": [sample("1", node="node3", job="node"), sample("0", node="node2", job="node"), sample("1", node="node1", job="node")],
    "load1": [sample("3.5", node="node1"), sample("NaN", node="node3")],
    "cpus": [sample("16", node="node1"), sample("0", node="node3")],
    "mem_used": [sample("0.25", node="node1"), sample("+Inf", node="node3")],
    "gpus_expected": [sample("8", node="node1"), sample("4", node="node2")],
    "gpus": [sample("7", node="node1"), sample("2", node="node3"), sample("NaN", node="node2")],
    "gpu_util": [sample("0.93", node="node1"), sample("-Inf", node="node3")],
    "gpu_mem": [sample("0.5", node="node1"), sample("0", node="node3")],
    "job_running": [sample("1", job="gpt", node="node1"), sample("1", job="bert", node="node2"), sample("1", job="gpt", node="node0")],
    "job_iteration": [
        sample("120", job="gpt", node="node1"),
        sample("NaN", job="bert", node="node2"),
        sample("33", job="gpt", node="node0"),
        sample("60", job="done", node="node3"),  # not running: no row
    ],
    "job_total": [sample("1000", job="gpt", node="node1"), sample("+Inf", job="bert", node="node2")],
    "job_loss": [sample("6.5", job="gpt", node="node1"), sample("NaN", job="bert", node="node2")],
    "job_tokens": [sample("9000", job="gpt", node="node1"), sample("+Inf", job="bert", node="node2")],
    "job_expected": [sample("10000", job="gpt", node="node1")],
    "job_since": [sample("4.2", job="gpt", node="node1")],
    "job_restarts": [sample("2", job="gpt", node="node1"), sample("-1", job="bert", node="node2")],
    "alerts": [
        sample("1", alertname="Zeta", severity="critical", node="node2", job="node"),
        sample("1", alertname="Alpha", severity="warning", node="node1", gpu="3", job="gpt", mountpoint="/data", instance="x:9100"),
        sample("1", alertname="Beta", severity="info", node="", gpu=""),
        {"value": [1700000000.0, "1"]},  # no labels at all: no name, no severity
        sample("1", alertname="Zeta", severity="critical", node="node1", job="node"),
    ],
}


def test_every_field_of_a_node_row_comes_from_its_own_query() -> None:
    snap = top.fold("http://p:9090", ANSWERS)
    assert snap.url == "http://p:9090"
    assert [n.node for n in snap.nodes] == ["node1", "node2", "node3"]
    one, two, three = snap.nodes
    assert one == top.NodeRow("node1", True, 3.5, 16, 0.25, 7, 8, 0.93, 0.5)
    # down, nothing but its expected GPUs known; a NaN count is no count
    assert two == top.NodeRow("node2", False, None, None, None, 0, 4, None, None)
    # a NaN load stays NaN, 0 CPUs is unknown, infinities are no reading, 0 is a reading
    assert (three.up, three.cpus, three.mem_used, three.gpus, three.gpus_expected, three.gpu_util, three.gpu_mem) == (
        True,
        None,
        None,
        2,
        0,
        None,
        0.0,
    )
    assert three.load1 is not None and math.isnan(three.load1)


@pytest.mark.parametrize(("value", "up"), [("1", True), ("0", False), ("2", False), ("NaN", False), ("+Inf", False), ("1.0", True)])
def test_a_node_is_up_only_when_its_target_answers_one(value: str, up: bool) -> None:
    (row,) = top.fold("u", {"up": [sample(value, node="n1")]}).nodes
    assert row.up is up


def test_every_field_of_a_job_row_comes_from_its_own_query_and_only_running_jobs_are_rows() -> None:
    jobs = top.fold("http://p:9090", ANSWERS).jobs
    assert [(j.job, j.node) for j in jobs] == [("bert", "node2"), ("gpt", "node0"), ("gpt", "node1")]
    bert, gpt0, gpt1 = jobs
    assert gpt1 == top.JobRow("gpt", "node1", 120, 1000, 6.5, 9000.0, 10000.0, 4.2, 2)
    assert gpt0 == top.JobRow("gpt", "node0", 33)  # the same job on another node is its own row
    assert (bert.iteration, bert.total, bert.tokens_per_second, bert.expected, bert.since_progress, bert.restarts) == (0, 0, None, None, None, 0)
    assert bert.loss is not None and math.isnan(bert.loss)  # the view shows a NaN loss


def test_alerts_are_named_placed_and_ordered_by_severity_name_and_place() -> None:
    alerts = top.fold("http://p:9090", ANSWERS).alerts
    assert [(a.name, a.severity, a.where) for a in alerts] == [
        ("Zeta", "critical", "node=node1"),  # the node exporter's job="node" says nothing
        ("Zeta", "critical", "node=node2"),
        ("Alpha", "warning", "node=node1, gpu=3, job=gpt, mountpoint=/data"),  # other labels are left out
        ("?", "", ""),
        ("Beta", "info", ""),  # empty labels are left out
    ]


def test_no_answers_fold_into_an_empty_snapshot() -> None:
    snap = top.fold("http://q:1", {})
    assert (snap.url, snap.nodes, snap.jobs, snap.alerts) == ("http://q:1", [], [], [])


def test_a_snapshot_as_a_dict_carries_every_row_and_field() -> None:
    snap = top.Snapshot("http://p:9090", [top.NodeRow("n1", True, 1.5, 4)], [top.JobRow("j", "n1", 3, 10)], [top.AlertRow("A", "warning", "node=n1")])
    assert snap.as_dict() == {
        "prometheus": "http://p:9090",
        "nodes": [
            {"node": "n1", "up": True, "load1": 1.5, "cpus": 4, "mem_used": None, "gpus": 0, "gpus_expected": 0, "gpu_util": None, "gpu_mem": None}
        ],
        "jobs": [
            {
                "job": "j",
                "node": "n1",
                "iteration": 3,
                "total": 10,
                "loss": None,
                "tokens_per_second": None,
                "expected": None,
                "since_progress": None,
                "restarts": 0,
            }
        ],
        "alerts": [{"name": "A", "severity": "warning", "where": "node=n1"}],
    }
    assert json.loads(json.dumps(snap.as_dict())) == snap.as_dict()


# ---- the view


def screen(snap: top.Snapshot, width: int = 200) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(top.render(snap))
    return out.getvalue()


def table(text: str, title: str) -> tuple[list[str], list[list[str]]]:
    """The headings and the rows of cells of the table under ``title``; the title line is as wide as the table
    (it is justified left within it)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.rstrip() == title)
    assert len(lines[at]) == len(lines[at + 1]) and lines[at + 1].startswith("┏"), (lines[at], lines[at + 1])
    heading = [c.strip() for c in lines[at + 2].strip()[1:-1].split("┃")]
    rows = []
    for line in lines[at + 4 :]:
        if not line.startswith("│"):
            break
        rows.append([c.strip() for c in line.strip()[1:-1].split("│")])
    return heading, rows


def cells(snap: top.Snapshot, which: int, column: int) -> list[Text]:
    part = top.render(snap).renderables[which]
    assert isinstance(part, Table)
    return list(part.columns[column].cells)  # type: ignore[arg-type]


def style(cell: Text) -> Style:
    return Style.parse(str(cell.style))


BOLD_RED, PLAIN, YELLOW = Style.parse("bold red"), Style.parse(""), Style.parse("yellow")

VIEW = top.Snapshot(
    "http://p:9090",
    [
        top.NodeRow("node1", True, 3.5, 16, 0.25, 7, 8, 0.934, 0.5),
        top.NodeRow("node2", False),
        top.NodeRow("node3", True, NAN, None, NAN, 2, 0, None, 1.0),
        top.NodeRow("node4", True, INF, 4, 0.0, 8, 8, 0.0, 0.0),
        top.NodeRow("\x1b[2Jevil", True),
    ],
    [
        top.JobRow("gpt", "node1", 120, 1000, 6.5, 9000.4, 10000.0, 4.2, 2),
        top.JobRow("bert", "node2", 0, 0, NAN, None, 10000.0, None, 0),
        top.JobRow("t5", "node3", 7, 0, INF, 12345.6, 0.0, 59.6, 1),
    ],
    [
        top.AlertRow("NodeDown", "critical", "node=node2"),
        top.AlertRow("Slow", "warning", "node=node1, job=gpt"),
        top.AlertRow("[bold]x[/bold]", "info", ""),
    ],
)


def test_the_node_table_shows_each_node_s_cells_in_order() -> None:
    heading, rows = table(screen(VIEW), "nodes (http://p:9090)")
    assert heading == ["node", "up", "load", "mem", "GPUs", "GPU util", "GPU mem"]
    assert rows == [
        ["node1", "up", "3.5/16", "25%", "7/8", "93%", "50%"],
        ["node2", "DOWN", "-/-", "-", "-", "-", "-"],
        ["node3", "up", "nan/-", "-", "2", "-", "100%"],
        ["node4", "up", "inf/4", "0%", "8/8", "0%", "0%"],
        ["\\x1b[2Jevil", "up", "-/-", "-", "-", "-", "-"],  # a name is escaped, never acted on
    ]


def test_the_job_table_shows_progress_against_the_plan() -> None:
    heading, rows = table(screen(VIEW), "running jobs")
    assert heading == ["job", "node", "iteration", "loss", "tokens/s", "of plan", "last iteration", "restarts"]
    assert rows == [
        ["gpt", "node1", "120/1000", "6.500", "9,000", "90%", "4 s ago", "2"],  # a job's row per node says which
        ["bert", "node2", "0", "nan", "-", "-", "-", "0"],  # no rate: no share of the plan
        ["t5", "node3", "7", "inf", "12,346", "-", "60 s ago", "1"],  # a plan of 0 tokens/s is no plan
    ]


def test_the_alert_table_shows_name_severity_and_place_as_text() -> None:
    heading, rows = table(screen(VIEW), "firing alerts")
    assert heading == ["alert", "severity", "where"]
    assert rows == [["NodeDown", "critical", "node=node2"], ["Slow", "warning", "node=node1, job=gpt"], ["[bold]x[/bold]", "info", ""]]


def test_the_node_table_is_as_wide_as_its_cells_not_the_terminal() -> None:
    text = screen(VIEW, width=200)
    border = next(line for line in text.splitlines() if line.startswith("┏"))
    assert len(border) < 120


def test_what_needs_attention_is_red_and_warnings_yellow() -> None:
    assert [style(c) for c in cells(VIEW, 0, 1)] == [PLAIN, BOLD_RED, PLAIN, PLAIN, PLAIN]  # DOWN
    assert [style(c) for c in cells(VIEW, 0, 4)] == [BOLD_RED, PLAIN, PLAIN, PLAIN, PLAIN]  # 7 of 8 GPUs; 8 of 8 is fine
    assert [style(c) for c in cells(VIEW, 2, 1)] == [BOLD_RED, YELLOW, YELLOW]
    plain = [cells(VIEW, 0, c) for c in (0, 2, 3, 5, 6)] + [cells(VIEW, 1, c) for c in range(8)] + [cells(VIEW, 2, c) for c in (0, 2)]
    assert all(style(c) == PLAIN for column in plain for c in column)


def test_no_jobs_and_no_alerts_say_so_and_no_nodes_leave_the_headings() -> None:
    text = screen(top.Snapshot("http://p:9090"))
    lines = [line.rstrip() for line in text.splitlines()]
    heading, rows = table(text, "nodes (http://p:9090)")
    assert heading == ["node", "up", "load", "mem", "GPUs", "GPU util", "GPU mem"] and rows == []
    assert lines[-2:] == ["running jobs: none", "firing alerts: none"]
    assert "running jobs" not in lines and "firing alerts" not in lines


def test_jobs_without_alerts_and_alerts_without_jobs() -> None:
    jobs_only = screen(top.Snapshot("u", jobs=[top.JobRow("gpt", "n1", 5)]))
    assert table(jobs_only, "running jobs")[1] == [["gpt", "n1", "5", "-", "-", "-", "-", "0"]]
    assert jobs_only.splitlines()[-1].rstrip() == "firing alerts: none"
    alerts_only = screen(top.Snapshot("u", alerts=[top.AlertRow("A", "critical", "")]))
    assert table(alerts_only, "firing alerts")[1] == [["A", "critical", ""]]
    assert "running jobs: none" in alerts_only.splitlines()


# ---- where Prometheus is


def test_a_url_given_is_taken_without_its_trailing_slashes(tmp_path: Path) -> None:
    off = inventory(tmp_path, all_vars="")
    assert top.prometheus_url(off, "http://10.0.0.9:9090/") == "http://10.0.0.9:9090"
    assert top.prometheus_url(off, "https://prom.example//") == "https://prom.example"
    assert top.prometheus_url(off, "HTTP://BOX/") == "HTTP://BOX"
    longest = "http://p/" + "a" * 491
    assert top.prometheus_url(off, longest) == longest


@pytest.mark.parametrize("url", ["ftp://host", "http://", "file:///etc/passwd", "p:9090", "10.0.0.1:9090", "http://p/" + "a" * 492])
def test_a_url_that_is_not_http_is_refused_naming_the_flag(tmp_path: Path, url: str) -> None:
    with pytest.raises(UsageError) as info:
        top.prometheus_url(inventory(tmp_path), url)
    assert info.value.message == f"--url {url!r} is not an http(s) URL"
    assert info.value.hint == "give Prometheus's address, e.g. http://10.0.0.1:9090"


@pytest.mark.parametrize("all_vars", ["", "megaprov_observe=false\n"])
def test_without_the_observe_stage_there_is_no_prometheus_to_read(tmp_path: Path, all_vars: str) -> None:
    found = inventory(tmp_path, all_vars=all_vars)
    with pytest.raises(UsageError) as info:
        top.prometheus_url(found, None)
    assert info.value.message == f"the observe stage is off in {found.path}: there is no Prometheus to read"
    assert info.value.hint == "set megaprov_observe: true and run `megaprov bootstrap -i INVENTORY --tags observe`, or pass --url"


@pytest.mark.parametrize(
    ("head", "all_vars", "url", "listen"),
    [
        ("head1 ansible_host=10.0.0.1", "", "http://10.0.0.1:9090", ("10.0.0.1", 9090)),
        ("head1", "", "http://head1:9090", ("head1", 9090)),
        ("head1 ansible_host=10.0.0.1 prometheus_port=9100", "", "http://10.0.0.1:9100", ("10.0.0.1", 9100)),
        ("head1 ansible_host=10.0.0.1 prometheus_listen_address=192.168.7.1", "", "http://192.168.7.1:9090", ("192.168.7.1", 9090)),
        ("head1 ansible_host=10.0.0.1", 'prometheus_listen_address=""\n', "http://10.0.0.1:9090", ("10.0.0.1", 9090)),
        ("head1 ansible_host=10.0.0.1", "prometheus_listen_address=fd00::1\nprometheus_port=9999\n", "http://[fd00::1]:9999", ("fd00::1", 9999)),
        ("head1 ansible_host=fd00::2", "", "http://[fd00::2]:9090", ("fd00::2", 9090)),
    ],
)
def test_prometheus_listens_where_the_head_s_variables_say(tmp_path: Path, head: str, all_vars: str, url: str, listen: tuple[str, int]) -> None:
    found = inventory(tmp_path, head=head, all_vars="megaprov_observe=true\n" + all_vars)
    assert top.prometheus_url(found, None) == url
    assert top._listen(found) == listen


PINNED = (
    "head1 ansible_host=10.0.0.1 ansible_user=ops ansible_port=2222"
    " ansible_ssh_common_args='-o StrictHostKeyChecking=yes -o UserKnownHostsFile=/etc/kh'"
)


def test_the_tunnel_is_ssh_to_the_head_with_its_pinned_settings_forwarding_one_port(tmp_path: Path) -> None:
    found = inventory(tmp_path, head=PINNED)
    assert top.tunnel_argv(found, 40000, "10.0.0.1", 9090) == [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        "ConnectTimeout=10",
        "-o",
        "ServerAliveInterval=15",
        "-N",
        "-o",
        "ExitOnForwardFailure=yes",
        "-L",
        "127.0.0.1:40000:10.0.0.1:9090",
        "-p",
        "2222",
        "-l",
        "ops",
        "-o",
        "StrictHostKeyChecking=yes",
        "-o",
        "UserKnownHostsFile=/etc/kh",
        "--",
        "10.0.0.1",
    ]


def test_a_tunnel_to_an_ipv6_prometheus_brackets_the_address(tmp_path: Path) -> None:
    # was 127.0.0.1:40000:fd00::1:9090, which ssh refuses ("Bad local forwarding specification")
    argv = top.tunnel_argv(inventory(tmp_path, head=PINNED), 40000, "fd00::1", 9090)
    assert argv[argv.index("-L") + 1] == "127.0.0.1:40000:[fd00::1]:9090"
    if shutil.which("ssh"):  # ssh's own parser, without connecting
        proc = subprocess.run(["ssh", "-G", *argv[1:]], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stderr
        assert "localforward [127.0.0.1]:40000 [fd00::1]:9090" in proc.stdout


def test_a_free_port_is_one_this_machine_can_listen_on() -> None:
    port = top._free_port()
    assert type(port) is int and 1024 <= port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_answers_says_whether_a_port_takes_a_connection() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        assert top.answers("127.0.0.1", port) is True
    assert top.answers("127.0.0.1", port) is False


def test_answers_waits_three_seconds_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[Any, ...]] = []

    def connect(address: tuple[str, int], timeout: float | None = None) -> socket.socket:
        asked.append((address, timeout))
        return socket.socket()

    monkeypatch.setattr(socket, "create_connection", connect)
    assert top.answers("10.0.0.1", 9090) is True
    assert top.answers("10.0.0.1", 9091, timeout=1.0) is True
    assert asked == [(("10.0.0.1", 9090), 3.0), (("10.0.0.1", 9091), 1.0)]


# ---- the tunnel's life, with ssh and the port check stood in for


class Clock:
    """time for top: monotonic() starts at 100 and each sleep moves it one second on."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += 1


class Ssh:
    """A stand-in ssh process: exits with ``code`` when polled (None: keeps running), says ``stderr``."""

    def __init__(self, code: int | None = None, stderr: bytes | None = b"", hangs: bool = False) -> None:
        self.code, self.hangs = code, hangs
        self.stderr = None if stderr is None else io.BytesIO(stderr)
        self.argv: list[str] = []
        self.kwargs: dict[str, Any] = {}
        self.calls: list[Any] = []

    def __call__(self, argv: list[str], **kwargs: Any) -> Ssh:
        self.argv, self.kwargs = argv, kwargs
        return self

    def poll(self) -> int | None:
        return self.code

    def terminate(self) -> None:
        self.calls.append("terminate")

    def kill(self) -> None:
        self.calls.append("kill")

    def wait(self, timeout: float | None = None) -> int:
        self.calls.append(("wait", timeout))
        if self.hangs and timeout is not None:
            raise subprocess.TimeoutExpired(self.argv, timeout)
        return -15


def stand_in(monkeypatch: pytest.MonkeyPatch, ssh: Ssh, answering: Callable[[str, int, int], bool]) -> tuple[Clock, list[Any]]:
    """ssh, the clock, port 40000 for the tunnel and a port check that answers ``answering(host, port, check number)``."""
    clock, checks = Clock(), []

    def answers(*args: Any, **kwargs: Any) -> bool:
        checks.append((args, kwargs))
        return answering(args[0], args[1], len(checks))

    monkeypatch.setattr(top, "answers", answers)
    monkeypatch.setattr(top, "time", clock)
    monkeypatch.setattr(top, "_free_port", lambda: 40000)
    monkeypatch.setattr(subprocess, "Popen", ssh)
    return clock, checks


def test_a_url_given_opens_no_tunnel_and_checks_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ssh = Ssh()
    _, checks = stand_in(monkeypatch, ssh, lambda *_: False)
    with top.prometheus(inventory(tmp_path, all_vars=""), "http://p:9/") as url:
        assert url == "http://p:9"
    assert (checks, ssh.argv, ssh.calls) == ([], [], [])


def test_prometheus_answering_here_is_read_directly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ssh, said = Ssh(), list[str]()
    _, checks = stand_in(monkeypatch, ssh, lambda host, port, n: (host, port) == ("10.0.0.1", 9090))
    with top.prometheus(inventory(tmp_path), None, said.append) as url:
        assert url == "http://10.0.0.1:9090"
    assert checks == [(("10.0.0.1", 9090), {})]
    assert (ssh.argv, ssh.calls, said) == ([], [], [])


def test_elsewhere_a_tunnel_opens_waits_for_its_port_and_closes_at_exit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found, ssh, said = inventory(tmp_path, head=PINNED), Ssh(), list[str]()
    clock, checks = stand_in(monkeypatch, ssh, lambda host, port, n: n == 4)  # the tunnel's port answers at the third look
    with top.prometheus(found, None, said.append) as url:
        assert url == "http://127.0.0.1:40000"
        assert ssh.calls == []  # open while the block runs
    assert ssh.argv == top.tunnel_argv(found, 40000, "10.0.0.1", 9090)
    assert ssh.kwargs == {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    assert checks == [(("10.0.0.1", 9090), {})] + [(("127.0.0.1", 40000), {"timeout": 1.0})] * 3
    assert clock.slept == [0.2, 0.2]
    assert said == ["Prometheus at 10.0.0.1:9090 through an SSH tunnel to head1 (127.0.0.1:40000)"]
    assert ssh.calls == ["terminate", ("wait", 5)]


def test_a_tunnel_is_closed_when_the_block_fails_and_killed_when_it_will_not_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ssh = Ssh(hangs=True)
    stand_in(monkeypatch, ssh, lambda host, port, n: n > 1)
    with pytest.raises(KeyboardInterrupt), top.prometheus(inventory(tmp_path), None) as url:
        assert url == "http://127.0.0.1:40000"
        raise KeyboardInterrupt
    assert ssh.calls == ["terminate", ("wait", 5), "kill", ("wait", None)]


HINT = "check that the head answers SSH with the inventory's settings, or pass --url"
FAILED = "top: Prometheus at 10.0.0.1:9090 does not answer here, and an SSH tunnel to the head head1 did not open"


@pytest.mark.parametrize(
    ("stderr", "shown"),
    [
        (b"Warning: Permanently added\nsecond\nHost key verification failed \xff  \n", " (Host key verification failed \ufffd)"),
        (b"x" * 1990 + b"\n" + b"y" * 300, " (" + "y" * 9 + ")"),  # only the first 2000 bytes are read
        (b"a\n" + b"z" * 250 + b"\n", " (" + "z" * 200 + ")"),  # and 200 characters of the last line shown
        (b"  \n", ""),
        (b"", ""),
        (None, ""),
    ],
)
def test_an_ssh_that_exits_is_reported_with_its_last_words(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stderr: bytes | None, shown: str) -> None:
    ssh = Ssh(code=255, stderr=stderr)
    clock, _ = stand_in(monkeypatch, ssh, lambda *_: False)
    with pytest.raises(HostsUnreachable) as info, top.prometheus(inventory(tmp_path), None):
        pytest.fail("no URL without a tunnel")
    assert (info.value.message, info.value.hint, info.value.exit_code) == (FAILED + shown, HINT, 4)
    assert clock.slept == []
    assert ssh.calls == ["terminate", ("wait", 5)]


def test_a_tunnel_that_never_answers_is_given_up_after_twenty_seconds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ssh = Ssh(code=None, stderr=b"still trying\n")
    clock, checks = stand_in(monkeypatch, ssh, lambda *_: False)
    with pytest.raises(HostsUnreachable) as info, top.prometheus(inventory(tmp_path), None):
        pytest.fail("no URL without a tunnel")
    assert (info.value.message, info.value.hint) == (FAILED, HINT)  # a running ssh's stderr is not read: it would block
    assert clock.slept == [0.2] * 21 and clock.now == 121.0  # looked at 100, 101, ... 120 s, gave up past 120
    assert len(checks) == 1 + 22
    assert ssh.stderr is not None and ssh.stderr.tell() == 0
    assert ssh.calls == ["terminate", ("wait", 5)]


# ---- one query over HTTP


class Prometheus:
    """A local HTTP server: ``answer(path) -> (status, body)``; it records each path asked."""

    def __init__(self, answer: Callable[[str], tuple[int, bytes]]) -> None:
        self.asked: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                outer.asked.append(self.path)
                status, body = answer(self.path)
                self.send_response(status, "Not\x1bFound" if status == 499 else None)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def serving(answer: Callable[[str], tuple[int, bytes]]) -> Iterator[Prometheus]:
    server = Prometheus(answer)
    try:
        yield server
    finally:
        server.close()


def success(result: Any, result_type: str = "vector") -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": result_type, "result": result}}).encode()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_query_is_one_get_of_the_query_api_and_answers_its_samples() -> None:
    answer = [sample("1", node="n1", job="node"), {"value": [0, "2"]}]
    with serving(lambda path: (200, success(answer))) as server:
        assert top.ask(server.url, 'up{job="node"}') == answer
        (path,) = server.asked
        parts = urllib.parse.urlsplit(path)
        assert parts.path == "/api/v1/query"
        assert urllib.parse.parse_qs(parts.query) == {"query": ['up{job="node"}']}


def test_samples_that_are_no_objects_or_whose_labels_are_no_object_are_dropped() -> None:
    keep = [sample("1", node="n1"), {"value": [0, "2"]}, {"metric": {}, "value": [0, "3"]}]
    hostile = ["x", 1, None, [1, 2], {"metric": [1], "value": [0, "1"]}, {"metric": "node", "value": [0, "1"]}]
    with serving(lambda path: (200, success(hostile[:3] + keep[:1] + hostile[3:] + keep[1:]))) as server:
        assert top.ask(server.url, "up") == keep


def test_another_result_type_gives_no_readings() -> None:
    matrix = [{"metric": {"node": "n1"}, "values": [[0, "1"], [15, "1"]]}]
    with serving(lambda path: (200, success(matrix, "matrix") if "up" in path else success([0, "1"], "scalar"))) as server:
        assert top.ask(server.url, "up") == matrix
        assert top.fold(server.url, {"up": top.ask(server.url, "up")}).nodes == [top.NodeRow("n1", False)]
        assert top.ask(server.url, "time()") == []  # a scalar's [time, value] holds no sample


REFUSED = [
    {"status": "error", "errorType": "bad_data", "error": "parse error at char 3"},
    {"status": "error", "data": {"result": []}},
    {"status": "success"},
    {"status": "success", "data": None},
    {"status": "success", "data": [1]},  # was an AttributeError (a traceback) rather than this refusal
    {"status": "success", "data": "x"},
    {"status": "success", "data": {"resultType": "vector"}},
    {"status": "success", "data": {"result": {}}},
    {"data": {"result": []}},
    [1, 2],
    "success",
]


@pytest.mark.parametrize("doc", REFUSED)
def test_an_answer_that_is_no_query_result_is_refused_quoting_it(doc: Any) -> None:
    with serving(lambda path: (200, json.dumps(doc).encode())) as server:
        with pytest.raises(RunFailed) as info:
            top.ask(server.url, "up")
        assert info.value.message == f"top: Prometheus at {server.url} refused up: {doc}"
        assert info.value.hint == "check its version (2.x) and --url"


def test_a_long_refusal_is_quoted_to_200_characters() -> None:
    doc = {"status": "error", "errorType": "bad_data", "error": "\x1b[2J" + "e" * 300}
    start = "{'status': 'error', 'errorType': 'bad_data', 'error': '\\x1b[2J"
    with serving(lambda path: (200, json.dumps(doc).encode())) as server:
        with pytest.raises(RunFailed) as info:
            top.ask(server.url, "up")
        quoted = info.value.message.removeprefix(f"top: Prometheus at {server.url} refused up: ")
        assert quoted == start + "e" * (200 - len(start))  # the answer's repr, ESC already an escape


def test_what_is_not_json_is_not_prometheus() -> None:
    with serving(lambda path: (200, b"<html>login</html>")) as server:
        with pytest.raises(RunFailed) as info:
            top.ask(server.url, "up")
        assert (info.value.message, info.value.hint) == (
            f"top: {server.url} does not answer as Prometheus does (not JSON)",
            "pass --url with Prometheus's address",
        )


def test_an_answer_of_the_size_limit_is_read_and_one_byte_more_is_refused() -> None:
    exact = success([sample("1", node="n1")])
    exact += b" " * (top.MAX_BODY - len(exact))
    with serving(lambda path: (200, exact + (b" " if "over" in path else b""))) as server:
        assert top.ask(server.url, "up") == [sample("1", node="n1")]
        with pytest.raises(RunFailed) as info:
            top.ask(server.url, "over")
        assert info.value.message == f"top: Prometheus at {server.url} answered more than 8388608 bytes for over"
        assert info.value.hint == "this is not megaprov's Prometheus"


UNREACHABLE_HINT = "check that the observe stage ran (`megaprov bootstrap -i INVENTORY --tags observe`) and Prometheus runs on the head"


def test_a_prometheus_that_does_not_answer_is_unreachable_with_the_reason() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(HostsUnreachable) as info:
        top.ask(url, "up")
    assert info.value.message == f"top: Prometheus at {url} does not answer ([Errno 111] Connection refused)"
    assert (info.value.hint, info.value.exit_code) == (UNREACHABLE_HINT, 4)
    with pytest.raises(HostsUnreachable) as info:  # an error without a reason: its own words
        top.ask("http://127.0.0.1:notaport", "up")
    assert info.value.message == "top: Prometheus at http://127.0.0.1:notaport does not answer (nonnumeric port: 'notaport')"


@pytest.mark.parametrize(("status", "reason"), [(404, "Not Found"), (503, "Service Unavailable"), (499, "Not\\x1bFound")])
def test_an_http_error_is_unreachable_with_its_reason_escaped(status: int, reason: str) -> None:
    with serving(lambda path: (status, b"{}")) as server:
        with pytest.raises(HostsUnreachable) as info:
            top.ask(server.url, "up")
        assert info.value.message == f"top: Prometheus at {server.url} does not answer ({reason})"


def test_a_snapshot_asks_each_query_once_and_folds_the_answers() -> None:
    by_expr = {expr: name for name, expr in top.QUERIES.items()}

    def answer(path: str) -> tuple[int, bytes]:
        name = by_expr[urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)["query"][0]]
        return 200, success(ANSWERS[name])

    with serving(answer) as server:
        snap = top.snapshot(server.url)
        asked = [urllib.parse.parse_qs(urllib.parse.urlsplit(p).query)["query"][0] for p in server.asked]
        assert sorted(asked) == sorted(top.QUERIES.values())
        assert snap.url == server.url
        expected = top.fold("http://p:9090", ANSWERS)
        assert (snap.nodes[0], [j.job for j in snap.jobs], snap.alerts) == (expected.nodes[0], [j.job for j in expected.jobs], expected.alerts)


# ---- the one GET: bounded in size and time


def test_a_get_reads_at_most_one_byte_past_its_limit() -> None:
    body = bytes(range(100))
    with serving(lambda path: (200, body)) as server:
        assert top.fetch(server.url + "/x", limit=10) == body[:11]
        assert top.fetch(server.url + "/x", limit=99) == body
        assert top.fetch(server.url + "/x", limit=1000) == body
        assert top.fetch(server.url + "/x") == body


def test_a_get_runs_in_a_daemon_thread_of_its_own_with_the_read_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    class Response(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            seen.append(("read", size))
            return b"abc"

    def urlopen(target: str, timeout: float | None = None) -> Response:
        thread = threading.current_thread()
        seen.append((target, timeout, thread.name, thread.daemon, thread is threading.main_thread()))
        return Response()

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    assert top.fetch("http://p/q", limit=41) == b"abc"
    assert seen == [("http://p/q", top.TIMEOUT, "megaprov-http", True, False), ("read", 42)]


def test_a_get_raises_what_went_wrong_in_its_thread() -> None:
    with serving(lambda path: (500, b"no")) as server:
        with pytest.raises(urllib.error.HTTPError) as info:
            top.fetch(server.url)
        assert info.value.code == 500
    with pytest.raises(urllib.error.URLError):
        top.fetch(f"http://127.0.0.1:{closed_port()}")


def test_a_slow_answer_is_given_up_at_the_deadline() -> None:
    release = threading.Event()

    def slow(path: str) -> tuple[int, bytes]:
        release.wait(4)
        return 200, b"late"

    with serving(slow) as server:
        start = time.monotonic()
        with pytest.raises(TimeoutError) as info:
            top.fetch(server.url, deadline=0.5)
        assert time.monotonic() - start < 2
        assert str(info.value) == "no whole answer within 0.5 s"
        release.set()


def test_a_silent_server_times_out_on_its_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(top, "TIMEOUT", 0.3)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)  # takes the connection, never answers
        start = time.monotonic()
        with pytest.raises(OSError) as info:
            top.fetch(f"http://127.0.0.1:{silent.getsockname()[1]}", deadline=3.0)
        assert time.monotonic() - start < 2
    assert "timed out" in str(info.value) and "no whole answer" not in str(info.value)
