"""The lab's root-squashed share (megaprov/cluster/lab_files/rootsquash_fs.py): root_squash's mapping, and the mounted daemon
on this machine (root, /dev/fuse and Debian's python3-fusepy): root is nobody there, the cluster user is itself."""

import importlib
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from megaprov.paths import LAB_FILES

SQUASHFS = LAB_FILES / "rootsquash_fs.py"
SYSTEM_PYTHON = "/usr/bin/python3"
USER = 2000  # ssh_mesh_uid's default: the cluster user


def load():
    """By its package name, so that the mutation benchmark's record of which test calls which function sees it."""
    return importlib.import_module("megaprov.cluster.lab_files.rootsquash_fs")


def test_root_and_its_group_are_squashed_to_nobody_and_other_ids_kept():
    squash = load().squash
    assert squash(0, 0, [0, 4, 2000]) == (65534, 65534, [4, 2000, 65534])
    assert squash(2000, 2000, [2000]) == (2000, 2000, [2000])
    assert squash(0, 2000, []) == (65534, 2000, [])


def _fusepy_available() -> bool:
    if not Path(SYSTEM_PYTHON).exists():
        return False
    return subprocess.run([SYSTEM_PYTHON, "-c", "import fusepy"], capture_output=True, check=False).returncode == 0


# Under the mutation benchmark (MEGAPROV_MUTATION=1) the daemon's copy is the mutated one, which imports mutmut; the
# system Python that runs it (for fusepy) has no mutmut, so the daemon tests are left to the fast tiers.
needs_fuse = pytest.mark.skipif(
    bool(os.environ.get("MEGAPROV_MUTATION"))
    or os.geteuid() != 0
    or not os.path.exists("/dev/fuse")
    or shutil.which("fusermount") is None
    or not _fusepy_available(),
    reason="not under the mutation benchmark; needs root, /dev/fuse, fusermount and python3-fusepy (apt-get install python3-fusepy fuse)",
)


@pytest.fixture
def share():
    """The daemon serving backing/ at share/: u/ is the cluster user's (0755), r/ root's (0755). In a directory of
    /tmp that the cluster user can traverse (pytest's tmp_path lies under a 0700 one)."""
    tmp_path = Path(tempfile.mkdtemp(prefix="megaprov-squash-"))
    backing, mount = tmp_path / "backing", tmp_path / "share"
    for d in (backing / "u", backing / "r", mount):
        d.mkdir(parents=True)
    os.chown(backing / "u", USER, USER)
    for d in (tmp_path, backing, backing / "u", backing / "r"):
        d.chmod(0o755)
    proc = subprocess.Popen([SYSTEM_PYTHON, str(SQUASHFS), str(backing), str(mount)], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while not os.path.ismount(mount):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"rootsquash_fs did not mount: {proc.communicate()[1]}")
        time.sleep(0.1)
    try:
        yield backing, mount
    finally:
        subprocess.run(["fusermount", "-u", "-z", str(mount)], check=False)
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(tmp_path, ignore_errors=True)


def as_user(*argv):
    return subprocess.run(list(argv), user=USER, group=USER, extra_groups=[], capture_output=True, text=True, check=False)


@needs_fuse
def test_root_cannot_write_into_the_cluster_users_or_roots_directories(share):
    backing, mount = share
    for where in ("u", "r", "."):
        with pytest.raises(PermissionError):
            (mount / where / "by-root").touch()
    with pytest.raises(PermissionError):
        (mount / "r" / "made-by-root").mkdir()
    assert sorted(p.name for p in backing.rglob("*")) == ["r", "u"]


@needs_fuse
def test_the_cluster_user_writes_as_itself_and_root_cannot_take_its_files(share):
    backing, mount = share
    script = f"set -e; mkdir -p {mount}/u/job/logs; echo hi > {mount}/u/job/logs/a; mv {mount}/u/job/logs/a {mount}/u/job/b; cat {mount}/u/job/b"
    done = as_user("sh", "-c", script)
    assert done.returncode == 0 and done.stdout == "hi\n", done.stderr
    st = (backing / "u" / "job" / "b").stat()
    assert (st.st_uid, st.st_gid) == (USER, USER)
    assert (mount / "u" / "job" / "b").read_text() == "hi\n"  # root still reads world-readable files, as nobody
    with pytest.raises(PermissionError):
        os.chown(mount / "u" / "job" / "b", 0, 0)
    with pytest.raises(PermissionError):
        (mount / "u" / "job" / "b").unlink()
    with pytest.raises(PermissionError):
        (mount / "u" / "job" / "b").write_text("overwritten by root")
    assert (backing / "u" / "job" / "b").read_text() == "hi\n"


@needs_fuse
def test_the_old_launch_commands_fail_as_they_do_on_a_root_squashed_nfs_mount(share):
    """job_launch.yml used to run `install -d -o USER -g USER` as root on the share."""
    _, mount = share
    old = subprocess.run(["install", "-d", "-o", str(USER), "-g", str(USER), "-m", "0755", str(mount / "u" / "job")], capture_output=True, text=True)
    assert old.returncode != 0 and not (mount / "u" / "job").exists(), old.stderr
    new = as_user("install", "-d", "-m", "0755", str(mount / "u" / "job"))
    assert new.returncode == 0, new.stderr
