"""ssh to a host of the inventory with the inventory's own connection settings (address, port, user, key, its ssh
options: host keys stay pinned as Ansible pins them). For what Ansible cannot carry: a tunnel to Prometheus, a
long-lived reader of a job directory. Pure."""

from __future__ import annotations

import shlex

from megaprov.cluster import inventory as inv


def ssh_argv(found: inv.Inventory, host: str, *options: str) -> list[str]:
    """``ssh OPTIONS... -- ADDRESS``: the caller appends the remote command (already quoted for the remote shell)."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=15", *options]
    for var, flag in (("ansible_port", "-p"), ("ansible_user", "-l"), ("ansible_ssh_private_key_file", "-i")):
        value = found.host_var(host, var)
        if value not in (None, ""):
            argv += [flag, str(value)]
    for var in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        argv += shlex.split(str(found.host_var(host, var, "") or ""))
    return [*argv, "--", str(found.host_var(host, "ansible_host", host))]
