"""pytest plugin of the mutation benchmark (see sitecustomize.py here): before mutmut files the functions a test
called, the ones its subprocesses called are added."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item: Any, nextitem: Any) -> None:
    where = os.environ.get("MEGAPROV_MUTATION_HITS")
    if not where or os.environ.get("MUTANT_UNDER_TEST") != "stats":
        return
    from mutmut.state import state  # type: ignore[import-not-found]

    for hits in Path(where).glob("*.hits"):
        state()._stats.update(hits.read_text().split())
        hits.unlink()
