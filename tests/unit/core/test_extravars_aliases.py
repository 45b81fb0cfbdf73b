"""YAML anchors and aliases in extra variables are refused wherever ``-e`` is read (``-e @file`` and
``-e key=value`` alike): a few hundred characters of aliases expand into gigabytes. Exit 2, one line, nothing
contacted."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from megaprov import values
from megaprov.commands.base import extravars
from megaprov.errors import ExitCode, UsageError

# A billion laughs in 220 characters: six levels of nine aliases, 9**6 strings once expanded.
LAUGHS = "[" + ",".join(f"&{chr(97 + i)} [" + ",".join([f"*{chr(96 + i)}"] * 9 if i else ['"lol"'] * 9) + "]" for i in range(6)) + "]"
ALIASED = [
    LAUGHS,
    "a: &a [1,1,1]\nb: [*a,*a]",
    "--- &a [1,1]\n",
    "!!seq &a [1,1]",
    "{? &a [1] : 1, b: *a}",
    "[&a 1, *a]\n...\n",
    "%YAML 1.1\n--- [&a [1], *a]",
    "x:\n  <<: *a",
    "[*a]",
    "&a",
]


@pytest.mark.parametrize("text", ALIASED, ids=range(len(ALIASED)))
@pytest.mark.parametrize("form", ["key=value", "@file"])
def test_aliases_are_refused_in_every_form_of_e(tmp_path: Path, form: str, text: str) -> None:
    if form == "@file":
        path = tmp_path / "vars.yml"
        path.write_text(f"x: {text}" if text.startswith("[") else text)
        arg = f"@{path}"
    else:
        arg = f"x={text}"
    with pytest.raises(UsageError, match="anchors and aliases are not allowed") as err:
        extravars([arg])
    assert "\n" not in err.value.one_line()


@pytest.mark.parametrize("command", [["bootstrap", "--check"], ["preflight"], ["doctor"]])
def test_the_command_line_refuses_them_with_exit_2(tmp_path: Path, command: list[str]) -> None:
    (tmp_path / "inventory.ini").write_text("[head]\nn1 ansible_host=192.0.2.1\n[gpu_nodes]\nn1\n")
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "HOME": str(tmp_path), "MEGAPROV_STATE": str(tmp_path / "state")}
    argv = [sys.executable, "-m", "megaprov", *command, "-i", "inventory.ini", "-e", f"x={LAUGHS}"]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == ExitCode.USAGE, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "anchors and aliases are not allowed" in lines[0], done.stderr
    assert not (tmp_path / "state" / "runs").exists(), "ansible-runner was started"


# Any YAML value that holds an anchor somewhere, in any position: refused before anything is built.
scalars = st.sampled_from(["1", "lol", '"s"', "true", "~"])
names = st.sampled_from(["a", "b1", "x_y"])


@st.composite
def with_anchor(draw: st.DrawFn) -> str:
    name = draw(names)
    inner = draw(st.lists(scalars, min_size=1, max_size=4))
    anchored = f"&{name} [{', '.join(inner)}]"
    refs = [f"*{name}"] * draw(st.integers(0, 5))
    items = draw(st.permutations([anchored, *draw(st.lists(scalars, max_size=3))]))
    shape = draw(st.sampled_from(["flow", "map", "nested"]))
    if shape == "flow":
        return "[" + ", ".join([*items, *refs]) + "]"
    if shape == "map":
        return "{" + ", ".join([f"k{i}: {v}" for i, v in enumerate([*items, *refs])]) + "}"
    return "[[" + ", ".join(items) + "], [" + ", ".join(refs or ["0"]) + "]]"


@settings(max_examples=200, deadline=None)
@given(text=with_anchor())
def test_any_anchor_is_refused_before_it_is_built(text: str) -> None:
    with pytest.raises(UsageError, match="anchors and aliases"):
        values.yaml_data(text, "-e x")
    with pytest.raises(UsageError, match="anchors and aliases"):
        extravars([f"x={text}"])
    assert yaml.safe_load(text) is not None  # it is YAML: refused for its anchor, not for its syntax
