# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""The pure part of the apt action plugin (plugins/action/apt.py): when one dpkg-query may stand in for
ansible.builtin.apt, the query, and how its answer is read."""

from __future__ import annotations

import shlex

# Options that only matter when apt installs: the fast path may skip them. Any other option (upgrade, autoremove,
# purge, deb, ...) sends the task to apt.
FAST_OPTIONS = frozenset(("name", "state", "update_cache", "cache_valid_time", "install_recommends", "allow_downgrade", "lock_timeout"))
INSTALLED = "install ok installed"
# What ansible.builtin.apt imports, and how the action plugin installs it where it is missing (no Python needed).
PYTHON_APT = "python3-apt"
_INSTALL = "DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-apt"
PYTHON_APT_INSTALL = "%s || { DEBIAN_FRONTEND=noninteractive apt-get update -q && %s; }" % (_INSTALL, _INSTALL)


def wanted(args):
    """Pure: {package: version or None} when the fast path may answer for these arguments, else None."""
    if set(args) - FAST_OPTIONS or args.get("state", "present") != "present":
        return None
    names = args.get("name")
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",")]
    if not isinstance(names, list) or not names:
        return None
    out = {}
    for name in names:
        if not isinstance(name, str) or not name or any(c in name for c in "*?<>[]/ \t\n"):
            return None  # globs, version ranges, .deb paths: apt decides
        package, _sep, version = name.partition("=")
        if not package or (name.count("=") > 1):
            return None
        out[package] = version or None
    return out


def query_argv(packages):
    """Pure: the dpkg-query command line (each name quoted for the shell)."""
    return "dpkg-query -W -f='${Package}\\t${Status}\\t${Version}\\n' %s 2>/dev/null; true" % " ".join(
        shlex.quote(p) for p in sorted(packages)
    )


def all_installed(packages, output):
    """Pure: whether dpkg-query's output shows every package installed at its pinned version (if pinned)."""
    seen = {}
    for line in output.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[1] == INSTALLED:
            seen[fields[0]] = fields[2]
    for package, version in packages.items():
        base = package.split(":", 1)[0]
        if base not in seen or (version is not None and seen[base] != version):
            return False
    return True
