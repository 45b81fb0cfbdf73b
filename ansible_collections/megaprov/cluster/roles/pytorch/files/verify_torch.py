"""megaprov pytorch role: what the environment's torch can do, as one JSON line."""
import json

import torch
import torch.distributed as dist

report = {
    "torch": torch.__version__,
    "cuda_build": torch.version.cuda,
    "cuda_available": torch.cuda.is_available(),
    "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0,
    "nccl": ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None,
    "backends": [name for name, ok in (("gloo", dist.is_gloo_available()), ("nccl", dist.is_nccl_available()), ("mpi", dist.is_mpi_available())) if ok],
}
x = torch.arange(6, dtype=torch.float32).reshape(2, 3)
report["matmul_ok"] = bool(torch.equal(x @ x.T, torch.tensor([[5.0, 14.0], [14.0, 50.0]])))
print(json.dumps(report))
