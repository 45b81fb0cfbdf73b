"""The bootstrap report's line for the driver state the nvidia_driver role read (megaprov.cluster.provision.gpu_summary)."""

from megaprov.cluster.provision import gpu_summary


def test_bootstrap_report_line_per_driver_state():
    assert gpu_summary({"action": "no_gpu", "installed_version": ""}) == "skipped: no GPU on the PCI bus"
    smi = [{"index": i} for i in range(8)]
    line = gpu_summary({"action": "none", "loaded_version": "550.127.08", "smi": smi, "fabricmanager_version": "550.127.08"})
    assert line == "driver 550.127.08 loaded, 8 GPU(s) in nvidia-smi, Fabric Manager 550.127.08"
    assert gpu_summary({"action": "reboot", "installed_version": "550.127.08", "loaded_version": "535.183.01"}).endswith("reboot needed")
