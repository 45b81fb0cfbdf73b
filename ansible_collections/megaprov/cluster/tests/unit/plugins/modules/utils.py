"""Running a collection module's main() as Ansible does, in the test process (the plugin tests, and megaprov's own
tests of the roles through tests/helpers/modules.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args


def run_module(main: Callable[[], Any], args: dict, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict]:
    """main() with `args` as the module's JSON arguments: its exit status and the JSON result it printed."""
    with patch_module_args(args), pytest.raises(SystemExit) as stop:
        main()
    code = stop.value.code
    return (0 if code is None else code if isinstance(code, int) else 1), json.loads(capsys.readouterr().out)
