"""The megatron role's megatron_packages are what Megatron-LM's training code imports beyond megatron-core:
found by importing it, not by reading. The real tree at core_v0.16.1 (the upstream snapshot) is imported and a model
built by the role's own check script, in this environment's Python, but with no installed distribution importable
except what a node's venv holds: torch, megatron-core and megatron_packages with their dependencies (the role's
pybind11 too), as links in a site directory of their own that Python, started without its site-packages, is given.
core_v0.16.1's megatron/training imports pydantic (megatron/rl, from training.py) and yaml
(yaml_arguments.py, from gpt_builders.py), which the role did not install."""

import importlib.metadata as md
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from tests.fixtures import upstream

ROOT = Path(__file__).resolve().parents[3]
ROLE = ROOT / "ansible_collections/megaprov/cluster/roles/megatron"
SCRIPT = ROLE / "files" / "megatron_build_check.py"


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def node_site(requirements: list[str], dest: Path) -> Path:
    """A site directory holding only the distributions a node's venv would: ``requirements`` and their dependencies
    (markers evaluated here, extras not taken), each as links to its installed top-level files and its metadata."""
    dists = {norm(d.metadata["Name"]): d for d in md.distributions()}
    keep: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        req = todo.pop()
        name = norm(req.name)
        if name in keep or name not in dists:
            continue
        keep.add(name)
        todo += [s for s in map(Requirement, dists[name].requires or []) if s.marker is None or s.marker.evaluate({"extra": ""})]
    dest.mkdir()
    for name in keep:
        for top in {Path(str(f)).parts[0] for f in dists[name].files or [] if not str(f).startswith("..")}:
            source = Path(str(dists[name].locate_file(top)))
            if source.exists() and not (dest / top).exists():
                (dest / top).symlink_to(source)
    return dest


ARGS = [
    "--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
    "--max-position-embeddings", "64", "--micro-batch-size", "1", "--global-batch-size", "1", "--train-iters", "1",
    "--lr", "0.0001", "--mock-data", "--tokenizer-type", "NullTokenizer", "--vocab-size", "127", "--legacy-tokenizer",
    "--use-cpu-initialization", "--transformer-impl", "local", "--no-gradient-accumulation-fusion", "--no-persist-layer-norm",
]  # fmt: skip


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    return upstream.megatron_tree(tmp_path_factory)


def check_with_only(checkout: Path, tmp_path: Path, packages: list[str]) -> dict[str, object]:
    pytest.importorskip("torch", reason="skipped: no torch in this environment")
    site = node_site(["torch", "megatron-core", *packages], tmp_path / "site")
    # -I -S: no site-packages of this environment, no PYTHON* variables; the standard library and the node's site only
    run = f"import runpy, sys; sys.path.append({str(site)!r}); sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    cmd = [sys.executable, "-I", "-S", "-c", run, str(SCRIPT), str(checkout), "--", *ARGS]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    assert lines, out.stderr[-3000:]
    result: dict[str, object] = json.loads(lines[-1])
    return result


def role_defaults() -> dict:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def test_the_training_code_imports_and_builds_with_megatron_packages_alone(checkout, tmp_path):
    defaults = role_defaults()
    result = check_with_only(checkout, tmp_path, defaults["megatron_packages"] + defaults["megatron_build_requirements"])
    assert result["imports"] == "ok", result
    assert result["mode"] == "megatron-lm" and result["model"] == "built", result


def test_without_pydantic_the_import_fails_and_says_which_module(checkout, tmp_path):
    """The check can fail: the role's old list (six, regex, einops) does not import the training code."""
    result = check_with_only(checkout, tmp_path, ["six", "regex", "einops"])
    assert str(result["imports"]).startswith("ModuleNotFoundError: No module named"), result
    assert result["model"] != "built"
