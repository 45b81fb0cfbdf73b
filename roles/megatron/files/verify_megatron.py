"""megaprov megatron role: versions of the installed megatron-core and of the checkout, as one JSON line."""
import importlib.util
import json
import sys

import megatron.core
from megatron.core import package_info

checkout = sys.argv[1]
spec = importlib.util.spec_from_file_location("checkout_package_info", f"{checkout}/megatron/core/package_info.py")
tree = importlib.util.module_from_spec(spec)
try:
    spec.loader.exec_module(tree)
    tree_version = tree.__version__
except (FileNotFoundError, AttributeError):
    tree_version = None
from megatron.core.transformer import TransformerConfig  # noqa: E402  (the core imports cleanly, not just its package)

TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=2, use_cpu_initialization=True)
te = importlib.util.find_spec("transformer_engine") is not None
print(json.dumps({"core": package_info.__version__, "core_path": megatron.core.__file__, "checkout": tree_version, "transformer_engine": te}))
