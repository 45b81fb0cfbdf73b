"""nvidia_driver's task order and the host changes its tasks make, read from the role's task files as Ansible runs them
(main.yml with its imports and includes expanded in order)."""

from pathlib import Path

import yaml

ROLE = Path(__file__).resolve().parents[3] / "ansible_collections/megaprov/cluster/roles" / "nvidia_driver"


def flat(name="main.yml"):
    """Every task of the role in run order, following import_tasks/include_tasks."""
    out = []
    for task in yaml.safe_load((ROLE / "tasks" / name).read_text()):
        sub = task.get("ansible.builtin.import_tasks") or task.get("ansible.builtin.include_tasks")
        sub = sub["file"] if isinstance(sub, dict) else sub  # include_tasks with apply: {file: ..., apply: {tags: ...}}
        out.extend(flat(sub) if sub else [task])
    return out


def index(tasks, predicate, what):
    hits = [i for i, task in enumerate(tasks) if predicate(task)]
    assert hits, f"no task {what}"
    return hits


def argv(task):
    return (task.get("ansible.builtin.command") or {}).get("argv") or []


def service(task, name):
    return (task.get("ansible.builtin.systemd_service") or {}).get("name") == name


def test_fabric_manager_and_persistenced_start_only_after_the_module_is_loaded_or_the_node_rebooted():
    tasks = flat()
    loads = index(tasks, lambda t: argv(t)[:2] == ["modprobe", "nvidia"], "running modprobe nvidia")
    reboots = index(tasks, lambda t: "ansible.builtin.reboot" in t, "rebooting")
    refuse = index(tasks, lambda t: "reboot" in str(t.get("when", "")) and "ansible.builtin.fail" in t, "refusing a mismatched driver")
    last_load_step = max(loads + reboots + refuse)
    for unit in ("nvidia-fabricmanager", "nvidia-persistenced"):
        starts = index(tasks, lambda t, unit=unit: service(t, unit), f"starting {unit}")
        assert min(starts) > last_load_step, f"{unit} is started before the driver is loaded or the node rebooted into it"


def test_kernel_headers_go_in_before_the_dkms_packages():
    tasks = flat()
    headers = index(tasks, lambda t: (t.get("megaprov.cluster.apt") or {}).get("name") == "{{ nvidia_driver_kernel_headers }}", "installing headers")
    driver = index(tasks, lambda t: (t.get("megaprov.cluster.apt") or {}).get("name") == "{{ __nvidia_driver_packages }}", "installing the driver")
    assert max(headers) < min(driver)
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert defaults["nvidia_driver_kernel_headers"] == "linux-headers-{{ ansible_kernel | default('unknown-kernel') }}"
    # A skipped DKMS build still installs "successfully": the role checks the module exists for the running kernel.
    built = index(tasks, lambda t: "nvidia.ko" in str((t.get("ansible.builtin.find") or {}).get("patterns")), "finding the built module")
    assert min(built) > max(driver)


def test_nouveau_is_blacklisted_and_the_initramfs_rebuilt_before_the_driver_goes_in():
    tasks = flat()
    blacklist = index(tasks, lambda t: "blacklist nouveau" in str((t.get("ansible.builtin.copy") or {}).get("content")), "blacklisting nouveau")
    copy = tasks[blacklist[0]]["ansible.builtin.copy"]
    assert copy["dest"].startswith("{{ __nvidia_driver_nouveau_conf") or copy["dest"].startswith("/etc/modprobe.d/")
    initramfs = index(tasks, lambda t: argv(t)[:1] == ["update-initramfs"], "rebuilding the initramfs")
    assert tasks[blacklist[0]]["register"] in str(tasks[initramfs[0]]["when"]), "the rebuild must follow a changed blacklist"
    driver = index(tasks, lambda t: (t.get("megaprov.cluster.apt") or {}).get("name") == "{{ __nvidia_driver_packages }}", "installing the driver")
    assert max(initramfs) < min(driver)
    variables = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    assert variables["__nvidia_driver_nouveau_conf"].startswith("/etc/modprobe.d/") and variables["__nvidia_driver_nouveau_conf"].endswith(".conf")


def test_persistence_mode_is_configured_explicitly_over_the_packaged_unit():
    tasks = flat()
    dropins = index(
        tasks,
        lambda t: "nvidia-persistenced" in str(t.get("ansible.builtin.copy", {}).get("content", "")) and "ExecStart" in str(t),
        "writing a drop-in",
    )
    content = tasks[dropins[0]]["ansible.builtin.copy"]["content"]
    lines = content.splitlines()
    assert "ExecStart=" in lines, "the drop-in must reset the packaged ExecStart"
    start = [line for line in lines if line.startswith("ExecStart=/")]
    assert len(start) == 1 and "--persistence-mode" in start[0] and "--no-persistence-mode" not in start[0]
    dest = tasks[dropins[0]]["ansible.builtin.copy"]["dest"]
    variables = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    assert variables[dest.strip("{} ")].startswith("/etc/systemd/system/nvidia-persistenced.service.d/")


def test_debian_distro_method_adds_contrib_and_non_free():
    tasks = flat()
    sources = index(tasks, lambda t: "Components:" in str((t.get("ansible.builtin.copy") or {}).get("content")), "adding Debian components")
    task = tasks[sources[0]]
    assert "distro" in task["when"] and "ubuntu" in task["when"]
    variables = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    assert {"contrib", "non-free", "non-free-firmware"} <= set(variables["__nvidia_driver_debian_components"])
