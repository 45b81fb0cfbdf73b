"""``megaprov top``: a live view of the cluster from Prometheus's HTTP API (the observe stage) for sites without
Grafana: nodes (up, load, memory, GPUs present against expected, GPU utilisation and memory), running jobs (iteration,
loss, tokens/s against the plan, time since the last iteration) and firing alerts. Queries and folding are pure; the
one HTTP call is bounded in time and size."""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from megaprov import values
from megaprov.cluster import inventory as inv
from megaprov.errors import HostsUnreachable, RunFailed, UsageError

TIMEOUT = 5.0  # one socket read
DEADLINE = 15.0  # one whole request (connect, headers, body)
MAX_BODY = 8 * 1024 * 1024

# name -> PromQL; each answers one instant vector
QUERIES: dict[str, str] = {
    "up": 'up{job="node"}',
    "load1": 'node_load1{job="node"}',
    "cpus": 'count by (node) (node_cpu_seconds_total{job="node",mode="idle"})',
    "mem_used": '1 - node_memory_MemAvailable_bytes{job="node"} / node_memory_MemTotal_bytes{job="node"}',
    "gpus_expected": "megaprov_node_gpus_expected",
    "gpus": "count by (node) (count by (node, gpu) (megaprov_gpu_info))",
    "gpu_util": "avg by (node) (megaprov_gpu_utilization_ratio)",
    "gpu_mem": "sum by (node) (megaprov_gpu_memory_used_bytes) / sum by (node) (megaprov_gpu_memory_total_bytes)",
    "job_running": "megaprov_job_running == 1",
    "job_iteration": "megaprov_job_iteration",
    "job_total": "megaprov_job_train_iterations",
    "job_loss": "megaprov_job_loss",
    "job_tokens": "megaprov_job_tokens_per_second",
    "job_expected": "megaprov_job_expected_tokens_per_second",
    "job_since": "time() - megaprov_job_last_progress_timestamp_seconds",
    "job_restarts": "megaprov_job_restarts_total",
    "alerts": 'ALERTS{alertstate="firing"}',
}


@dataclass
class NodeRow:
    node: str
    up: bool
    load1: float | None = None
    cpus: int | None = None
    mem_used: float | None = None
    gpus: int = 0
    gpus_expected: int = 0
    gpu_util: float | None = None
    gpu_mem: float | None = None


@dataclass
class JobRow:
    job: str
    node: str
    iteration: int = 0
    total: int = 0
    loss: float | None = None
    tokens_per_second: float | None = None
    expected: float | None = None
    since_progress: float | None = None
    restarts: int = 0


@dataclass
class AlertRow:
    name: str
    severity: str
    where: str


@dataclass
class Snapshot:
    url: str
    nodes: list[NodeRow] = field(default_factory=list)
    jobs: list[JobRow] = field(default_factory=list)
    alerts: list[AlertRow] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return {
            "prometheus": self.url,
            "nodes": [asdict(n) for n in self.nodes],
            "jobs": [asdict(j) for j in self.jobs],
            "alerts": [asdict(a) for a in self.alerts],
        }


def _value(sample: dict[str, Any]) -> float | None:
    try:
        number = float(sample["value"][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return number if math.isfinite(number) or math.isnan(number) else None


def _count(value: float | None) -> int:
    """A count from a sample: a whole, finite, non-negative number, else 0 (nan, inf and -1 are not counts)."""
    return int(value) if value is not None and math.isfinite(value) and 0 <= value < 1e12 else 0


def _by(results: list[dict[str, Any]], *labels: str) -> dict[tuple[str, ...], float | None]:
    return {tuple(str(r.get("metric", {}).get(label, "")) for label in labels): _value(r) for r in results}


def fold(url: str, answers: dict[str, list[dict[str, Any]]]) -> Snapshot:
    """The snapshot from each query's result vector. Pure."""
    snap = Snapshot(url)
    up = _by(answers.get("up", []), "node")
    per_node = {name: _by(answers.get(name, []), "node") for name in ("load1", "cpus", "mem_used", "gpus_expected", "gpus", "gpu_util", "gpu_mem")}
    for (node,) in sorted(up):

        def get(name: str, node: str = node) -> float | None:
            return per_node[name].get((node,))

        snap.nodes.append(
            NodeRow(
                node,
                up.get((node,)) == 1.0,
                get("load1"),
                _count(get("cpus")) or None,
                get("mem_used"),
                _count(get("gpus")),
                _count(get("gpus_expected")),
                get("gpu_util"),
                get("gpu_mem"),
            )
        )
    series = {name: _by(answers.get(name, []), "job", "node") for name in QUERIES if name.startswith("job_")}
    for job, node in sorted(series["job_running"]):

        def jget(name: str, key: tuple[str, str] = (job, node)) -> float | None:
            return series[name].get(key)

        snap.jobs.append(
            JobRow(
                job,
                node,
                _count(jget("job_iteration")),
                _count(jget("job_total")),
                jget("job_loss"),
                jget("job_tokens"),
                jget("job_expected"),
                jget("job_since"),
                _count(jget("job_restarts")),
            )
        )
    order = {"critical": 0, "warning": 1}
    for r in answers.get("alerts", []):
        labels = r.get("metric", {})
        where = ", ".join(
            f"{k}={labels[k]}" for k in ("node", "gpu", "job", "mountpoint") if labels.get(k) and not (k == "job" and labels[k] == "node")
        )
        snap.alerts.append(AlertRow(str(labels.get("alertname", "?")), str(labels.get("severity", "")), where))
    snap.alerts.sort(key=lambda a: (order.get(a.severity, 2), a.name, a.where))
    return snap


def prometheus_url(found: inv.Inventory, override: str | None) -> str:
    """Where Prometheus answers: --url, else the head's prometheus_listen_address (or its ansible_host) and
    prometheus_port from the inventory. Pure."""
    if override:
        parsed = urllib.parse.urlparse(override)
        if parsed.scheme not in ("http", "https") or not parsed.netloc or len(override) > 500:
            raise UsageError(f"--url {override!r} is not an http(s) URL", "give Prometheus's address, e.g. http://10.0.0.1:9090")
        return override.rstrip("/")
    if not inv.as_bool(found.host_var(found.head, "megaprov_observe", False)):
        raise UsageError(
            f"the observe stage is off in {found.path}: there is no Prometheus to read",
            "set megaprov_observe: true and run `megaprov bootstrap -i INVENTORY --tags observe`, or pass --url",
        )
    host, port = _listen(found)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _listen(found: inv.Inventory) -> tuple[str, int]:
    host = str(found.host_var(found.head, "prometheus_listen_address", "") or found.host_var(found.head, "ansible_host", found.head))
    return host, int(found.host_var(found.head, "prometheus_port", 9090))


def answers(host: str, port: int, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to host:port opens (Prometheus listens on the cluster network only)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def tunnel_argv(found: inv.Inventory, local_port: int, host: str, port: int) -> list[str]:
    """ssh to the head with the inventory's connection settings, forwarding a local port to Prometheus. Pure."""
    from megaprov.cluster.sshcmd import ssh_argv

    remote = f"[{host}]" if ":" in host else host  # ssh reads an IPv6 address in -L only inside brackets
    return ssh_argv(found, found.head, "-N", "-o", "ExitOnForwardFailure=yes", "-L", f"127.0.0.1:{local_port}:{remote}:{port}")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def prometheus(found: inv.Inventory, override: str | None, say: Callable[[str], None] | None = None) -> Iterator[str]:
    """Prometheus's URL for the life of the block: --url, the head's address where it answers, else an SSH tunnel
    to the head that this opens and closes (a laptop outside the cluster network reaches it so)."""
    url = prometheus_url(found, override)
    if override:
        yield url
        return
    host, port = _listen(found)
    if answers(host, port):
        yield url
        return
    local = _free_port()
    argv = tunnel_argv(found, local, host, port)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # noqa: S603 (argv, no shell)
    try:
        deadline = time.monotonic() + 20
        while not answers("127.0.0.1", local, timeout=1.0):
            if proc.poll() is not None or time.monotonic() > deadline:
                said = (proc.stderr.read(2000) if proc.poll() is not None and proc.stderr else b"").decode(errors="replace").strip()
                raise HostsUnreachable(
                    f"top: Prometheus at {host}:{port} does not answer here, and an SSH tunnel to the head {found.head} did not open"
                    + (f" ({said.splitlines()[-1][:200]})" if said else ""),
                    "check that the head answers SSH with the inventory's settings, or pass --url",
                )
            time.sleep(0.2)
        if say:
            say(f"Prometheus at {host}:{port} through an SSH tunnel to {found.head} (127.0.0.1:{local})")
        yield f"http://127.0.0.1:{local}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def fetch(target: str, deadline: float = DEADLINE, limit: int = MAX_BODY) -> bytes:
    """The body of one GET, at most ``limit + 1`` bytes, within ``deadline`` seconds for the whole request. urllib's
    timeout bounds each socket read, so a server that sends a byte every few seconds would hold it for ever: the
    request runs in a daemon thread that is abandoned at the deadline."""
    answer: dict[str, Any] = {}

    def get() -> None:
        try:
            with urllib.request.urlopen(target, timeout=TIMEOUT) as response:  # noqa: S310 (an http(s) URL, checked by the caller)
                answer["body"] = response.read(limit + 1)
        except Exception as exc:  # noqa: BLE001 (handed to the caller's thread)
            answer["error"] = exc

    worker = threading.Thread(target=get, name="megaprov-http", daemon=True)
    worker.start()
    worker.join(deadline)
    if worker.is_alive():
        raise TimeoutError(f"no whole answer within {deadline:g} s")
    if "error" in answer:
        raise answer["error"]
    return bytes(answer["body"])


def ask(url: str, expr: str) -> list[dict[str, Any]]:
    """One instant query; the result vector."""
    target = f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        body = fetch(target)
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        reason = values.printable(getattr(exc, "reason", exc))
        raise HostsUnreachable(
            f"top: Prometheus at {url} does not answer ({reason})",
            "check that the observe stage ran (`megaprov bootstrap -i INVENTORY --tags observe`) and Prometheus runs on the head",
        ) from None
    if len(body) > MAX_BODY:
        raise RunFailed(f"top: Prometheus at {url} answered more than {MAX_BODY} bytes for {expr}", "this is not megaprov's Prometheus")
    try:
        doc = json.loads(body)
    except ValueError:
        raise RunFailed(f"top: {url} does not answer as Prometheus does (not JSON)", "pass --url with Prometheus's address") from None
    data = doc.get("data") if isinstance(doc, dict) else None  # "data" may be anything in an answer that is not Prometheus's
    if not isinstance(data, dict) or doc.get("status") != "success" or not isinstance(data.get("result"), list):
        raise RunFailed(f"top: Prometheus at {url} refused {expr}: {values.printable(str(doc)[:200])}", "check its version (2.x) and --url")
    # Each sample an object whose labels are an object (a hostile answer gets no further than this)
    return [r for r in data["result"] if isinstance(r, dict) and isinstance(r.get("metric", {}), dict)]


def snapshot(url: str) -> Snapshot:
    return fold(url, {name: ask(url, expr) for name, expr in QUERIES.items()})


def _pct(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.0%}"


def _num(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else ("nan" if math.isnan(value) else fmt.format(value))


def render(snap: Snapshot) -> Any:
    """The rich renderable of a snapshot: three tables (every cell plain text, never markup). Pure."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    nodes = Table(title=f"nodes ({snap.url})", title_justify="left", expand=False)
    for column in ("node", "up", "load", "mem", "GPUs", "GPU util", "GPU mem"):
        nodes.add_column(column)
    for n in snap.nodes:
        gpus = f"{n.gpus}/{n.gpus_expected}" if n.gpus_expected else str(n.gpus or "-")
        nodes.add_row(
            Text(values.printable(n.node)),
            Text("up" if n.up else "DOWN", style="" if n.up else "bold red"),
            Text(f"{_num(n.load1, '{:.1f}')}/{n.cpus or '-'}"),
            Text(_pct(n.mem_used)),
            Text(gpus, style="bold red" if n.gpus < n.gpus_expected else ""),
            Text(_pct(n.gpu_util)),
            Text(_pct(n.gpu_mem)),
        )
    jobs = Table(title="running jobs", title_justify="left")
    for column in ("job", "node", "iteration", "loss", "tokens/s", "of plan", "last iteration", "restarts"):  # a job runs on several nodes
        jobs.add_column(column)
    for j in snap.jobs:
        share = j.tokens_per_second / j.expected if j.tokens_per_second is not None and j.expected else None
        jobs.add_row(
            Text(values.printable(j.job)),
            Text(values.printable(j.node)),
            Text(f"{j.iteration}/{j.total}" if j.total else str(j.iteration)),
            Text(_num(j.loss, "{:.3f}")),
            Text(_num(j.tokens_per_second)),
            Text(_pct(share)),
            Text("-" if j.since_progress is None else f"{j.since_progress:.0f} s ago"),
            Text(str(j.restarts)),
        )
    alerts = Table(title="firing alerts", title_justify="left")
    for column in ("alert", "severity", "where"):
        alerts.add_column(column)
    for a in snap.alerts:
        alerts.add_row(
            Text(values.printable(a.name)),
            Text(values.printable(a.severity), style="bold red" if a.severity == "critical" else "yellow"),
            Text(values.printable(a.where)),
        )
    parts: list[Any] = [nodes, jobs if snap.jobs else Text("running jobs: none"), alerts if snap.alerts else Text("firing alerts: none")]
    return Group(*parts)
