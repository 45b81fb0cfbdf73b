#!/usr/bin/env python3
"""Where a run's time went, task by task, from ansible-runner's job events (an artifacts directory that
`megaprov bootstrap` prints): per task, its wall span (first start to last end over its hosts), how many hosts ran or
skipped it; tasks skipped on every host; the top N.

    .venv/bin/python benchmarks/taskprof.py ARTIFACTS_DIR [N]

Tasks are told apart by their file and line (``task_path``), so two roles' tasks of the same name are not merged.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

DONE = ("runner_on_ok", "runner_on_skipped", "runner_on_failed", "runner_on_unreachable")


@dataclass
class Task:
    play: str
    name: str
    action: str
    path: str
    hosts: int = 0
    skipped: int = 0
    first: float = float("inf")
    last: float = 0.0

    @property
    def wall(self) -> float:
        return max(0.0, self.last - self.first)


def profile(events: list[dict[str, Any]]) -> list[Task]:
    """Tasks in the order they first ran, folded from job events (pure)."""
    tasks: dict[tuple[str, str, str], Task] = {}
    for event in events:
        data = event.get("event_data", {})
        if event.get("event") not in DONE or not data.get("start") or not data.get("end"):
            continue
        path = str(data.get("task_path", "")).split("/ansible_collections/megaprov/cluster/")[-1]
        key = (str(data.get("play", "")), str(data.get("task", "")), path)
        task = tasks.setdefault(key, Task(key[0], key[1], str(data.get("task_action", "")), path))
        task.hosts += 1
        task.skipped += event.get("event") == "runner_on_skipped"
        task.first = min(task.first, datetime.fromisoformat(data["start"]).timestamp())
        task.last = max(task.last, datetime.fromisoformat(data["end"]).timestamp())
    return list(tasks.values())


# Actions that run on the controller alone (no module on the node): everything else is one module run on the host.
CONTROLLER_ONLY = {
    f"ansible.builtin.{name}"
    for name in (
        "assert debug fail set_fact include_tasks include_role import_tasks import_role include_vars meta"
        " validate_argument_spec add_host group_by set_stats pause"
    ).split()
}


def module_runs(events: list[dict[str, Any]]) -> dict[str, int]:
    """Per host, the tasks that ran a module on it (not skipped, not a controller-only action): a re-run's cost on the
    nodes, which does not depend on how busy the machine is (pure)."""
    runs: dict[str, int] = {}
    for event in events:
        data = event.get("event_data", {})
        if event.get("event") in ("runner_on_ok", "runner_on_failed") and data.get("task_action") not in CONTROLLER_ONLY:
            if not data.get("delegate_to") or data.get("delegate_to") == data.get("host"):
                runs[str(data.get("host"))] = runs.get(str(data.get("host")), 0) + 1
    return runs


def load(artifacts: Path) -> list[dict[str, Any]]:
    files = sorted((artifacts / "job_events").glob("*.json"), key=lambda p: int(p.name.split("-")[0]))
    return [json.loads(f.read_text()) for f in files]


def lines(tasks: list[Task], top: int) -> list[str]:
    skipped = [t for t in tasks if t.hosts and t.skipped == t.hosts]
    out = [
        f"tasks {len(tasks)}, wall sum {sum(t.wall for t in tasks):.1f} s; skipped on every host: {len(skipped)} "
        f"({sum(t.wall for t in skipped):.1f} s)"
    ]
    for t in sorted(tasks, key=lambda t: t.wall, reverse=True)[:top]:
        out.append(f"{t.wall:6.2f} s  hosts={t.hosts} skipped={t.skipped}  {t.play[:28]:28} | {t.name[:70]} [{t.action}] {t.path}")
    return out


if __name__ == "__main__":
    print("\n".join(lines(profile(load(Path(sys.argv[1]))), int(sys.argv[2]) if len(sys.argv) > 2 else 25)))
