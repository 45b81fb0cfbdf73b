"""Read and validate an Ansible INI inventory before any host is contacted.

Parsing is strict on purpose: every problem becomes an :class:`InventoryError` that names the
file, the line or variable, and the fix. Variable types come from the roles'
``meta/argument_specs.yml`` (one source of truth with Ansible; the cluster-wide ``megaprov_*`` settings are the
options of the collection's ``megaprov`` role) and from ``ANSIBLE_VARS``.
"""

from __future__ import annotations

import ast
import difflib
import functools
import ipaddress
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from megaprov import values
from megaprov.cluster import compat
from megaprov.errors import InventoryError, UsageError

REQUIRED_GROUPS = ("head", "gpu_nodes")
_HOSTNAME_RE = values.HOST_NAME
_GROUP_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RANGE_RE = re.compile(r"\[([0-9]+|[a-z]):([0-9]+|[a-z])\]")
_VAR_RE = values.VARIABLE
_SECTION_RE = re.compile(r"^\[([^\]]*)\]\s*(?:#.*)?$")  # a trailing comment is allowed, as in Ansible
_COMMENT_RE = re.compile(r"\s+#.*$")

Checker = Callable[[Any, str], Any]  # (value, field) -> the value, or values.BadValue naming the field and the fix

# ---- values typed for the file they become on a server: /etc/exports, fstab, slurm.conf, a unit, ...
# Each mirrors (or is stricter than) the assert of the role that writes the file, so that a value the role would
# refuse on the node (exit 4, after earlier stages changed it) is refused here, before any host is contacted (exit 2).

_CONFIG_PATH = re.compile(r"[A-Za-z0-9._/-]")


def config_path(value: Any, field: str) -> str:
    """An absolute path written into a server's configuration: letters, digits and ``._/-`` only. Whitespace separates
    fields in exports(5) and fstab(5), ``#`` starts a comment there, ``()*`` are exports' client syntax, ``%``, ``$``,
    ``\\`` and quotes mean something in a systemd unit: none of them is a path character here."""
    path = values.absolute_path(value, field)
    bad = next((c for c in str(value) if not _CONFIG_PATH.fullmatch(c)), None)
    if bad is not None or len(str(value)) > 200 or ".." in str(value):
        why = f"has the character {bad!r}" if bad is not None else "is longer than 200 characters" if len(str(value)) > 200 else "contains '..'"
        raise values.BadValue(
            field, value, f"{why}, which exports, fstab, systemd units or a config file would read", "use letters, digits and ._/- (e.g. /shared)"
        )
    return path


def _directory(value: Any, field: str) -> str:
    path = config_path(value, field)
    if path == "/":
        raise values.BadValue(field, value, "is the root directory", "give a directory of its own (e.g. /var/lib/NAME)")
    return path


def _optional(check: Checker) -> Checker:
    def optional(value: Any, field: str) -> Any:
        return value if value in ("", None) else check(value, field)

    return optional


def _word(pattern: str, what: str, fix: str, max_len: int = 500) -> Checker:
    """A value of a target's own syntax (a Slurm name, a Prometheus duration, mount options), matched in full; a
    number from an INI line is read as its digits."""
    compiled = re.compile(pattern)

    def word(value: Any, field: str) -> str:
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        if not isinstance(text, str) or len(text) > max_len or not compiled.fullmatch(text):
            raise values.BadValue(field, value, f"is not {what}", fix)
        return text

    return word


def _list_of(check: Checker, what: str) -> Checker:
    def items(value: Any, field: str) -> list[Any]:
        if not isinstance(value, list):
            raise values.BadValue(field, value, f"is not a list of {what}", f"write a YAML list: [{what}, ...]")
        return [check(item, f"{field}[{index}]") for index, item in enumerate(value)]

    return items


def ip_address(value: Any, field: str) -> str:
    """An address a service listens on: an IPv4 or IPv6 address (no name, no zone), as the roles assert."""
    if isinstance(value, str) and "%" not in value:
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            pass
    raise values.BadValue(field, value, "is not an IP address", "give the address the service listens on, e.g. 10.0.0.1")


def _number(low: int, high: int) -> Checker:
    def number(value: Any, field: str) -> int:
        text = value.strip() if isinstance(value, str) else value
        whole = int(text) if isinstance(text, str) and re.fullmatch(r"-?\d{1,12}", text) else text
        return values.bounded_int(whole, field, low, high)

    return number


_port = _number(1, 65535)
_seconds = _number(0, 10**9)
_PROMETHEUS_DURATION = _word(r"([0-9]{1,5}(ms|s|m|h|d|w|y))+", "a Prometheus duration", "write it as 15s, 1m, 30d or 1y30d (no spaces)", 64)
_NFS_OPTIONS = r"[a-z_][a-z0-9_.-]*(=[A-Za-z0-9_.:/@+-]+)?(,[a-z_][a-z0-9_.-]*(=[A-Za-z0-9_.:/@+-]+)?)*"
SLURM_CLUSTER_NAME = r"[a-z][a-z0-9_-]{0,39}"  # the slurm role's assert; Slurm itself lower-cases ClusterName
SLURM_PARTITION_NAME = r"[A-Za-z0-9_-]{1,40}"
SLURM_TIME = r"INFINITE|UNLIMITED|([0-9]{1,5}-)?[0-9]{1,2}(:[0-9]{2}){0,2}"
_partition_name = _word(SLURM_PARTITION_NAME, "a Slurm partition name", "use letters, digits, _ and - (at most 40)")
_slurm_time = _word(SLURM_TIME, "a Slurm time", "write INFINITE, minutes (at most 99), HH:MM:SS or DAYS-HH[:MM[:SS]]")
PARTITION_KEYS = ("name", "default", "max_time", "nodes")


def slurm_partitions(value: Any, field: str) -> list[Any]:
    """``slurm_partitions`` as slurm.conf's PartitionName lines take it: names Slurm reads as one word, at most one
    default, a Slurm time, inventory host names (each line is ``key=value`` words: a space would start a new key)."""
    if not isinstance(value, list) or not value:
        raise values.BadValue(field, value, "is not a list of partitions", "write e.g. [{name: gpu, default: true, max_time: INFINITE}]")
    names: set[str] = set()
    defaults = 0
    for index, partition in enumerate(value):
        where = f"{field}[{index}]"
        if not isinstance(partition, dict) or "name" not in partition:
            raise values.BadValue(where, partition, "is not a partition", "write it as {name: gpu, default: true, max_time: INFINITE}")
        unknown = sorted(str(key) for key in partition if key not in PARTITION_KEYS)
        if unknown:
            raise values.BadValue(
                f"{where}.{unknown[0]}", partition[unknown[0]], "is not a partition setting", "a partition has name, default, max_time and nodes"
            )
        name = _partition_name(partition["name"], f"{where}.name")
        if name in names:
            raise values.BadValue(f"{where}.name", name, "names a partition twice", "give each partition its own name")
        names.add(name)
        default = partition.get("default", False)
        if not isinstance(default, bool) and str(default).lower() not in _TRUE | _FALSE:
            raise values.BadValue(f"{where}.default", default, "must be true or false", "mark one partition default: true")
        defaults += as_bool(default)
        if "max_time" in partition:
            _slurm_time(partition["max_time"], f"{where}.max_time")
        if "nodes" in partition:
            _list_of(values.host_name, "host names")(partition["nodes"], f"{where}.nodes")
    if defaults > 1:
        raise values.BadValue(field, [p.get("name") for p in value], f"marks {defaults} partitions default", "mark at most one default: true")
    return value


_RECEIVER_NAME = _word(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", "a receiver name", "use letters, digits and _.- (at most 64)")
_RECEIVER_CHECKS: dict[str, Checker] = {
    "name": _RECEIVER_NAME,
    "webhook_url": _word(
        r"https?://[A-Za-z0-9.:\[\]_-]{1,253}(/[A-Za-z0-9._~%/?=&+-]{0,400})?", "an http(s) URL", "write http(s)://HOST[:PORT]/PATH"
    ),
    "email_to": _word(r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,253}", "an e-mail address", "write one address, e.g. ops@example.org"),
    "email_from": _word(r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]{1,253}", "an e-mail address", "write one address, e.g. alerts@example.org"),
    "email_smarthost": _word(r"[A-Za-z0-9.-]{1,253}:[0-9]{1,5}", "a mail relay", "write HOST:PORT, e.g. smtp.example.org:25"),
}


def alert_receivers(value: Any, field: str) -> list[Any]:
    """Alertmanager's receivers as the prometheus role writes them: a named webhook or e-mail receiver each."""
    if not isinstance(value, list):
        raise values.BadValue(field, value, "is not a list of receivers", "write e.g. [{name: ops, webhook_url: https://...}]")
    names: set[str] = set()
    for index, receiver in enumerate(value):
        where = f"{field}[{index}]"
        if not isinstance(receiver, dict) or "name" not in receiver:
            raise values.BadValue(
                where, receiver, "is not a receiver", "write {name: ops, webhook_url: URL} or {name: ops, email_to: A, email_smarthost: H:P}"
            )
        for key, item in receiver.items():
            if key not in _RECEIVER_CHECKS:
                raise values.BadValue(f"{where}.{key}", item, "is not a receiver setting", "a receiver has " + ", ".join(_RECEIVER_CHECKS))
            _RECEIVER_CHECKS[key](item, f"{where}.{key}")
        if "webhook_url" not in receiver and not ("email_to" in receiver and "email_smarthost" in receiver):
            raise values.BadValue(where, receiver, "has no webhook_url and no email_to with email_smarthost", "give the receiver one of them")
        if receiver["name"] in names:
            raise values.BadValue(f"{where}.name", receiver["name"], "names a receiver twice", "give each receiver its own name")
        names.add(receiver["name"])
    return value


_NCCL_VALUE = _word(
    r"[A-Za-z0-9_.,:=^+/@%-]{0,256}", "a plain NCCL setting", "use letters, digits and _.,:=^+/@%- (nccl.env is sourced by a shell, unquoted)"
)


def nccl_env(value: Any, field: str) -> dict[str, Any]:
    """``infiniband_nccl_env``: NAME=VALUE lines of /etc/megaprov/nccl.env, which every launch sources with a shell."""
    if not isinstance(value, dict):
        raise values.BadValue(field, value, "is not a mapping of NCCL variables", "write e.g. {NCCL_IB_HCA: mlx5_0}")
    for key, item in value.items():
        values.env_name(key, f"{field} key")
        if item is not None and not isinstance(item, (str, int, float, bool)):
            raise values.BadValue(f"{field}.{key}", item, "is not a plain value", "give a string or a number")
        _NCCL_VALUE("" if item is None else str(item), f"{field}.{key}")
    return value


def _ipoib_address(value: Any, field: str) -> str:
    """The address the megaprov-ipoib unit gives the IPoIB interface: ``ip addr replace ADDRESS/PREFIX``."""
    if isinstance(value, str) and re.fullmatch(r"\d{1,3}(\.\d{1,3}){3}/\d{1,2}", value):
        try:
            ipaddress.IPv4Interface(value)
            return value
        except ValueError:
            pass
    raise values.BadValue(field, value, "is not an IPv4 address with its prefix", "write it as 10.1.0.5/16")


# Variable -> its checker, for every inventory variable that reaches a server's configuration (grep the roles'
# templates/ and the tasks that write exports, fstab and units). Each is typed before any host is contacted.
SERVER_CONFIG: dict[str, Checker] = {
    # /etc/exports, ganesha.conf
    "nfs_server_export_dir": config_path,
    "nfs_server_kernel_options": _word(_NFS_OPTIONS, "a list of export options", "write them as rw,sync,no_subtree_check (no spaces)"),
    "nfs_server_client_addresses": _list_of(ip_address, "IP addresses"),
    # fstab (the nfs_client role's mount)
    "nfs_client_server": _optional(values.host_address),
    "nfs_client_export": _directory,
    "nfs_client_mount_point": _directory,
    "nfs_client_mount_options": _word(_NFS_OPTIONS, "a list of mount options", "write them as hard,_netdev,vers=4.2 (no spaces)"),
    # slurm.conf, gres.conf, slurmdbd.conf, cgroup.conf
    "slurm_cluster_name": _word(
        SLURM_CLUSTER_NAME, "a Slurm cluster name", "use lower-case letters, digits, _ and - (at most 40, starting with a letter)"
    ),
    "slurm_partitions": slurm_partitions,
    "slurm_gpu_type": _word(r"([a-z0-9_]{1,32})?", "a Slurm GRES type", "use lower-case letters, digits and _ (at most 32), e.g. h100"),
    "slurm_controller_host": values.host_name,
    "slurm_compute_hosts": _list_of(values.host_name, "host names"),
    "slurm_node_addr": values.host_address,
    "slurm_plugin_dir": _directory,
    "slurm_repo": _word(
        r"(deb (\[[^\]]*\] )?[a-z]+://\S+ \S+( [A-Za-z0-9._-]+)+)?", "an apt source line", "write deb [OPTIONS] URL SUITE COMPONENT, or ''"
    ),
    "slurm_slurmctld_port": _port,
    "slurm_slurmd_port": _port,
    "slurm_health_check_interval": _seconds,
    "slurm_kill_wait": _number(30, 10**6),
    "slurm_slurmd_timeout": _number(10, 10**6),
    "slurm_mem_reserve_mb": _number(0, 10**9),
    # prometheus.yml, alertmanager.yml and their units' ARGS
    "prometheus_listen_address": ip_address,
    "prometheus_port": _port,
    "prometheus_node_exporter_port": _port,
    "prometheus_dcgm_port": _port,
    "prometheus_alertmanager_port": _port,
    "prometheus_alert_recorder_port": _port,
    "prometheus_storage_path": _directory,
    "prometheus_alertmanager_storage_path": _directory,
    "prometheus_retention_time": _PROMETHEUS_DURATION,
    "prometheus_retention_size": _word(r"([0-9]{1,6}(B|KB|MB|GB|TB|PB|EB))?", "a Prometheus size", "write it as 500GB, or '' for no limit"),
    "prometheus_scrape_interval": _PROMETHEUS_DURATION,
    "prometheus_evaluation_interval": _PROMETHEUS_DURATION,
    "prometheus_alertmanager_group_wait": _PROMETHEUS_DURATION,
    "prometheus_alertmanager_group_interval": _PROMETHEUS_DURATION,
    "prometheus_alertmanager_repeat_interval": _PROMETHEUS_DURATION,
    "prometheus_node_hosts": _list_of(values.host_name, "host names"),
    "prometheus_dcgm_hosts": _list_of(values.host_name, "host names"),
    "prometheus_alertmanager_receivers": alert_receivers,
    "prometheus_alertmanager_route_receiver": _optional(_RECEIVER_NAME),
    # Grafana's unit drop-in (Environment=) and its data source
    "grafana_listen_address": ip_address,
    "grafana_port": _port,
    "grafana_provisioning_dir": _directory,
    "grafana_prometheus_url": _word(
        r"https?://[A-Za-z0-9.:\[\]_-]{1,253}(/[A-Za-z0-9._~%/-]{0,200})?", "an http(s) URL", "write http(s)://HOST:PORT"
    ),
    "grafana_prometheus_scrape_interval": _word(r"[0-9]{1,5}(ms|s|m|h)", "a Prometheus interval", "write it as 15s or 1m"),
    # systemd units and drop-ins of the observe stage
    "central_logs_host": values.host_name,
    "central_logs_listen_address": ip_address,
    "central_logs_port": _port,
    "central_logs_dir": _directory,
    "central_logs_max_use": _word(r"[0-9]{1,6}[KMGT]?", "a journal size", "write it as 8G"),
    "central_logs_retention": _word(r"[0-9]{1,5}(s|min|h|d|weeks|months|years)", "a journal retention", "write it as 30d or 2weeks"),
    "dcgm_exporter_listen_address": ip_address,
    "dcgm_exporter_port": _port,
    "dcgm_hostengine_port": _port,
    "dcgm_exporter_interval_ms": _number(1, 10**9),
    "dcgm_exporter_xid_window_ms": _number(1, 10**10),
    "dcgm_exporter_job_mapping_dir": _word(r"/run/[A-Za-z0-9._/-]{1,200}", "a directory under /run", "use e.g. /run/megaprov/dcgm-job-mapping"),
    "node_exporter_listen_address": ip_address,
    "node_exporter_port": _port,
    "node_exporter_textfile_dir": _directory,
    "node_exporter_nvidia_smi": _directory,
    "node_exporter_extra_args": _list_of(
        _word(
            r"--[a-z][a-z0-9.-]{1,80}(=[A-Za-z0-9_.,:/^$|()*+?@-]{0,200})?",
            "a node-exporter flag",
            "write --flag or --flag=value (no spaces or quotes)",
        ),
        "flags",
    ),
    "node_exporter_gpu_kernel_log_command": _word(
        r"([A-Za-z0-9._/=-]+( [A-Za-z0-9._/=-]+)*)?", "a plain command line", "use words of letters, digits and ._/=- (at most 300)", 300
    ),
    "node_exporter_dcgm_job_mapping_dir": _word(
        r"(/run/[A-Za-z0-9._/-]{1,200})?", "a directory under /run", "use e.g. /run/megaprov/dcgm-job-mapping, or ''"
    ),
    "node_exporter_gpu_interval": _number(1, 86400),
    "node_exporter_job_interval": _number(1, 86400),
    "infiniband_ipoib_interface": _word(r"([A-Za-z0-9_.:-]{1,15})?", "a network interface name", "use the name `ip link` shows, e.g. ib0"),
    "infiniband_ipoib_address": _optional(_ipoib_address),
    "infiniband_nccl_env": nccl_env,
    "infiniband_nccl_hcas": _list_of(_word(r"[A-Za-z0-9_.-]+(:[0-9]+)?", "an HCA", "write NAME[:PORT], e.g. mlx5_0:1"), "HCAs"),
    # the package cache's units and apt-cacher-ng's configuration
    "package_cache_address": _word(r"([A-Za-z0-9][A-Za-z0-9.-]{0,252})?", "a host address", "give the head's cluster address or name"),
    "package_cache_apt_port": _port,
    "package_cache_http_port": _port,
    "package_cache_apt_dir": _directory,
    "package_cache_web_root": _directory,
    "package_cache_apt_ca_file": _optional(_directory),
    "package_cache_apt_upstream_proxy": _word(r"(https?://[A-Za-z0-9@:._-]+/?)?", "a proxy URL", "write http://HOST:PORT/, or ''"),
    # limits.conf and systemd's DefaultLimit*
    "common_memlock": _word(r"unlimited|[0-9]{1,12}", "a memlock limit", "write unlimited or a size in KiB"),
    "common_nofile": _number(1, 2**30),
}

# Variables megaprov renders itself (scripts, units, paths), typed beyond their argument spec.
TYPED_VARS: dict[str, Checker] = {
    "ansible_host": values.host_address,
    "megaprov_shared_dir": config_path,  # /etc/exports, fstab, the units of the observe stage, every job's paths
    "megaprov_scratch_dir": config_path,
    "megaprov_controller_shared_dir": values.absolute_path,
    "megaprov_cluster_user": values.posix_user,
    "slurm_gpus_per_node": values.gpu_count_or_auto,
}

# Role variables the megaprov command reads itself before Ansible runs (logs, top, status, the launch, bundle); the
# megaprov role's options (megaprov_*) and the typed variables above are read or typed by megaprov too.
READ_BY_MEGAPROV = ("central_logs_host", "prometheus_listen_address", "prometheus_port", "megatron_checkpoint_write_mbps", "package_cache_bundle")
_TEMPLATE = re.compile(r"\{\{|\{%|\{#")


def templated(value: Any) -> bool:
    """Whether a value, or a string anywhere inside it, holds Jinja (Ansible templates it on the node)."""
    if isinstance(value, str):
        return _TEMPLATE.search(value) is not None
    if isinstance(value, dict):
        return any(templated(key) or templated(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return any(templated(item) for item in value)
    return False


def read_literally(name: str, specs: dict[str, dict[str, Any]]) -> bool:
    """Whether megaprov reads or types ``name`` before Ansible templates it (so a template there cannot be honoured).
    Ansible's connection variables are left to their own checks (``ansible_port`` may be a template)."""
    if name.startswith("ansible_"):
        return False
    return name in TYPED_VARS or name in SERVER_CONFIG or name in READ_BY_MEGAPROV or specs.get(name, {}).get("role") == "megaprov"


# Connection variables Ansible itself interprets.
# Each description is the hint of a type error (these have no role README to point at).
ANSIBLE_VARS: dict[str, dict[str, Any]] = {
    "ansible_host": {"type": "str", "description": "the address Ansible connects to: an IP address or a DNS name"},
    "ansible_port": {"type": "int", "min": 1, "max": 65535, "description": "the host's SSH port, a number from 1 to 65535"},
    "ansible_user": {"type": "str", "description": "the account Ansible logs in as"},
    "ansible_become": {"type": "bool", "description": "whether Ansible becomes root on the host: true or false"},
    "ansible_python_interpreter": {"type": "str", "description": "the path of the host's Python that runs Ansible's modules"},
    "ansible_ssh_private_key_file": {"type": "path", "description": "the absolute path of the SSH private key on this machine"},
    "ansible_ssh_common_args": {"type": "str", "description": "extra options Ansible passes to ssh, as one string"},
    "ansible_connection": {"type": "str", "description": "how Ansible reaches the host: ssh (the default), local or a container plugin"},
}


@dataclass
class Host:
    name: str
    groups: set[str] = field(default_factory=set)
    vars: dict[str, Any] = field(default_factory=dict)
    line: str = ""


@dataclass
class Inventory:
    path: Path
    hosts: dict[str, Host]
    groups: dict[str, list[str]]
    group_vars: dict[str, dict[str, Any]]

    @property
    def head(self) -> str:
        return self.groups["head"][0]

    def hosts_of(self, group: str) -> list[str]:
        return list(self.groups.get(group, []))

    def host_var(self, host: str, name: str, default: Any = None) -> Any:
        """The value Ansible would see for a plain (untemplated) variable, children ignored."""
        value = default
        if name in self.group_vars.get("all", {}):
            value = self.group_vars["all"][name]
        for group in sorted(self.hosts[host].groups):
            if name in self.group_vars.get(group, {}):
                value = self.group_vars[group][name]
        return self.hosts[host].vars.get(name, value)


def _range_size(pattern: str) -> int:
    """How many names ``pattern`` expands to, computed without expanding it."""
    size = 1
    for start, end in _RANGE_RE.findall(pattern):
        if start.isdigit() and end.isdigit():
            size *= max(int(end) - int(start) + 1, 0)
        elif not start.isdigit() and not end.isdigit():
            size *= max(ord(end) - ord(start) + 1, 0)
    return size


def _expand_ranges(pattern: str, where: str) -> list[str]:
    if len(pattern) > 300:
        raise InventoryError(f"{where}: host pattern {values.shown(pattern)} is {len(pattern)} characters long", "a host name has at most 253")
    size = _range_size(pattern)
    if size > values.MAX_HOSTS:
        raise InventoryError(
            f"{where}: host range {values.shown(pattern)} expands to {size:,} hosts", f"a cluster has at most {values.MAX_HOSTS:,} (MAX_HOSTS)"
        )
    match = _RANGE_RE.search(pattern)
    if not match:
        if "[" in pattern or "]" in pattern:
            raise InventoryError(f"{where}: bad host range in {pattern!r}", "write ranges as node[01:08] or node[a:c]")
        return [pattern]
    start, end = match.group(1), match.group(2)
    head, tail = pattern[: match.start()], pattern[match.end() :]
    if start.isdigit() != end.isdigit():
        raise InventoryError(f"{where}: bad host range in {pattern!r}", "both ends must be numbers or both letters")
    if start.isdigit():
        width = len(start) if start.startswith("0") else 0
        if width > 1 and len(end) != width:  # as Ansible's expand_hostname_range, which refuses node[01:100]
            raise InventoryError(
                f"{where}: host range {pattern!r} pads its first bound to {width} digits but not its last",
                f"write both bounds with the same number of digits, e.g. [{start.zfill(len(end))}:{end}], or drop the leading zero",
            )
        names = [str(i).zfill(width) for i in range(int(start), int(end) + 1)]
    else:
        names = [chr(c) for c in range(ord(start), ord(end) + 1)]
    if not names:
        raise InventoryError(f"{where}: empty host range in {pattern!r}", "the first bound must not exceed the second")
    return [name for v in names for name in _expand_ranges(head + v + tail, where)]


def _literal(value: str, where: str = "", key: str = "value") -> Any:
    """An INI value as Ansible's INI reader takes it: a Python literal, else the text. What ``literal_eval`` parses but
    cannot build (``{{ 8 }}`` is a set of sets: unhashable) fails Ansible's reader too: one line, not a traceback."""
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value
    except (TypeError, RecursionError, MemoryError) as exc:
        raise InventoryError(
            f"{where}: {key}={values.shown(value)}: Ansible's INI reader cannot read this value ({type(exc).__name__}: {str(exc)[:60]})",
            "give a literal value, or write the variable in group_vars/ as YAML",
        ) from None


def _split_kv(tokens: list[str], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for token in tokens:
        if "=" not in token:
            raise InventoryError(f"{where}: {token!r} is not key=value", "write host variables as name=value")
        key, value = token.split("=", 1)
        if not _VAR_RE.fullmatch(key):
            raise InventoryError(f"{where}: {key!r} is not a valid variable name", "use letters, digits and _")
        out[key] = _literal(value, where, key)
    return out


def parse_ini(text: str, source: str) -> tuple[dict[str, Host], dict[str, list[str]], dict[str, dict[str, Any]], dict[str, list[str]]]:
    """Parse Ansible's INI inventory format. Returns hosts, groups, group vars, group children."""
    if text.startswith("\ufeff"):
        raise InventoryError(
            f"{source}:1: the file starts with a UTF-8 byte-order mark, which Ansible's INI parser reads as part of the first line",
            "save it as UTF-8 without BOM",
        )
    hosts: dict[str, Host] = {}
    groups: dict[str, list[str]] = {"ungrouped": []}
    members: dict[str, set[str]] = {"ungrouped": set()}  # the same as groups, for linear duplicate checks
    gvars: dict[str, dict[str, Any]] = {}
    children: dict[str, list[str]] = {}
    section, kind = "ungrouped", "hosts"
    for number, raw in enumerate(text.splitlines(), start=1):
        where = f"{source}:{number}"
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            header = _SECTION_RE.match(line)
            if not header:
                raise InventoryError(f"{where}: unclosed section header {line!r}", "write it as [group], [group:vars] or [group:children]")
            name, _, suffix = header.group(1).strip().partition(":")
            if suffix not in ("", "vars", "children"):
                raise InventoryError(f"{where}: unknown section kind ':{suffix}' in {line!r}", "use [group], [group:vars] or [group:children]")
            if not _GROUP_RE.fullmatch(name):
                raise InventoryError(f"{where}: invalid group name {name!r}", "group names use letters, digits and _ (no dashes)")
            section, kind = name, suffix or "hosts"
            if kind == "hosts":
                groups.setdefault(section, [])
                members.setdefault(section, set())
            elif kind == "vars":
                gvars.setdefault(section, {})
            else:
                children.setdefault(section, [])
            continue
        if kind == "vars":
            key, sep, value = line.partition("=")
            key = key.strip()
            if not sep or not _VAR_RE.fullmatch(key):
                raise InventoryError(f"{where}: {line!r} in [{section}:vars] is not name=value", "write one variable per line as name=value")
            # As Ansible does: a Python literal (number, quoted string, list, ...) with an optional trailing
            # comment, otherwise the whole rest of the line as a string (a comment included).
            parsed = _literal(value.strip(), where, key)
            if isinstance(parsed, str) and parsed == value.strip() and _COMMENT_RE.search(parsed):
                raise InventoryError(
                    f"{where}: {key}={values.shown(parsed)}: Ansible keeps ' #...' as part of an unquoted value in [{section}:vars]",
                    f"quote the value ({key}='...' # comment) or move the comment to its own line",
                )
            gvars[section][key] = parsed
            continue
        if kind == "children":
            line = _COMMENT_RE.sub("", line)
            if not _GROUP_RE.fullmatch(line):
                raise InventoryError(f"{where}: invalid child group {line!r}", "list one group name per line")
            children[section].append(line)
            continue
        try:  # Ansible splits host lines like a shell with comments: `n1 a=1 # note`, `n2 b=x#note` (b is x)
            tokens = shlex.split(line, comments=True)
        except ValueError as exc:
            raise InventoryError(f"{where}: cannot split {values.shown(line)} ({exc})", "close the quotes") from None
        if not tokens:
            continue
        name_part = tokens[0]
        host_vars = _split_kv(tokens[1:], where)
        if ":" in name_part.rpartition("]")[2]:
            name_part, port = name_part.rsplit(":", 1)
            if not port.isdigit():
                raise InventoryError(f"{where}: bad port in {line.split()[0]!r}", "write host:port with a number, or ansible_port=N")
            host_vars.setdefault("ansible_port", int(port))
        for name in _expand_ranges(name_part, where):
            if not _HOSTNAME_RE.fullmatch(name):
                raise InventoryError(f"{where}: {name!r} is not a valid host name", "use letters, digits, dots and dashes (it goes into /etc/hosts)")
            if name in members[section]:
                raise InventoryError(
                    f"{where}: host {name!r} is listed twice in [{section}] (first at {hosts[name].line})", "remove one of the two lines"
                )
            host = hosts.setdefault(name, Host(name=name, line=where))
            clash = {k: v for k, v in host_vars.items() if k in host.vars and host.vars[k] != v}
            if clash:
                key = next(iter(clash))
                raise InventoryError(
                    f"{where}: host {name!r} is defined again with {key}={clash[key]!r} (was {host.vars[key]!r} at {host.line})",
                    "define each host's variables once",
                )
            host.vars.update(host_vars)
            groups[section].append(name)
            members[section].add(name)
            if len(hosts) > values.MAX_HOSTS:
                raise InventoryError(f"{where}: more than {values.MAX_HOSTS:,} hosts", f"a cluster has at most {values.MAX_HOSTS:,} (MAX_HOSTS)")
    return hosts, groups, gvars, children


INI_SUFFIXES = ("", ".ini", ".cfg", ".hosts", ".txt")
MAX_ANSIBLE_INVENTORY_BYTES = 64 * 1024 * 1024  # what ansible-inventory may print about one inventory
ANSIBLE_INVENTORY_TIMEOUT = 300.0  # seconds a dynamic inventory (a script, a cloud's plugin) may take


def is_ini(path: Path) -> bool:
    """megaprov's own strict INI reader takes the file (with line numbers); everything else goes through Ansible's."""
    if path.suffix not in INI_SUFFIXES or os.access(path, os.X_OK):
        return False
    return True


def _ansible_inventory() -> str:
    beside = Path(sys.executable).parent / "ansible-inventory"
    found = str(beside) if beside.is_file() else shutil.which("ansible-inventory")
    if found is None:
        from megaprov.errors import EnvironmentProblem

        raise EnvironmentProblem("ansible-inventory is not installed", "pip install megaprov (it depends on ansible-core)")
    return found


def _ansible_failure(path: Path, stderr: str) -> InventoryError:
    """Ansible's reasons, as one line: the first plugin's cause and where (its Origin: file:line)."""
    causes = [line.strip() for line in stderr.splitlines() if line.strip()]
    origin = next((re.search(r"Origin: (\S+?):(\d+)", line) for line in causes if re.search(r"Origin: \S+?:\d+", line)), None)
    why = next((line.split(":", 1)[1].strip() for line in causes if line.startswith("[WARNING]: Failed to parse")), None)
    why = why or next((line for line in causes if line.startswith("[ERROR]")), "no hosts could be read")
    where = f"{origin.group(1)}:{origin.group(2)}" if origin else str(path)
    return InventoryError(
        f"{where}: Ansible cannot read this inventory ({values.printable(why)[:300]})",
        f"fix it until `ansible-inventory -i {path} --list` reads it",
    )


def parse_with_ansible(path: Path) -> tuple[dict[str, Host], dict[str, list[str]], dict[str, dict[str, Any]], dict[str, list[str]]]:
    """A YAML, JSON, TOML or directory inventory, a dynamic inventory script or an inventory plugin's configuration
    (NetBox, a cloud), read by ansible-core itself (`ansible-inventory --list --export`: group variables stay on
    their groups; group_vars/ and host_vars/ are read by megaprov as for INI). Returns what :func:`parse_ini` returns."""
    env = dict(
        os.environ,
        ANSIBLE_INVENTORY_UNPARSED_FAILED="True",
        ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED="True",
        ANSIBLE_VARS_ENABLED="none",  # the vars files are megaprov's to read and check, file by file
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_DEPRECATION_WARNINGS="False",
    )
    try:
        proc = subprocess.run(  # noqa: S603 (argv, no shell; the inventory is the operator's)
            [_ansible_inventory(), "-i", str(path), "--list", "--export"],
            capture_output=True,
            env=env,
            timeout=ANSIBLE_INVENTORY_TIMEOUT,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise InventoryError(
            f"{path}: ansible-inventory did not answer within {ANSIBLE_INVENTORY_TIMEOUT:.0f} s", "check the dynamic inventory"
        ) from None
    if proc.returncode != 0:
        raise _ansible_failure(path, proc.stderr.decode(errors="replace"))
    if len(proc.stdout) > MAX_ANSIBLE_INVENTORY_BYTES:
        raise InventoryError(f"{path}: the inventory is larger than {MAX_ANSIBLE_INVENTORY_BYTES >> 20} MiB", "split it")
    doc = values.json_data(proc.stdout.decode(errors="replace"), f"{path} (as ansible-inventory reads it)")
    if not isinstance(doc, dict):
        raise InventoryError(f"{path}: ansible-inventory printed no inventory", f"check `ansible-inventory -i {path} --list`")
    hostvars = (doc.get("_meta") or {}).get("hostvars") or {}
    hosts: dict[str, Host] = {}
    groups: dict[str, list[str]] = {}
    gvars: dict[str, dict[str, Any]] = {}
    children: dict[str, list[str]] = {}
    where = str(path)
    for group, entry in doc.items():
        if group == "_meta" or not isinstance(entry, dict):
            continue
        if not _GROUP_RE.fullmatch(group):
            raise InventoryError(f"{where}: invalid group name {values.shown(group)}", "group names use letters, digits and _ (no dashes)")
        if entry.get("vars"):
            if not isinstance(entry["vars"], dict):
                raise InventoryError(f"{where}: the variables of group {group} are not a mapping", "write them as name: value")
            gvars[group] = dict(entry["vars"])
        if group != "all":
            groups[group] = []
            kids = [k for k in entry.get("children") or [] if k != "ungrouped"]
            if kids:
                children[group] = list(kids)
        for name in entry.get("hosts") or []:
            if not isinstance(name, str) or not _HOSTNAME_RE.fullmatch(name):
                raise InventoryError(
                    f"{where}: {values.shown(name)} is not a valid host name", "use letters, digits, dots and dashes (it goes into /etc/hosts)"
                )
            own = hostvars.get(name) or {}
            if not isinstance(own, dict):
                raise InventoryError(f"{where}: the variables of host {name} are not a mapping", "write them as name: value")
            hosts.setdefault(name, Host(name=name, vars=dict(own), line=where))
            groups.setdefault(group, []).append(name)
            if len(hosts) > values.MAX_HOSTS:
                raise InventoryError(f"{where}: more than {values.MAX_HOSTS:,} hosts", f"a cluster has at most {values.MAX_HOSTS:,} (MAX_HOSTS)")
    return hosts, groups, gvars, children


def _read(path: Path, what: str, max_bytes: int = values.MAX_VARS_FILE_BYTES) -> str:
    try:
        return values.read_text(path, what, max_bytes)
    except UsageError as exc:
        raise InventoryError(exc.message, exc.hint) from None


def _load_yaml_vars(path: Path) -> dict[str, Any]:
    text = _read(path, "variables file")
    try:
        data = values.yaml_data(text, str(path))
    except UsageError as exc:
        raise InventoryError(exc.message, exc.hint) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise InventoryError(f"{path}{line}: invalid YAML ({getattr(exc, 'problem', exc)})", "fix the YAML syntax") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InventoryError(f"{path}: must be a mapping of variable: value, not {type(data).__name__}", "write name: value lines")
    return data


VARS_EXTENSIONS = (".yml", ".yaml", ".json")


def _ignored(entry: Path) -> bool:
    """A hidden entry or an editor's backup, which Ansible's variable loader skips (``.gitkeep``, ``all.yml~``)."""
    return entry.name.startswith(".") or entry.name.endswith("~")


def _vars_dir(base: Path, name: str) -> list[Path]:
    """Files Ansible reads for group_vars/<name> or host_vars/<name>, as its loader's ``find_vars_files`` finds them:
    only the first of <name> (a file or a directory), <name>.yml, <name>.yaml, <name>.json that exists; in a
    directory, every file without an extension or with one of those, in sorted order, subdirectories without an
    extension walked, hidden entries and backups skipped. A link that leads nowhere (a loop, a dangling target) is
    returned too, so that reading it says what is wrong instead of skipping it."""
    for candidate in (base / f"{name}{ext}" for ext in ("", *VARS_EXTENSIONS)):
        if candidate.is_dir():
            return _dir_vars_files(candidate)
        if candidate.is_file() or candidate.is_symlink():
            return [candidate]
    return []


def _dir_vars_files(top: Path) -> list[Path]:
    """The variables files of a group_vars/<name>/ directory, depth first in sorted order (an explicit stack:
    a deep tree cannot exhaust Python's); more than MAX_HOSTS entries (a link loop among them) is an error."""
    files: list[Path] = []
    seen = 0
    stack = [iter(sorted(top.iterdir()))]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        seen += 1
        if seen > values.MAX_HOSTS:
            raise InventoryError(f"{top}: more than {values.MAX_HOSTS:,} entries", "keep a variables directory to a few files")
        if _ignored(entry):
            continue
        if entry.is_dir():
            if not entry.suffix:
                stack.append(iter(sorted(entry.iterdir())))
        elif (entry.is_file() or entry.is_symlink()) and entry.suffix in ("", *VARS_EXTENSIONS):
            files.append(entry)
    return files


def role_specs(roles_dir: Path) -> dict[str, dict[str, Any]]:
    """Every public role variable from the roles' argument specs: name -> option spec."""
    specs: dict[str, dict[str, Any]] = {}
    for spec_file in sorted(roles_dir.glob("*/meta/argument_specs.yml")):
        data = yaml.safe_load(spec_file.read_text(encoding="utf-8")) or {}
        for entry in (data.get("argument_specs") or {}).values():
            for name, option in (entry.get("options") or {}).items():
                specs[name] = dict(option, role=spec_file.parent.parent.name)
    return specs


_TRUE = {"yes", "on", "1", "true", "y", "t"}
_FALSE = {"no", "off", "0", "false", "n", "f"}


def as_bool(value: Any) -> bool:
    """A boolean the way Ansible reads it from INI or YAML ("false", "no", "0" are false)."""
    return value if isinstance(value, bool) else str(value).strip().lower() in _TRUE


def _is_number(value: int | float | str) -> bool:
    """Whether Ansible's float check (``float(value)``) takes ``value``."""
    try:
        float(value)
    except ValueError:
        return False
    return True


def check_type(name: str, value: Any, spec: dict[str, Any]) -> str | None:
    """Return why ``value`` does not fit ``spec`` (an argument_specs option), or None."""
    if isinstance(value, str) and "{{" in value:
        return None  # templated: Ansible resolves it later, role argument specs check it then
    kind = spec.get("type", "str")
    problem: str | None = None
    if kind == "bool":
        if not isinstance(value, bool) and str(value).lower() not in _TRUE | _FALSE:
            problem = "must be true or false"
    elif kind == "int":
        if isinstance(value, bool) or not (isinstance(value, int) or (isinstance(value, str) and re.fullmatch(r"-?\d+", value.strip()))):
            problem = "must be a whole number"
        else:
            number = int(value)
            if "min" in spec and number < spec["min"] or "max" in spec and number > spec["max"]:
                problem = f"must be between {spec.get('min')} and {spec.get('max')}"
    elif kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float, str)) or not _is_number(value):
            problem = "must be a number"
    elif kind in ("str", "path", "raw_str"):
        if isinstance(value, (dict, list)):
            problem = "must be a string"
        elif kind == "path" and isinstance(value, str) and not value.startswith(("/", "~")):
            problem = "must be an absolute path"
    elif kind == "list":
        if not isinstance(value, list):
            problem = "must be a list"
    elif kind == "dict":
        if not isinstance(value, dict):
            problem = "must be a mapping"
    if problem is None and "choices" in spec and value not in spec["choices"]:
        problem = "must be one of " + ", ".join(map(str, spec["choices"]))
    return problem


def all_specs(roles_dir: Path) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """Every variable megaprov knows the type of, and the role-name prefixes."""
    specs = dict(ANSIBLE_VARS)
    specs.update(role_specs(roles_dir))
    prefixes = {d.name for d in roles_dir.iterdir() if d.is_dir()} if roles_dir.is_dir() else set()
    return specs, prefixes


def typed_problem(name: str, value: Any, typed: bool = True, tree: bool = True) -> values.BadValue | None:
    """Why a variable megaprov renders itself (``TYPED_VARS``), or any string in any variable, is unsafe, or None.
    Control characters are refused everywhere: a newline in a value becomes a line of a script or a unit."""
    try:
        if tree:
            values.check_tree(value, name)
        if typed and name in TYPED_VARS:
            TYPED_VARS[name](value, name)
        if typed and name in SERVER_CONFIG:
            SERVER_CONFIG[name](value, name)
    except values.BadValue as bad:
        return bad
    return None


def validate_vars(variables: dict[str, Any], source: str, specs: dict[str, dict[str, Any]], role_prefixes: set[str]) -> None:
    for name, value in variables.items():
        if not isinstance(name, str) or not values.VARIABLE.fullmatch(name):
            raise InventoryError(f"{source}: {values.shown(name)} is not a variable name", "use letters, digits and _ (not starting with a digit)")
        bad = typed_problem(name, value, typed=False)  # control characters first: spec messages print the value
        if bad is None and templated(value) and read_literally(name, specs):
            raise InventoryError(
                f"{source}: {name}={values.shown(value)} is a template: megaprov reads this value before Ansible templates it",
                "give a literal value",
            )
        if bad is None:
            _check_spec(name, value, source, specs, role_prefixes)
            bad = typed_problem(name, value, tree=False)
        if bad is not None:
            raise InventoryError(f"{source}: {bad.message}", bad.hint)


def _check_spec(name: str, value: Any, source: str, specs: dict[str, dict[str, Any]], role_prefixes: set[str]) -> None:
    spec = specs.get(name)
    if spec is None:
        prefix = next((p for p in role_prefixes if name.startswith(p + "_")), None)
        if name.startswith("megaprov_") or prefix:
            close = difflib.get_close_matches(name, list(specs), n=1)
            hint = f"did you mean {close[0]}?" if close else "see the role README for its variables"
            raise InventoryError(f"{source}: unknown variable {name}", hint)
        return
    problem = check_type(name, value, spec)
    if problem:
        raise InventoryError(
            f"{source}: {name}={values.shown(value)} {problem}",
            str(spec["description"])
            if isinstance(spec.get("description"), str)
            else f"see the README of the role megaprov.cluster.{spec.get('role', '')}",
        )


def _overlap(a: str, b: str) -> bool:
    pa, pb = PurePosixPath(a), PurePosixPath(b)
    return pa == pb or pa in pb.parents or pb in pa.parents


def storage_checks(inventory: Inventory) -> None:
    """Storage settings that no single variable type can express; raised before any host is contacted."""
    path = inventory.path
    servers = inventory.groups.get("nfs_server")
    if servers is not None and len(servers) != 1:
        raise InventoryError(
            f"{path}: [nfs_server] has {len(servers)} hosts", "put exactly one host in [nfs_server] (or remove the group: [head] serves NFS)"
        )
    server = servers[0] if servers else inventory.head
    shared = str(inventory.host_var(server, "nfs_server_export_dir", inventory.host_var(server, "megaprov_shared_dir", "/shared")))
    if not shared.startswith("/") or PurePosixPath(shared) == PurePosixPath("/"):
        raise InventoryError(
            f"{path}: the shared directory {shared!r} must be an absolute path other than /", "set megaprov_shared_dir to e.g. /shared"
        )
    for host in inventory.hosts:
        scratch = str(inventory.host_var(host, "megaprov_scratch_dir", "/var/tmp"))
        if _overlap(shared, scratch):
            raise InventoryError(
                f"{path}: the shared directory {shared} and megaprov_scratch_dir={scratch} (host {host}) overlap",
                "keep node-local scratch outside the NFS export",
            )
    cidr = str(inventory.host_var(server, "nfs_server_clients_cidr", "") or "")
    if cidr:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            raise InventoryError(f"{path}: nfs_server_clients_cidr={cidr!r} is not a CIDR", "write it as ADDRESS/PREFIX, e.g. 10.0.0.0/16") from None


# Source variables whose defaults reach the internet, and when each is used: (variable, switch, value that uses it).
OFFLINE_SOURCES: tuple[tuple[str, str, Any], ...] = (
    ("nvidia_driver_repo_url", "nvidia_driver_method", "cuda_repo"),
    ("nvidia_driver_keyring_url", "nvidia_driver_method", "cuda_repo"),
    ("nccl_tests_repo", "nccl_tests", True),
    ("megatron_repo", "megatron_checkout", True),
    ("apex_repo", "apex_enabled", True),
    ("grafana_apt_repo", "megaprov_observe", True),  # Grafana's own repository ("" provisions the dashboards only)
    ("container_toolkit_repo_url", "megaprov_containers", True),
    ("container_toolkit_key_url", "megaprov_containers", True),
    ("enroot_base_url", "megaprov_containers", True),  # enroot and pyxis: under Slurm only (SLURM_ONLY)
    ("pyxis_source_url", "megaprov_containers", True),
)
SLURM_ONLY = ("enroot_base_url", "pyxis_source_url")
# What an offline bundle on the head's package cache provides (megaprov bundle build: git/, wheels/, apt/, sources/).
BUNDLED_SOURCES = (
    "nccl_tests_repo",
    "megatron_repo",
    "apex_repo",
    "pytorch_index_url",
    "container_toolkit_repo_url",
    "container_toolkit_key_url",
    "enroot_base_url",
    "pyxis_source_url",
)


@functools.lru_cache(maxsize=64)
def _role_defaults(path: Path) -> dict[str, Any]:
    """A role's defaults/main.yml, read once per process (it was read per host and variable: 45 s for 3,000 hosts)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else {}
    return data if isinstance(data, dict) else {}


def _role_default(roles_dir: Path, role: str, name: str) -> Any:
    return _role_defaults(roles_dir / role / "defaults" / "main.yml").get(name)


def _plain(value: Any) -> str | None:
    """A setting as the compatibility table reads it; None when unset or a Jinja expression: megaprov cannot
    evaluate those before it connects, so the checks that need the value are skipped (the roles check it on the node)."""
    if value is None or (isinstance(value, str) and ("{{" in value or "{%" in value)):
        return None
    return str(value).strip()


def _stack(inventory: Inventory, host: str, var: Callable[[str, str], Any]) -> compat.Stack:
    """One gpu_nodes host's GPU-stack settings (inventory value, else the role default) for :func:`compat.problems`."""
    open_modules = _plain(var(host, "nvidia_driver_open"))
    return compat.Stack(
        branch=_plain(var(host, "nvidia_driver_branch")),
        cuda=_plain(var(host, "cuda_version")),
        toolkit=var(host, "cuda_method") != "none",
        torch=_plain(var(host, "pytorch_version")),
        # Only an explicit setting: the role's default derives the tag from the table, as compat.derive_tag does.
        tag=_plain(inventory.host_var(host, "pytorch_cuda_tag")),
        torch_cuda=var(host, "pytorch_build") != "cpu",
        gpu_model=_plain(inventory.host_var(host, "megaprov_gpu_model")) or None,
        open_modules=None if open_modules is None or open_modules.lower() not in _TRUE | _FALSE else as_bool(open_modules),
        driver_installed_by_megaprov=var(host, "nvidia_driver_method") != "preinstalled",
        apex=as_bool(var(host, "apex_enabled")) if _plain(var(host, "apex_enabled")) is not None else False,
    )


def with_extra_vars(inventory: Inventory, extravars: dict[str, Any]) -> Inventory:
    """``inventory`` as the play sees it with ``-e`` variables, which win over every inventory value."""
    hosts = {name: replace(host, vars={**host.vars, **extravars}) for name, host in inventory.hosts.items()}
    return replace(inventory, hosts=hosts)


def gpu_stack_checks(inventory: Inventory, roles_dir: Path) -> None:
    """GPU-stack settings that only make sense together; raised before any host is contacted."""
    path = inventory.path

    def var(host: str, name: str) -> Any:
        role = next((r for r in ("nvidia_driver", "cuda", "nccl", "pytorch", "apex", "megatron") if name.startswith(r + "_")), "")
        return inventory.host_var(host, name, _role_default(roles_dir, role, name) if role else None)

    checked: dict[compat.Stack, list[compat.Problem]] = {}  # thousands of hosts share a few stacks
    for host in inventory.hosts_of("gpu_nodes"):
        stack = _stack(inventory, host, var)
        if stack not in checked:
            checked[stack] = compat.problems(stack)
        for problem in checked[stack][:1]:
            raise InventoryError(f"{path}: {problem.variable}={problem.value} (host {host}) {problem.text}", problem.hint)
        megatron, core = str(var(host, "megatron_version")), inventory.host_var(host, "megatron_core_version")
        if core is not None and "{{" not in str(core) and megatron.removeprefix("core_v") != str(core):
            raise InventoryError(
                f"{path}: megatron_core_version={core} (host {host}) does not match megatron_version={megatron}",
                "remove megatron_core_version: it follows the tag",
            )
        if var(host, "pytorch_source") == "wheelhouse" and not var(host, "pytorch_wheelhouse"):
            raise InventoryError(
                f"{path}: pytorch_source=wheelhouse (host {host}) but pytorch_wheelhouse is unset",
                "set pytorch_wheelhouse to the directory of wheels on the nodes",
            )
        if as_bool(inventory.host_var(host, "megaprov_offline", False)):
            # An offline bundle served by the head's package cache carries the git mirrors and the wheels: the roles'
            # defaults follow the cache's fact there (NVIDIA's apt repository is not among them: its URL is still needed).
            bundled = BUNDLED_SOURCES if as_bool(var(host, "megaprov_package_cache")) and var(host, "package_cache_bundle") else ()
            unset = [
                name
                for name, switch, used in OFFLINE_SOURCES
                if (as_bool(var(host, switch)) if isinstance(used, bool) else var(host, switch) == used)
                and inventory.host_var(host, name) is None
                and name not in bundled
                and (name not in SLURM_ONLY or inventory.host_var(host, "megaprov_scheduler", "none") == "slurm")
            ]
            if (
                var(host, "pytorch_source") != "wheelhouse"
                and inventory.host_var(host, "pytorch_index_url") is None
                and "pytorch_index_url" not in bundled
            ):
                unset.append("pytorch_index_url (or pytorch_source: wheelhouse)")
            if unset:
                raise InventoryError(
                    f"{path}: megaprov_offline is true but {', '.join(unset)} (host {host}) still point(s) at the internet",
                    "set each to your mirror (an apt repository, git remote or wheel index the nodes reach)",
                )


def resolve_children(groups: dict[str, list[str]], children: dict[str, list[str]], source: str) -> dict[str, list[str]]:
    """Every group's hosts, its children's included, in order: an iterative depth-first walk that resolves each
    group once (a DAG of many groups sharing children is linear, not exponential, and a long chain of children
    cannot exhaust Python's stack); a cycle is an error naming the group. Pure."""
    resolved: dict[str, list[str]] = {}
    visiting: set[str] = set()
    for root in groups:
        if root in resolved:
            continue
        stack = [(root, iter(children.get(root, [])))]
        visiting.add(root)
        while stack:
            group, kids = stack[-1]
            kid = next(kids, None)
            if kid is None:
                out = dict.fromkeys(groups.get(group, []))  # ordered, each host once
                for child in children.get(group, []):
                    out.update(dict.fromkeys(resolved[child]))
                resolved[group] = list(out)
                visiting.discard(group)
                stack.pop()
            elif kid in visiting:
                raise InventoryError(f"{source}: group {kid!r} contains itself through [{kid}:children]", "remove the cycle")
            elif kid not in resolved:
                visiting.add(kid)
                stack.append((kid, iter(children.get(kid, []))))
    return resolved


def load(path: str | Path, roles_dir: Path, defaults: Path | None = None) -> Inventory:
    """Parse and validate ``path``; raise :class:`InventoryError` on the first problem."""
    path = Path(path)
    vars_base: Path | None = None  # where group_vars/ and host_vars/ are: beside the inventory, or in its directory
    if path.is_dir():
        candidates = [path / "inventory.ini", path / "hosts.ini", path / "hosts", path / "inventory.yml", path / "hosts.yml"]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:  # a directory of sources, as Ansible reads one (its group_vars/ inside it)
            found, vars_base = path, path
        path = found
    if not path.exists() and not path.is_symlink():
        raise InventoryError(f"inventory {path} does not exist", "pass an inventory: INI, YAML, a directory or a script (megaprov lab up writes one)")
    if path.is_file() and is_ini(path):
        data = values.read_bytes(path, "inventory", values.MAX_VARS_FILE_BYTES)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise InventoryError(f"{path}:{line}: not UTF-8 (byte 0x{data[exc.start]:02x})", "save the inventory as UTF-8") from None
        hosts, groups, gvars, children = parse_ini(text, str(path))
    else:
        if path.is_file():
            values.read_bytes(path, "inventory", values.MAX_VARS_FILE_BYTES)  # bounded, readable, not a FIFO
        hosts, groups, gvars, children = parse_with_ansible(path)
    base_dir = vars_base or path.parent

    for parent, kids in children.items():
        for kid in kids:
            if kid not in groups and kid not in children:
                raise InventoryError(f"{path}: [{parent}:children] names group {kid!r}, which is not defined", f"add a [{kid}] section or remove it")
    for name in list(children):
        groups.setdefault(name, [])

    resolved = resolve_children(groups, children, str(path))
    for group, names in resolved.items():
        for name in names:
            hosts[name].groups.add(group)
    for group in gvars:
        if group != "all" and group not in resolved:
            raise InventoryError(f"{path}: [{group}:vars] for a group that has no hosts section", f"add [{group}] or rename the section")

    for group in REQUIRED_GROUPS:
        if not resolved.get(group):
            raise InventoryError(
                f"{path}: group [{group}] is missing or empty",
                "add [head] with the one controller host and [gpu_nodes] with the training nodes",
            )
    if len(resolved["head"]) != 1:
        raise InventoryError(f"{path}: [head] has {len(resolved['head'])} hosts ({', '.join(resolved['head'])})", "put exactly one host in [head]")

    specs, prefixes = all_specs(roles_dir)

    all_vars: dict[str, dict[str, Any]] = {}
    if defaults is not None and defaults.is_file():
        all_vars["all"] = dict(_load_yaml_vars(defaults))  # a role's defaults/main.yml: the lowest precedence
    for group, section_vars in gvars.items():
        validate_vars(section_vars, f"{path} [{group}:vars]", specs, prefixes)
        all_vars.setdefault(group, {}).update(section_vars)
    for kind, target in (("group_vars", "group"), ("host_vars", "host")):
        base = base_dir / kind
        if not base.is_dir():
            continue
        for entry in sorted(base.iterdir()):
            if _ignored(entry):
                continue
            # group_vars/gpu_nodes.yml is gpu_nodes, host_vars/n1.example.org.yml and host_vars/n1.example.org are n1.example.org
            name = entry.stem if entry.suffix in VARS_EXTENSIONS and not entry.is_dir() else entry.name
            if target == "group" and name not in resolved and name != "all":
                raise InventoryError(f"{entry}: group_vars for unknown group {name!r}", f"rename it to one of: {', '.join(sorted(resolved))}")
            if target == "host" and name not in hosts:
                raise InventoryError(f"{entry}: host_vars for unknown host {name!r}", "rename it to a host of the inventory")
            for file in _vars_dir(base, name):
                file_vars = _load_yaml_vars(file)
                validate_vars(file_vars, str(file), specs, prefixes)
                if target == "group":
                    all_vars.setdefault(name, {}).update(file_vars)
                else:
                    hosts[name].vars.update(file_vars)
    for name, host in hosts.items():
        validate_vars(host.vars, f"{path} ({host.line}, host {name})", specs, prefixes)

    inventory = Inventory(path=path.resolve(), hosts=hosts, groups=resolved, group_vars=all_vars)
    storage_checks(inventory)
    gpu_stack_checks(inventory, roles_dir)
    seen: dict[tuple[str, int], str] = {}
    for name in hosts:
        port = inventory.host_var(name, "ansible_port", 22)
        if isinstance(port, str) and "{{" in port:
            continue  # templated: Ansible resolves it later, so two hosts cannot be compared before it connects
        key = (inventory.host_var(name, "ansible_host", name), int(port))
        if key in seen:
            raise InventoryError(
                f"{path}: hosts {seen[key]!r} and {name!r} both point at {key[0]}:{key[1]}",
                "give each host its own ansible_host (a duplicate would be provisioned twice)",
            )
        seen[key] = name
    return inventory
