"""The only module that imports ansible_runner.

``build_run_kwargs`` turns a :class:`RunSpec` into the exact keyword arguments of
``ansible_runner.run`` (a pure function the unit tests assert); ``run`` executes it, feeds
every event to a callback and folds the events into a :class:`RunResult`.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from megaprov.errors import EnvironmentProblem, UsageError
from megaprov.paths import ANSIBLE_CFG
from megaprov.values import VARIABLE

STRATEGIES = ("linear", "free", "mitogen")
KEEP_RUNS = 30


@dataclass(frozen=True)
class RunOptions:
    """What a user may choose about a run (the bootstrap/preflight flags)."""

    limit: str | None = None
    tags: tuple[str, ...] = ()
    skip_tags: tuple[str, ...] = ()
    check: bool = False
    diff: bool = False
    forks: int | None = None
    extravars: dict[str, Any] = field(default_factory=dict)
    strategy: str = "linear"
    verbosity: int = 0
    flush_cache: bool = False


@dataclass(frozen=True)
class RunSpec:
    playbook: Path
    inventories: tuple[Path, ...]
    private_data_dir: Path
    collections_root: Path
    fact_cache_dir: Path
    options: RunOptions = field(default_factory=RunOptions)


@dataclass
class HostStats:
    host: str
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0
    rescued: int = 0
    ignored: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class Failure:
    host: str
    task: str
    play: str
    message: str
    unreachable: bool
    # the module said the failure is the user's settings, not the node (megaprov.cluster.job_step's refusals)
    usage: bool = False


@dataclass(frozen=True)
class TaskResult:
    host: str
    task: str
    action: str
    res: dict[str, Any]
    # the controller's clock when the task started and ended on this host (epoch seconds), where known
    window: tuple[float, float] | None = None
    role: str = ""  # the role the task belongs to ("" for a play's own tasks)


@dataclass
class RunResult:
    status: str
    rc: int
    hosts: list[HostStats]
    failures: list[Failure]
    results: list[TaskResult]
    artifacts: Path
    seconds: float
    error_line: str = ""
    # (play name, start time in epoch seconds) in the order the plays started
    plays: list[tuple[str, float]] = field(default_factory=list)
    # what the plays said to megaprov through ansible.builtin.set_stats (keys chosen by the playbook)
    data: dict[str, Any] = field(default_factory=dict)
    # the run ended with the playbook's stats (a cancelled, timed-out or killed run did not: `data` is then unknown)
    stats_seen: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.failures

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts)


def mitogen_strategy_dir() -> Path:
    spec = importlib.util.find_spec("ansible_mitogen")
    if spec is None or not spec.submodule_search_locations:
        raise EnvironmentProblem("--strategy mitogen needs the mitogen package", "pip install 'mitogen>=0.3.54,<0.4'")
    return Path(next(iter(spec.submodule_search_locations))) / "plugins" / "strategy"


def find_program(name: str) -> str | None:
    """An executable as megaprov's runs find it: in megaprov's own environment's bin directory first, then on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.exists() else shutil.which(name)


def search_path() -> str:
    """PATH with the bin directory of megaprov's own environment first (the venv need not be activated)."""
    if find_program("ansible-playbook") is None:
        raise EnvironmentProblem("ansible-playbook is not installed", "pip install megaprov (it depends on ansible-core)")
    return os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "/usr/bin:/bin")])


UNSAFE_KEY = "__ansible_unsafe"


def as_data(value: Any, where: str = "extra vars", top: bool = True) -> Any:
    """``value`` with every string marked unsafe, so that Ansible never templates it. Pure.

    ansible-runner hands extra vars to ansible-playbook as JSON (``-e '{...}'``); Ansible's JSON decoder reads
    ``{"__ansible_unsafe": "text"}`` as an unsafe (never templated) string, the encoding Ansible itself uses for
    ``!unsafe`` values. Every extra var megaprov passes came from a user or a file (the job spec, job.json, the
    inventory, ``-e``): ``"{{ lookup('pipe', ...) }}"`` must reach a play as those characters, not run on the
    controller. tests/unit/cluster/test_runner.py runs a real play to prove it."""
    if isinstance(value, str):
        return {UNSAFE_KEY: value}
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        if top:  # ansible-runner writes top-level names into the JSON of -e unescaped
            for key in value:
                if not isinstance(key, str) or not VARIABLE.fullmatch(key):
                    raise UsageError(f"{where}: {key!r:.60} is not a variable name", "use letters, digits and _ (not starting with a digit)")
        for key, item in value.items():
            if isinstance(key, str) and key.startswith("__ansible_"):
                raise UsageError(f"{where}: key {key!r} is reserved by Ansible", "rename the variable")
            out[str(key) if not isinstance(key, str) else key] = as_data(item, where, top=False)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        return [as_data(item, where, top=False) for item in value]
    if value is not None and not isinstance(value, (bool, int, float)):  # a date, bytes (!!binary): not JSON
        raise UsageError(f"{where}: a value of type {type(value).__name__} cannot be passed to Ansible", "write it as a string")
    return value


def build_run_kwargs(spec: RunSpec, strategy_dir: Path | None = None, path: str | None = None) -> dict[str, Any]:
    """Keyword arguments for ``ansible_runner.run``. Pure: no I/O (a relative inventory is made absolute from the
    current directory)."""
    opts = spec.options
    cmdline: list[str] = []
    if opts.check:
        cmdline.append("--check")
    if opts.diff:
        cmdline.append("--diff")
    if opts.flush_cache:
        cmdline.append("--flush-cache")
    envvars = {
        "ANSIBLE_CONFIG": str(ANSIBLE_CFG),
        # megaprov runs its own copy of the collection, whatever else the user has installed.
        "ANSIBLE_COLLECTIONS_PATH": str(spec.collections_root),
        # ansible-runner turns host key checking off unless told otherwise: keys stay pinned.
        "ANSIBLE_HOST_KEY_CHECKING": "True",
        "ANSIBLE_CACHE_PLUGIN": "jsonfile",
        "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(spec.fact_cache_dir),
        "ANSIBLE_FORCE_COLOR": "False",
        "PYTHONUNBUFFERED": "1",
    }
    if opts.strategy == "mitogen":
        envvars["ANSIBLE_STRATEGY_PLUGINS"] = str(strategy_dir)
        envvars["ANSIBLE_STRATEGY"] = "mitogen_linear"
    elif opts.strategy != "linear":
        envvars["ANSIBLE_STRATEGY"] = opts.strategy
    kwargs: dict[str, Any] = {
        "private_data_dir": str(spec.private_data_dir),
        "project_dir": str(spec.collections_root / "ansible_collections" / "megaprov" / "cluster"),
        "playbook": str(spec.playbook),
        # Absolute: ansible-runner runs Ansible in project_dir, where a relative inventory names nothing (no host matched).
        "inventory": [os.path.abspath(p) for p in spec.inventories],
        "envvars": envvars,
        "extravars": as_data(dict(opts.extravars)),  # data, never templates
        # Fresh private_data_dir per run, and no env/ files: stale extravars can never leak in.
        "suppress_env_files": True,
        # The fact cache is ours (shared across runs), not one per artifact directory.
        "fact_cache_type": "none",
        "quiet": True,
        "json_mode": False,
        "timeout": None,
    }
    if path:
        envvars["PATH"] = path
    if cmdline:
        kwargs["cmdline"] = shlex.join(cmdline)
    if opts.tags:
        kwargs["tags"] = ",".join(opts.tags)
    if opts.skip_tags:
        kwargs["skip_tags"] = ",".join(opts.skip_tags)
    if opts.limit:
        kwargs["limit"] = opts.limit
    if opts.forks:
        kwargs["forks"] = opts.forks
    if opts.verbosity:
        kwargs["verbosity"] = opts.verbosity
    return kwargs


def _seconds(start: str | None, end: str | None) -> tuple[float, float] | None:
    if not start or not end:
        return None
    try:
        return datetime.fromisoformat(start).timestamp(), datetime.fromisoformat(end).timestamp()
    except ValueError:
        return None


def epoch(stamp: Any) -> float | None:
    """An ISO 8601 stamp (an event's, a node log's start line) as seconds since the epoch; None for anything that is
    not one (a node's `date` without %N prints "%3N")."""
    if not isinstance(stamp, str):
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _message(res: dict[str, Any]) -> str:
    items = res.get("results")
    if res.get("msg") == "One or more items failed" and isinstance(items, list):  # a loop: the first failed item's words
        failed = [r for r in items if isinstance(r, dict) and r.get("failed")]
        if failed:
            return f"item {failed[0].get('item')!s:.80}: {_message(failed[0])}"
    keys: tuple[str, ...] = ("msg", "stderr", "reason", "module_stderr", "stdout")
    if res.get("msg") == "non-zero return code":  # a command: its own words are more useful
        keys = ("stderr", "stdout", "msg")
    for key in keys:
        value = res.get(key)
        if value:
            text = str(value).strip()
            return text.splitlines()[-1] if key in ("module_stderr", "stderr") else " ".join(text.split())
    return "failed (no message)"


class EventFolder:
    """Folds ansible-runner events into host stats, failures and collected task results."""

    def __init__(self, collect: Iterable[str] = ()) -> None:
        self.collect = set(collect)
        self.stats: dict[str, HostStats] = {}
        self.spans: dict[str, list[float]] = {}
        self.failures: list[Failure] = []
        self.results: list[TaskResult] = []
        self.play = ""
        self.plays: list[tuple[str, float]] = []
        self.data: dict[str, Any] = {}
        self.stats_seen = False

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.play = data.get("play", "")
            created = epoch(event.get("created"))
            if created is not None:
                self.plays.append((self.play, created))
        host = data.get("host")
        if host and kind.startswith("runner_on_") and kind not in ("runner_on_start",):
            span = _seconds(data.get("start"), data.get("end"))
            if span:
                lo_hi = self.spans.setdefault(host, [span[0], span[1]])
                lo_hi[0], lo_hi[1] = min(lo_hi[0], span[0]), max(lo_hi[1], span[1])
        res = data.get("res") or {}
        if kind == "runner_on_failed" and not data.get("ignore_errors"):
            self.failures.append(Failure(host or "?", data.get("task", ""), self.play, _message(res), False, res.get("usage_error") is True))
        elif kind == "runner_on_unreachable":
            self.failures.append(Failure(host or "?", data.get("task", ""), self.play, _message(res), True))
        elif kind == "runner_on_ok" and data.get("task_action") in self.collect:
            window = _seconds(data.get("start"), data.get("end"))
            self.results.append(TaskResult(host or "?", data.get("task", ""), data.get("task_action", ""), res, window, data.get("role") or ""))
        elif kind == "playbook_on_stats":
            self.stats_seen = True
            said = data.get("artifact_data")
            if isinstance(said, dict):
                self.data = dict(said)
            for key, attr in (
                ("ok", "ok"),
                ("changed", "changed"),
                ("failures", "failed"),
                ("dark", "unreachable"),
                ("skipped", "skipped"),
                ("rescued", "rescued"),
                ("ignored", "ignored"),
            ):
                for name, count in (data.get(key) or {}).items():
                    setattr(self.stats.setdefault(name, HostStats(name)), attr, int(count))

    def host_stats(self) -> list[HostStats]:
        for name, (lo, hi) in self.spans.items():
            self.stats.setdefault(name, HostStats(name)).seconds = round(hi - lo, 2)
        return [self.stats[name] for name in sorted(self.stats)]


_HEADERS = ("TASK [", "PLAY [", "PLAY RECAP", "RUNNING HANDLER [")


def _a_tasks_failure(lines: list[str]) -> bool:
    """Whether the error at ``lines[0]`` is a task's own failure on a host: ansible-core prints those as ``[ERROR]:``
    too (without a terminal, e.g. under cron), followed by the host's ``fatal: [host]`` line; the events hold them."""
    for line in lines[1:]:
        text = line.strip()
        if text.startswith(("fatal: [", "failed: [")):
            return True
        if text.startswith(_HEADERS):
            return False
    return False


def first_error_line(stdout: str) -> str:
    """The first error ansible-playbook printed outside a task (syntax, undefined variable, bad pattern)."""
    lines = stdout.splitlines()
    for index, line in enumerate(lines):
        text = line.strip()
        if text.startswith("[ERROR]:") and _a_tasks_failure(lines[index:]):
            continue
        if text.startswith(("[ERROR]:", "ERROR!")):
            message = text.split(":", 1)[1].strip() if text.startswith("[ERROR]:") else text[len("ERROR!") :].strip()
            origin = next((x.strip() for x in lines[index + 1 : index + 4] if x.strip().startswith("Origin:")), "")
            return f"{message} ({origin})" if origin else message
    return ""


def new_private_dir(state: Path, label: str) -> Path:
    runs = state / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    path = runs / f"{stamp}-{label}"
    path.mkdir(mode=0o700)
    old = sorted(p for p in runs.iterdir() if p.is_dir())
    for stale in old[:-KEEP_RUNS]:
        shutil.rmtree(stale, ignore_errors=True)
    return path


def run(spec: RunSpec, on_event: Callable[[dict[str, Any]], None] | None = None, collect: Iterable[str] = ()) -> RunResult:
    """Run a playbook through ansible-runner and return what happened."""
    import ansible_runner  # imported here so that `megaprov --help` stays fast

    strategy_dir = mitogen_strategy_dir() if spec.options.strategy == "mitogen" else None
    spec.fact_cache_dir.mkdir(parents=True, exist_ok=True)
    folder = EventFolder(collect)

    def handler(event: dict[str, Any]) -> bool:
        folder(event)
        if on_event is not None:
            on_event(event)
        return True

    started = time.monotonic()
    result = ansible_runner.run(event_handler=handler, **build_run_kwargs(spec, strategy_dir, search_path()))
    artifacts = Path(result.config.artifact_dir)
    stdout = artifacts / "stdout"
    error_line = first_error_line(stdout.read_text(errors="replace")) if stdout.is_file() else ""
    return RunResult(
        status=str(result.status),
        rc=int(result.rc if result.rc is not None else 1),
        hosts=folder.host_stats(),
        failures=folder.failures,
        results=folder.results,
        artifacts=artifacts,
        seconds=round(time.monotonic() - started, 2),
        error_line=error_line,
        plays=folder.plays,
        data=folder.data,
        stats_seen=folder.stats_seen,
    )
