"""The documentation: generated pages are current, the README stays short, links resolve and the commands the
tutorial and how-to guides give parse with the real parser."""

import importlib.util
import re
import shlex
from pathlib import Path

import pytest

from megaprov.commands import build_parser

ROOT = Path(__file__).resolve().parents[2]
FIX = "run `.venv/bin/python tools/gen-docs.py`"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "tools" / "gen-docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LINKED = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
GUIDES = [ROOT / "README.md", ROOT / "docs" / "tutorial" / "lab.md", *sorted((ROOT / "docs" / "how-to").glob("*.md"))]


@pytest.fixture(scope="session")
def generated() -> dict[Path, str]:
    """Every generated file and what it must hold now: generated once per session, by the tests that ask (a generator
    that refuses the tree fails them, not the collection of the whole suite)."""
    return _generator().outputs()


def test_every_generated_file_is_current(generated):
    stale = [str(path.relative_to(ROOT)) for path, text in sorted(generated.items()) if not path.exists() or path.read_text() != text]
    assert not stale, f"out of date or missing: {', '.join(stale)}: {FIX}"


def test_the_reference_covers_what_the_issue_names(generated):
    names = {p.name for p in generated if p.parent == ROOT / "docs" / "reference"}
    assert names == {"cli.md", "exit-codes.md", "doctor-codes.md", "alert-rules.md", "role-variables.md", "support-matrix.md", "stages.md"}
    roles = sorted(p.name for p in (ROOT / "ansible_collections/megaprov/cluster/roles").iterdir() if p.is_dir())
    assert sorted(p.parent.name for p in generated if p.name == "README.md" and p.parent.parent.name == "roles") == roles


def test_the_generated_pages_hold_every_code_and_rule(generated):
    from megaprov.cluster.stages import STAGES
    from megaprov.errors import EXIT_CODES
    from megaprov.ops.doctor.findings import CODES

    reference = ROOT / "docs" / "reference"
    assert all(f"| `{code}` |" in generated[reference / "doctor-codes.md"] for code in CODES)
    assert all(f"| {int(code)} | `{kind}` |" in generated[reference / "exit-codes.md"] for code, (kind, _) in EXIT_CODES.items())
    rules = (ROOT / "ansible_collections/megaprov/cluster/roles/prometheus/files/rules/megaprov.rules.yml").read_text()
    assert all(f"| `{alert}` |" in generated[reference / "alert-rules.md"] for alert in re.findall(r"^\s*- alert: (\w+)$", rules, re.M))
    collection = generated[ROOT / "ansible_collections/megaprov/cluster/README.md"]
    assert all(f"| `{name}` |" in collection for name, _ in STAGES)
    modules = ROOT / "ansible_collections/megaprov/cluster/plugins/modules"
    assert all(f"`megaprov.cluster.{p.stem}`" in collection for p in modules.glob("*.py") if p.stem != "__init__")


def test_a_stale_table_is_replaced_and_a_readme_without_markers_refused():
    gen = _generator()
    rewritten = gen.role_readme("nccl", f"## Role Variables\n\n{gen.TABLE_BEGIN}\n| `old` | str | `x` | gone |\n{gen.TABLE_END}\n")
    assert "| `nccl_method` |" in rewritten and "| `old` |" not in rewritten
    with pytest.raises(ValueError, match="no role-variables markers"):
        gen.role_readme("nccl", "## Role Variables\n\n| `nccl_method` | str | `none` | x |\n")


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move detail into docs/ (at most 200)"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _links(path):
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not re.match(r"^[a-z]+:", target):
            yield target


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(path):
    broken = []
    for target in _links(path):
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md":
            anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", dest.read_text(), re.M)}
            if anchor not in anchors:
                broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)}: links that lead nowhere: {broken}"


def _shell_blocks(path):
    return re.findall(r"```(?:sh|bash)\n(.*?)```", path.read_text(), re.S)


def _commands(path):
    """Every megaprov command of a guide's shell blocks, as argv: lines that start with it (after VAR=value words)
    and $(megaprov ...) inside other lines."""
    found = []
    for block in _shell_blocks(path):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            texts = re.findall(r"\$\((megaprov [^)]*)\)", line)
            bare = re.sub(r"^(\w+=\S+ )+", "", line)
            if bare.startswith("megaprov "):
                texts.insert(0, bare)
            for text in texts:
                words = shlex.split(text, comments=True)
                cut = next((i for i, w in enumerate(words) if w in ("|", "||", "&&", ";", ">", ">>", "2>")), len(words))
                found.append((path.relative_to(ROOT).as_posix(), words[1:cut]))
    return found


COMMANDS = [c for path in GUIDES for c in _commands(path)]


def test_the_guides_give_commands():
    assert {path for path, _ in COMMANDS} == {p.relative_to(ROOT).as_posix() for p in GUIDES}


@pytest.mark.parametrize(("path", "argv"), COMMANDS, ids=lambda v: v if isinstance(v, str) else " ".join(v)[:60])
def test_every_guide_command_parses_with_the_real_parser(path, argv):
    if argv == ["--version"]:
        return
    args = build_parser().parse_args(argv)
    assert getattr(args, "handler", None) is not None, f"{path}: megaprov {' '.join(argv)} names no command"
    assert not getattr(args, "inventory_positional", None) and not getattr(args, "spec", None), f"{path}: old form: {argv}"
    assert not getattr(args, "job_deprecated", None), f"{path}: old form: {argv}"


PATHS = re.compile(r"(?<![\w./-])(?:\./)?((?:scripts|tools|examples/jobs|inventories)/[\w.-]+(?:/[\w.-]+)*)")


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_script_and_example_named_exists(path):
    missing = sorted({p for p in PATHS.findall(path.read_text()) if not (ROOT / p).exists()})
    assert not missing, f"{path.relative_to(ROOT)} names files that do not exist: {missing}"
