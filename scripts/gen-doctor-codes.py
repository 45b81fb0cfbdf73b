#!/usr/bin/env python3
"""Write the README's troubleshooting table from megaprov doctor's catalogue (megaprov/ops/doctor/findings.py):
every code with its severity, cause, evidence and fix. tests/static/test_static.py checks the README is in sync.

    .venv/bin/python scripts/gen-doctor-codes.py          # rewrite the README's table
    .venv/bin/python scripts/gen-doctor-codes.py --check  # exit 1 when the README differs
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from megaprov.ops.doctor.findings import CODES, LOG_CODES  # noqa: E402

BEGIN = "<!-- doctor-codes:begin (scripts/gen-doctor-codes.py writes this table) -->"
END = "<!-- doctor-codes:end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table() -> str:
    rows = ["| code | severity | found in | cause | evidence | fix |", "|---|---|---|---|---|---|"]
    for code, entry in CODES.items():
        where = "logs" if code in LOG_CODES else "cluster"
        if code in ("GPU_XID", "GPU_ECC"):
            where = "logs, cluster"
        rows.append(f"| `{code}` | {entry.severity} | {where} | {_cell(entry.cause)} | {_cell(entry.evidence)} | {_cell(entry.fix)} |")
    return "\n".join(rows)


def render(readme: str) -> str:
    start, end = readme.index(BEGIN), readme.index(END)
    return readme[: start + len(BEGIN)] + "\n" + table() + "\n" + readme[end:]


def main() -> int:
    path = ROOT / "README.md"
    text = path.read_text()
    new = render(text)
    if "--check" in sys.argv[1:]:
        if new != text:
            print("README.md: the doctor codes table is out of date: run scripts/gen-doctor-codes.py", file=sys.stderr)
            return 1
        return 0
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
