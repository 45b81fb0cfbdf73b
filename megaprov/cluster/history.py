"""What megaprov remembers of a cluster's bootstraps on this machine (for `megaprov status`): each node's last result
per stage. Every bootstrap adds the stages it ran; a --check dry run adds nothing."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from megaprov.paths import fact_cache_dir, state_dir


def status_file(inventory: Path) -> Path:
    return state_dir() / "status" / f"{fact_cache_dir(inventory).name}.json"


def read_status(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def record_bootstrap(inventory: Path, report: Any, stage_of: dict[str, str], check: bool) -> None:
    """After a bootstrap (not a --check dry run): each stage it ran, per node ok, failed or unreachable; the stages it
    did not run keep their earlier result. Pure apart from the one file it writes."""
    if check:
        return
    path = status_file(inventory)
    data = read_status(path)
    stages: dict[str, Any] = data.get("stages") if isinstance(data.get("stages"), dict) else {}  # type: ignore[assignment]
    hosts = [h.host for h in report.hosts if h.host != "localhost"]
    now = time.time()
    for entry in report.stages:
        stage = entry["stage"]
        if stage == "validate":
            continue
        results = {h: "ok" for h in hosts}
        for failure in report.failures:
            if stage_of.get(failure.play) == stage and failure.host in results:
                results[failure.host] = "unreachable" if failure.unreachable else "failed"
        stages[stage] = {"at": now, "hosts": results}
    data.update(stages=stages, last={"at": now, "ok": report.ok, "exit_code": int(report.exit_code), "error": report.error})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
