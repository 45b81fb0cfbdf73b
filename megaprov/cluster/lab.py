"""The local lab: Debian 12 systemd containers (podman + runc) that act as cluster nodes.

``up`` builds the node image once (debootstrap -> podman import -> podman build, cached by the
hash of its build files), starts N nodes on their own network, pins their host keys and writes
``lab/<name>/`` in megaprov's state directory (``megaprov lab inventory`` prints the path). ``down`` removes
exactly what ``up`` made, found by name and label.

Each lab has its own /24 (chosen from LAB_POOL by the lab's name, skipping subnets in use) and each node a
fixed address in it (nodeN = .N+1), so a node keeps its address across ``stop``/``start`` as a real node does.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from megaprov.cluster import gitsource, wheelhouse
from megaprov.errors import EnvironmentProblem, UsageError
from megaprov.paths import LAB_FILES, cache_dir, fact_cache_dir

Progress = Callable[[str], None]
BASE_IMAGE = "localhost/megaprov-base:bookworm"
NODE_IMAGE = "localhost/megaprov-node"
LABEL = "io.megaprov.lab"
ADDRESS_LABEL = "io.megaprov.lab.address"  # the node's fixed address, shown while it is stopped
LAB_SHARED_DIR = "/shared"  # megaprov_shared_dir's default
# node1's NFS export and, on every node, the raw volume behind the root-squashed /shared (lab_files/rootsquash_fs.py)
LAB_EXPORT_DIR = "/srv/megaprov/export"
LAB_SHARE_FSTYPE = "fuse.megaprov-squash"
# The volume's data lies here on this machine, not in podman's root-only (0700) storage: megaprov, run as root,
# writes into the share as the cluster user (data prepare), which must be able to reach it, as through /shared.
LAB_SHARES = Path("/var/lib/megaprov/labs")
IMAGE_FILES = ("Containerfile", "ssh-hostkeys.conf", "rootsquash_fs.py", "megaprov-lab-share.service", "fuse-device.conf", "nested-containers.conf")
LAB_WHEELHOUSE = "/srv/megaprov/wheelhouse"  # pytorch_wheelhouse on lab nodes
# Megatron-LM's tree where GitHub is out of reach (this project's CI, an air-gapped machine): a directory or a `git
# archive` tarball of the pinned tag, named by MEGATRON_SOURCE_ENV. `lab up` makes it a git remote (gitsource) that
# every node mounts read-only here; the head's package cache mirrors it and the nodes check it out, as they would
# GitHub's. Unset, the lab clones Megatron-LM from GitHub like any cluster.
MEGATRON_SOURCE_ENV = "MEGAPROV_MEGATRON_LM"
LAB_GIT = "/srv/megaprov/git"
LAB_MEGATRON_TAG = "core_v0.16.1"  # the megatron role's megatron_version
# Stand-ins for GPU device files: Slurm's gres.conf File= must name a character device. The lab's nodes have no GPU,
# but with these slurmd accepts `Gres=gpu:2`, so scheduling by GPU (--gpus-per-node, CUDA_VISIBLE_DEVICES, a refused
# --gpus beyond the count) is exercised. Nothing else reads them: the GPU stage and preflight look at the PCI bus.
LAB_GPU_DEVICES = (("/dev/null", "/dev/nvidia0"), ("/dev/zero", "/dev/nvidia1"))
DEBOOTSTRAP_PACKAGES = "python3,python3-venv,openssh-server,sudo,iproute2,procps,ca-certificates,locales"
HOST_CA_CANDIDATES = ("/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt")
MAX_NODES = 32
# Lab subnets: /24s of 10.90.0.0/16, clear of podman's default pool (10.89.0.0/16) that unnamed networks,
# Molecule's among them, take from.
LAB_POOL = ipaddress.IPv4Network("10.90.0.0/16")
LAB_PREFIX = 24


@dataclass(frozen=True)
class Node:
    name: str  # inventory and host name: node1 ...
    container: str
    address: str
    state: str


def _quiet(_: str) -> None:
    return None


def is_name(name: str) -> bool:
    """A lab name megaprov makes: 1-20 lowercase letters, digits and dashes, starting with a letter."""
    return bool(name) and name.replace("-", "").isalnum() and name[0].isalpha() and len(name) <= 20 and name == name.lower()


def validate_name(name: str) -> None:
    if not is_name(name):
        raise UsageError(f"--name {name!r} is not a valid lab name", "use 1-20 lowercase letters, digits and dashes, starting with a letter")


def container_name(lab: str, index: int) -> str:
    return f"megaprov-{lab}-node{index}"


def network_name(lab: str) -> str:
    return f"megaprov-{lab}"


def podman_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CONTAINERS_CONF"] = str(LAB_FILES / "containers.conf")
    return env


def podman(*args: str, check: bool = True, input_bytes: bytes | None = None, timeout: float = 600) -> str:
    if shutil.which("podman") is None:
        raise EnvironmentProblem("podman is not installed", "run scripts/setup.sh (apt-get install podman runc netavark aardvark-dns)")
    proc = subprocess.run(["podman", *args], capture_output=True, env=podman_env(), input=input_bytes, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        err = proc.stderr.decode(errors="replace").strip().splitlines()
        raise EnvironmentProblem(
            f"podman {args[0]} failed: {err[-1] if err else 'exit ' + str(proc.returncode)}",
            "see `podman info`; the lab needs podman with runc (scripts/setup.sh)",
        )
    return proc.stdout.decode(errors="replace")


def image_tag() -> str:
    digest = hashlib.sha256()
    for name in IMAGE_FILES:
        digest.update((LAB_FILES / name).read_bytes())
    return f"{NODE_IMAGE}:{digest.hexdigest()[:12]}"


def _image_exists(ref: str) -> bool:
    if shutil.which("podman") is None:
        raise EnvironmentProblem("podman is not installed", "run scripts/setup.sh (apt-get install podman runc netavark aardvark-dns)")
    return subprocess.run(["podman", "image", "exists", ref], env=podman_env(), check=False).returncode == 0


def ensure_image(progress: Progress = _quiet, mirror: str | None = None) -> str:
    """Build the node image unless the cached one matches the build files. Returns its tag."""
    tag = image_tag()
    if _image_exists(tag):
        progress(f"node image {tag} is cached")
        podman("tag", tag, f"{NODE_IMAGE}:latest")
        return tag
    if not _image_exists(BASE_IMAGE):
        if shutil.which("debootstrap") is None:
            raise EnvironmentProblem("debootstrap is not installed", "run scripts/setup.sh (apt-get install debootstrap)")
        mirror = mirror or os.environ.get("MEGAPROV_DEBIAN_MIRROR", "http://deb.debian.org/debian")
        progress(f"debootstrap Debian 12 from {mirror} (1-2 minutes)")
        with tempfile.TemporaryDirectory(prefix="megaprov-rootfs-") as tmp:
            rootfs = Path(tmp) / "rootfs"
            proc = subprocess.run(
                ["debootstrap", "--variant=minbase", f"--include={DEBOOTSTRAP_PACKAGES}", "bookworm", str(rootfs), mirror],
                capture_output=True,
                check=False,
            )
            if proc.returncode != 0:
                tail = proc.stdout.decode(errors="replace").strip().splitlines()[-1:]
                raise EnvironmentProblem(
                    f"debootstrap failed: {' '.join(tail)}", "check that the Debian mirror is reachable (MEGAPROV_DEBIAN_MIRROR)"
                )
            progress("import the base image")
            tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
            assert tar.stdout is not None
            imp = subprocess.run(["podman", "import", "-", BASE_IMAGE], stdin=tar.stdout, capture_output=True, env=podman_env(), check=False)
            tar.wait()
            if imp.returncode != 0:
                raise EnvironmentProblem(
                    "podman import of the base image failed: " + imp.stderr.decode(errors="replace").strip()[-200:], "see `podman info`"
                )
    progress(f"build node image {tag}")
    podman(
        "build",
        "-q",
        "--network",
        "host",
        "--build-arg",
        f"BASE={BASE_IMAGE}",
        "-t",
        tag,
        "-t",
        f"{NODE_IMAGE}:latest",
        "-f",
        str(LAB_FILES / "Containerfile"),
        str(LAB_FILES),
    )
    return tag


def _inspect(lab: str | None) -> list[tuple[str, Node]]:
    """(lab name, node) for every lab container, or those of one lab: one `podman ps` and one `podman inspect`."""
    label = f"{LABEL}={lab}" if lab else LABEL
    names = podman("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}").split()
    if not names:
        return []
    fields = [
        '{{index .Config.Labels "' + LABEL + '"}}',
        "{{.Name}}",
        "{{.State.Status}}",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        "{{.Config.Hostname}}",
        '{{index .Config.Labels "' + ADDRESS_LABEL + '"}}',
    ]
    fmt = "|".join(fields)
    out = podman("inspect", "--format", fmt, *names, check=False)
    if len(out.splitlines()) < len(names):
        # A container listed a moment ago can be gone (or half removed, by a `lab down` beside this) when it is
        # inspected: inspect them one by one; one podman can no longer read prints nothing and is left out.
        out = "".join(podman("inspect", "--format", fmt, name, check=False) for name in names)
    found = []
    for line in out.splitlines():
        owner, cname, state, address, hostname, fixed = (line.split("|") + [""] * 6)[:6]
        made = re.fullmatch(r"megaprov-(.+)-node([0-9]{1,4})", cname)
        if not made or made.group(1) != owner or not is_name(owner):
            continue  # a container megaprov did not make, under its label (another tool's, a hand-made one)
        # A stopped container has no address on its network; a lab node keeps its fixed one.
        found.append((owner, int(made.group(2)), Node(hostname, cname, address or ("" if fixed.startswith("<no value>") else fixed), state)))
    return [(owner, node) for owner, _index, node in sorted(found, key=lambda item: (item[0], item[1]))]


def nodes(lab: str) -> list[Node]:
    """The containers of one lab, in node order."""
    return [node for _, node in _inspect(lab)]


def labs() -> dict[str, list[Node]]:
    """Every lab on this machine with its nodes."""
    found: dict[str, list[Node]] = {}
    for owner, node in _inspect(None):
        found.setdefault(owner, []).append(node)
    return found


def _wait_booted(cname: str, deadline: float) -> None:
    while True:
        proc = subprocess.run(["podman", "exec", cname, "systemctl", "is-system-running"], capture_output=True, env=podman_env(), check=False)
        state = proc.stdout.decode().strip()
        if state in ("running", "degraded"):
            return
        if time.monotonic() > deadline:
            raise EnvironmentProblem(
                f"lab node {cname} did not finish booting (systemd says {state or 'nothing'})", f"inspect it with `podman logs {cname}`"
            )
        time.sleep(0.5)


def _wait_ssh(address: str, key: Path, known_hosts: Path, deadline: float) -> None:
    while True:
        try:
            with socket.create_connection((address, 22), timeout=2):
                pass
            proc = subprocess.run(
                [
                    "ssh",
                    "-i",
                    str(key),
                    "-o",
                    "BatchMode=yes",
                    "-o",
                    "StrictHostKeyChecking=yes",
                    "-o",
                    f"UserKnownHostsFile={known_hosts}",
                    "-o",
                    "ConnectTimeout=5",
                    f"root@{address}",
                    "true",
                ],
                capture_output=True,
                check=False,
                timeout=20,
            )
            if proc.returncode == 0:
                return
            reason = proc.stderr.decode(errors="replace").strip()
        except OSError as exc:
            reason = str(exc)
        if time.monotonic() > deadline:
            raise EnvironmentProblem(
                f"lab node {address} is not reachable over SSH ({reason})", "run `megaprov lab down` and `megaprov lab up` again"
            )
        time.sleep(0.5)


def choose_subnet(lab: str, used: list[str]) -> str:
    """The lab's /24: the one its name hashes to, or the next one that overlaps nothing in ``used``. Pure.

    The same name gets the same subnet whenever it is free, so a lab that is recreated gets its old addresses back.
    """
    taken = [ipaddress.ip_network(u, strict=False) for u in used]
    candidates = list(LAB_POOL.subnets(new_prefix=LAB_PREFIX))
    start = int.from_bytes(hashlib.sha256(lab.encode()).digest()[:4], "big") % len(candidates)
    for offset in range(len(candidates)):
        subnet = candidates[(start + offset) % len(candidates)]
        if not any(subnet.overlaps(t) for t in taken if t.version == 4):
            return str(subnet)
    raise EnvironmentProblem(f"every /24 of {LAB_POOL} is in use", "remove labs you no longer need (`megaprov lab status`, `megaprov lab down`)")


def node_address(subnet: str, index: int) -> str:
    """The fixed address of node ``index`` (1-based) in the lab's subnet: .1 is the gateway, node1 is .2. Pure."""
    net = ipaddress.IPv4Network(subnet)
    if not 1 <= index <= min(MAX_NODES, net.num_addresses - 3):
        raise UsageError(f"node {index} does not fit in subnet {subnet}", f"use 1 to {MAX_NODES} nodes")
    return str(net.network_address + 1 + index)


def used_subnets() -> list[str]:
    """Subnets this machine already uses: every podman network's and every address on a host interface."""
    used: list[str] = []
    names = podman("network", "ls", "--format", "{{.Name}}").split()
    if names:
        for net in json.loads(podman("network", "inspect", *names) or "[]"):
            used += [s["subnet"] for s in net.get("subnets") or [] if s.get("subnet")]
    proc = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=False)
    for line in proc.stdout.splitlines():
        fields = line.split()
        if "inet" in fields:
            used.append(fields[fields.index("inet") + 1])
    return used


def network_create_argv(lab: str, subnet: str) -> list[str]:
    """The podman arguments that create the lab's network with its own subnet. Pure."""
    return ["network", "create", "--subnet", subnet, "--label", f"{LABEL}={lab}", network_name(lab)]


def node_create_argv(lab: str, index: int, subnet: str, image: str, ca: str | None, wheels: Path, git: Path | None = None) -> list[str]:
    """The podman arguments that create node ``index`` of the lab at its fixed address. Pure."""
    cname = container_name(lab, index)
    args = [
        "create",
        "--name",
        cname,
        "--hostname",
        f"node{index}",
        "--label",
        f"{LABEL}={lab}",
        "--label",
        f"{ADDRESS_LABEL}={node_address(subnet, index)}",
        "--network",
        network_name(lab),
        "--ip",
        node_address(subnet, index),
        "--network-alias",
        f"node{index}",
        "--no-hosts",
        "--systemd",
        "always",
    ]
    if ca:
        args += ["-v", f"{ca}:/etc/host-ca.crt:ro"]
    args += ["-v", f"{wheels}:{LAB_WHEELHOUSE}:ro"]
    if git is not None:
        args += ["-v", f"{git}:{LAB_GIT}:ro"]
    # node1 is [head] and so the NFS server: NFS-Ganesha exports a real file system (the volume at
    # LAB_EXPORT_DIR, not the overlay root) and needs CAP_DAC_READ_SEARCH to open files by handle. The kernel
    # here has no NFS client, so every node (node1 too) gets the volume at LAB_EXPORT_DIR and sees the training
    # share at /shared through a FUSE daemon with NFS root_squash semantics (lab_files/rootsquash_fs.py): root on a
    # node is nobody there, as on a real NFS mount. FUSE needs /dev/fuse and CAP_SYS_ADMIN to mount.
    args += ["-v", f"{volume_name(lab)}:{LAB_EXPORT_DIR}", "--device", "/dev/fuse", "--cap-add", "SYS_ADMIN"]
    # Slurm's epilog (root) finds a job's strays by SLURM_JOB_ID in their environment: reading another user's
    # /proc/PID/environ needs CAP_SYS_PTRACE, which root has on a real node and a container lacks by default.
    args += ["--cap-add", "SYS_PTRACE"]
    # Containers in a node as the cluster user (rootless podman for launch.container, enroot under pyxis) mount a /proc
    # of their own, which the kernel refuses while parts of the node's /proc are masked or read-only: unmasked. The
    # node's /proc/sys is then the lab host's kernel settings, so the image masks systemd-sysctl (lab_files/Containerfile).
    args += ["--security-opt", "unmask=/proc/*"]
    if index == 1:
        args += ["--cap-add", "DAC_READ_SEARCH"]
    for source, target in LAB_GPU_DEVICES:
        args += ["--device", f"{source}:{target}"]
    return [*args, image]


def _network_subnet(lab: str) -> str | None:
    """The subnet of the lab's network, or None when it does not exist."""
    if subprocess.run(["podman", "network", "exists", network_name(lab)], env=podman_env(), check=False).returncode != 0:
        return None
    found = json.loads(podman("network", "inspect", network_name(lab)) or "[]")
    subnets = [s["subnet"] for net in found for s in net.get("subnets") or [] if ":" not in s.get("subnet", ":")]
    return subnets[0] if subnets else None


def ensure_network(lab: str, progress: Progress = _quiet) -> str:
    """Create the lab's network on a subnet of its own unless it exists; return its subnet."""
    subnet = _network_subnet(lab)
    if subnet:
        return subnet
    used = used_subnets()
    for _ in range(8):  # another lab may take the same subnet between our look and our create
        subnet = choose_subnet(lab, used)
        progress(f"create network {network_name(lab)} ({subnet})")
        proc = subprocess.run(["podman", *network_create_argv(lab, subnet)], capture_output=True, text=True, env=podman_env(), check=False)
        if proc.returncode == 0:
            return subnet
        existing = _network_subnet(lab)
        if existing:  # created by a concurrent `lab up` of the same name
            return existing
        used.append(subnet)
    raise EnvironmentProblem(f"podman could not create network {network_name(lab)}: {proc.stderr.strip()[-200:]}", "see `podman network ls`")


def _check_share(node: Node) -> None:
    """The node sees the training share root-squashed (its FUSE daemon runs), not the raw volume."""
    fstype = podman("exec", node.container, "findmnt", "-n", "-o", "FSTYPE", "--mountpoint", LAB_SHARED_DIR, check=False).strip()
    if fstype != LAB_SHARE_FSTYPE:
        raise EnvironmentProblem(
            f"lab node {node.name} has no root-squashed {LAB_SHARED_DIR} (found {fstype or 'nothing mounted'})",
            f"see `podman exec {node.container} systemctl status megaprov-lab-share`; the lab needs /dev/fuse on this machine",
        )


def _host_key(node: Node, deadline: float) -> str:
    """The node's ed25519 host key as ``TYPE BASE64`` (generated at its first boot)."""
    while True:
        host_key = podman("exec", node.container, "sh", "-c", "cat /etc/ssh/ssh_host_ed25519_key.pub 2>/dev/null || true").split()[:2]
        if host_key:
            return " ".join(host_key)
        if time.monotonic() > deadline:
            raise EnvironmentProblem(f"lab node {node.name} has no SSH host key", f"inspect it with `podman logs {node.container}`")
        time.sleep(0.3)


def lab_dir(root: Path, lab: str) -> Path:
    """A lab's inventory, keys and known_hosts under megaprov's state directory ``root`` (a checked name: never a path)."""
    validate_name(lab)
    return root / "lab" / lab


def inventory_path(root: Path, lab: str) -> Path:
    return lab_dir(root, lab) / "inventory.ini"


def share_host_dir(lab: str) -> Path:
    """Where this machine holds the lab's shared directory (the volume's data)."""
    return LAB_SHARES / lab / "shared"


def volume_create_argv(lab: str) -> list[str]:
    """The podman arguments that create the lab's volume on share_host_dir (a bind: a real file system for
    NFS-Ganesha, reachable by the cluster user on this machine). Pure."""
    return [
        "volume", "create", "--label", f"{LABEL}={lab}",
        "--opt", "type=none", "--opt", "o=bind", "--opt", f"device={share_host_dir(lab)}",
        volume_name(lab),
    ]  # fmt: skip


def ensure_volume(lab: str) -> None:
    """The lab's volume and its directory (0755 down from /, so the cluster user reaches it) unless the volume exists."""
    if subprocess.run(["podman", "volume", "exists", volume_name(lab)], env=podman_env(), check=False).returncode == 0:
        return
    directory = share_host_dir(lab)
    if directory.exists():  # left by a lab removed by volume name only: a new lab starts with an empty share
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    for path in (LAB_SHARES.parent, LAB_SHARES, directory.parent, directory):
        path.chmod(0o755)
    podman(*volume_create_argv(lab))


def volume_name(lab: str) -> str:
    """The podman volume holding the lab's shared directory on node1 (the NFS server)."""
    return f"megaprov-lab-{lab}-shared"


def _mount_source(container: str, destination: str) -> str | None:
    """The host directory mounted at ``destination`` in the container, or None."""
    out = podman("inspect", "--format", "{{range .Mounts}}{{.Destination}}\t{{.Source}}\n{{end}}", container)
    return next((src for dst, _, src in (line.partition("\t") for line in out.splitlines()) if dst == destination), None)


def megatron_source() -> Path | None:
    """The Megatron-LM tree named by MEGAPROV_MEGATRON_LM, or None (the lab then clones GitHub's)."""
    given = os.environ.get(MEGATRON_SOURCE_ENV, "")
    if not given:
        return None
    path = Path(given).expanduser()
    if not (path.is_file() or (path / "megatron").is_dir()):
        raise UsageError(
            f"{MEGATRON_SOURCE_ENV}={given} is neither a Megatron-LM tree nor an archive of one",
            f"point it at a directory holding megatron/ and pretrain_gpt.py, or a git archive tarball of {LAB_MEGATRON_TAG}; or unset it",
        )
    return path


def render_inventory(lab: str, members: list[Node], key: Path, known_hosts: Path, shared: str, megatron_remote: str | None = None) -> tuple[str, str]:
    """The lab's inventory.ini and group_vars/all.yml. Pure."""
    lines = [f"# megaprov lab '{lab}': written by `megaprov lab up`, removed by `megaprov lab down`.", "[head]", members[0].name, "", "[gpu_nodes]"]
    lines += [f"{n.name} ansible_host={n.address}" for n in members]
    inventory = "\n".join(lines) + "\n"
    group_vars = (
        "---\n"
        f"# Lab nodes are GPU-less containers of lab '{lab}'.\n"
        "ansible_user: root\n"
        f"ansible_ssh_private_key_file: {key}\n"
        f"ansible_ssh_common_args: -o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes\n"
        "megaprov_lab: true\n"
        "megaprov_gpu_expected: false\n"
        "# Containers share the host's clock and cannot steer it; /proc/sys is read-only in them.\n"
        "common_chrony_steer_clock: false\n"
        "common_sysctl_apply: false\n"
        "# The lab's disks are the host's: a short write test is enough.\n"
        "preflight_write_test_mb: 64\n"
        "# No kernel NFS here: NFS-Ganesha serves the shared directory from node1, the nodes reach it with libnfs.\n"
        "# Training sees it at /shared, root-squashed as on an NFS mount (the node image's megaprov-lab-share).\n"
        "nfs_server_implementation: ganesha\n"
        f"nfs_server_export_dir: {LAB_EXPORT_DIR}\n"
        "nfs_server_ganesha_graceless: true\n"
        "nfs_client_mode: libnfs\n"
        "# CPU nodes, no package index for torch's CPU build: the wheelhouse `lab up` builds, mounted read-only.\n"
        "pytorch_source: wheelhouse\n"
        f"pytorch_wheelhouse: {LAB_WHEELHOUSE}\n"
        "# Megatron-LM's real tree: every node checks it out, builds its dataset helpers (which the lab trainer's jobs import)\n"
        "# and builds a model from rendered arguments with its own training code, as the cluster user. pretrain_gpt.py itself\n"
        "# needs CUDA; the lab's jobs run megaprov's lab trainer.\n"
        "megatron_checkout: true\n"
        + (
            f"# From the tree {MEGATRON_SOURCE_ENV} named, as a git remote every node mounts (the head's cache mirrors it).\n"
            f"package_cache_git_repos: {{megatron: {megatron_remote}}}\n"
            if megatron_remote
            else ""
        )
        + "# Slurm runs the lab's jobs with launch.launcher: slurm. The nodes are containers whose cgroup controllers are\n"
        "# read-only: Slurm's container profile. Each node has two stand-in GPU device files for gres.\n"
        "megaprov_scheduler: slurm\n"
        "slurm_profile: container\n"
        f"slurm_gpus_per_node: {len(LAB_GPU_DEVICES)}\n"
        "# A stopped node is DOWN after 30 s (Slurm's default is 300), so that a lost node's job continues sooner.\n"
        "slurm_slurmd_timeout: 30\n"
        "# enroot (pyxis's runtime, where the containers stage is on) skips its cgroups hook: a node's /proc/self/cgroup\n"
        "# names this machine's cgroup paths, which the node's /sys/fs/cgroup does not hold. A private cgroup namespace\n"
        "# would give the node its own, but on a cgroup v1 host its systemd then leaves its cgroup and podman exec fails.\n"
        "enroot_disabled_hooks: [10-cgroups.sh]\n"
        "# The head's package cache: every node's apt downloads through it, the wheelhouse is indexed there.\n"
        "megaprov_package_cache: true\n"
        f"package_cache_wheelhouse: {LAB_WHEELHOUSE}\n"
        "# Prometheus, the alert rules and Alertmanager on the head, node-exporter everywhere, journals to the head; the\n"
        "# head's alert recorder keeps what fired (/var/lib/megaprov-alerts/alerts.jsonl).\n"
        "megaprov_observe: true\n"
        "prometheus_alert_recorder: true\n"
        "# The containers cannot make systemd-journal-upload's dynamic-user mount namespace: a static user instead.\n"
        "central_logs_sandbox: false\n"
        "# Grafana's repository is out of reach: its data source and megaprov's dashboards are only provisioned.\n"
        'grafana_apt_repo: ""\n'
        "# This machine sees the nodes' shared directory as the volume's directory.\n"
        f"megaprov_controller_shared_dir: {shared}\n"
    )
    return inventory, group_vars


def up(root: Path, lab: str, count: int, progress: Progress = _quiet, boot_timeout: float = 120) -> tuple[Path, list[Node]]:
    """Start the lab (or restart/reuse it with ``count`` nodes); return the inventory path and the nodes."""
    validate_name(lab)
    if not 1 <= count <= MAX_NODES:
        raise UsageError(f"--nodes {count} is out of range", f"use 1 to {MAX_NODES}")
    existing = nodes(lab)
    if existing and len(existing) != count:
        raise UsageError(f"lab {lab!r} already exists with {len(existing)} node(s)", f"run `megaprov lab down --name {lab}` first")
    for node in existing:
        if node.state != "running":  # stopped by a reboot or the end of a session: start it again
            progress(f"start stopped {node.container}")
            podman("start", node.container)
    directory = lab_dir(root, lab)
    key = directory / "id_ed25519"
    known_hosts = directory / "known_hosts"
    tag = ensure_image(progress)
    progress("wheelhouse (torch CPU build, megatron-core, uv) for the nodes")
    wheels = wheelhouse.build()
    source = megatron_source()
    git = None
    if source is not None:
        progress(f"Megatron-LM {LAB_MEGATRON_TAG} from {source} as a git remote for the nodes")
        git = gitsource.remote_from_tree(source, "Megatron-LM", LAB_MEGATRON_TAG, cache_dir() / "git")
    if existing:  # nodes keep the mounts they were made with: the inventory must say what they have
        mounted = _mount_source(existing[0].container, LAB_GIT)
        if (mounted is None) != (git is None) or (git is not None and mounted != str(git.parent)):
            have = f"Megatron-LM from {mounted}" if mounted else "no Megatron-LM tree (GitHub)"
            raise UsageError(
                f"lab {lab!r} was made with {have}, and {MEGATRON_SOURCE_ENV} now asks for {source or 'GitHub'}",
                f"run `megaprov lab down --name {lab}` first, or set {MEGATRON_SOURCE_ENV} as when the lab was made",
            )
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o700)
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"megaprov-lab-{lab}", "-f", str(key)], check=True)
    if not existing:
        subnet = ensure_network(lab, progress)
        ensure_volume(lab)
        ca = next((c for c in HOST_CA_CANDIDATES if Path(c).is_file()), None)
        for index in range(1, count + 1):
            cname = container_name(lab, index)
            progress(f"start {cname} at {node_address(subnet, index)} ({index}/{count})")
            podman(*node_create_argv(lab, index, subnet, tag, ca, wheels, git.parent if git else None))
            podman("cp", str(key.with_suffix(".pub")), f"{cname}:/root/.ssh/authorized_keys")
            podman("start", cname)
    deadline = time.monotonic() + boot_timeout
    members = nodes(lab)
    pins = []
    for index, node in enumerate(members, start=1):
        progress(f"wait for {node.name} to boot ({index}/{count})")
        _wait_booted(node.container, deadline)
        pins.append(f"{node.address},{node.name} {_host_key(node, deadline)}")
    known_hosts.write_text("\n".join(pins) + "\n")
    for index, node in enumerate(members, start=1):
        progress(f"wait for SSH on {node.name} ({index}/{count})")
        _wait_ssh(node.address, key, known_hosts, deadline)
        _check_share(node)
    # a lab made before the volume was a bind (podman's own storage) keeps its mount point
    found = podman("volume", "inspect", "--format", "{{.Options.device}}|{{.Mountpoint}}", volume_name(lab)).strip()
    device, mountpoint = (found.split("|") + [""])[:2]
    shared = device if device and not device.startswith("<no value>") else mountpoint
    inventory, group_vars = render_inventory(lab, members, key, known_hosts, shared, f"{LAB_GIT}/{git.name}" if git else None)
    (directory / "group_vars").mkdir(exist_ok=True)
    (directory / "group_vars" / "all.yml").write_text(group_vars)
    path = directory / "inventory.ini"
    path.write_text(inventory)
    # Addresses and host keys may have changed: facts cached for this inventory are stale.
    shutil.rmtree(fact_cache_dir(path), ignore_errors=True)
    return path, members


def down(root: Path, lab: str, progress: Progress = _quiet) -> list[str]:
    """Remove the lab's containers, network and inventory directory. Returns what was removed."""
    validate_name(lab)
    removed: list[str] = []
    for node in nodes(lab):
        progress(f"remove {node.container}")
        podman("rm", "-f", "-t", "3", node.container)
        removed.append(node.container)
    if subprocess.run(["podman", "network", "exists", network_name(lab)], env=podman_env(), check=False).returncode == 0:
        podman("network", "rm", network_name(lab))
        removed.append(network_name(lab))
    if subprocess.run(["podman", "volume", "exists", volume_name(lab)], env=podman_env(), check=False).returncode == 0:
        podman("volume", "rm", volume_name(lab))
        removed.append(volume_name(lab))
    if share_host_dir(lab).parent.is_dir():
        shutil.rmtree(share_host_dir(lab).parent)
        removed.append(str(share_host_dir(lab).parent))
    directory = lab_dir(root, lab)
    if directory.exists():
        shutil.rmtree(directory)
        removed.append(str(directory))
    return removed


def find_node(lab: str, name: str) -> Node:
    """One node of an existing lab by its inventory name (node3); a usage error names what exists."""
    validate_name(lab)
    members = nodes(lab)
    if not members:
        raise UsageError(f"lab {lab!r} does not exist", "see `megaprov lab status`, or start it with `megaprov lab up --name " + lab + "`")
    for node in members:
        if node.name == name:
            return node
    raise UsageError(f"lab {lab!r} has no node {name!r}", "use one of: " + ", ".join(n.name for n in members))


def pinned_keys(known_hosts: str) -> dict[str, str]:
    """Host name or address -> pinned ``TYPE BASE64``, from the lab's known_hosts (``ADDRESS,NAME TYPE KEY``). Pure."""
    pins: dict[str, str] = {}
    for line in known_hosts.splitlines():
        fields = line.split()
        if len(fields) >= 3 and not line.startswith("#"):
            for host in fields[0].split(","):
                pins[host] = " ".join(fields[1:3])
    return pins


def inventory_addresses(inventory: str) -> dict[str, str]:
    """Node name -> ansible_host from the inventory ``render_inventory`` writes. Pure."""
    found: dict[str, str] = {}
    for line in inventory.splitlines():
        fields = line.split()
        for field in fields[1:]:
            if field.startswith("ansible_host="):
                found[fields[0]] = field.split("=", 1)[1]
    return found


def stop(lab: str, name: str, timeout: float = 30) -> Node:
    """Stop one node the way a machine is powered off (systemd shuts down; the container and its disk stay)."""
    node = find_node(lab, name)
    podman("stop", "-t", str(int(timeout)), node.container, timeout=timeout + 30)
    return find_node(lab, name)


def start(root: Path, lab: str, name: str, progress: Progress = _quiet, boot_timeout: float = 120) -> Node:
    """Start one stopped node, wait for boot and SSH, and check it came back at its address with its pinned host key."""
    node = find_node(lab, name)
    directory = lab_dir(root, lab)
    key, known_hosts, inventory = directory / "id_ed25519", directory / "known_hosts", directory / "inventory.ini"
    pins = pinned_keys(known_hosts.read_text()) if known_hosts.is_file() else {}
    expected = inventory_addresses(inventory.read_text()).get(name) if inventory.is_file() else None
    if name not in pins or not expected or not key.is_file():
        raise EnvironmentProblem(
            f"lab {lab!r} has no inventory entry or pinned host key for {name} in {directory}", f"run `megaprov lab up --name {lab}`"
        )
    if node.state != "running":
        progress(f"start {node.container}")
        podman("start", node.container)
    deadline = time.monotonic() + boot_timeout
    progress(f"wait for {name} to boot")
    _wait_booted(node.container, deadline)
    node = find_node(lab, name)
    if node.address != expected:
        raise EnvironmentProblem(
            f"lab node {name} came back at {node.address}, its inventory says {expected}", f"run `megaprov lab down --name {lab}` and `lab up` again"
        )
    found = _host_key(node, deadline)
    if found != pins[name]:
        raise EnvironmentProblem(
            f"lab node {name} has a new SSH host key ({found.split()[0]}), not the pinned one", f"inspect it with `podman logs {node.container}`"
        )
    progress(f"wait for SSH on {name} at {node.address}")
    _wait_ssh(node.address, key, known_hosts, deadline)
    _check_share(node)
    return node
