"""The local lab over podman (megaprov.cluster.lab, issue 36): the podman commands each step runs (exact argv, the
containers.conf it is given), what it makes of podman's answers (`ps`/`inspect` lines, network and volume JSON, `exec`
output), the errors the operator reads when podman, systemd, SSH or the share are not as expected, the node image
cache, `lab down`, `lab stop`/`start` and the pure helpers (subnets, addresses, pinned keys, the inventory).

Stood in, at the edge only: podman, ip, ssh and debootstrap are small programs first on PATH that answer as the real
ones do (from a table the test sets) and record every call; the clock (lab.time) and the TCP connect to a node's port
22 (lab.socket). Everything else (the state directory under tmp_path, ssh-keygen, file modes) is real."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from megaprov.cluster import lab
from megaprov.errors import EnvironmentProblem, UsageError

FAKE = """#!{python}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
name = os.path.basename(sys.argv[0])
argv = sys.argv[1:]
with open(os.path.join(here, "calls.jsonl"), "a") as log:
    log.write(json.dumps({{"prog": name, "argv": argv, "conf": os.environ.get("CONTAINERS_CONF")}}) + "\\n")
answers = json.load(open(os.path.join(here, "answers.json")))
best = None
for i, a in enumerate(answers):
    if a["prog"] == name and argv[: len(a["argv"])] == a["argv"] and (best is None or len(a["argv"]) >= len(answers[best]["argv"])):
        best = i
if best is None:
    sys.stderr.write("Error: unexpected call\\n")
    sys.exit(125)
count_file = os.path.join(here, f"count-{{best}}")
n = int(open(count_file).read()) if os.path.exists(count_file) else 0
open(count_file, "w").write(str(n + 1))
seq = answers[best]["seq"]
out, rc, err = seq[min(n, len(seq) - 1)]
sys.stdout.write(out)
sys.stderr.write(err)
sys.exit(rc)
"""


class Bin:
    """Programs first on PATH that answer from a table (the longest matching argv prefix, the latest of equals) and
    record each call (argv, CONTAINERS_CONF)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.answers: list[dict[str, Any]] = []
        directory.mkdir()
        self._save()

    def install(self, *progs: str) -> None:
        for prog in progs:
            path = self.dir / prog
            path.write_text(FAKE.format(python=sys.executable))
            path.chmod(0o755)

    def answer(self, prog: str, *argv: str, out: str = "", rc: int = 0, err: str = "", then: list[tuple[str, int, str]] | None = None) -> None:
        self.answers.append({"prog": prog, "argv": list(argv), "seq": [(out, rc, err), *(then or [])]})
        self._save()

    def _save(self) -> None:
        (self.dir / "answers.json").write_text(json.dumps(self.answers))

    @property
    def calls(self) -> list[list[str]]:
        return [[c["prog"], *c["argv"]] for c in self.records]

    @property
    def records(self) -> list[dict[str, Any]]:
        path = self.dir / "calls.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture
def fake(tmp_path, monkeypatch) -> Bin:
    made = Bin(tmp_path / "bin")
    made.install("podman", "ip", "ssh", "debootstrap")
    monkeypatch.setenv("PATH", f"{made.dir}:{os.environ['PATH']}")
    return made


class Clock:
    """lab.time: monotonic time that each sleep advances."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch) -> Clock:
    made = Clock()
    monkeypatch.setattr(lab, "time", made)
    return made


CONF = str(lab.LAB_FILES / "containers.conf")


# ---- podman itself


def test_podman_runs_with_the_lab_s_containers_conf_and_returns_its_output(fake, monkeypatch):
    monkeypatch.setenv("CONTAINERS_CONF", "/elsewhere.conf")
    fake.answer("podman", "version", out="4.3.1\n")
    assert lab.podman("version", "--format", "x") == "4.3.1\n"
    assert fake.records == [{"prog": "podman", "argv": ["version", "--format", "x"], "conf": CONF}]
    assert lab.podman_env()["CONTAINERS_CONF"] == CONF
    assert lab.podman_env()["PATH"] == os.environ["PATH"]


def test_a_failed_podman_command_names_its_last_error_line(fake):
    fake.answer("podman", "rm", rc=125, err="warning: one\nError: no such container x\n")
    with pytest.raises(EnvironmentProblem) as caught:
        lab.podman("rm", "x")
    assert caught.value.message == "podman rm failed: Error: no such container x"
    assert caught.value.hint == "see `podman info`; the lab needs podman with runc (scripts/setup.sh)"


def test_a_failed_podman_command_without_a_message_names_its_exit(fake):
    fake.answer("podman", "rm", rc=3)
    with pytest.raises(EnvironmentProblem) as caught:
        lab.podman("rm", "x")
    assert caught.value.message == "podman rm failed: exit 3"


def test_an_unchecked_podman_command_returns_its_output_whatever_its_exit(fake):
    fake.answer("podman", "inspect", out="partial\n", rc=125, err="Error: gone\n")
    assert lab.podman("inspect", "x", check=False) == "partial\n"


def test_podman_feeds_its_input(fake, tmp_path):
    # the fake echoes nothing of stdin; a real program reading it (cat) shows what podman is handed
    (fake.dir / "podman").write_text("#!/bin/sh\ncat\n")
    assert lab.podman("load", input_bytes=b"bytes in") == "bytes in"


def test_without_podman_the_lab_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    for call in (lambda: lab.podman("ps"), lambda: lab._image_exists("x")):
        with pytest.raises(EnvironmentProblem) as caught:
            call()
        assert caught.value.message == "podman is not installed"
        assert caught.value.hint == "run scripts/setup.sh (apt-get install podman runc netavark aardvark-dns)"


def test_an_image_exists_when_podman_says_so(fake):
    fake.answer("podman", "image", "exists", "a")
    fake.answer("podman", "image", "exists", "b", rc=1)
    assert lab._image_exists("a") is True
    assert lab._image_exists("b") is False
    assert fake.records[0] == {"prog": "podman", "argv": ["image", "exists", "a"], "conf": CONF}


# ---- the node image


def test_a_cached_node_image_is_only_tagged_latest(fake):
    tag = lab.image_tag()
    fake.answer("podman", "image", "exists", tag)
    fake.answer("podman", "tag")
    said: list[str] = []
    assert lab.ensure_image(said.append) == tag
    assert said == [f"node image {tag} is cached"]
    assert fake.calls == [["podman", "image", "exists", tag], ["podman", "tag", tag, "localhost/megaprov-node:latest"]]


def test_the_node_image_is_built_on_the_cached_base(fake):
    tag = lab.image_tag()
    fake.answer("podman", "image", "exists", rc=1)
    fake.answer("podman", "image", "exists", lab.BASE_IMAGE)
    fake.answer("podman", "build")
    said: list[str] = []
    assert lab.ensure_image(said.append) == tag
    assert said == [f"build node image {tag}"]
    assert fake.calls[-1] == [
        "podman", "build", "-q", "--network", "host", "--build-arg", "BASE=localhost/megaprov-base:bookworm",
        "-t", tag, "-t", "localhost/megaprov-node:latest", "-f", str(lab.LAB_FILES / "Containerfile"), str(lab.LAB_FILES),
    ]  # fmt: skip
    assert fake.calls[:2] == [["podman", "image", "exists", tag], ["podman", "image", "exists", lab.BASE_IMAGE]]


def test_a_failed_build_is_the_operator_s_error(fake):
    fake.answer("podman", "image", "exists", rc=1)
    fake.answer("podman", "image", "exists", lab.BASE_IMAGE)
    fake.answer("podman", "build", rc=1, err="Error: COPY failed\n")
    with pytest.raises(EnvironmentProblem) as caught:
        lab.ensure_image()
    assert caught.value.message == "podman build failed: Error: COPY failed"


def test_without_a_base_image_debootstrap_makes_it_from_the_mirror(fake, monkeypatch):
    monkeypatch.delenv("MEGAPROV_DEBIAN_MIRROR", raising=False)
    fake.answer("podman", "image", "exists", rc=1)
    fake.answer("debootstrap", rc=1, out="I: one\nE: Failed getting release file\n")
    said: list[str] = []
    with pytest.raises(EnvironmentProblem) as caught:
        lab.ensure_image(said.append)
    assert caught.value.message == "debootstrap failed: E: Failed getting release file"
    assert caught.value.hint == "check that the Debian mirror is reachable (MEGAPROV_DEBIAN_MIRROR)"
    assert said == ["debootstrap Debian 12 from http://deb.debian.org/debian (1-2 minutes)"]
    [boot] = [c for c in fake.calls if c[0] == "debootstrap"]
    assert boot[:4] == ["debootstrap", "--variant=minbase", f"--include={lab.DEBOOTSTRAP_PACKAGES}", "bookworm"]
    assert boot[4].endswith("/rootfs") and Path(boot[4]).parent.name.startswith("megaprov-rootfs-")
    assert boot[5] == "http://deb.debian.org/debian"
    assert not Path(boot[4]).parent.exists()  # the temporary root is removed


def test_the_mirror_comes_from_the_argument_or_the_environment(fake, monkeypatch):
    fake.answer("podman", "image", "exists", rc=1)
    fake.answer("debootstrap", rc=1)
    monkeypatch.setenv("MEGAPROV_DEBIAN_MIRROR", "http://env.example/debian")
    said: list[str] = []
    with pytest.raises(EnvironmentProblem) as caught:
        lab.ensure_image(said.append)
    assert caught.value.message == "debootstrap failed: "
    with pytest.raises(EnvironmentProblem):
        lab.ensure_image(said.append, mirror="http://arg.example/debian")
    assert said == [
        "debootstrap Debian 12 from http://env.example/debian (1-2 minutes)",
        "debootstrap Debian 12 from http://arg.example/debian (1-2 minutes)",
    ]
    assert [c[-1] for c in fake.calls if c[0] == "debootstrap"] == ["http://env.example/debian", "http://arg.example/debian"]


def test_without_debootstrap_the_lab_says_how_to_install_it(fake, monkeypatch):
    (fake.dir / "debootstrap").unlink()
    monkeypatch.setenv("PATH", f"{fake.dir}:/usr/bin:/bin")
    monkeypatch.setattr(lab.shutil, "which", lambda prog: str(fake.dir / prog) if (fake.dir / prog).exists() else None)
    fake.answer("podman", "image", "exists", rc=1)
    with pytest.raises(EnvironmentProblem) as caught:
        lab.ensure_image()
    assert (caught.value.message, caught.value.hint) == ("debootstrap is not installed", "run scripts/setup.sh (apt-get install debootstrap)")


def test_the_base_image_is_imported_from_the_debootstrapped_tree_then_built_on(fake, tmp_path):
    # debootstrap that writes a file into the root it is given; podman import that keeps what tar hands it
    (fake.dir / "debootstrap").write_text('#!/bin/sh\nmkdir -p "$4/etc" && echo bookworm > "$4/etc/debian_version"\n')
    fake.answer("podman", "image", "exists", rc=1)
    fake.answer("podman", "build")
    real = fake.dir / "podman"
    (fake.dir / "podman.py").write_text(real.read_text())
    real.write_text(
        f'#!/bin/sh\nif [ "$1" = import ]; then cat > {tmp_path}/imported.tar; echo "$@" > {tmp_path}/import-args; exit 0; fi\n'
        f'exec {sys.executable} {fake.dir}/podman.py "$@"\n'
    )
    (fake.dir / "podman.py").write_text((fake.dir / "podman.py").read_text().replace("os.path.basename(sys.argv[0])", '"podman"'))
    said: list[str] = []
    assert lab.ensure_image(said.append) == lab.image_tag()
    assert said[1:] == ["import the base image", f"build node image {lab.image_tag()}"]
    assert (tmp_path / "import-args").read_text() == f"import - {lab.BASE_IMAGE}\n"
    import tarfile

    with tarfile.open(tmp_path / "imported.tar") as tar:
        assert tar.extractfile("./etc/debian_version").read() == b"bookworm\n"


def test_a_failed_import_says_podman_s_words(fake, tmp_path):
    (fake.dir / "debootstrap").write_text('#!/bin/sh\nmkdir -p "$4"\n')
    fake.answer("podman", "image", "exists", rc=1)
    fake.answer("podman", "import", rc=125, err="Error: " + "x" * 300 + " storage full\n")
    with pytest.raises(EnvironmentProblem) as caught:
        lab.ensure_image()
    assert caught.value.message == "podman import of the base image failed: " + ("Error: " + "x" * 300 + " storage full")[-200:]
    assert caught.value.hint == "see `podman info`"


# ---- what exists: podman ps and inspect


FMT = (
    '{{index .Config.Labels "io.megaprov.lab"}}|{{.Name}}|{{.State.Status}}|{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}'
    '|{{.Config.Hostname}}|{{index .Config.Labels "io.megaprov.lab.address"}}'
)


def test_one_lab_s_nodes_come_from_one_ps_and_one_inspect_in_node_order(fake):
    fake.answer("podman", "ps", out="megaprov-x-node10\nmegaprov-x-node2\nmegaprov-x-node1\n")
    fake.answer(
        "podman",
        "inspect",
        out="x|megaprov-x-node10|running|10.90.7.11|node10|10.90.7.11\n"
        "x|megaprov-x-node2|exited||node2|10.90.7.3\n"
        "x|megaprov-x-node1|running|10.90.7.2|node1|10.90.7.2\n",
    )
    assert lab.nodes("x") == [
        lab.Node("node1", "megaprov-x-node1", "10.90.7.2", "running"),
        lab.Node("node2", "megaprov-x-node2", "10.90.7.3", "exited"),  # stopped: its fixed address
        lab.Node("node10", "megaprov-x-node10", "10.90.7.11", "running"),
    ]
    assert fake.calls == [
        ["podman", "ps", "-a", "--filter", "label=io.megaprov.lab=x", "--format", "{{.Names}}"],
        ["podman", "inspect", "--format", FMT, "megaprov-x-node10", "megaprov-x-node2", "megaprov-x-node1"],
    ]


def test_a_stopped_node_made_before_the_address_label_has_no_address(fake):
    fake.answer("podman", "ps", out="megaprov-x-node1\n")
    fake.answer("podman", "inspect", out="x|megaprov-x-node1|exited||node1|<no value>\n")
    assert lab.nodes("x") == [lab.Node("node1", "megaprov-x-node1", "", "exited")]


def test_a_short_inspect_line_is_read_with_empty_fields(fake):
    fake.answer("podman", "ps", out="megaprov-x-node1\n")
    fake.answer("podman", "inspect", out="x|megaprov-x-node1|running\n")
    assert lab.nodes("x") == [lab.Node("", "megaprov-x-node1", "", "running")]


def test_no_lab_containers_means_no_inspect(fake):
    fake.answer("podman", "ps", out="\n")
    assert lab.nodes("x") == [] and lab.labs() == {}
    assert [c[1] for c in fake.calls] == ["ps", "ps"]
    assert fake.calls[1] == ["podman", "ps", "-a", "--filter", "label=io.megaprov.lab", "--format", "{{.Names}}"]


def test_every_lab_on_the_machine_with_its_nodes(fake):
    fake.answer("podman", "ps", out="megaprov-b-node1\nmegaprov-a-node2\nmegaprov-a-node1\n")
    fake.answer(
        "podman",
        "inspect",
        out="b|megaprov-b-node1|running|10.90.9.2|node1|10.90.9.2\n"
        "a|megaprov-a-node2|running|10.90.8.3|node2|10.90.8.3\n"
        "a|megaprov-a-node1|running|10.90.8.2|node1|10.90.8.2\n",
    )
    found = lab.labs()
    assert list(found) == ["a", "b"]
    assert found == {
        "a": [lab.Node("node1", "megaprov-a-node1", "10.90.8.2", "running"), lab.Node("node2", "megaprov-a-node2", "10.90.8.3", "running")],
        "b": [lab.Node("node1", "megaprov-b-node1", "10.90.9.2", "running")],
    }


def test_containers_are_inspected_one_by_one_when_one_went_away(fake):
    fake.answer("podman", "ps", out="megaprov-x-node1\nmegaprov-x-node2\n")
    fake.answer("podman", "inspect", rc=125, out="x|megaprov-x-node1|running|10.90.7.2|node1|10.90.7.2\n", err="Error: no such container\n")
    fake.answer("podman", "inspect", "--format", FMT, "megaprov-x-node2", rc=125, err="Error: no such container\n")
    assert lab.nodes("x") == [lab.Node("node1", "megaprov-x-node1", "10.90.7.2", "running")]
    assert fake.calls[2:] == [["podman", "inspect", "--format", FMT, "megaprov-x-node1"], ["podman", "inspect", "--format", FMT, "megaprov-x-node2"]]


# ---- networks and subnets


NETWORKS = [
    {"name": "podman", "subnets": [{"subnet": "10.88.0.0/16", "gateway": "10.88.0.1"}]},
    {"name": "megaprov-a", "subnets": [{"subnet": "10.90.8.0/24"}, {"subnet": "fd00::/64"}, {"gateway": "x"}]},
    {"name": "nosubnets", "subnets": None},
    {"name": "other"},
]

IP_ADDR = (
    "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
    "2: eth0    inet 192.168.1.5/24 brd 192.168.1.255 scope global eth0\\       valid_lft forever\n"
    "3: weird line without an address\n"
)


def test_used_subnets_are_every_podman_network_s_and_every_host_address(fake):
    fake.answer("podman", "network", "ls", out="podman\nmegaprov-a\nnosubnets\nother\n")
    fake.answer("podman", "network", "inspect", out=json.dumps(NETWORKS))
    fake.answer("ip", out=IP_ADDR)
    assert lab.used_subnets() == ["10.88.0.0/16", "10.90.8.0/24", "fd00::/64", "127.0.0.1/8", "192.168.1.5/24"]
    assert fake.calls == [
        ["podman", "network", "ls", "--format", "{{.Name}}"],
        ["podman", "network", "inspect", "podman", "megaprov-a", "nosubnets", "other"],
        ["ip", "-o", "-4", "addr", "show"],
    ]


def test_without_podman_networks_only_the_host_addresses_are_used(fake):
    fake.answer("podman", "network", "ls", out="")
    fake.answer("ip", out=IP_ADDR)
    assert lab.used_subnets() == ["127.0.0.1/8", "192.168.1.5/24"]
    assert [c[:3] for c in fake.calls] == [["podman", "network", "ls"], ["ip", "-o", "-4"]]


def test_an_empty_network_inspect_is_no_subnets(fake):
    fake.answer("podman", "network", "ls", out="a\n")
    fake.answer("podman", "network", "inspect", out="")
    fake.answer("ip", rc=1)
    assert lab.used_subnets() == []


def test_the_lab_s_network_subnet_is_its_first_ipv4_one(fake):
    fake.answer("podman", "network", "exists", "megaprov-a")
    fake.answer("podman", "network", "inspect", "megaprov-a", out=json.dumps([NETWORKS[1]]))
    fake.answer("podman", "network", "exists", "megaprov-b", rc=1)
    fake.answer("podman", "network", "exists", "megaprov-c")
    fake.answer("podman", "network", "inspect", "megaprov-c", out=json.dumps([{"subnets": [{"subnet": "fd00::/64"}, {}]}]))
    fake.answer("podman", "network", "exists", "megaprov-d")
    fake.answer("podman", "network", "inspect", "megaprov-d", out="")
    assert lab._network_subnet("a") == "10.90.8.0/24"
    assert lab._network_subnet("b") is None
    assert lab._network_subnet("c") is None
    assert lab._network_subnet("d") is None
    assert fake.records[:2] == [
        {"prog": "podman", "argv": ["network", "exists", "megaprov-a"], "conf": CONF},
        {"prog": "podman", "argv": ["network", "inspect", "megaprov-a"], "conf": CONF},
    ]
    assert ["podman", "network", "inspect", "megaprov-b"] not in fake.calls


def test_an_existing_network_is_kept(fake):
    fake.answer("podman", "network", "exists", "megaprov-a")
    fake.answer("podman", "network", "inspect", "megaprov-a", out=json.dumps([NETWORKS[1]]))
    said: list[str] = []
    assert lab.ensure_network("a", said.append) == "10.90.8.0/24"
    assert said == [] and [c[2] for c in fake.calls] == ["exists", "inspect"]


def test_a_new_network_gets_the_first_free_subnet(fake):
    fake.answer("podman", "network", "exists", rc=1)
    fake.answer("podman", "network", "ls", out="")
    fake.answer("ip", out="")
    fake.answer("podman", "network", "create")
    said: list[str] = []
    subnet = lab.choose_subnet("a", [])
    assert lab.ensure_network("a", said.append) == subnet
    assert said == [f"create network megaprov-a ({subnet})"]
    assert fake.records[-1] == {"prog": "podman", "argv": lab.network_create_argv("a", subnet), "conf": CONF}


def test_a_subnet_taken_meanwhile_is_skipped(fake):
    first = lab.choose_subnet("a", [])
    second = lab.choose_subnet("a", [first])
    fake.answer("podman", "network", "exists", rc=1)
    fake.answer("podman", "network", "ls", out="")
    fake.answer("ip", out="")
    fake.answer("podman", "network", "create", rc=125, err="Error: subnet in use\n", then=[("", 0, "")])
    said: list[str] = []
    assert lab.ensure_network("a", said.append) == second
    assert said == [f"create network megaprov-a ({first})", f"create network megaprov-a ({second})"]


def test_a_network_made_meanwhile_by_the_same_lab_is_taken(fake):
    fake.answer("podman", "network", "exists", rc=1, then=[("", 0, "")])
    fake.answer("podman", "network", "inspect", "megaprov-a", out=json.dumps([NETWORKS[1]]))
    fake.answer("podman", "network", "ls", out="")
    fake.answer("ip", out="")
    fake.answer("podman", "network", "create", rc=125, err="Error: network exists\n")
    assert lab.ensure_network("a") == "10.90.8.0/24"


def test_a_network_that_cannot_be_made_after_eight_tries_is_the_operator_s_problem(fake):
    fake.answer("podman", "network", "exists", rc=1)
    fake.answer("podman", "network", "ls", out="")
    fake.answer("ip", out="")
    fake.answer("podman", "network", "create", rc=125, err="  Error: netavark: " + "y" * 250 + "  \n")
    with pytest.raises(EnvironmentProblem) as caught:
        lab.ensure_network("a")
    assert caught.value.message == "podman could not create network megaprov-a: " + ("Error: netavark: " + "y" * 250)[-200:]
    assert caught.value.hint == "see `podman network ls`"
    creates = [c for c in fake.calls if c[1:3] == ["network", "create"]]
    assert len(creates) == 8 and len({c[4] for c in creates}) == 8


# ---- volume, share, host key, mounts


def test_a_new_volume_has_an_empty_directory_reachable_by_everyone(fake, tmp_path, monkeypatch):
    monkeypatch.setattr(lab, "LAB_SHARES", tmp_path / "var" / "megaprov" / "labs")
    old = tmp_path / "var" / "megaprov" / "labs" / "a" / "shared"
    old.mkdir(parents=True)
    (old / "left").write_text("")
    for path in (old, old.parent, old.parent.parent, old.parent.parent.parent):
        path.chmod(0o700)
    fake.answer("podman", "volume", "exists", rc=1)
    fake.answer("podman", "volume", "create")
    lab.ensure_volume("a")
    assert list(old.iterdir()) == []
    for path in (old, old.parent, old.parent.parent, old.parent.parent.parent):
        assert stat.S_IMODE(path.stat().st_mode) == 0o755, path
    assert fake.calls[-1] == ["podman", *lab.volume_create_argv("a")]
    assert fake.calls[0] == ["podman", "volume", "exists", "megaprov-lab-a-shared"]


def test_an_existing_volume_is_left_as_it_is(fake, tmp_path, monkeypatch):
    monkeypatch.setattr(lab, "LAB_SHARES", tmp_path / "labs")
    fake.answer("podman", "volume", "exists")
    lab.ensure_volume("a")
    assert fake.calls == [["podman", "volume", "exists", "megaprov-lab-a-shared"]] and not (tmp_path / "labs").exists()
    assert fake.records[0]["conf"] == CONF


NODE = lab.Node("node2", "megaprov-a-node2", "10.90.8.3", "running")


def test_the_share_must_be_the_root_squashed_fuse_mount(fake):
    fake.answer("podman", "exec", out="fuse.megaprov-squash\n")
    lab._check_share(NODE)
    assert fake.calls == [["podman", "exec", "megaprov-a-node2", "findmnt", "-n", "-o", "FSTYPE", "--mountpoint", "/shared"]]


@pytest.mark.parametrize(("answer", "rc", "found"), [("\n", 1, "nothing mounted"), ("nfs4\n", 0, "nfs4")])
def test_a_node_without_the_squashed_share_is_the_operator_s_problem(fake, answer, rc, found):
    fake.answer("podman", "exec", out=answer, rc=rc)
    with pytest.raises(EnvironmentProblem) as caught:
        lab._check_share(NODE)
    assert caught.value.message == f"lab node node2 has no root-squashed /shared (found {found})"
    assert caught.value.hint == "see `podman exec megaprov-a-node2 systemctl status megaprov-lab-share`; the lab needs /dev/fuse on this machine"


def test_the_host_key_is_read_once_it_is_there(fake, clock):
    fake.answer("podman", "exec", out="", then=[("ssh-ed25519 AAAAkey root@node2\n", 0, "")])
    assert lab._host_key(NODE, clock.now + 10) == "ssh-ed25519 AAAAkey"
    assert clock.slept == [0.3]
    assert fake.calls[0] == ["podman", "exec", "megaprov-a-node2", "sh", "-c", "cat /etc/ssh/ssh_host_ed25519_key.pub 2>/dev/null || true"]


def test_no_host_key_by_the_deadline_is_the_operator_s_problem(fake, clock):
    fake.answer("podman", "exec", out="\n")
    with pytest.raises(EnvironmentProblem) as caught:
        lab._host_key(NODE, clock.now + 1)
    assert (caught.value.message, caught.value.hint) == ("lab node node2 has no SSH host key", "inspect it with `podman logs megaprov-a-node2`")
    assert clock.slept == [0.3] * 4  # 1000.0, .3, .6, .9 still before the deadline; 1001.2 past it


def test_the_mount_source_is_the_host_directory_at_that_destination(fake):
    fake.answer("podman", "inspect", out="/srv/megaprov/wheelhouse\t/w\n/srv/megaprov/git\t/cache/git/mlm\n\n")
    assert lab._mount_source("c1", "/srv/megaprov/git") == "/cache/git/mlm"
    assert lab._mount_source("c1", "/nowhere") is None
    assert fake.calls[0] == ["podman", "inspect", "--format", "{{range .Mounts}}{{.Destination}}\t{{.Source}}\n{{end}}", "c1"]


# ---- booting and SSH


def test_a_node_is_booted_once_systemd_runs_even_degraded(fake, clock):
    fake.answer("podman", "exec", out="starting\n", rc=1, then=[("degraded\n", 1, "")])
    lab._wait_booted("megaprov-a-node1", clock.now + 60)
    assert clock.slept == [0.5]
    assert fake.records[0] == {"prog": "podman", "argv": ["exec", "megaprov-a-node1", "systemctl", "is-system-running"], "conf": CONF}
    fake.answer("podman", "exec", "megaprov-a-node2", out="running\n")
    lab._wait_booted("megaprov-a-node2", clock.now)
    assert clock.slept == [0.5]


@pytest.mark.parametrize(("answer", "said"), [("", "nothing"), ("maintenance\n", "maintenance")])
def test_a_node_that_does_not_boot_by_the_deadline_is_named(fake, clock, answer, said):
    fake.answer("podman", "exec", out=answer, rc=1)
    with pytest.raises(EnvironmentProblem) as caught:
        lab._wait_booted("megaprov-a-node1", clock.now + 1)
    assert caught.value.message == f"lab node megaprov-a-node1 did not finish booting (systemd says {said})"
    assert caught.value.hint == "inspect it with `podman logs megaprov-a-node1`"
    assert clock.slept == [0.5, 0.5, 0.5]  # 1000.0, 1000.5, 1001.0 not past the deadline; 1001.5 is


class Port:
    """lab.socket: the TCP connect to a node's port 22, refused the first ``refusals`` times."""

    def __init__(self, refusals: int = 0) -> None:
        self.refusals = refusals
        self.tried: list[tuple[tuple[str, int], float]] = []

    def create_connection(self, address, timeout):
        self.tried.append((address, timeout))
        if len(self.tried) <= self.refusals:
            raise ConnectionRefusedError(111, "Connection refused")
        import contextlib

        return contextlib.nullcontext()


def test_ssh_is_ready_once_the_port_answers_and_the_pinned_key_logs_in(fake, clock, monkeypatch, tmp_path):
    port = Port(refusals=1)
    monkeypatch.setattr(lab, "socket", port)
    fake.answer("ssh", rc=255, err="kex_exchange_identification: read: Connection reset\n", then=[("", 0, "")])
    lab._wait_ssh("10.90.8.3", tmp_path / "id", tmp_path / "kh", clock.now + 60)
    assert port.tried == [(("10.90.8.3", 22), 2)] * 3
    assert clock.slept == [0.5, 0.5]
    assert fake.calls == [
        [
            "ssh", "-i", str(tmp_path / "id"), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={tmp_path / 'kh'}", "-o", "ConnectTimeout=5", "root@10.90.8.3", "true",
        ]
    ] * 2  # fmt: skip


def test_ssh_that_never_logs_in_says_ssh_s_words(fake, clock, monkeypatch, tmp_path):
    monkeypatch.setattr(lab, "socket", Port())
    fake.answer("ssh", rc=255, err="  Host key verification failed.\n")
    with pytest.raises(EnvironmentProblem) as caught:
        lab._wait_ssh("10.90.8.3", tmp_path / "id", tmp_path / "kh", clock.now + 0.7)
    assert caught.value.message == "lab node 10.90.8.3 is not reachable over SSH (Host key verification failed.)"
    assert caught.value.hint == "run `megaprov lab down` and `megaprov lab up` again"
    assert clock.slept == [0.5, 0.5]


def test_a_port_that_never_opens_says_the_connect_error(fake, clock, monkeypatch, tmp_path):
    monkeypatch.setattr(lab, "socket", Port(refusals=100))
    with pytest.raises(EnvironmentProblem) as caught:
        lab._wait_ssh("10.90.8.3", tmp_path / "id", tmp_path / "kh", clock.now)
    assert caught.value.message == "lab node 10.90.8.3 is not reachable over SSH ([Errno 111] Connection refused)"
    assert fake.calls == []


# ---- down, stop, find_node


def lab_of(fake: Bin, *states: str, name: str = "a") -> list[lab.Node]:
    members = [lab.Node(f"node{i}", f"megaprov-{name}-node{i}", f"10.90.8.{i + 1}", s) for i, s in enumerate(states, start=1)]
    fake.answer("podman", "ps", out="".join(f"{n.container}\n" for n in members))
    fake.answer("podman", "inspect", out="".join(f"{name}|{n.container}|{n.state}|{n.address}|{n.name}|{n.address}\n" for n in members))
    return members


def test_down_removes_exactly_what_up_made(fake, tmp_path, monkeypatch):
    monkeypatch.setattr(lab, "LAB_SHARES", tmp_path / "labs")
    (tmp_path / "labs" / "a" / "shared" / "data").mkdir(parents=True)
    (tmp_path / "labs" / "b").mkdir()
    (tmp_path / "state" / "lab" / "a").mkdir(parents=True)
    (tmp_path / "state" / "lab" / "a" / "inventory.ini").write_text("")
    (tmp_path / "state" / "lab" / "b").mkdir()
    lab_of(fake, "running", "exited")
    fake.answer("podman", "rm")
    fake.answer("podman", "network")
    fake.answer("podman", "volume")
    said: list[str] = []
    removed = lab.down(tmp_path / "state", "a", said.append)
    assert removed == [
        "megaprov-a-node1",
        "megaprov-a-node2",
        "megaprov-a",
        "megaprov-lab-a-shared",
        str(tmp_path / "labs" / "a"),
        str(tmp_path / "state" / "lab" / "a"),
    ]
    assert said == ["remove megaprov-a-node1", "remove megaprov-a-node2"]
    assert fake.calls[2:] == [
        ["podman", "rm", "-f", "-t", "3", "megaprov-a-node1"],
        ["podman", "rm", "-f", "-t", "3", "megaprov-a-node2"],
        ["podman", "network", "exists", "megaprov-a"],
        ["podman", "network", "rm", "megaprov-a"],
        ["podman", "volume", "exists", "megaprov-lab-a-shared"],
        ["podman", "volume", "rm", "megaprov-lab-a-shared"],
    ]
    assert {r["conf"] for r in fake.records} == {CONF}
    assert sorted(p.name for p in (tmp_path / "labs").iterdir()) == ["b"]
    assert sorted(p.name for p in (tmp_path / "state" / "lab").iterdir()) == ["b"]


def test_down_of_a_lab_that_is_gone_removes_nothing(fake, tmp_path, monkeypatch):
    monkeypatch.setattr(lab, "LAB_SHARES", tmp_path / "labs")
    fake.answer("podman", "ps", out="")
    fake.answer("podman", "network", "exists", rc=1)
    fake.answer("podman", "volume", "exists", rc=1)
    assert lab.down(tmp_path / "state", "a") == []
    assert [c[1:3] for c in fake.calls] == [["ps", "-a"], ["network", "exists"], ["volume", "exists"]]


def test_down_refuses_a_name_that_is_not_a_lab_s(fake, tmp_path):
    with pytest.raises(UsageError, match="is not a valid lab name"):
        lab.down(tmp_path, "../etc")
    assert fake.calls == []


def test_find_node_names_what_exists(fake):
    lab_of(fake, "running", "running")
    assert lab.find_node("a", "node2") == lab.Node("node2", "megaprov-a-node2", "10.90.8.3", "running")
    with pytest.raises(UsageError) as caught:
        lab.find_node("a", "node3")
    assert (caught.value.message, caught.value.hint) == ("lab 'a' has no node 'node3'", "use one of: node1, node2")


def test_find_node_of_a_lab_that_does_not_exist(fake):
    fake.answer("podman", "ps", out="")
    with pytest.raises(UsageError) as caught:
        lab.find_node("zz", "node1")
    assert (caught.value.message, caught.value.hint) == (
        "lab 'zz' does not exist",
        "see `megaprov lab status`, or start it with `megaprov lab up --name zz`",
    )


def test_stop_powers_the_node_off_with_its_grace_and_returns_it_as_it_is_then(fake):
    lab_of(fake, "running", "running")
    fake.answer("podman", "stop")
    assert lab.stop("a", "node2", timeout=12.7) == lab.Node("node2", "megaprov-a-node2", "10.90.8.3", "running")
    assert [c[1] for c in fake.calls] == ["ps", "inspect", "stop", "ps", "inspect"]
    assert fake.calls[2] == ["podman", "stop", "-t", "12", "megaprov-a-node2"]


# ---- pure helpers


def test_the_subnet_is_the_one_the_name_hashes_to():
    import hashlib
    import ipaddress

    candidates = list(ipaddress.IPv4Network("10.90.0.0/16").subnets(new_prefix=24))
    for name in ("a", "ci", "lab-7"):
        index = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big") % 256
        assert lab.choose_subnet(name, []) == str(candidates[index])
        taken = str(candidates[index])
        assert lab.choose_subnet(name, [taken]) == str(candidates[(index + 1) % 256])
        # an IPv6 network never overlaps
        assert lab.choose_subnet(name, ["fd00::/8"]) == taken


def test_the_subnet_search_wraps_around_the_pool():
    import hashlib
    import ipaddress

    candidates = [str(c) for c in ipaddress.IPv4Network("10.90.0.0/16").subnets(new_prefix=24)]
    index = int.from_bytes(hashlib.sha256(b"ci").digest()[:4], "big") % 256
    taken = candidates[index:]
    assert lab.choose_subnet("ci", taken) == candidates[0]
    with pytest.raises(EnvironmentProblem) as caught:
        lab.choose_subnet("ci", candidates)
    assert caught.value.message == "every /24 of 10.90.0.0/16 is in use"
    assert caught.value.hint == "remove labs you no longer need (`megaprov lab status`, `megaprov lab down`)"


@pytest.mark.parametrize(
    ("subnet", "index", "address"), [("10.90.7.0/24", 1, "10.90.7.2"), ("10.90.7.0/24", 32, "10.90.7.33"), ("10.0.0.0/29", 5, "10.0.0.6")]
)
def test_node_addresses(subnet, index, address):
    assert lab.node_address(subnet, index) == address


@pytest.mark.parametrize(("subnet", "index"), [("10.90.7.0/24", 0), ("10.90.7.0/24", 33), ("10.0.0.0/29", 6)])
def test_a_node_that_does_not_fit_is_refused(subnet, index):
    with pytest.raises(UsageError) as caught:
        lab.node_address(subnet, index)
    assert (caught.value.message, caught.value.hint) == (f"node {index} does not fit in subnet {subnet}", "use 1 to 32 nodes")


def test_pinned_keys_skip_comments_and_short_lines():
    text = "# 10.0.0.1,node9 ssh-ed25519 COMMENT\n10.90.7.2,node1 ssh-ed25519 K1 extra\nnode2 ssh-ed25519\n\nnode3 ssh-rsa K3\n"
    assert lab.pinned_keys(text) == {"10.90.7.2": "ssh-ed25519 K1", "node1": "ssh-ed25519 K1", "node3": "ssh-rsa K3"}


def test_inventory_addresses_read_ansible_host_wherever_it_stands():
    text = "[head]\nnode1\n[gpu_nodes]\nnode1 x=1 ansible_host=10.0.0.2\nnode2 ansible_host=a=b\nansible_host=9.9.9.9\n"
    assert lab.inventory_addresses(text) == {"node1": "10.0.0.2", "node2": "a=b"}


def test_the_megatron_tree_is_a_directory_with_megatron_or_an_archive(tmp_path, monkeypatch):
    monkeypatch.delenv(lab.MEGATRON_SOURCE_ENV, raising=False)
    assert lab.megatron_source() is None
    monkeypatch.setenv(lab.MEGATRON_SOURCE_ENV, "")
    assert lab.megatron_source() is None
    (tmp_path / "tree" / "megatron").mkdir(parents=True)
    monkeypatch.setenv(lab.MEGATRON_SOURCE_ENV, str(tmp_path / "tree"))
    assert lab.megatron_source() == tmp_path / "tree"
    (tmp_path / "m.tar").write_text("")
    monkeypatch.setenv(lab.MEGATRON_SOURCE_ENV, str(tmp_path / "m.tar"))
    assert lab.megatron_source() == tmp_path / "m.tar"
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(lab.MEGATRON_SOURCE_ENV, "~/tree")
    assert lab.megatron_source() == tmp_path / "tree"


def test_a_megatron_tree_that_is_not_one_is_refused(tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(lab.MEGATRON_SOURCE_ENV, str(tmp_path / "empty"))
    with pytest.raises(UsageError) as caught:
        lab.megatron_source()
    assert caught.value.message == f"MEGAPROV_MEGATRON_LM={tmp_path / 'empty'} is neither a Megatron-LM tree nor an archive of one"
    assert caught.value.hint == (
        "point it at a directory holding megatron/ and pretrain_gpt.py, or a git archive tarball of core_v0.16.1; or unset it"
    )


def test_node_create_argv_mounts_the_megatron_remote_and_the_host_ca():
    argv = lab.node_create_argv("ci", 2, "10.90.7.0/24", "img", "/etc/ssl/ca.crt", Path("/w"), Path("/cache/git"))
    assert argv[argv.index("/etc/ssl/ca.crt:/etc/host-ca.crt:ro") - 1] == "-v"
    assert argv[argv.index("/cache/git:/srv/megaprov/git:ro") - 1] == "-v"
    assert (
        argv.index("/etc/ssl/ca.crt:/etc/host-ca.crt:ro")
        < argv.index("/w:/srv/megaprov/wheelhouse:ro")
        < argv.index("/cache/git:/srv/megaprov/git:ro")
    )
    assert "DAC_READ_SEARCH" not in argv


def test_the_inventory_names_the_megatron_remote_only_when_there_is_one():
    members = [lab.Node("node1", "c1", "10.90.7.2", "running")]
    _, without = lab.render_inventory("x", members, Path("/k"), Path("/kh"), "/s")
    _, with_remote = lab.render_inventory("x", members, Path("/k"), Path("/kh"), "/s", "/srv/megaprov/git/mlm.git")
    assert "package_cache_git_repos" not in without
    added = [line for line in with_remote.splitlines() if line not in without.splitlines()]
    assert added == [
        "# From the tree MEGAPROV_MEGATRON_LM named, as a git remote every node mounts (the head's cache mirrors it).",
        "package_cache_git_repos: {megatron: /srv/megaprov/git/mlm.git}",
    ]


# ---- up and start, end to end over the stood-in podman


KEYS = {1: "ssh-ed25519 AAAAone", 2: "ssh-ed25519 AAAAtwo"}


def booting(fake: Bin, name: str = "a", subnet: str = "10.90.8.0/24", count: int = 2) -> None:
    """podman's answers for each node of a lab: booted, its host key, the squashed share."""
    for i in range(1, count + 1):
        cname = f"megaprov-{name}-node{i}"
        fake.answer("podman", "exec", cname, "systemctl", out="running\n")
        fake.answer("podman", "exec", cname, "sh", out=f"{KEYS[i]} root@node{i}\n")
        fake.answer("podman", "exec", cname, "findmnt", out="fuse.megaprov-squash\n")
    fake.answer("podman", "volume", "inspect", out="/var/lib/megaprov/labs/a/shared|/var/lib/containers/v/_data\n")
    fake.answer("ssh")


@pytest.fixture
def machine(fake, clock, tmp_path, monkeypatch):
    """This machine as `lab up` sees it: a cached node image, a built wheelhouse, no Megatron-LM tree, a CA bundle,
    the lab shares under tmp_path, every node's port 22 open."""
    monkeypatch.setattr(lab, "LAB_SHARES", tmp_path / "labs")
    monkeypatch.setattr(lab.wheelhouse, "build", lambda: tmp_path / "wheels")
    monkeypatch.delenv(lab.MEGATRON_SOURCE_ENV, raising=False)
    (tmp_path / "ca.crt").write_text("")
    monkeypatch.setattr(lab, "HOST_CA_CANDIDATES", (str(tmp_path / "missing.crt"), str(tmp_path / "ca.crt")))
    monkeypatch.setattr(lab, "socket", Port())
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    fake.answer("podman", "image", "exists")
    fake.answer("podman", "tag")
    return fake


def test_up_makes_the_network_the_volume_and_each_node_then_writes_the_inventory(machine, tmp_path):
    fake = machine
    subnet = lab.choose_subnet("a", [])
    prefix = subnet.rsplit(".", 1)[0]
    members = [lab.Node(f"node{i}", f"megaprov-a-node{i}", f"{prefix}.{i + 1}", "running") for i in (1, 2)]
    listing = "".join(f"a|{n.container}|running|{n.address}|{n.name}|{n.address}\n" for n in members)
    fake.answer("podman", "ps", out="", then=[("megaprov-a-node1\nmegaprov-a-node2\n", 0, "")])
    fake.answer("podman", "inspect", out=listing)
    fake.answer("podman", "network", "exists", rc=1)
    fake.answer("podman", "network", "ls", out="")
    fake.answer("ip", out="")
    fake.answer("podman", "network", "create")
    fake.answer("podman", "volume", "exists", rc=1)
    fake.answer("podman", "volume", "create")
    fake.answer("podman", "create")
    fake.answer("podman", "cp")
    fake.answer("podman", "start")
    booting(fake)
    facts = lab.fact_cache_dir(tmp_path / "state" / "lab" / "a" / "inventory.ini")
    facts.mkdir(parents=True)
    said: list[str] = []
    path, made = lab.up(tmp_path / "state", "a", 2, said.append, boot_timeout=30)
    directory = tmp_path / "state" / "lab" / "a"
    assert path == directory / "inventory.ini" and made == members
    assert said == [
        f"node image {lab.image_tag()} is cached",
        "wheelhouse (torch CPU build, megatron-core, uv) for the nodes",
        f"create network megaprov-a ({subnet})",
        f"start megaprov-a-node1 at {prefix}.2 (1/2)",
        f"start megaprov-a-node2 at {prefix}.3 (2/2)",
        "wait for node1 to boot (1/2)",
        "wait for node2 to boot (2/2)",
        "wait for SSH on node1 (1/2)",
        "wait for SSH on node2 (2/2)",
    ]
    created = [c[1:] for c in fake.calls if c[1] in ("create", "cp", "start")]
    assert created == [
        lab.node_create_argv("a", 1, subnet, lab.image_tag(), str(tmp_path / "ca.crt"), tmp_path / "wheels"),
        ["cp", str(directory / "id_ed25519.pub"), "megaprov-a-node1:/root/.ssh/authorized_keys"],
        ["start", "megaprov-a-node1"],
        lab.node_create_argv("a", 2, subnet, lab.image_tag(), str(tmp_path / "ca.crt"), tmp_path / "wheels"),
        ["cp", str(directory / "id_ed25519.pub"), "megaprov-a-node2:/root/.ssh/authorized_keys"],
        ["start", "megaprov-a-node2"],
    ]
    assert ["podman", *lab.volume_create_argv("a")] in fake.calls
    assert (directory / "known_hosts").read_text() == f"{prefix}.2,node1 {KEYS[1]}\n{prefix}.3,node2 {KEYS[2]}\n"
    inventory, group_vars = lab.render_inventory("a", members, directory / "id_ed25519", directory / "known_hosts", "/var/lib/megaprov/labs/a/shared")
    assert path.read_text() == inventory
    assert (directory / "group_vars" / "all.yml").read_text() == group_vars
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert (directory / "id_ed25519").read_text().startswith("-----BEGIN OPENSSH PRIVATE KEY-----")
    assert (directory / "id_ed25519.pub").read_text().split()[2] == "megaprov-lab-a"
    assert not facts.exists()  # facts cached for the old addresses are gone
    ssh = [c for c in fake.calls if c[0] == "ssh"]
    assert [c[-2] for c in ssh] == [f"root@{prefix}.2", f"root@{prefix}.3"]
    assert ssh[0][ssh[0].index("-i") + 1] == str(directory / "id_ed25519")
    assert fake.calls[-1] == ["podman", "volume", "inspect", "--format", "{{.Options.device}}|{{.Mountpoint}}", "megaprov-lab-a-shared"]


def test_up_of_a_lab_made_before_the_bind_volume_uses_podman_s_mountpoint(machine, tmp_path):
    fake = machine
    lab_of(fake, "exited", "running")
    fake.answer("podman", "inspect", "--format", "{{range .Mounts}}{{.Destination}}\t{{.Source}}\n{{end}}", out="/srv/megaprov/wheelhouse\t/w\n")
    fake.answer("podman", "start")
    booting(fake)
    fake.answer("podman", "volume", "inspect", out="<no value>|/var/lib/containers/v/_data\n")
    directory = tmp_path / "state" / "lab" / "a"
    directory.mkdir(parents=True)
    (directory / "id_ed25519").write_text("kept")
    said: list[str] = []
    lab.up(tmp_path / "state", "a", 2, said.append)
    assert said[:2] == ["start stopped megaprov-a-node1", f"node image {lab.image_tag()} is cached"]
    assert ["podman", "start", "megaprov-a-node1"] in fake.calls and ["podman", "start", "megaprov-a-node2"] not in fake.calls
    assert not [c for c in fake.calls if c[1] in ("create", "cp") or c[1:3] == ["network", "create"]]
    assert (directory / "id_ed25519").read_text() == "kept"  # the lab's key is kept
    assert "megaprov_controller_shared_dir: /var/lib/containers/v/_data\n" in (directory / "group_vars" / "all.yml").read_text()
    assert (directory / "known_hosts").read_text() == f"10.90.8.2,node1 {KEYS[1]}\n10.90.8.3,node2 {KEYS[2]}\n"


@pytest.mark.parametrize("count", [0, 33])
def test_up_refuses_a_node_count_out_of_range(fake, tmp_path, count):
    with pytest.raises(UsageError) as caught:
        lab.up(tmp_path, "a", count)
    assert (caught.value.message, caught.value.hint) == (f"--nodes {count} is out of range", "use 1 to 32")
    assert fake.calls == []


def test_up_refuses_another_node_count_for_an_existing_lab(fake, tmp_path):
    lab_of(fake, "running", "running")
    with pytest.raises(UsageError) as caught:
        lab.up(tmp_path, "a", 3)
    assert (caught.value.message, caught.value.hint) == ("lab 'a' already exists with 2 node(s)", "run `megaprov lab down --name a` first")
    assert [c[1] for c in fake.calls] == ["ps", "inspect"]


def test_up_with_one_and_thirty_two_nodes_is_allowed_as_far_as_the_count_goes(fake, tmp_path):
    for count in (1, 32):
        lab_of(fake, *["running"] * 2)
        with pytest.raises(UsageError, match="already exists with 2 node"):
            lab.up(tmp_path, "a", count)


def written_lab(tmp_path: Path, *, known: str | None = None, inventory: str | None = None, key: bool = True) -> Path:
    directory = tmp_path / "state" / "lab" / "a"
    directory.mkdir(parents=True)
    if key:
        (directory / "id_ed25519").write_text("k")
    if known is not None:
        (directory / "known_hosts").write_text(known)
    if inventory is not None:
        (directory / "inventory.ini").write_text(inventory)
    return directory


INVENTORY = "[head]\nnode1\n[gpu_nodes]\nnode1 ansible_host=10.90.8.2\nnode2 ansible_host=10.90.8.3\n"
KNOWN = f"10.90.8.2,node1 {KEYS[1]}\n10.90.8.3,node2 {KEYS[2]}\n"


def test_start_brings_a_stopped_node_back_at_its_address_with_its_key(machine, tmp_path):
    fake = machine
    lab_of(fake, "running", "exited")
    fake.answer("podman", "start")
    booting(fake)
    directory = written_lab(tmp_path, known=KNOWN, inventory=INVENTORY)
    said: list[str] = []
    node = lab.start(tmp_path / "state", "a", "node2", said.append, boot_timeout=30)
    assert node == lab.Node("node2", "megaprov-a-node2", "10.90.8.3", "exited")
    assert said == ["start megaprov-a-node2", "wait for node2 to boot", "wait for SSH on node2 at 10.90.8.3"]
    assert [c[1:3] for c in fake.calls] == [
        ["ps", "-a"], ["inspect", "--format"], ["start", "megaprov-a-node2"], ["exec", "megaprov-a-node2"],
        ["ps", "-a"], ["inspect", "--format"], ["exec", "megaprov-a-node2"], ["-i", str(directory / "id_ed25519")],
        ["exec", "megaprov-a-node2"],
    ]  # fmt: skip
    assert [c[3] for c in fake.calls if c[1] == "exec"] == ["systemctl", "sh", "findmnt"]


def test_start_of_a_running_node_only_checks_it(machine, tmp_path):
    fake = machine
    lab_of(fake, "running", "running")
    booting(fake)
    written_lab(tmp_path, known=KNOWN, inventory=INVENTORY)
    said: list[str] = []
    lab.start(tmp_path / "state", "a", "node1", said.append)
    assert said == ["wait for node1 to boot", "wait for SSH on node1 at 10.90.8.2"]
    assert not [c for c in fake.calls if c[1] == "start"]


@pytest.mark.parametrize(
    ("known", "inventory", "key"),
    [
        (None, INVENTORY, True),
        (KNOWN, None, True),
        (KNOWN, INVENTORY, False),
        ("10.90.8.2,node1 ssh-ed25519 K\n", INVENTORY, True),
        (KNOWN, "[head]\nnode1\n", True),
    ],
)
def test_start_without_the_lab_s_records_says_to_run_up(machine, tmp_path, known, inventory, key):
    lab_of(machine, "running", "exited")
    directory = written_lab(tmp_path, known=known, inventory=inventory, key=key)
    with pytest.raises(EnvironmentProblem) as caught:
        lab.start(tmp_path / "state", "a", "node2")
    assert (caught.value.message, caught.value.hint) == (
        f"lab 'a' has no inventory entry or pinned host key for node2 in {directory}",
        "run `megaprov lab up --name a`",
    )
    assert [c[1] for c in machine.calls] == ["ps", "inspect"]


def test_a_node_that_came_back_elsewhere_is_refused(machine, tmp_path):
    lab_of(machine, "running", "running")
    booting(machine)
    written_lab(tmp_path, known=KNOWN, inventory=INVENTORY.replace("10.90.8.3", "10.90.8.9"))
    with pytest.raises(EnvironmentProblem) as caught:
        lab.start(tmp_path / "state", "a", "node2")
    assert (caught.value.message, caught.value.hint) == (
        "lab node node2 came back at 10.90.8.3, its inventory says 10.90.8.9",
        "run `megaprov lab down --name a` and `lab up` again",
    )


def test_a_node_with_a_new_host_key_is_refused(machine, tmp_path):
    lab_of(machine, "running", "running")
    booting(machine)
    written_lab(tmp_path, known=KNOWN.replace("AAAAtwo", "AAAAold"), inventory=INVENTORY)
    with pytest.raises(EnvironmentProblem) as caught:
        lab.start(tmp_path / "state", "a", "node2")
    assert (caught.value.message, caught.value.hint) == (
        "lab node node2 has a new SSH host key (ssh-ed25519), not the pinned one",
        "inspect it with `podman logs megaprov-a-node2`",
    )
    assert not [c for c in machine.calls if c[0] == "ssh"]


# ---- output that is not UTF-8 (a locale's message, a garbled line) is read, not a traceback


def test_podman_output_that_is_not_utf8_is_read_with_replacement_characters(fake):
    (fake.dir / "podman").write_text("#!/bin/sh\nprintf 'caf\\351\\n'\nprintf 'Error: bad \\377\\n' >&2\nexit 1\n")
    assert lab.podman("ps", check=False) == "caf\ufffd\n"
    with pytest.raises(EnvironmentProblem) as caught:
        lab.podman("ps")
    assert caught.value.message == "podman ps failed: Error: bad \ufffd"


def test_ssh_s_words_that_are_not_utf8_are_read_with_replacement_characters(fake, clock, monkeypatch, tmp_path):
    monkeypatch.setattr(lab, "socket", Port())
    (fake.dir / "ssh").write_text("#!/bin/sh\nprintf 'refus\\351\\n' >&2\nexit 255\n")
    with pytest.raises(EnvironmentProblem) as caught:
        lab._wait_ssh("10.90.8.3", tmp_path / "id", tmp_path / "kh", clock.now)
    assert caught.value.message == "lab node 10.90.8.3 is not reachable over SSH (refus\ufffd)"


def test_debootstrap_and_import_words_that_are_not_utf8_are_read_with_replacement_characters(fake, tmp_path):
    fake.answer("podman", "image", "exists", rc=1)
    (fake.dir / "debootstrap").write_text("#!/bin/sh\nprintf 'E: \\351chec\\n'\nexit 1\n")
    with pytest.raises(EnvironmentProblem) as caught:
        lab.ensure_image()
    assert caught.value.message == "debootstrap failed: E: \ufffdchec"
    (fake.dir / "debootstrap").write_text('#!/bin/sh\nmkdir -p "$4"\n')
    real = fake.dir / "podman"
    (fake.dir / "podman.py").write_text(real.read_text().replace("os.path.basename(sys.argv[0])", '"podman"'))
    real.write_text(
        f"#!/bin/sh\nif [ \"$1\" = import ]; then cat > /dev/null; printf 'Error: \\377\\n' >&2; exit 125; fi\n"
        f'exec {sys.executable} {fake.dir}/podman.py "$@"\n'
    )
    with pytest.raises(EnvironmentProblem) as caught:
        lab.ensure_image()
    assert caught.value.message == "podman import of the base image failed: Error: \ufffd"


def megatron_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    tree = tmp_path / "mlm"
    (tree / "megatron").mkdir(parents=True)
    (tree / "pretrain_gpt.py").write_text("")
    monkeypatch.setenv(lab.MEGATRON_SOURCE_ENV, str(tree))
    monkeypatch.setattr(lab, "cache_dir", lambda: tmp_path / "cache")
    return tree


def test_up_with_a_megatron_tree_mounts_its_git_remote_on_every_node_and_names_it(machine, tmp_path, monkeypatch):
    fake = machine
    tree = megatron_tree(tmp_path, monkeypatch)
    subnet = lab.choose_subnet("a", [])
    prefix = subnet.rsplit(".", 1)[0]
    fake.answer("podman", "ps", out="", then=[("megaprov-a-node1\n", 0, "")])
    fake.answer("podman", "inspect", out=f"a|megaprov-a-node1|running|{prefix}.2|node1|{prefix}.2\n")
    for args, rc in ((("network", "exists"), 1), (("network", "ls"), 0), (("network", "create"), 0), (("volume", "exists"), 0)):
        fake.answer("podman", *args, rc=rc)
    fake.answer("ip", out="")
    for verb in ("create", "cp", "start"):
        fake.answer("podman", verb)
    booting(fake, count=1)
    said: list[str] = []
    lab.up(tmp_path / "state", "a", 1, said.append)
    [git] = (tmp_path / "cache" / "git").glob("*/Megatron-LM.git")
    assert said[2] == f"Megatron-LM core_v0.16.1 from {tree} as a git remote for the nodes"
    [create] = [c[1:] for c in fake.calls if c[1] == "create"]
    assert create == lab.node_create_argv("a", 1, subnet, lab.image_tag(), str(tmp_path / "ca.crt"), tmp_path / "wheels", git.parent)
    group_vars = (tmp_path / "state" / "lab" / "a" / "group_vars" / "all.yml").read_text()
    assert "package_cache_git_repos: {megatron: /srv/megaprov/git/Megatron-LM.git}\n" in group_vars


def test_an_existing_lab_is_reused_with_the_megatron_tree_its_nodes_mount(machine, tmp_path, monkeypatch):
    fake = machine
    megatron_tree(tmp_path, monkeypatch)
    from megaprov.cluster import gitsource

    git = gitsource.remote_from_tree(tmp_path / "mlm", "Megatron-LM", lab.LAB_MEGATRON_TAG, tmp_path / "cache" / "git")
    lab_of(fake, "running")
    fake.answer("podman", "inspect", "--format", "{{range .Mounts}}{{.Destination}}\t{{.Source}}\n{{end}}", out=f"/srv/megaprov/git\t{git.parent}\n")
    booting(fake, count=1)
    path, _ = lab.up(tmp_path / "state", "a", 1)
    assert ["podman", "inspect", "--format", "{{range .Mounts}}{{.Destination}}\t{{.Source}}\n{{end}}", "megaprov-a-node1"] in fake.calls
    assert "package_cache_git_repos: {megatron: /srv/megaprov/git/Megatron-LM.git}" in (path.parent / "group_vars" / "all.yml").read_text()
    fake.answer("podman", "inspect", "--format", "{{range .Mounts}}{{.Destination}}\t{{.Source}}\n{{end}}", out=f"/srv/megaprov/git\t{git.parent}x\n")
    with pytest.raises(UsageError) as caught:
        lab.up(tmp_path / "state", "a", 1)
    assert caught.value.message == f"lab 'a' was made with Megatron-LM from {git.parent}x, and MEGAPROV_MEGATRON_LM now asks for {tmp_path / 'mlm'}"
    assert caught.value.hint == "run `megaprov lab down --name a` first, or set MEGAPROV_MEGATRON_LM as when the lab was made"


def test_stop_gives_systemd_thirty_seconds_by_default(fake):
    lab_of(fake, "running")
    fake.answer("podman", "stop")
    lab.stop("a", "node1")
    assert fake.calls[2] == ["podman", "stop", "-t", "30", "megaprov-a-node1"]
