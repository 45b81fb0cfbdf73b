"""The package's shape, read from its source: the import graph has no cycle and ``megaprov.cluster`` never imports
``megaprov.training`` or ``megaprov.ops`` (the rooms above it), and no Python decides anything on an Ansible task's
name (a renamed task would silently change what megaprov does): a task's name is only shown."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "megaprov"
# Standalone programs shipped as data (copied into the lab's image), not modules of the package
NOT_MODULES = {PACKAGE / "cluster" / "lab_files"}


def _sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if not any(d in p.parents for d in NOT_MODULES))


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in _sources()}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at module level and inside functions, except those under ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        children = list(ast.iter_child_nodes(node))
        if isinstance(node, ast.If) and _type_checking(node):
            children = list(node.orelse)
        stack.extend(children)


def _resolve(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The megaprov modules an import statement names (``from megaprov.training import jobs`` names
    ``megaprov.training.jobs`` where that is a module, else the package)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.split(".")[0] == "megaprov"}
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*parts, base] if base else parts)
    if base.split(".")[0] != "megaprov":
        return set()
    return {f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names}


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        targets: set[str] = set()
        for node in _imports(tree):
            targets |= {t for t in _resolve(name, path.name == "__init__.py", node) if t in MODULES and t != name}
        graph[name] = targets
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order, the first again at the end), or None."""
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def test_the_import_graph_has_no_cycle():
    cycle = _cycle(_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cluster_room_imports_nothing_above_it():
    upward = sorted(
        f"{source} -> {target}"
        for source, targets in _graph().items()
        if source.startswith("megaprov.cluster")
        for target in targets
        if target.startswith(("megaprov.training", "megaprov.ops", "megaprov.commands", "megaprov.cli"))
    )
    assert upward == []


def test_the_graph_sees_function_level_imports_and_skips_type_checking_ones():
    """The checks above would pass on an empty graph: pin what they read on a known module and on a made-up one."""
    graph = _graph()
    assert "megaprov.cluster.runner" in graph["megaprov.cluster.plays"]
    assert "megaprov.training.launchers.slurm" in graph["megaprov.training.launchers"]  # imported inside of()
    assert "megaprov.training.jobs" not in graph["megaprov.training.launchers"]  # under TYPE_CHECKING only
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


# ---- task names


def _names_a_task(node: ast.AST) -> bool:
    """``x.task``, ``x["task"]`` or ``x.get("task", ...)``: an Ansible task's name."""
    if isinstance(node, ast.Attribute):
        return node.attr == "task"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "task"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "task"
    return False


MATCHERS = {"match", "search", "fullmatch", "findall", "finditer", "sub", "split"}


def _decisions_on_task_names(tree: ast.AST) -> Iterator[ast.AST]:
    """Where a task's name is compared, matched, searched or used as a key, rather than shown or passed on."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(_names_a_task(n) for n in (node.left, *node.comparators)):
            yield node
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if _names_a_task(node.func.value) and node.func.attr != "get":  # name.startswith(...), name.lower() == ...
                yield node
            elif node.func.attr in MATCHERS and any(_names_a_task(a) for a in node.args):  # re.match(..., name)
                yield node
        elif isinstance(node, ast.Subscript) and _names_a_task(node.slice):  # TABLE[failure.task]
            yield node
        elif isinstance(node, ast.Match) and _names_a_task(node.subject):
            yield node


def test_no_python_decides_on_a_task_name():
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)[:100]}"
        for path in _sources()
        for node in _decisions_on_task_names(ast.parse(path.read_text(), str(path)))
    ]
    assert found == []


@pytest.mark.parametrize(
    ("source", "decides"),
    [
        ('first.task.startswith("Refuse")', True),
        ('t.task == "Submit the batch script"', True),
        ('"Start" in f.task', True),
        ('data.get("task", "") == "x"', True),
        ('re.match("Start", data["task"])', True),
        ("KNOWN[f.task]", True),
        ("match f.task:\n    case 'x': pass", True),
        ("print(f\"{f.host}: task '{f.task}' failed\")", False),
        ('TaskResult(item.host, item.task, "action", {})', False),
        ('name = data.get("task", "")', False),
        ('f.action == "ansible.builtin.debug"', False),
    ],
)
def test_the_check_tells_a_decision_from_a_display(source, decides):
    assert bool(list(_decisions_on_task_names(ast.parse(source)))) == decides


# Domain code reports through a Reporter (megaprov.output, tests/unit/core/test_reporter.py), never through quiet flags.
def test_no_function_of_the_package_takes_a_quiet_flag():
    # RunProgress is the renderer the reporter drives: the one place that may say "quiet"
    found = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in (*node.args.args, *node.args.kwonlyargs)]
                if "quiet" in names and not (path.name == "output.py" and node.name == "__init__"):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}")
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "quiet":
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} a field")
    assert found == []
