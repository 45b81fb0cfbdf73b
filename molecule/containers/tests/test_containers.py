"""The container stack as it really runs: the CDI spec of the GPU node, made for the driver now installed (prepare
upgraded it after a first run), and podman itself resolving nvidia.com/gpu devices from it; enroot from its release
packages importing an image the cluster user built with podman and running it; pyxis loaded by srun and running a
job step in a container."""

import shlex

import pytest

from tests.molecule.inventory import USER, as_user, controller, names, node, variable

(GPU,) = names("gpu_nodes")
HOSTS = names("all")
SPEC = "/etc/cdi/nvidia.yaml"
IMAGE = "localhost/megaprov-tiny:1"
# nested podman in the lab's containers: no new network namespace (its loopback needs CAP_NET_ADMIN), no cgroups (the
# lab's cgroup controllers are read-only)
PODMAN_RUN = "podman run --rm --network host --cgroups=disabled"
# A minimal root filesystem from the node's own dash and cat, with a marker file, for the images built below.
ROOTFS = """set -e
R=$(mktemp -d)
for f in /bin/dash /bin/cat /bin/ls; do
  mkdir -p "$R$(dirname $f)"; cp "$f" "$R$f"
  for l in $(ldd "$f" | grep -o '/[^ ]*'); do mkdir -p "$R$(dirname $l)"; cp -L "$l" "$R$l"; done
done
ln -s dash "$R/bin/sh"; mkdir -p "$R/etc"; echo 'megaprov image' > "$R/etc/megaprov-image"
tar -C "$R" -c . | podman import --change CMD=/bin/sh - {image} >/dev/null
rm -rf "$R"
"""


@pytest.fixture(scope="module")
def gpu():
    return node(GPU)


@pytest.fixture(scope="module")
def root_image(gpu):
    """An image in root's podman storage, made on the node."""
    out = gpu.run(f"bash -c {shlex.quote(ROOTFS.format(image=IMAGE))}")
    assert out.rc == 0, out.stderr
    return IMAGE


def test_the_toolkit_is_nvidias_four_packages_at_the_pinned_version(gpu):
    want = "1.18.1-1"  # container_toolkit_version's default (the fixture repository also serves 1.17.8-1)
    for name in ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1"):
        package = gpu.package(name)
        assert package.is_installed and package.version == want, (name, package.version)
    held = gpu.check_output("apt-mark showhold").split()
    assert "nvidia-container-toolkit" in held and "libnvidia-container1" in held
    assert gpu.package("podman").is_installed


def test_rootless_podman_keeps_the_cluster_users_images_on_local_disk(gpu):
    """Not in the home (NFS on a cluster): containers-storage.conf's rootless_storage_path, under [storage] where podman
    4.3 reads it, with $UID replaced by podman; the parent sticky and open, the user's own 0700."""
    parent, mine = gpu.file("/var/lib/podman-rootless"), gpu.file("/var/lib/podman-rootless/2000")
    assert (parent.user, parent.mode) == ("root", 0o1777) and (mine.user, mine.mode) == (USER, 0o700)
    out = as_user(gpu, "podman info --format '{{.Store.GraphRoot}}'")
    assert out.rc == 0 and out.stdout.strip() == "/var/lib/podman-rootless/2000/storage", (out.stdout, out.stderr)
    assert not gpu.file(f"/home/{USER}/.local/share/containers/storage/overlay").exists


def test_the_cdi_spec_lists_every_gpu_by_index_and_all(gpu):
    spec = gpu.file(SPEC)
    assert spec.is_file and (spec.user, spec.mode) == ("root", 0o644)
    listed = gpu.check_output("nvidia-ctk cdi list").split()
    assert listed == ["nvidia.com/gpu=0", "nvidia.com/gpu=all"]
    text = spec.content_string
    assert "kind: nvidia.com/gpu" in text and "cdiVersion: " in text
    for device in ("/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"):
        assert f"path: {device}" in text, device


def test_the_spec_was_regenerated_for_the_upgraded_driver(gpu):
    before, now = variable(GPU, "fixture_driver_before"), variable(GPU, "fixture_driver")
    text = gpu.file(SPEC).content_string
    assert f"libnvidia-ml.so.{now}" in text and f"libnvidia-ml.so.{before}" not in text
    assert gpu.file("/var/lib/megaprov/container_toolkit/cdi-driver-version").content_string.strip() == now


def test_the_refresh_units_write_the_same_spec(gpu):
    # nvidia-cdi-refresh.service (toolkit >= 1.18) takes its output path from the role's drop-in
    out = gpu.check_output("systemctl show -p Environment nvidia-cdi-refresh.service")
    assert f"NVIDIA_CTK_CDI_OUTPUT_FILE_PATH={SPEC}" in out


def test_podman_gives_a_container_the_gpu_devices_and_driver_library_of_the_spec(gpu, root_image):
    out = gpu.run(f"{PODMAN_RUN} --device nvidia.com/gpu=all {root_image} /bin/ls /dev /usr/lib/x86_64-linux-gnu")
    assert out.rc == 0, out.stderr
    seen = out.stdout.split()
    for entry in ("nvidia0", "nvidiactl", "nvidia-uvm", f"libnvidia-ml.so.{variable(GPU, 'fixture_driver')}"):
        assert entry in seen, (entry, out.stdout)


def test_podman_refuses_a_gpu_the_spec_does_not_have(gpu, root_image):
    out = gpu.run(f"{PODMAN_RUN} --device nvidia.com/gpu=7 {root_image} /bin/true")
    assert out.rc != 0 and "unresolvable CDI devices nvidia.com/gpu=7" in out.stderr, out.stderr


def test_enroot_is_the_release_with_its_capabilities(gpu):
    assert gpu.check_output("enroot version").strip() == "4.1.2"
    assert gpu.package("enroot").version == "4.1.2-1" and gpu.package("enroot+caps").is_installed
    assert "cap_sys_admin=ep" in gpu.check_output("getcap /usr/bin/enroot-mksquashovlfs")
    for package in ("squashfs-tools", "jq", "parallel", "zstd", "pigz"):  # the package's Depends, and Recommends
        assert gpu.package(package).is_installed, package


def test_enroot_keeps_per_user_state_on_local_scratch(gpu):
    conf = gpu.file("/etc/enroot/enroot.conf.d/megaprov.conf").content_string
    assert "ENROOT_DATA_PATH /var/lib/enroot/data/user-$(id -u)" in conf
    for parent in ("/run/enroot", "/var/lib/enroot/cache", "/var/lib/enroot/data"):
        d = gpu.file(parent)
        assert d.is_directory and d.mode == 0o1777, parent


@pytest.mark.parametrize("name", HOSTS)
def test_the_hooks_named_disabled_lose_their_execute_bits_and_the_others_keep_them(name):
    host = node(name)
    disabled = variable(name, "enroot_disabled_hooks")
    assert disabled == ["10-cgroups.sh"]
    hooks = host.check_output("ls /etc/enroot/hooks.d").split()
    assert set(disabled) < set(hooks) and "10-devices.sh" in hooks, hooks
    for hook in hooks:
        mode = host.file(f"/etc/enroot/hooks.d/{hook}").mode
        assert (mode & 0o111 == 0) == (hook in disabled), (hook, oct(mode))


def test_the_registry_credentials_are_the_users_alone_and_verbatim(gpu):
    creds = gpu.file(f"/home/{USER}/.config/enroot/.credentials")
    assert (creds.user, creds.mode) == (USER, 0o600)
    lines = [line for line in creds.content_string.splitlines() if not line.startswith("#")]
    # the braces stayed data (!unsafe), the login $oauthtoken as NGC wants it
    assert lines == [
        "machine nvcr.io login $oauthtoken password nvapi-{{not-a-template}}%x",
        "machine containers-head:5000 login megaprov password s3cret",
    ]
    assert gpu.file(f"/home/{USER}/.config/enroot").mode == 0o700


@pytest.fixture(scope="module")
def squashfs(gpu):
    """The cluster user's image: built with rootless podman, imported by enroot (podman://), as that user."""
    home = f"/home/{USER}"
    gpu.run(f"rm -f {home}/tiny.sqsh")
    runtime = f"/tmp/xdg-runtime-{USER}"  # a login session's XDG_RUNTIME_DIR (no logind in the lab)
    script = f"mkdir -p -m 700 {runtime}\nexport XDG_RUNTIME_DIR={runtime}\ncd {home}\n" + ROOTFS.format(image=IMAGE)
    out = as_user(gpu, f"bash -c {shlex.quote(script)}")
    assert out.rc == 0, out.stderr
    out = as_user(gpu, f"env XDG_RUNTIME_DIR={runtime} enroot import -o {home}/tiny.sqsh podman://{IMAGE}")
    # enroot 4.1.2's podman:// import (src/docker.sh, docker::daemon::import) removes its extraction container in an
    # EXIT trap that calls `docker rm` whatever the engine: without a docker command the import ends with status 127
    # (errexit in the trap) after the image is written, and leaves that container in the user's podman storage.
    docker = gpu.exists("docker")
    assert out.rc == 0 or (out.rc == 127 and not docker and "Creating squashfs filesystem" in out.stderr), out.stderr[-2000:]
    as_user(gpu, f"env XDG_RUNTIME_DIR={runtime} podman container prune -f")
    return f"{home}/tiny.sqsh"


def test_enroot_imports_and_runs_an_image_as_the_cluster_user(gpu, squashfs):
    assert gpu.file(squashfs).user == USER
    gpu.run(f"timeout 60 runuser -u {USER} -- enroot remove -f tiny")
    out = as_user(gpu, f"enroot create -n tiny {squashfs}")
    assert out.rc == 0, out.stderr
    assert gpu.file("/var/lib/enroot/data/user-2000/tiny").is_directory  # ENROOT_DATA_PATH of the role's drop-in
    out = as_user(gpu, "enroot start tiny /bin/cat /etc/megaprov-image")
    assert out.rc == 0 and out.stdout.strip() == "megaprov image", (out.stdout, out.stderr)


@pytest.mark.parametrize("name", HOSTS)
def test_pyxis_is_built_for_the_installed_slurm_and_loaded_by_srun(name):
    host = node(name)
    slurm = host.check_output("srun --version").split()[-1]
    assert host.file("/var/lib/megaprov/pyxis/built-for").content_string.strip() == f"pyxis 0.24.0 slurm {slurm} prefix /usr/local"
    assert host.file("/usr/local/lib/slurm/spank_pyxis.so").is_file
    assert "required /usr/local/lib/slurm/spank_pyxis.so" in host.file("/etc/slurm/plugstack.conf.d/pyxis.conf").content_string
    out = host.run("srun --help")
    assert "--container-image" in out.stdout, (out.stdout[-500:], out.stderr)


def test_configless_slurmd_got_the_controllers_plugstack_conf(gpu):
    include = "include /etc/slurm/plugstack.conf.d/*.conf"
    assert include in controller().file("/etc/slurm/plugstack.conf").content_string
    assert include in gpu.file("/run/slurm/conf/plugstack.conf").content_string


def test_a_job_step_runs_in_a_container_image(gpu, squashfs):
    out = as_user(controller(), f"srun -N1 -w {GPU} --container-image={squashfs} /bin/cat /etc/megaprov-image")
    assert out.rc == 0 and out.stdout.strip() == "megaprov image", (out.rc, out.stdout, out.stderr)


def test_an_image_enroot_cannot_find_fails_the_step():
    out = as_user(controller(), f"srun -N1 -w {GPU} --container-image=/nonexistent.sqsh /bin/true")
    assert out.rc != 0 and "pyxis" in out.stderr, (out.rc, out.stderr)


def test_the_toolkit_is_only_on_the_gpu_nodes_and_enroot_on_the_head_too():
    """The head imports squashfs images for pyxis (megaprov image pull): enroot, no toolkit and no CDI spec."""
    head = controller()
    assert head.package("enroot").version == "4.1.2-1"
    assert not head.package("nvidia-container-toolkit").is_installed and not head.file(SPEC).exists
