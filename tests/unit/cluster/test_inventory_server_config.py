"""Inventory values that become server configuration (/etc/exports, fstab, slurm.conf and gres.conf, the
Prometheus, Alertmanager and Grafana configs, systemd units) are typed for that target before any host is contacted;
Slurm names are Slurm names; a template in a value megaprov reads itself is one line naming the variable, never a
traceback. Real inventories on disk, read by the real loader; the command line run as a subprocess."""

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from megaprov.cluster import inventory as inv
from megaprov.errors import ExitCode, InventoryError

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "ansible_collections/megaprov/cluster/roles"
DEFAULTS = ROOT / "ansible_collections/megaprov/cluster/roles/megaprov/defaults/main.yml"
JOB = ROOT / "examples" / "jobs" / "lab-tiny.yml"
HOSTS = "[head]\nh1 ansible_host=10.0.0.1\n[gpu_nodes]\nn1 ansible_host=10.0.0.2\n"


def write(directory: Path, all_vars: dict[str, Any]) -> Path:
    path = directory / "inventory.ini"
    path.write_text(HOSTS)
    (directory / "group_vars").mkdir(exist_ok=True)
    (directory / "group_vars" / "all.yml").write_text(yaml.safe_dump(all_vars))
    return path


def refused(directory: Path, all_vars: dict[str, Any]) -> InventoryError:
    with pytest.raises(InventoryError) as err:
        inv.load(write(directory, all_vars), ROLES, DEFAULTS)
    return err.value


def cli(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin", "HOME": str(cwd), "MEGAPROV_STATE": str(cwd / "state")}
    return subprocess.run([sys.executable, "-m", "megaprov", *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("megaprov: error: ") and "internal error" not in stderr and "Traceback" not in stderr, stderr
    return lines[0]


# ---- 1. every value that reaches a server's configuration, typed for that file


PARTITION = {"name": "gpu", "default": True, "max_time": "INFINITE"}
SERVER_CONFIG_BAD = [
    # /etc/exports and ganesha.conf: the reviewer's world-writable export without root squash
    ("megaprov_shared_dir", "/shared *(rw,no_root_squash,insecure)"),
    ("megaprov_shared_dir", "/shared#x"),
    ("megaprov_scratch_dir", "/var/tmp x"),
    ("nfs_server_export_dir", "/export 10.0.0.0/8(rw,no_root_squash)"),
    ("nfs_server_export_dir", "~/srv"),  # a path to its argument spec, but not absolute
    ("nfs_server_kernel_options", "rw) *(rw,no_root_squash"),
    ("nfs_server_kernel_options", "rw sync"),
    ("nfs_server_client_addresses", ["10.0.0.1 *"]),
    ("nfs_server_client_addresses", ["node1"]),
    # fstab (the nfs_client role's mount)
    ("nfs_client_server", "srv:/x"),
    ("nfs_client_export", "/e 0 0"),
    ("nfs_client_mount_point", "/shared x"),
    ("nfs_client_mount_options", "hard,x y"),
    # slurm.conf, gres.conf, slurmdbd.conf
    ("slurm_cluster_name", "my cluster x=y"),
    ("slurm_cluster_name", "Prod"),  # Slurm lower-cases ClusterName: the accounting database would know another name
    ("slurm_cluster_name", "a" * 41),
    ("slurm_partitions", [{"name": "gpu Default=YES MaxTime=1"}]),
    ("slurm_partitions", [{"name": "gpu.big"}]),
    ("slurm_partitions", [{"name": "gpu", "max_time": "1 State=DOWN"}]),
    ("slurm_partitions", [{"name": "gpu", "nodes": ["n1 Weight=1"]}]),
    ("slurm_partitions", [{"name": "gpu", "nodes": "n1"}]),
    ("slurm_partitions", [{"name": "gpu", "default": "maybe"}]),
    ("slurm_partitions", [{"name": "a", "default": True}, {"name": "b", "default": True}]),
    ("slurm_partitions", [{"name": "gpu"}, {"name": "gpu"}]),
    ("slurm_partitions", [{"name": "gpu", "priority": 5}]),
    ("slurm_partitions", []),
    ("slurm_partitions", ["gpu"]),
    ("slurm_gpu_type", "h100 Count=8"),
    ("slurm_node_addr", "10.0.0.1 Weight=1"),
    ("slurm_controller_host", "h1 x"),
    ("slurm_compute_hosts", ["n1 x"]),
    ("slurm_plugin_dir", "/usr/lib x"),
    ("slurm_slurmctld_port", 70000),
    ("slurm_kill_wait", -1),
    ("slurm_slurmd_timeout", 5),  # below 10 s a busy node would be set DOWN
    # prometheus.yml, alertmanager.yml, their /etc/default files (ARGS="...")
    ("prometheus_listen_address", "0.0.0.0 --web.enable-admin-api"),
    ("prometheus_listen_address", "head.example.org"),
    ("prometheus_storage_path", '/var/lib/p" --web.enable-lifecycle "'),
    ("prometheus_alertmanager_storage_path", "/a b"),
    ("prometheus_retention_time", "30d --web.enable-admin-api"),
    ("prometheus_retention_size", "1GB x"),
    ("prometheus_scrape_interval", "15s\u00a0x"),
    ("prometheus_evaluation_interval", "15"),
    ("prometheus_alertmanager_group_wait", "10 s"),
    ("prometheus_alertmanager_repeat_interval", "4h x"),
    ("prometheus_node_hosts", ["n1 x"]),
    ("prometheus_dcgm_hosts", "n1"),
    ("prometheus_alertmanager_receivers", [{"name": "a b", "webhook_url": "http://x/"}]),
    ("prometheus_alertmanager_receivers", [{"name": "ops", "webhook_url": "javascript:alert(1)"}]),
    ("prometheus_alertmanager_receivers", [{"name": "ops", "email_to": "ops@example.org"}]),
    ("prometheus_alertmanager_receivers", [{"name": "ops"}]),
    ("prometheus_alertmanager_route_receiver", "a b"),
    ("prometheus_port", 0),
    ("prometheus_alertmanager_port", 65536),
    # Grafana's unit drop-in and its data source
    ("grafana_listen_address", "0.0.0.0 GF_SECURITY_ADMIN_PASSWORD=x"),
    ("grafana_port", 99999),
    ("grafana_provisioning_dir", "/etc/grafana %n"),
    ("grafana_prometheus_url", 'http://x" injected: "y'),
    ("grafana_prometheus_scrape_interval", "15s x"),
    # systemd units and drop-ins
    ("central_logs_dir", "/var/log/j --output=/etc"),
    ("central_logs_max_use", "8G --x"),
    ("central_logs_retention", "30d x"),
    ("central_logs_listen_address", "x"),
    ("central_logs_host", "h1/x"),
    ("central_logs_port", -5),
    ("dcgm_exporter_listen_address", "1.2.3.4 -x"),
    ("dcgm_exporter_job_mapping_dir", "/run/x y"),
    ("node_exporter_listen_address", "::1 x"),
    ("node_exporter_textfile_dir", "/var/lib x"),
    ("node_exporter_nvidia_smi", "/usr/bin/nvidia-smi;x"),
    ("node_exporter_extra_args", ["--a=b c"]),
    ("node_exporter_extra_args", ['--a="b"']),
    ("node_exporter_gpu_kernel_log_command", 'dmesg" --x "y'),
    ("node_exporter_dcgm_job_mapping_dir", "/tmp/x"),
    ("infiniband_ipoib_interface", "ib0 up; x"),
    ("infiniband_ipoib_address", "10.0.0.1/16 dev x"),
    ("infiniband_nccl_env", {"NCCL_IB_HCA": "mlx5_0 x"}),
    ("infiniband_nccl_env", {"NCCL X": "1"}),
    ("infiniband_nccl_hcas", ["mlx5_0 x"]),
    ("package_cache_address", "a b"),
    ("package_cache_apt_dir", "/var/cache x"),
    ("package_cache_web_root", "/srv %n"),
    ("package_cache_apt_ca_file", "/a b"),
    ("package_cache_apt_upstream_proxy", "http://x y"),
    ("common_memlock", "64 x"),
]


@pytest.mark.parametrize(("name", "value"), SERVER_CONFIG_BAD, ids=[f"{n}={v!r}"[:60] for n, v in SERVER_CONFIG_BAD])
def test_a_value_that_would_change_a_servers_configuration_is_refused(tmp_path: Path, name: str, value: Any) -> None:
    err = refused(tmp_path, {name: value})
    assert name in err.message and "\n" not in err.one_line(), err.one_line()
    assert err.hint, err.one_line()


SERVER_CONFIG_GOOD = {
    "megaprov_shared_dir": "/srv/shared-1.x",
    "megaprov_scratch_dir": "/var/tmp",
    "nfs_server_export_dir": "/srv/export",
    "nfs_server_kernel_options": "rw,sync,no_subtree_check,fsid=0,sec=sys:krb5",
    "nfs_server_client_addresses": ["10.0.0.1", "10.0.0.2"],
    "nfs_client_server": "10.0.0.1",
    "nfs_client_export": "/srv/export",
    "nfs_client_mount_point": "/srv/shared-1.x",
    "nfs_client_mount_options": "hard,_netdev,noatime,vers=4.2,nconnect=8,x-systemd.mount-timeout=30",
    "slurm_cluster_name": "prod_a-1",
    "slurm_partitions": [
        {"name": "gpu", "default": True, "max_time": "INFINITE"},
        {"name": "Debug_1", "nodes": ["n1"], "max_time": "2-12:00:00"},
        {"name": "short", "max_time": 30, "default": False},
    ],
    "slurm_gpu_type": "h100_sxm",
    "slurm_node_addr": "10.0.0.2",
    "slurm_controller_host": "h1",
    "slurm_compute_hosts": ["n1"],
    "slurm_plugin_dir": "/usr/lib/x86_64-linux-gnu/slurm-wlm",
    "slurm_slurmctld_port": 6817,
    "slurm_kill_wait": "120",
    "prometheus_listen_address": "10.0.0.1",
    "prometheus_storage_path": "/var/lib/prometheus/metrics2",
    "prometheus_retention_time": "1y30d",
    "prometheus_retention_size": "",
    "prometheus_scrape_interval": "500ms",
    "prometheus_alertmanager_group_wait": "10s",
    "prometheus_node_hosts": ["h1", "n1"],
    "prometheus_alertmanager_receivers": [
        {"name": "ops", "webhook_url": "https://hooks.example.org/x?a=1"},
        {"name": "mail", "email_to": "ops@example.org", "email_smarthost": "smtp.example.org:25"},
    ],
    "prometheus_alertmanager_route_receiver": "ops",
    "prometheus_port": 9090,
    "grafana_listen_address": "fd00::1",
    "grafana_provisioning_dir": "/etc/grafana/provisioning",
    "grafana_prometheus_url": "http://10.0.0.1:9090",
    "grafana_prometheus_scrape_interval": "15s",
    "central_logs_dir": "/var/log/journal/remote",
    "central_logs_max_use": "8G",
    "central_logs_retention": "30d",
    "central_logs_host": "h1",
    "dcgm_exporter_job_mapping_dir": "/run/megaprov/dcgm-job-mapping",
    "node_exporter_extra_args": ["--collector.systemd", "--collector.filesystem.mount-points-exclude=^/(dev|proc)($|/)"],
    "node_exporter_gpu_kernel_log_command": "journalctl -k -o short-monotonic",
    "node_exporter_dcgm_job_mapping_dir": "",
    "infiniband_ipoib_interface": "ib0",
    "infiniband_ipoib_address": "10.1.0.2/16",
    "infiniband_nccl_env": {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_SOCKET_IFNAME": "^docker,lo", "NCCL_IB_GID_INDEX": 3},
    "infiniband_nccl_hcas": ["mlx5_0:1"],
    "package_cache_apt_dir": "/var/cache/apt-cacher-ng",
    "package_cache_apt_upstream_proxy": "http://proxy.example.org:3128/",
    "common_memlock": "unlimited",
}


def test_what_the_roles_take_passes(tmp_path: Path) -> None:
    found = inv.load(write(tmp_path, SERVER_CONFIG_GOOD), ROLES, DEFAULTS)
    assert found.host_var("n1", "slurm_cluster_name") == "prod_a-1"


def test_the_reviewers_export_exits_2_in_one_line(tmp_path: Path) -> None:
    write(tmp_path, {"megaprov_shared_dir": "/shared *(rw,no_root_squash,insecure)"})
    done = cli(tmp_path, "inventory", "check", "-i", "inventory.ini")
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert "megaprov_shared_dir" in one_line(done.stderr)


# ---- 2. Slurm names are Slurm names, refused by megaprov (exit 2), not by the role on the node (exit 4)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("slurm_cluster_name", "prod ClusterName=x"),
        ("slurm_partitions", [{"name": "gpu Nodes=ALL Default=YES"}]),
        ("slurm_partitions", [{"name": "gpu", "max_time": "INFINITE State=DOWN"}]),
        ("slurm_gpu_type", "h100 Count=64"),
    ],
)
def test_a_slurm_name_with_spaces_and_keys_exits_2(tmp_path: Path, name: str, value: Any) -> None:
    write(tmp_path, {"megaprov_scheduler": "slurm", name: value})
    done = cli(tmp_path, "inventory", "check", "-i", "inventory.ini")
    assert done.returncode == ExitCode.USAGE, done.stdout + done.stderr
    assert name in one_line(done.stderr)


# ---- 3. a template in a value megaprov reads before Ansible templates it


TEMPLATED = [
    ("megaprov_gpus_per_node", "{{ 4 * 2 }}"),
    ("megaprov_gpu_expected", "{{ true }}"),
    ("megaprov_observe", "{% if true %}true{% endif %}"),
    ("megaprov_scheduler", "{{ site_scheduler }}"),
    ("megaprov_offline", "{{ offline }}"),
    ("megaprov_cluster_user", "{{ user }}"),
    ("megaprov_scratch_dir", "{{ scratch }}"),
    ("megaprov_gpu_model", "{{ model }}"),
    ("megaprov_controller_shared_dir", "{# where #}/mnt/shared"),
    ("prometheus_port", "{{ 9000 + 90 }}"),
    ("central_logs_host", "{{ groups.head[0] }}"),
    ("slurm_cluster_name", "{{ cluster }}"),
    ("slurm_partitions", [{"name": "{{ partition }}"}]),
    ("nfs_server_client_addresses", ["{{ address }}"]),
    ("infiniband_nccl_env", {"NCCL_IB_HCA": "{{ hcas }}"}),
    ("grafana_port", "{{ port }}"),
]


@pytest.mark.parametrize(("name", "value"), TEMPLATED, ids=[n for n, _ in TEMPLATED])
def test_a_template_megaprov_would_read_is_refused_naming_the_variable(tmp_path: Path, name: str, value: Any) -> None:
    err = refused(tmp_path, {name: value})
    assert name in err.message and "megaprov reads this value before Ansible templates it" in err.message, err.one_line()
    assert err.hint == "give a literal value", err.one_line()
    assert str(tmp_path / "group_vars" / "all.yml") in err.message  # where it is: the file, so the group


@pytest.mark.parametrize(
    "argv",
    [
        ["plan", "-f", str(JOB), "-i", "inventory.ini"],
        ["train", "-f", str(JOB), "-i", "inventory.ini", "--dry-run"],
        ["job", "check", "-f", str(JOB), "-i", "inventory.ini"],
        ["doctor", "-i", "inventory.ini"],
        ["inventory", "check", "-i", "inventory.ini"],
    ],
    ids=["plan", "train", "job check", "doctor", "inventory check"],
)
def test_the_reviewers_template_exits_2_not_1(tmp_path: Path, argv: list[str]) -> None:
    write(tmp_path, {"megaprov_gpus_per_node": "{{ 4 * 2 }}", "megaprov_gpu_model": "H100-SXM"})
    done = cli(tmp_path, *argv)
    assert done.returncode == ExitCode.USAGE, done.stderr
    line = one_line(done.stderr)
    assert "megaprov_gpus_per_node" in line and "give a literal value" in line, line


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ("n1 megaprov_gpus_per_node='{{ 4 * 2 }}'", r"host n1\): megaprov_gpus_per_node='\{\{ 4 \* 2 \}\}' is a template"),
        # literal_eval reads '{{ 8 }}' as a set of sets: a TypeError (Ansible's INI reader fails on it too)
        ("n1 megaprov_gpus_per_node='{{ 8 }}'", r"inventory.ini:4: megaprov_gpus_per_node='\{\{ 8 \}\}': Ansible's INI reader cannot read"),
        ("n1\n[all:vars]\nslurm_kill_wait={{1}: 2}", r"inventory.ini:6: slurm_kill_wait='\{\{1\}: 2\}': Ansible's INI reader cannot read"),
    ],
)
def test_a_template_in_an_ini_line_names_the_host_or_line(tmp_path: Path, line: str, needle: str) -> None:
    path = tmp_path / "inventory.ini"
    path.write_text(f"[head]\nh1\n[gpu_nodes]\n{line}\n")
    with pytest.raises(InventoryError, match=needle):
        inv.load(path, ROLES, DEFAULTS)


# Every variable megaprov types, with a template of every shape in it: a clean InventoryError or a load, never another
# exception; and where it loads, the commands that read the inventory end in a documented code, never 1.
TYPED = sorted(
    {*inv.TYPED_VARS, *getattr(inv, "SERVER_CONFIG", {}), *getattr(inv, "READ_BY_MEGAPROV", ())}
    | {n for n, s in inv.role_specs(ROLES).items() if s.get("role") == "megaprov"}
)
jinja = st.sampled_from(["{{ 4 * 2 }}", "{% if x %}1{% endif %}", "{# c #}", "/shared/{{ x }}", "{{x}}", "8{{ '' }}"])
shaped = st.one_of(jinja, st.lists(jinja, min_size=1, max_size=2), st.dictionaries(st.sampled_from(["name", "NCCL_X"]), jinja, min_size=1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(TYPED), value=shaped)
def test_templates_in_typed_variables_are_refused_or_left_whole(name: str, value: Any) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = write(Path(directory), {name: value})
        try:
            inv.load(path, ROLES, DEFAULTS)
        except InventoryError as exc:
            assert len(exc.one_line().splitlines()) == 1 and name in exc.message
            return
    raise AssertionError(f"{name}={json.dumps(value)} was taken: megaprov types it, so a template cannot be checked")
