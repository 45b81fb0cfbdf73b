"""A PEP 503 simple index of the wheels in some directories, written under a web root (megaprov package_cache role).

    python3 wheel_index.py --root WEBROOT [--source DIR]... [--optional-source DIR]... [--check]

WEBROOT/wheels/ holds one symbolic link per wheel (to its file in a source directory: a wheelhouse, an offline
bundle's wheels/, the role's pip downloads), WEBROOT/simple/index.html lists the projects and
WEBROOT/simple/<normalized name>/index.html each project's files with their sha256 (`#sha256=` fragments: pip and uv
check them). Files are rewritten only when their content changes; links and project pages nothing lists any more are
removed. Hashes are kept in WEBROOT/.wheel-index.json by (path, size, mtime), so a re-run does not read every wheel
again. Prints one JSON object: changed, projects, wheels. --check reports what would change and writes nothing.
Standard library only: it runs with the head's python3.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import os
import re
import sys
from pathlib import Path

CACHE = ".wheel-index.json"
# PEP 427: {distribution}-{version}(-{build tag})?-{python tag}-{abi tag}-{platform tag}.whl
WHEEL = re.compile(r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-[^-]+(?:-[^-]+)?-[^-]+-[^-]+-[^-]+\.whl$")


def normalize(name: str) -> str:
    """PEP 503 normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def find_wheels(sources: list[Path]) -> dict[str, Path]:
    """File name -> path of every wheel in the source directories (the first source wins for a name)."""
    found: dict[str, Path] = {}
    for source in sources:
        for path in sorted(source.glob("*.whl")):
            if WHEEL.match(path.name) and path.is_file():
                found.setdefault(path.name, path)
    return found


def project_page(project: str, files: list[tuple[str, str]]) -> str:
    links = "\n".join(f'    <a href="../../wheels/{html.escape(n)}#sha256={h}">{html.escape(n)}</a><br>' for n, h in sorted(files))
    return f"<!DOCTYPE html>\n<html>\n  <head><title>Links for {html.escape(project)}</title></head>\n  <body>\n{links}\n  </body>\n</html>\n"


def root_page(projects: list[str]) -> str:
    links = "\n".join(f'    <a href="{html.escape(p)}/">{html.escape(p)}</a><br>' for p in sorted(projects))
    return f"<!DOCTYPE html>\n<html>\n  <head><title>Simple index</title></head>\n  <body>\n{links}\n  </body>\n</html>\n"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for chunk in iter(lambda: stream.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def plan(root: Path, sources: list[Path]) -> tuple[dict[Path, str], dict[Path, Path], set[Path], dict[str, list[object]]]:
    """What the index must look like: page path -> text, link path -> target, paths to remove, the new hash cache."""
    wheels = find_wheels(sources)
    try:
        old = json.loads((root / CACHE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = {}
    cache: dict[str, list[object]] = {}
    projects: dict[str, list[tuple[str, str]]] = {}
    for name, path in wheels.items():
        stat = path.stat()
        key = str(path.resolve())
        entry = old.get(key) if isinstance(old, dict) else None
        if isinstance(entry, list) and len(entry) == 3 and entry[:2] == [stat.st_size, stat.st_mtime_ns]:
            digest = str(entry[2])
        else:
            digest = sha256(path)
        cache[key] = [stat.st_size, stat.st_mtime_ns, digest]
        match = WHEEL.match(name)
        assert match is not None  # find_wheels kept only wheel names
        projects.setdefault(normalize(match.group("name")), []).append((name, digest))
    pages = {root / "simple" / "index.html": root_page(list(projects))}
    pages.update({root / "simple" / p / "index.html": project_page(p, files) for p, files in projects.items()})
    links = {root / "wheels" / name: path.resolve() for name, path in wheels.items()}
    stale: set[Path] = set()
    if (root / "wheels").is_dir():
        stale |= {p for p in (root / "wheels").iterdir() if p not in links}
    if (root / "simple").is_dir():
        stale |= {p for p in (root / "simple").iterdir() if p.is_dir() and p / "index.html" not in pages}
    return pages, links, stale, cache


def apply(root: Path, sources: list[Path], check: bool) -> dict[str, object]:
    pages, links, stale, cache = plan(root, sources)
    changes: list[str] = []
    for path, text in pages.items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            changes.append(f"write {path}")
            if not check:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
                tmp = path.with_name(path.name + ".tmp")
                tmp.write_text(text, encoding="utf-8")
                tmp.chmod(0o644)
                tmp.replace(path)
    for link, target in links.items():
        if not (link.is_symlink() and Path(os.readlink(link)) == target):
            changes.append(f"link {link}")
            if not check:
                link.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
                if link.is_symlink() or link.exists():
                    link.unlink()
                link.symlink_to(target)
    for path in sorted(stale):
        changes.append(f"remove {path}")
        if not check:
            if path.is_dir() and not path.is_symlink():
                for child in path.iterdir():
                    child.unlink()
                path.rmdir()
            else:
                path.unlink()
    if not check:
        text = json.dumps(cache, sort_keys=True)
        if not (root / CACHE).is_file() or (root / CACHE).read_text(encoding="utf-8") != text:
            (root / CACHE).write_text(text, encoding="utf-8")
    return {"changed": bool(changes), "changes": changes, "projects": len(pages) - 1, "wheels": len(links)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--source", type=Path, action="append", default=[])
    parser.add_argument("--optional-source", type=Path, action="append", default=[], help="a source that may not exist yet")
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    missing = [str(s) for s in args.source if not s.is_dir()]
    if missing:
        print(json.dumps({"failed": True, "msg": f"wheel source directory missing: {', '.join(missing)}"}))
        return 2
    if not args.check:
        args.root.mkdir(parents=True, exist_ok=True, mode=0o755)
    sources = [*args.source, *(s for s in args.optional_source if s.is_dir())]
    print(json.dumps(apply(args.root, sources, args.check)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
