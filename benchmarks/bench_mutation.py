"""Mutation score of every module of the package and of the collection's plugins, killed by the fast test tiers.

mutmut (3.x) is the tool: it was the one of mutmut, cosmic-ray and pytest-gremlins that PyPI serves here, and its
design suits this suite. It compiles every mutant of a module into one copy behind a per-function trampoline, so
the module is imported once; it records which tests call which function and runs only those tests per mutant,
forked from a process that has already collected them. cosmic-ray rewrites and re-imports the file per mutant
and runs the whole selection each time (about 10x the cost on this 2-core machine).

The run happens in a scratch copy of the working tree (tracked and untracked, not ignored files), so the checkout
is never touched. A survivor counts against the score unless `benchmarks/mutation_equivalents/<module>.yml` explains
it: each entry names the file, the function, the line before and after the mutation, and why the two behave the
same. Score = killed / (mutants - explained equivalents); timeouts count as killed (the mutant hangs a test).

    .venv/bin/python benchmarks/bench_mutation.py [--module planner ...] [--tests tests/unit/training/test_x.py ...]
        [--survivors] [--check] [--jobs 2] [--keep DIR]

--survivors prints the diff of every unexplained survivor; --check exits 1 when a module is under the target
(85 %) or an entry of the equivalents file no longer matches any mutant (stale explanations are errors).

Only behaviour counts: the tests marked ``sync`` (a golden file, a committed dashboard compared with what the code
generates now) are left out, since regenerating the file lets a mutant through them. A full run of every module takes
hours on 2 cores: --record FILE merges each run's figures into one table (benchmarks/mutation_scores.json, with the
commit and date of the run), and --list prints every module with its recorded score, or that it is unmeasured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
TARGET = 0.85
EQUIVALENTS = ROOT / "benchmarks" / "mutation_equivalents"
SCORES = ROOT / "benchmarks" / "mutation_scores.json"

PLUGINS = "ansible_collections/megaprov/cluster/plugins"


def discover(root: Path = ROOT) -> dict[str, str]:
    """Every module of the package and of the collection's plugins that defines a function; short name -> path in
    the checkout. The short name is the file's stem (a package's ``__init__``: the package's name), prefixed by its
    directory where two would share it (``training.data`` and ``commands.data``). Pure but for reading the tree."""
    files = sorted(root.glob("megaprov/**/*.py")) + sorted((root / PLUGINS).glob("**/*.py"))
    found = [f for f in files if "__pycache__" not in f.parts and "def " in f.read_text(encoding="utf-8")]

    def stem(path: Path) -> str:
        return path.parent.name if path.stem == "__init__" else path.stem

    counts: dict[str, int] = {}
    for f in found:
        counts[stem(f)] = counts.get(stem(f), 0) + 1
    names: dict[str, str] = {}
    for f in found:
        parent = f.parent.parent if f.stem == "__init__" else f.parent
        name = stem(f) if counts[stem(f)] == 1 else f"{parent.name}.{stem(f)}"
        names[name] = f.relative_to(root).as_posix()
    return dict(sorted(names.items()))


MODULES = discover()
FAST_TIERS = ["tests/unit", "tests/cli", "tests/tools", "ansible_collections/megaprov/cluster/tests/unit"]
# Directories the tests read beside the code (they resolve paths from the repository root).
ALSO_COPY = ["schemas", "examples", "inventories", "molecule", "scripts", "benchmarks", "tools", "docs", "README.md"]
KILLED = {"killed", "timeout"}


@dataclass
class Score:
    module: str
    total: int = 0
    killed: int = 0
    equivalent: int = 0
    survivors: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        counted = self.total - self.equivalent
        return self.killed / counted if counted else 1.0


def scratch_copy(dest: Path) -> None:
    """The working tree as git sees it (tracked + untracked, not ignored), without .venv, .git or state."""
    listing = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, listing.decode().split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def configure(dest: Path, paths: list[str], tests: list[str]) -> None:
    """[tool.mutmut] for this run: mutate only the chosen files; the collection (roles, modules) is copied as sources too."""
    collection = "ansible_collections"
    sources = sorted({"megaprov"} | {collection for p in paths if p.startswith(collection + "/")})
    also = [p for p in ALSO_COPY if (dest / p).exists()] + ([] if collection in sources else [collection])
    config = (
        "\n[tool.mutmut]\n"
        f"source_paths = {json.dumps(sources)}\n"
        f"only_mutate = {json.dumps(paths)}\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(tests)}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "megaprov_mutation_hits", "-q", "-x", "-m", "not slow and not sync"]\n'
        f"also_copy = {json.dumps(also)}\n"
        "use_git_change_detection = false\n"
    )
    with (dest / "pyproject.toml").open("a") as fh:
        fh.write(config)


def load_equivalents() -> list[dict[str, str]]:
    """Every explained survivor, from one file per module (so that each module's file has one author at a time)."""
    entries: list[dict[str, str]] = []
    for path in sorted(EQUIVALENTS.glob("*.yml")):
        for i, e in enumerate(yaml.safe_load(path.read_text()) or []):
            missing = {"file", "function", "before", "after", "why"} - set(e)
            if missing:
                sys.exit(f"{path.relative_to(ROOT)} entry {i + 1}: missing {', '.join(sorted(missing))}")
            entries.append(e)
    return entries


def changed_lines(diff: str) -> tuple[str, str]:
    """The removed and added lines of a mutant's diff, stripped and joined (mutmut changes one expression)."""
    body = [line for line in diff.splitlines() if not line.startswith(("---", "+++", "@@"))]
    before = " / ".join(line[1:].strip() for line in body if line.startswith("-"))
    after = " / ".join(line[1:].strip() for line in body if line.startswith("+"))
    return before, after


def function_of(name: str) -> str:
    """megaprov.training.verdict.x_mann_kendall__mutmut_5 -> mann_kendall; a method xǁClassǁname -> Class.name."""
    leaf = name.rsplit(".", 1)[1].rsplit("__mutmut_", 1)[0]
    leaf = leaf[2:] if leaf.startswith("x_") else leaf.removeprefix("x")
    return leaf.strip("ǁ").replace("ǁ", ".")


def collect(dest: Path, paths: dict[str, str], equivalents: list[dict[str, str]], used: set[int]) -> list[tuple[Score, list[str]]]:
    os.chdir(dest)
    from mutmut.__main__ import status_by_exit_code  # type: ignore[import-not-found]
    from mutmut.mutation.diff_apply import get_diff_for_mutant  # type: ignore[import-not-found]

    out = []
    for short, rel in paths.items():
        meta = json.loads((dest / "mutants" / f"{rel}.meta").read_text())
        score = Score(short)
        diffs = []
        for name, code in sorted(meta["exit_code_by_key"].items()):
            score.total += 1
            status = status_by_exit_code[code]
            if status in KILLED:
                score.killed += 1
                continue
            diff = get_diff_for_mutant(name, path=Path(rel))
            before, after = changed_lines(diff)
            func = function_of(name)
            key = (rel, func, before, after)
            match = next((i for i, e in enumerate(equivalents) if (e["file"], e["function"], e["before"], e["after"]) == key), None)
            if match is not None:
                used.add(match)
                score.equivalent += 1
                continue
            score.survivors.append(name)
            diffs.append(f"# {name}: {status}\n{diff}")
        out.append((score, diffs))
    return out


def record(path: Path, results: list[tuple[Score, list[str]]], chosen: dict[str, str], tests: list[str]) -> None:
    """Merge this run's per-module figures into the JSON table at ``path`` (one entry per module, the newest run's)."""
    table = json.loads(path.read_text()) if path.is_file() else {}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    for score, _ in results:
        table[score.module] = {
            "file": chosen[score.module],
            "mutants": score.total,
            "killed": score.killed,
            "equivalent": score.equivalent,
            "survivors": len(score.survivors),
            "score": round(score.score, 4),
            "commit": commit,
            "date": time.strftime("%Y-%m-%d"),
            "tests": " ".join(tests),
        }
    path.write_text(json.dumps(dict(sorted(table.items())), indent=1) + "\n")


def list_modules(path: Path) -> int:
    table = json.loads(path.read_text()) if path.is_file() else {}
    measured = 0
    for name, rel in MODULES.items():
        got = table.get(name)
        if got and got.get("file") == rel:
            measured += 1
            flag = "" if got["score"] >= TARGET else "  < target"
            # a narrower selection than the fast tiers kills fewer: its score is a lower bound, and said so
            narrowed = "" if got.get("tests", "").split() == FAST_TIERS else f", tests: {got.get('tests', '?')}"
            counted = got["mutants"] - got["equivalent"]
            print(f"{name:<22}{got['score']:>7.1%}  {got['killed']}/{counted} ({got['commit']}, {got['date']}{narrowed}){flag}")
        else:
            print(f"{name:<22}{'-':>7}  unmeasured")
    print(f"{measured} of {len(MODULES)} modules measured")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--module", action="append", choices=sorted(MODULES), help="a module to mutate (repeat; default: all)")
    ap.add_argument("--tests", nargs="+", default=FAST_TIERS, help="the test selection (default: the fast tiers and the collection's plugin tests)")
    ap.add_argument("--survivors", action="store_true", help="print the diff of every unexplained survivor")
    ap.add_argument("--check", action="store_true", help=f"exit 1 when a module scores under {round(TARGET * 100)}%% or an equivalent entry is stale")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="mutants run at once")
    ap.add_argument("--keep", type=Path, help="run in this directory and keep it (default: a temporary one)")
    ap.add_argument("--record", type=Path, nargs="?", const=SCORES, help=f"merge the figures into this JSON table (default {SCORES.name})")
    ap.add_argument("--list", action="store_true", help="print every module with its recorded score and exit")
    args = ap.parse_args()
    if args.list:
        return list_modules(args.record or SCORES)

    mutmut = Path(sys.executable).parent / "mutmut"
    if not mutmut.exists():
        print("mutmut is not installed in this venv: run scripts/setup.sh (the test extra carries it)", file=sys.stderr)
        return 2
    chosen = {m: MODULES[m] for m in (args.module or MODULES)}
    equivalents = load_equivalents()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="megaprov-mutation-"))
    if args.keep and workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        scratch_copy(workdir)
        configure(workdir, list(chosen.values()), args.tests)
        start = time.monotonic()
        # A test's subprocesses tell which functions they called (benchmarks/mutation_hooks): without them a function
        # that tests reach only through a subprocess would count as tested by none.
        hits = workdir / "hits"
        hits.mkdir()
        hooks = str(workdir / "benchmarks" / "mutation_hooks")
        pythonpath = os.pathsep.join(filter(None, [hooks, os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "NO_COLOR": "1", "MEGAPROV_MUTATION": "1", "PYTHONPATH": pythonpath, "MEGAPROV_MUTATION_HITS": str(hits)}
        proc = subprocess.run([str(mutmut), "run", "--max-children", str(args.jobs)], cwd=workdir, env=env, capture_output=True, text=True)
        elapsed = time.monotonic() - start
        if proc.returncode != 0 or not all((workdir / "mutants" / f"{p}.meta").exists() for p in chosen.values()):
            print((proc.stdout + proc.stderr)[-4000:], file=sys.stderr)
            print(f"mutmut run failed (exit {proc.returncode})", file=sys.stderr)
            return 2
        used: set[int] = set()
        results = collect(workdir, chosen, equivalents, used)
    finally:
        os.chdir(ROOT)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)

    print(f"mutmut {len(chosen)} module(s), tests: {' '.join(args.tests)}, {elapsed:.0f} s, {args.jobs} at once")
    print(f"{'module':<14}{'mutants':>8}{'killed':>8}{'equiv':>7}{'survive':>8}{'score':>8}")
    failed = False
    for score, diffs in results:
        flag = "" if score.score >= TARGET else "  < target"
        failed |= bool(flag)
        print(f"{score.module:<14}{score.total:>8}{score.killed:>8}{score.equivalent:>7}{len(score.survivors):>8}{score.score:>8.1%}{flag}")
        if args.survivors:
            for d in diffs:
                print(d)
    total = sum(s.total for s, _ in results)
    killed = sum(s.killed for s, _ in results)
    eq = sum(s.equivalent for s, _ in results)
    print(f"{'all':<14}{total:>8}{killed:>8}{eq:>7}{total - killed - eq:>8}{killed / max(total - eq, 1):>8.1%}")
    if args.record:
        record(args.record, results, chosen, args.tests)
    chosen_files = set(chosen.values())
    stale = [e for i, e in enumerate(equivalents) if e["file"] in chosen_files and i not in used]
    for e in stale:
        print(f"stale equivalent entry (matches no surviving mutant): {e['file']} {e['function']}: {e['before']!r} -> {e['after']!r}")
    return 1 if args.check and (failed or stale) else 0


if __name__ == "__main__":
    sys.exit(main())
