"""Facts the nodes reported, as Ansible's fact cache holds them on the controller (nothing is contacted)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from megaprov import values
from megaprov.errors import UsageError

MAX_FACTS_BYTES = 64 << 20  # one host's cached facts (what a node reports is input: bounded like any file)


def read_json(path: Path) -> Any:
    """The file's JSON, or None when it is missing, unreadable, not a regular file or larger than MAX_FACTS_BYTES."""
    try:
        return json.loads(values.read_bytes(path, "fact cache entry", MAX_FACTS_BYTES))
    except (UsageError, ValueError, RecursionError):
        return None


def host_facts(cache: Path, host: str, name: str) -> Iterator[Any]:
    """The fact ``name`` in each of ``host``'s fact-cache entries (the plain one first, then each stage's ``s*_``
    prefixed one): plain JSON or ansible-core 2.19's ``__payload__`` wrapper; the module's own (cacheable) fact,
    else the gathered local fact. None for an entry without it."""
    for entry in (cache / host, *sorted(cache.glob(f"s*_{host}"))):
        doc = read_json(entry)
        if isinstance(doc, dict) and isinstance(doc.get("__payload__"), str):
            try:
                doc = json.loads(doc["__payload__"])
            except ValueError:
                doc = None
        if not isinstance(doc, dict):
            yield None
            continue
        local = doc.get("ansible_local")
        yield doc.get(name) or (local.get(name) if isinstance(local, dict) else None)
