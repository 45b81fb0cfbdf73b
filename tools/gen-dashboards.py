"""Write the grafana role's dashboards from tools/dashboards.py, or check that the committed ones are current.

    python tools/gen-dashboards.py           # (re)write roles/grafana/files/dashboards/*.json
    python tools/gen-dashboards.py --check   # exit 1, naming the files, when they differ from the generator's output

A JSON file in that directory that the generator does not produce is removed (or, with --check, reported).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DIR = ROOT / "ansible_collections" / "megaprov" / "cluster" / "roles" / "grafana" / "files" / "dashboards"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file differs, is missing or is extra")
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the dashboards directory (default: the grafana role's)")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT))
    from tools.dashboards import rendered

    wanted = rendered()
    directory: Path = args.dir
    present = {path.name for path in directory.glob("*.json")} if directory.is_dir() else set()
    stale = sorted(name for name, text in wanted.items() if name not in present or (directory / name).read_text(encoding="utf-8") != text)
    extra = sorted(present - set(wanted))
    if args.check:
        for name in stale:
            print(f"{directory / name}: differs from tools/dashboards.py (run tools/gen-dashboards.py)", file=sys.stderr)
        for name in extra:
            print(f"{directory / name}: not a generated dashboard (remove it, or run tools/gen-dashboards.py)", file=sys.stderr)
        return 1 if stale or extra else 0
    directory.mkdir(parents=True, exist_ok=True)
    for name in stale:
        (directory / name).write_text(wanted[name], encoding="utf-8")
        print(f"wrote {directory / name}")
    for name in extra:
        (directory / name).unlink()
        print(f"removed {directory / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
