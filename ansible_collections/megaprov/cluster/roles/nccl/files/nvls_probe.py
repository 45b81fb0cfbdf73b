"""Whether NCCL can use NVLink SHARP (NVLS) on this node, asked of the CUDA driver the way NCCL asks it
(src/transport/nvls.cc, ncclNvlsInit): CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED on each GPU. The driver sets it only
where the GPUs, the NVSwitches, Fabric Manager and the driver (CUDA 12.1 or later) all support multicast objects.
Standard library only, no GPU memory allocated; prints one JSON line."""

from __future__ import annotations

import ctypes
import json

CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 132  # cuda.h, CUDA 12.1 and later


def probe() -> dict:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return {"error": f"no CUDA driver library: {exc}"}
    rc = cuda.cuInit(0)
    if rc != 0:
        # 802 (system not yet initialized): an NVSwitch node whose Fabric Manager is not running
        return {"error": f"cuInit failed with CUDA error {rc}"}
    version, count = ctypes.c_int(0), ctypes.c_int(0)
    cuda.cuDriverGetVersion(ctypes.byref(version))
    cuda.cuDeviceGetCount(ctypes.byref(count))
    found: dict = {"driver_version": version.value, "multicast": []}
    for index in range(count.value):
        device, value = ctypes.c_int(0), ctypes.c_int(0)
        cuda.cuDeviceGet(ctypes.byref(device), index)
        # a driver older than CUDA 12.1 does not know the attribute: it returns an error and leaves 0
        cuda.cuDeviceGetAttribute(ctypes.byref(value), CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, device)
        found["multicast"].append(value.value)
    return found


if __name__ == "__main__":
    print(json.dumps(probe()))
