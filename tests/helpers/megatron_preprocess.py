"""Run Megatron-LM's own ``tools/preprocess_data.py`` from a checkout, on this machine's Python:

    python tests/helpers/megatron_preprocess.py CHECKOUT [preprocess_data.py's arguments]

On a CPU-only torch the tool's imports reach the one module of the tree that imports triton; the megatron role's
check script gives that import its stand-in (``triton_stand_in``, see that script), as for the tree's other code."""

import importlib.util
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "ansible_collections/megaprov/cluster/roles/megatron/files/megatron_build_check.py"

if __name__ == "__main__":
    sys.path.pop(0)  # this folder: its megatron.py (a test helper) is not Megatron-LM's package
    checkout = sys.argv[1]
    spec = importlib.util.spec_from_file_location("megatron_build_check", CHECK)
    assert spec is not None and spec.loader is not None
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    check.triton_stand_in(checkout)
    tool = str(Path(checkout) / "tools" / "preprocess_data.py")
    sys.argv = [tool, *sys.argv[2:]]
    sys.path.insert(0, str(Path(tool).parent))
    runpy.run_path(tool, run_name="__main__")
