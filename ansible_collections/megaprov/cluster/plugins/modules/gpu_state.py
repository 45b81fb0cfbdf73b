#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# megaprov: the NVIDIA driver's state on a node, read-only (Secure Boot, loaded and installed driver, GPUs).
from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_state
short_description: NVIDIA driver state of a node, and what the driver role must do next
description:
  - Reads Secure Boot from EFI variables, the loaded nvidia module version from sysfs, the installed driver
    packages from dpkg, the NVIDIA GPUs on the PCI bus and, where the driver is loaded, nvidia-smi.
  - "Returns C(action), one of C(no_gpu) (no NVIDIA GPU on this machine's PCI bus), C(none) (the installed driver
    is loaded), C(load) (installed, not loaded yet: modprobe without a reboot), C(reboot) (another version is loaded)
    or C(install) (no driver package is installed)."
  - "Also returns the GPUs' PCI device IDs (C(pci_gpu_devices), which tell the GPU generation and so the kernel
    module flavour) and whether nouveau is loaded (C(nouveau_loaded): it holds the GPUs until a reboot)."
  - Never changes anything; supports check mode.
options:
  driver_packages:
    description: Package names that carry the driver version, first installed wins.
    type: list
    elements: str
    default: []
  fabricmanager_packages:
    description: Package names of Fabric Manager, first installed wins.
    type: list
    elements: str
    default: []
  root:
    description: File system root to read (tests use a fake tree).
    type: path
    default: /
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the NVIDIA driver state
  megaprov.cluster.gpu_state:
    driver_packages: [nvidia-driver-570-open, nvidia-driver-570]
    fabricmanager_packages: [nvidia-fabricmanager-570]
  register: gpu

- name: Show what the driver role does next
  ansible.builtin.debug:
    msg: "{{ gpu.action }} (loaded {{ gpu.loaded_version or 'none' }}, installed {{ gpu.installed_version or 'none' }})"
"""

RETURN = r"""
action:
  description: The driver role's next step, one of no_gpu, none, load, reboot or install.
  type: str
  returned: always
  sample: load
secure_boot:
  description: C(enabled), C(disabled) or C(unknown) (no EFI variables, as on a BIOS boot or in a container).
  type: str
  returned: always
mok_enrolled:
  description: Whether DKMS's signing key (/var/lib/dkms/mok.pub) is enrolled; only tested with Secure Boot enabled.
  type: bool
  returned: always
pci_gpus:
  description: PCI addresses of the NVIDIA GPUs on the bus, whether or not a driver is bound.
  type: list
  elements: str
  returned: always
pci_gpu_devices:
  description: PCI device IDs of those GPUs (such as C(0x2330)), in the same order.
  type: list
  elements: str
  returned: always
nouveau_loaded:
  description: Whether the nouveau module is loaded (it holds the GPUs until a reboot).
  type: bool
  returned: always
loaded_version:
  description: Version of the loaded nvidia kernel module, empty when none is loaded.
  type: str
  returned: always
installed_package:
  description: The first of O(driver_packages) that is installed, empty when none is.
  type: str
  returned: always
installed_version:
  description: Upstream version of that package (C(550.127.08) from C(550.127.08-1)), empty when none is installed.
  type: str
  returned: always
fabricmanager_package:
  description: The first of O(fabricmanager_packages) that is installed, empty when none is.
  type: str
  returned: always
fabricmanager_version:
  description: Upstream version of that package, empty when none is installed.
  type: str
  returned: always
smi:
  description: One entry per GPU from nvidia-smi (index, name, driver, persistence, memory_mib); empty when no driver is loaded.
  type: list
  elements: dict
  returned: always
smi_rc:
  description: >-
    nvidia-smi's exit status (0 when it was not run). Non-zero with rows in RV(smi) is a node where a GPU has fallen
    off the bus - nvidia-smi lists the others and exits 15.
  type: int
  returned: always
smi_error:
  description: The first line nvidia-smi wrote on standard error (at most 300 characters), empty when none.
  type: str
  returned: always
"""

import os
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.megaprov.cluster.plugins.module_utils import gpu_query, pci
from ansible_collections.megaprov.cluster.plugins.module_utils.nvidia_driver import loaded_version

SECURE_BOOT_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
SMI_QUERY = gpu_query.query_gpu(gpu_query.INVENTORY)


def _read(path, binary=False):
    try:
        with open(path, "rb" if binary else "r") as handle:
            return handle.read() if binary else handle.read().strip()
    except OSError:
        return b"" if binary else ""


def secure_boot(root):
    """'enabled', 'disabled' or 'unknown' (no EFI variables: BIOS boot or a container)."""
    data = _read(os.path.join(root, SECURE_BOOT_VAR), binary=True)
    if len(data) < 5:
        return "unknown"
    return "enabled" if data[4] == 1 else "disabled"


def pci_gpus(root):
    """NVIDIA display/3D controllers on the PCI bus of this machine."""
    return pci.nvidia_gpus(os.path.join(root, "sys/bus/pci/devices"))


def pci_gpu_devices(root):
    """PCI device IDs ('0x2330') of the NVIDIA GPUs on the PCI bus, in the order of pci_gpus."""
    return [_read(os.path.join(root, "sys/bus/pci/devices", dev, "device")).lower() for dev in pci_gpus(root)]


def nouveau_loaded(root):
    return os.path.isdir(os.path.join(root, "sys/module/nouveau"))


def upstream(version):
    """'550.127.08' from a Debian version such as '550.127.08-1' or '1:550.127.08-0ubuntu1'."""
    version = version.split(":", 1)[-1]
    return version.split("-", 1)[0]


def parse_smi(text):
    """The GPUs in nvidia-smi's answer to SMI_QUERY."""
    return [
        {"index": int(row["index"]), "name": row["name"], "driver": row["driver_version"], "persistence": row["persistence_mode"],
         "memory_mib": row["memory.total"]}
        for row in gpu_query.rows(text, gpu_query.INVENTORY)
        if row["index"].isdigit()
    ]


def decide(gpus_on_pci, installed, loaded, nouveau=False):
    """The driver role's next step (see DOCUMENTATION). nouveau bound to the GPUs keeps nvidia from loading
    until a reboot (the blacklist takes effect at boot)."""
    if not gpus_on_pci:
        return "no_gpu"
    if not installed:
        return "install"
    if not loaded:
        return "reboot" if nouveau else "load"
    return "none" if upstream(installed) == loaded else "reboot"


def dpkg_versions(module, names):
    """{package: version} of the installed packages among names."""
    if not names or not shutil.which("dpkg-query"):
        return {}
    rc, out, err = module.run_command(["dpkg-query", "-W", "-f=${Package}\t${Version}\t${db:Status-Abbrev}\n", *names])
    versions = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2][1:2] == "i":  # ii, or hi when held
            versions[parts[0]] = parts[1]
    return versions


def first(versions, names):
    return next(((name, versions[name]) for name in names if name in versions), ("", ""))


def main():
    module = AnsibleModule(
        argument_spec={
            "driver_packages": {"type": "list", "elements": "str", "default": []},
            "fabricmanager_packages": {"type": "list", "elements": "str", "default": []},
            "root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    root = module.params["root"]
    versions = dpkg_versions(module, module.params["driver_packages"] + module.params["fabricmanager_packages"])
    driver_pkg, driver_version = first(versions, module.params["driver_packages"])
    fm_pkg, fm_version = first(versions, module.params["fabricmanager_packages"])
    gpus = pci_gpus(root)
    loaded = loaded_version(root)
    smi, smi_rc, smi_error = [], 0, ""
    if loaded and shutil.which("nvidia-smi"):
        # the rows it printed count whatever its status: with a GPU fallen off the bus it lists the others, says which
        # one it lost on stderr and exits 15
        smi_rc, out, err = module.run_command(SMI_QUERY)
        smi = parse_smi(out)
        smi_error = next((line.strip() for line in err.splitlines() if line.strip()), "")[:300]
    boot = secure_boot(root)
    enrolled = False
    key = os.path.join(root, "var/lib/dkms/mok.pub")
    if boot == "enabled" and os.path.exists(key) and shutil.which("mokutil"):
        rc, out, err = module.run_command(["mokutil", "--test-key", key])
        enrolled = "already enrolled" in out + err
    state = {
        "secure_boot": boot,
        "mok_enrolled": enrolled,
        "pci_gpus": gpus,
        "pci_gpu_devices": pci_gpu_devices(root),
        "nouveau_loaded": nouveau_loaded(root),
        "loaded_version": loaded,
        "installed_package": driver_pkg,
        "installed_version": upstream(driver_version) if driver_version else "",
        "fabricmanager_package": fm_pkg,
        "fabricmanager_version": upstream(fm_version) if fm_version else "",
        "smi": smi,
        "smi_rc": smi_rc,
        "smi_error": smi_error,
        "action": decide(gpus, driver_version, loaded, nouveau_loaded(root)),
    }
    module.exit_json(changed=False, **state)


if __name__ == "__main__":
    main()
