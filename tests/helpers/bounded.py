"""Python code for a child interpreter whose memory is bounded: the bound is on the work, not on the imports."""

from __future__ import annotations


def limited(code: str, address_space: int) -> str:
    """``code`` with an address-space limit set after its leading imports: it may grow ``address_space`` beyond what
    they took. The bound is on the read or the analysis, not on the imports (under the mutation benchmark an imported
    module carries every mutant, several times its own size)."""
    lines = code.splitlines(keepends=True)
    head = next((i for i, line in enumerate(lines) if not line.startswith(("import ", "from "))), len(lines))
    limit = (
        "import os as _os, resource as _resource\n"
        f"_bound = int(open('/proc/self/statm').read().split()[0]) * _os.sysconf('SC_PAGE_SIZE') + {address_space}\n"
        "_resource.setrlimit(_resource.RLIMIT_AS, (_bound, _bound))\n"
    )
    return "".join(lines[:head]) + limit + "".join(lines[head:])
