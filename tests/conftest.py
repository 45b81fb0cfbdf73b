import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# megaprov's state (runs, fact caches, lab inventories and keys) stays inside the checkout under test, not in the
# user's XDG state directory; a test that needs the XDG default unsets it (tests/unit/test_paths.py).
os.environ.setdefault("MEGAPROV_STATE", str(ROOT / ".megaprov" / "state"))


def load_module(path: Path, name: str):
    """Import an Ansible module file (the collection's plugins/modules/*.py) to test its pure functions."""
    # Its __name__ is the dotted path from the repository root (ansible_collections.megaprov.cluster.plugins.modules.nccl_check): the name the
    # mutation benchmark (benchmarks/bench_mutation.py) gives its functions. `name` stays an alias in sys.modules.
    path = Path(path).resolve()
    qualified = ".".join(path.relative_to(ROOT).with_suffix("").parts) if path.is_relative_to(ROOT) else name
    spec = importlib.util.spec_from_file_location(qualified, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = sys.modules[qualified] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT
