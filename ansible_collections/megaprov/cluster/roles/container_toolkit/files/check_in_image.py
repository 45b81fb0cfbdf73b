"""megaprov: the node checks of a job in a container image, run inside the image where and as the job runs.

    python - JOB_DIR_PARENT < check_in_image.py

Run by the image's interpreter in the job's own container settings (podman with the job's devices, limits and mounts,
under the limits of the job's unit; or srun with pyxis), as the cluster user. Prints one JSON line: the host, what
the image's torch sees (CUDA, the GPU count, the NCCL it carries: the image's, not the host's), the container's
memlock limit (RDMA registers pinned memory: NCCL over InfiniBand wants it unlimited), the InfiniBand device files
the container sees, and whether the cluster user can write in JOB_DIR_PARENT (the shared directory's jobs
directory). megaprov judges the answer (megaprov/training/imagecheck.py). Standard library and torch only.
"""

import json
import os
import resource
import socket
import sys
import tempfile


def first_line(exc):
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def limit(value):
    return "unlimited" if value == resource.RLIM_INFINITY else value


def main():
    target = sys.argv[1] if len(sys.argv) > 1 else ""
    # Slurm's name of the node where srun runs it (the kernel's host name may be a longer one), else the host name
    host = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    fact = {"host": host, "uid": os.getuid(), "python": sys.version.split()[0]}
    try:
        import torch

        fact["torch"] = torch.__version__
        fact["cuda"] = bool(torch.cuda.is_available())
        fact["gpus"] = torch.cuda.device_count() if fact["cuda"] else 0
        nccl = None
        if fact["cuda"] and hasattr(torch.cuda, "nccl"):
            version = torch.cuda.nccl.version()
            nccl = ".".join(str(part) for part in version) if isinstance(version, tuple) else str(version)
        fact["nccl"] = nccl
    except Exception as exc:  # the answer says what failed; megaprov refuses the job with it
        fact["torch"] = None
        fact["torch_error"] = first_line(exc)
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    fact["memlock"] = [limit(soft), limit(hard)]
    try:
        fact["infiniband"] = sorted(os.listdir("/dev/infiniband"))
    except OSError:
        fact["infiniband"] = None
    fact["writable"] = None
    if target:
        try:
            with tempfile.NamedTemporaryFile(dir=target, prefix=".megaprov-check-"):
                pass
            fact["writable"] = True
        except OSError as exc:
            fact["writable"] = False
            fact["write_error"] = first_line(exc)
    print(json.dumps(fact, sort_keys=True))


if __name__ == "__main__":
    main()
