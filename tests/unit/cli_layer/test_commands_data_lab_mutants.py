"""`megaprov lab ...` and `megaprov data ...` from argv to what the operator reads: the exit code, the lines on stdout
and stderr, the JSON document of ``-o json``, and what each command hands to the layer below (megaprov.cluster.lab,
megaprov.training.data). Every command runs in-process through megaprov.cli.main.

Stood in, only at the edge: podman (a fake `podman` on PATH that keeps its containers, networks and volumes in a JSON
file and logs every call), the lab's host share directory (under tmp_path), and the clock of `lab stop/start` and of
`data prepare`. `lab up` and `lab start` boot containers and wait for SSH: there the layer below (lab.up, lab.start) is a
recorder. Everything else is real: `lab status`, `lab stop`, `lab down`, `lab image` and `lab inventory` run
megaprov.cluster.lab over the fake podman, `data corpus` writes its corpus, `data prepare` tokenises with the byte
tokenizer (megatron-core's builder) into a shared directory that -i names."""

import json
import os
import sys
import textwrap

import pytest

from megaprov.cli import main
from megaprov.cluster import lab
from megaprov.commands import lab as lab_command
from megaprov.errors import ExitCode
from megaprov.training import data
from tests.helpers.owned import users_directory

FAKE_PODMAN = textwrap.dedent(
    """\
    #!{python}
    import json, os, sys
    state_file, log = os.environ["FAKE_PODMAN_STATE"], os.environ["FAKE_PODMAN_LOG"]
    args = sys.argv[1:]
    with open(log, "a") as f:
        f.write(" ".join(args) + "\\n")
    state = json.load(open(state_file))
    containers = state["containers"]
    def save():
        json.dump(state, open(state_file, "w"))
    if args[0] == "ps":
        label = args[args.index("--filter") + 1].split("=", 1)[1]
        wanted = label.split("=", 1)[1] if "=" in label else None
        print("\\n".join(c["name"] for c in containers if wanted in (None, c["lab"])))
    elif args[0] == "inspect":
        for name in args[3:]:
            for c in containers:
                if c["name"] == name:
                    print("|".join([c["lab"], c["name"], c["state"], c["address"], c["hostname"], c["fixed"]]))
    elif args[0] == "rm":
        state["containers"] = [c for c in containers if c["name"] != args[-1]]
        save()
    elif args[0] == "stop":
        for c in containers:
            if c["name"] == args[-1]:
                c["state"], c["address"] = "exited", ""
        save()
    elif args[0] in ("network", "volume", "image"):
        kind = args[0] + "s"
        if args[1] == "exists":
            sys.exit(0 if args[2] in state[kind] else 1)
        if args[1] == "rm":
            state[kind].remove(args[2])
            save()
    elif args[0] == "tag":
        pass
    else:
        sys.exit(125)
    """
)


def node_container(lab_name, index, state="running"):
    address = f"10.90.7.{index + 1}"
    return {
        "lab": lab_name,
        "name": f"megaprov-{lab_name}-node{index}",
        "state": state,
        "address": address if state == "running" else "",
        "hostname": f"node{index}",
        "fixed": address,
    }


@pytest.fixture
def podman(tmp_path, monkeypatch):
    """The fake podman: ``podman.state`` is what it holds (edit it, then ``podman.save()``), ``podman.calls()`` its argv."""

    class Podman:
        def __init__(self):
            self.state = {"containers": [], "networks": [], "volumes": [], "images": []}
            self.path = tmp_path / "podman-state.json"
            self.log = tmp_path / "podman.log"

        def save(self):
            self.path.write_text(json.dumps(self.state))

        def calls(self):
            return self.log.read_text().splitlines() if self.log.exists() else []

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "podman").write_text(FAKE_PODMAN.format(python=sys.executable))
    (bin_dir / "podman").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_PODMAN_STATE", str(tmp_path / "podman-state.json"))
    monkeypatch.setenv("FAKE_PODMAN_LOG", str(tmp_path / "podman.log"))
    fake = Podman()
    fake.save()
    return fake


@pytest.fixture
def state(tmp_path, monkeypatch):
    """megaprov's state directory, in a path with brackets: a path is printed as data, never as rich markup."""
    path = tmp_path / "st[bold]ate"
    monkeypatch.setenv("MEGAPROV_STATE", str(path))
    return path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def document(out):
    doc = json.loads(out)
    return doc["command"], doc["ok"], doc["result"]


# ---- lab status


def test_lab_status_without_labs_says_none_is_running(capsys, podman, state):
    assert run(capsys, "lab", "status") == (ExitCode.OK, "no lab is running\n", "")
    code, out, err = run(capsys, "lab", "status", "-o", "json")
    assert (code, err) == (ExitCode.OK, "") and document(out) == ("lab status", True, {})


def test_lab_status_lists_each_lab_its_nodes_and_inventory(capsys, podman, state):
    podman.state["containers"] = [node_container("ci", 1), node_container("ci", 2, "exited"), node_container("default", 1)]
    podman.save()
    code, out, err = run(capsys, "lab", "status")
    assert (code, err) == (ExitCode.OK, "")
    assert out == (
        "lab ci: node1 10.90.7.2 running, node2 10.90.7.3 exited\n"
        f"  inventory: {state}/lab/ci/inventory.ini\n"
        "lab default: node1 10.90.7.2 running\n"
        f"  inventory: {state}/lab/default/inventory.ini\n"
    )


def test_a_stopped_node_without_its_address_shows_a_dash(capsys, podman, state):
    stopped = node_container("ci", 1, "exited") | {"fixed": "<no value>"}  # a node made before the address label
    podman.state["containers"] = [stopped]
    podman.save()
    assert run(capsys, "lab", "status")[1].splitlines()[0] == "lab ci: node1 - exited"


def test_lab_status_as_json_maps_each_lab_to_its_nodes(capsys, podman, state):
    podman.state["containers"] = [node_container("ci", 2, "exited"), node_container("ci", 1)]
    podman.save()
    code, out, err = run(capsys, "lab", "status", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert document(out) == (
        "lab status",
        True,
        {
            "ci": [
                {"name": "node1", "container": "megaprov-ci-node1", "address": "10.90.7.2", "state": "running"},
                {"name": "node2", "container": "megaprov-ci-node2", "address": "10.90.7.3", "state": "exited"},
            ]
        },
    )


# ---- lab inventory


def test_lab_inventory_prints_the_path_of_an_existing_labs_inventory(capsys, state):
    inventory = state / "lab" / "ci" / "inventory.ini"
    inventory.parent.mkdir(parents=True)
    inventory.write_text("[head]\n")
    assert run(capsys, "lab", "inventory", "--name", "ci") == (ExitCode.OK, f"{inventory}\n", "")
    code, out, _ = run(capsys, "lab", "inventory", "--name", "ci", "-o", "json")
    assert code == ExitCode.OK and document(out) == ("lab inventory", True, {"name": "ci", "inventory": str(inventory)})


def test_lab_inventory_of_a_lab_never_made_says_how_to_make_it(capsys, state):
    code, out, err = run(capsys, "lab", "inventory")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == (
        f"megaprov: error: lab default: no inventory at {state}/lab/default/inventory.ini: start the lab with `megaprov lab up --name default`\n"
    )


# ---- lab image


def test_lab_image_reuses_the_cached_image_and_names_its_tag(capsys, podman, state):
    tag = lab.image_tag()
    podman.state["images"] = [tag]
    podman.save()
    code, out, err = run(capsys, "lab", "image")
    assert (code, out, err) == (ExitCode.OK, f"lab: node image {tag}\n", f"lab: node image {tag} is cached\n")
    assert podman.calls() == [f"image exists {tag}", f"tag {tag} localhost/megaprov-node:latest"]
    code, out, err = run(capsys, "lab", "image", "-o", "json")
    assert (code, err) == (ExitCode.OK, "") and document(out) == ("lab image", True, {"image": tag})


# ---- lab down


@pytest.fixture
def shares(tmp_path, monkeypatch):
    """The host directory of the labs' shares (/var/lib/megaprov/labs on a real machine)."""
    monkeypatch.setattr(lab, "LAB_SHARES", tmp_path / "labs")
    return tmp_path / "labs"


def test_lab_down_removes_the_nodes_network_volume_share_and_inventory(capsys, podman, state, shares):
    podman.state = {
        "containers": [node_container("ci", 1), node_container("ci", 2), node_container("other", 1)],
        "networks": ["megaprov-ci", "megaprov-other"],
        "volumes": ["megaprov-lab-ci-shared"],
        "images": [],
    }
    podman.save()
    (shares / "ci" / "shared").mkdir(parents=True)
    (state / "lab" / "ci").mkdir(parents=True)
    code, out, err = run(capsys, "lab", "down", "--name", "ci")
    assert code == ExitCode.OK
    assert out == "lab ci: removed 6 object(s)\n"
    assert err == "lab: remove megaprov-ci-node1\nlab: remove megaprov-ci-node2\n"
    assert [c for c in podman.calls() if c.startswith(("rm", "network rm", "volume rm"))] == [
        "rm -f -t 3 megaprov-ci-node1",
        "rm -f -t 3 megaprov-ci-node2",
        "network rm megaprov-ci",
        "volume rm megaprov-lab-ci-shared",
    ]
    assert not (shares / "ci").exists() and not (state / "lab" / "ci").exists()
    assert [c["name"] for c in json.loads(podman.path.read_text())["containers"]] == ["megaprov-other-node1"]


def test_lab_down_as_json_lists_what_it_removed_and_says_nothing_else(capsys, podman, state, shares):
    podman.state["containers"] = [node_container("ci", 1)]
    podman.state["networks"] = ["megaprov-ci"]
    podman.save()
    code, out, err = run(capsys, "lab", "down", "--name", "ci", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert document(out) == ("lab down", True, {"name": "ci", "removed": ["megaprov-ci-node1", "megaprov-ci"]})


def test_lab_down_of_nothing_says_so(capsys, podman, state, shares):
    assert run(capsys, "lab", "down") == (ExitCode.OK, "lab default: nothing to remove\n", "")
    code, out, _ = run(capsys, "lab", "down", "-o", "json")
    assert code == ExitCode.OK and document(out) == ("lab down", True, {"name": "default", "removed": []})


# ---- lab up (the layer below boots containers and waits for SSH: a recorder)


@pytest.fixture
def lab_up(monkeypatch):
    calls = []

    def up(root, name, count, progress=None):
        calls.append((root, name, count))
        progress(f"create {lab.container_name(name, 1)}")
        members = [lab.Node(f"node{i}", lab.container_name(name, i), f"10.90.7.{i + 1}", "running") for i in range(1, count + 1)]
        return lab.inventory_path(root, name), members

    monkeypatch.setattr(lab, "up", up)
    return calls


def test_lab_up_starts_the_named_lab_in_the_state_directory_and_names_its_inventory(capsys, state, lab_up):
    code, out, err = run(capsys, "lab", "up", "--nodes", "3", "--name", "ci")
    assert code == ExitCode.OK
    assert lab_up == [(state, "ci", 3)]
    assert out == f"lab ci: 3 node(s) up; inventory: {state}/lab/ci/inventory.ini\n"
    assert err == "lab: create megaprov-ci-node1\n"


def test_lab_up_defaults_to_two_nodes_of_the_default_lab_and_as_json_says_nothing_on_stderr(capsys, state, lab_up):
    code, out, err = run(capsys, "lab", "up", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert lab_up == [(state, "default", 2)]
    assert document(out) == (
        "lab up",
        True,
        {
            "name": "default",
            "inventory": f"{state}/lab/default/inventory.ini",
            "nodes": [
                {"name": "node1", "container": "megaprov-default-node1", "address": "10.90.7.2", "state": "running"},
                {"name": "node2", "container": "megaprov-default-node2", "address": "10.90.7.3", "state": "running"},
            ],
        },
    )


# ---- lab stop / lab start


class Clock:
    """time for `lab stop/start`: the command reads it before and after; 2.345 s pass in between."""

    def __init__(self):
        self.readings = iter([100.0, 102.345])

    def monotonic(self):
        return next(self.readings)


@pytest.fixture
def clock(monkeypatch):
    monkeypatch.setattr(lab_command, "time", Clock())


def test_lab_stop_powers_the_node_off_and_shows_it_exited(capsys, podman, state, clock):
    podman.state["containers"] = [node_container("ci", 1), node_container("ci", 2)]
    podman.save()
    code, out, err = run(capsys, "lab", "stop", "node2", "--name", "ci")
    assert (code, err) == (ExitCode.OK, "")
    assert out == "lab ci: node2 exited (2.3s)\n"
    assert "stop -t 30 megaprov-ci-node2" in podman.calls()
    assert [c["state"] for c in json.loads(podman.path.read_text())["containers"]] == ["running", "exited"]


def test_lab_stop_as_json_gives_the_node_as_podman_now_shows_it(capsys, podman, state, clock):
    podman.state["containers"] = [node_container("default", 1)]
    podman.save()
    code, out, err = run(capsys, "lab", "stop", "node1", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert document(out) == (
        "lab stop",
        True,
        {
            "name": "default",
            "node": {"name": "node1", "container": "megaprov-default-node1", "address": "10.90.7.2", "state": "exited"},
            "seconds": 2.3,
        },
    )


@pytest.fixture
def lab_start(monkeypatch):
    calls = []

    def start(root, name, node, progress=None):
        calls.append((root, name, node))
        progress(f"wait for {node} to boot")
        return lab.Node(node, lab.container_name(name, 3), "10.90.7.4", "running")

    monkeypatch.setattr(lab, "start", start)
    return calls


def test_lab_start_boots_the_node_in_the_state_directorys_lab_and_shows_its_address(capsys, state, clock, lab_start):
    code, out, err = run(capsys, "lab", "start", "node3", "--name", "ci")
    assert code == ExitCode.OK
    assert lab_start == [(state, "ci", "node3")]
    assert out == "lab ci: node3 running at 10.90.7.4, host key unchanged (2.3s)\n"
    assert err == "lab: wait for node3 to boot\n"


def test_lab_start_as_json_reports_the_node_and_the_seconds_only(capsys, state, clock, lab_start):
    code, out, err = run(capsys, "lab", "start", "node3", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert lab_start == [(state, "default", "node3")]
    assert document(out) == (
        "lab start",
        True,
        {
            "name": "default",
            "node": {"name": "node3", "container": "megaprov-default-node3", "address": "10.90.7.4", "state": "running"},
            "seconds": 2.3,
        },
    )


# ---- data corpus


def test_data_corpus_writes_the_documents_and_says_how_many_bytes(capsys, tmp_path):
    path = tmp_path / "corpus.jsonl"
    code, out, err = run(capsys, "data", "corpus", "--output-file", path, "--documents", "1200", "--seed", "7")
    size = path.stat().st_size
    assert (code, err) == (ExitCode.OK, "")
    assert out == f"data: 1,200 documents, {size:,} bytes in {path}\n"
    assert len(path.read_text().splitlines()) == 1200
    again = tmp_path / "again.jsonl"
    code, out, _ = run(capsys, "data", "corpus", "--output-file", again, "--documents", "1200", "--seed", "7", "-o", "json")
    assert document(out) == ("data corpus", True, {"file": str(again), "documents": 1200, "bytes": size})
    assert again.read_bytes() == path.read_bytes()


def test_data_corpus_defaults_to_2000_documents_of_seed_1234(capsys, tmp_path):
    code, out, _ = run(capsys, "data", "corpus", "--output-file", tmp_path / "c.jsonl", "-o", "json")
    assert code == ExitCode.OK
    expected = data.synthetic_corpus(tmp_path / "expected.jsonl", 2000, 1234)
    assert document(out)[2] == {"file": str(tmp_path / "c.jsonl"), "documents": 2000, "bytes": expected}
    assert (tmp_path / "c.jsonl").read_bytes() == (tmp_path / "expected.jsonl").read_bytes()


# ---- data prepare -i: a relative --output-prefix goes into the cluster's shared directory


def cluster(tmp_path, shared):
    path = tmp_path / "inventory.ini"
    path.write_text(
        "[head]\nhead ansible_host=10.1.0.1\n[gpu_nodes]\nnode1 ansible_host=10.1.0.11\n"
        f"[all:vars]\nmegaprov_gpu_expected=false\nmegaprov_shared_dir={shared}\n"
    )
    return path


@pytest.fixture
def shared(tmp_path):
    path = tmp_path / "shared"
    path.mkdir()
    return path


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["alpha beta", "", "gamma", "delta epsilon zeta"]))
    return path


def prepare(capsys, tmp_path, corpus, prefix, *more):
    return run(capsys, "data", "prepare", "--input", corpus, "--output-prefix", prefix, "-i", cluster(tmp_path, tmp_path / "shared"), *more)


def test_an_absolute_prefix_with_an_inventory_is_refused(capsys, tmp_path, corpus, shared):
    code, out, err = prepare(capsys, tmp_path, corpus, "/data/lab")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == (
        "megaprov: error: --output-prefix /data/lab is absolute but -i puts it under the shared directory: give a relative prefix, e.g. data/lab\n"
    )


def test_a_prefix_leaving_the_shared_directory_by_dots_is_refused(capsys, tmp_path, corpus, shared):
    code, out, err = prepare(capsys, tmp_path, corpus, "../elsewhere/lab")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == "megaprov: error: --output-prefix='../elsewhere/lab' leaves its directory through '..': write a path inside it, without '..'\n"
    assert not (tmp_path / "elsewhere").exists()


def test_a_prefix_through_a_link_out_of_the_shared_directory_is_refused(capsys, tmp_path, corpus, shared):
    (tmp_path / "outside").mkdir()
    (shared / "data").symlink_to(tmp_path / "outside")
    code, out, err = prepare(capsys, tmp_path, corpus, "data/new/lab")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == (
        f"megaprov: error: --output-prefix data/new/lab: {shared}/data/new leads outside the shared directory {shared}: give a prefix inside it\n"
    )
    assert not (tmp_path / "outside" / "new").exists()


def test_a_prefix_under_a_file_names_the_directory_it_cannot_create(capsys, tmp_path, corpus, shared):
    (shared / "data").write_text("not a directory")
    code, out, err = prepare(capsys, tmp_path, corpus, "data/lab")
    assert (code, out) == (ExitCode.USAGE, "")
    assert err == f"megaprov: error: --output-prefix data/lab: cannot create {shared}/data (File exists): check the shared directory's permissions\n"


class FiveSecondClock:
    """time for data.prepare: each monotonic() reading is 5 s after the one before (a report per chunk)."""

    def __init__(self):
        self.now = -5.0

    def monotonic(self):
        self.now += 5.0
        return self.now


@pytest.fixture
def megatron():
    pytest.importorskip("megatron.core", reason="megatron-core is not installed in this environment")


@pytest.fixture
def users_share():
    """A shared directory of the cluster user's (uid 2000) that it can reach (pytest's tmp_path is root's 0700)."""
    with users_directory("shared") as share:
        yield share


@pytest.mark.skipif(os.geteuid() != 0, reason="root writes as the owner of the shared directory; another user writes as itself")
def test_root_makes_the_prefixs_directories_in_the_share_as_its_owner_0755(capsys, tmp_path, corpus, users_share, megatron):
    old = os.umask(0)  # a permissive umask: the directories are still 0755
    try:
        code, out, err = run(
            capsys, "data", "prepare", "--input", corpus, "--output-prefix", "data/web/lab", "-i", cluster(tmp_path, users_share), "-o", "json"
        )
    finally:
        os.umask(old)
    assert (code, err) == (ExitCode.OK, "")
    assert document(out)[2]["prefixes"] == {"text": f"{users_share}/data/web/lab_text_document"}
    for directory in (users_share / "data", users_share / "data" / "web"):
        st = directory.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (2000, 2000, 0o755)
    assert (users_share / "data" / "web" / "lab_text_document.bin").stat().st_uid == 2000


def test_a_prefix_in_an_existing_directory_of_the_share_is_written_there(capsys, tmp_path, corpus, shared, megatron):
    (shared / "data").mkdir()
    code, out, err = prepare(capsys, tmp_path, corpus, "data/lab", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    assert document(out)[2]["prefixes"] == {"text": f"{shared}/data/lab_text_document"}
    assert sorted(p.name for p in (shared / "data").iterdir()) == ["lab_text_document.bin", "lab_text_document.idx"]


def test_data_prepare_shows_each_progress_line_but_the_last_then_the_summary(capsys, tmp_path, corpus, shared, megatron, monkeypatch):
    monkeypatch.setattr(data, "CHUNK_BYTES", 1)  # a chunk per line
    monkeypatch.setattr(data, "time", FiveSecondClock())
    code, out, err = prepare(capsys, tmp_path, corpus, "data/lab")
    assert code == ExitCode.OK
    # readings: 0 at the start, 5, 10, 15, 20 after each of the 4 one-line chunks (each a report), 25 at the end; the
    # report at 20 s would only repeat the summary on stdout, and is not shown
    assert err == (
        "data: 1 docs, 11 tokens, 0.0 MB in 5.0 s (0 docs/s, 2 tokens/s)\n"
        "data: 1 docs, 11 tokens, 0.0 MB in 10.0 s (0 docs/s, 1 tokens/s)\n"
        "data: 2 docs, 17 tokens, 0.0 MB in 15.0 s (0 docs/s, 1 tokens/s after 5.0 s of start-up)\n"
    )
    assert out == (
        "data: 3 docs, 36 tokens, 0.0 MB in 25.0 s (0 docs/s, 1 tokens/s after 5.0 s of start-up)\n"
        "data: skipped 1 empty document(s)\n"
        f"data: text: prefix {shared}/data/lab_text_document (list it under data.prefixes)\n"
    )


def test_data_prepare_as_json_gives_the_figures_and_no_progress(capsys, tmp_path, corpus, shared, megatron, monkeypatch):
    monkeypatch.setattr(data, "CHUNK_BYTES", 1)
    monkeypatch.setattr(data, "time", FiveSecondClock())
    code, out, err = prepare(capsys, tmp_path, corpus, "data/lab", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    prefix = f"{shared}/data/lab_text_document"
    assert document(out) == (
        "data prepare",
        True,
        {
            "prefixes": {"text": prefix},
            "files": [f"{prefix}.bin", f"{prefix}.idx"],
            "tokenizer": "byte",
            "vocab_size": 257,
            "eod": 256,
            "workers": 1,
            "documents": 3,
            "tokens": 36,
            "bytes": 85,
            "skipped_empty": 1,
            "seconds": 25.0,
            "startup_seconds": 5.0,
            "docs_per_second": 0.1,
            "tokens_per_second": 1.25,
        },
    )


def test_data_prepare_hands_its_keys_workers_and_eod_choice_to_the_tokeniser(capsys, tmp_path, shared, megatron):
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"body": t, "title": t[:3]}) + "\n" for t in ["alpha beta", "gamma delta"]))
    code, out, err = prepare(capsys, tmp_path, src, "ds", "--json-keys", "body", "title", "--workers", "2", "--no-append-eod", "-o", "json")
    assert (code, err) == (ExitCode.OK, "")
    result = document(out)[2]
    assert result["prefixes"] == {"body": f"{shared}/ds_body_document", "title": f"{shared}/ds_title_document"}
    assert (result["workers"], result["documents"], result["tokens"]) == (2, 2, 10 + 11 + 3 + 3)  # bytes, no end-of-document token


def test_containers_under_the_lab_label_that_megaprov_did_not_make_are_left_out(capsys, podman, state):
    """Another tool's (or a hand-made) container carrying megaprov's label: a name without a node number, a label that
    is no lab name, a name of another lab. `lab status` lists the real lab's nodes only, in node order."""
    foreign = [
        {**node_container("ci", 3), "name": "someones-box"},
        {**node_container("ci", 4), "lab": "My_Lab", "name": "megaprov-My_Lab-node4"},
        {**node_container("ci", 5), "name": "megaprov-other-node5"},
    ]
    podman.state["containers"] = [node_container("ci", 10), *foreign, node_container("ci", 2)]
    podman.save()
    code, out, err = run(capsys, "lab", "status")
    assert (code, err) == (ExitCode.OK, "")
    assert out == f"lab ci: node2 10.90.7.3 running, node10 10.90.7.11 running\n  inventory: {state}/lab/ci/inventory.ini\n"
