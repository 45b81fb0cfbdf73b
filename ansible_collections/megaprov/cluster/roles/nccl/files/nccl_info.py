"""Which NCCL the training environment loads: the nvidia-nccl wheel (its headers and library), the version the
library itself reports (ncclGetVersion, no GPU needed), and the NCCL torch was built against when torch is there.
Run with the training environment's interpreter; prints one JSON line."""

from __future__ import annotations

import ctypes
import importlib.metadata
import json
import os
import sys


def version_text(code: int) -> str:
    # NCCL_VERSION(X,Y,Z): X*10000 + Y*100 + Z since 2.9 (X*1000 + Y*100 + Z before).
    major, rest = (code // 10000, code % 10000) if code >= 20900 else (code // 1000, code % 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def wheel() -> dict:
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if not name.startswith("nvidia-nccl"):
            continue
        files = {str(f): os.path.realpath(dist.locate_file(f)) for f in dist.files or []}
        lib = next((path for rel, path in files.items() if rel.endswith("/libnccl.so.2")), "")
        header = next((path for rel, path in files.items() if rel.endswith("/include/nccl.h")), "")
        if lib and header:
            return {"dist": name, "wheel_version": dist.version, "lib": lib, "lib_dir": os.path.dirname(lib), "include": os.path.dirname(header)}
    return {}


def main() -> None:
    found = wheel()
    if found:
        code = ctypes.c_int(0)
        try:
            ctypes.CDLL(found["lib"]).ncclGetVersion(ctypes.byref(code))
            found["library_version"] = version_text(code.value)
        except OSError as exc:
            found["library_error"] = str(exc).splitlines()[0]
    try:
        import torch  # noqa: PLC0415 (optional: the check works before torch is installed)

        found["torch"] = torch.__version__
        found["torch_nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.version.cuda else None
    except Exception as exc:  # noqa: BLE001 (torch absent or CPU build: reported, not fatal)
        found["torch_error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    found["python"] = sys.executable
    print(json.dumps(found))


if __name__ == "__main__":
    main()
