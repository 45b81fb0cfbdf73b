"""The one reader for what the cluster writes. Every kind of entry a cluster user can put where
megaprov reads (a link out of the tree, a link inside it, a directory, a FIFO, a device, a file past its bound, a
path through a linked directory) meets every reader the commands use, and each is refused with the entry's name:
nothing outside the tree is read, nothing blocks, nothing is read past its bound, and it is exit 2, not 1."""

import json
import os
import signal
from pathlib import Path

import pytest

from megaprov import untrusted, values
from megaprov.cluster import rates
from megaprov.errors import ExitCode, UsageError
from megaprov.training import follow, jobmeta, jobs, nodefacts, target

SECRET = "root:$6$secret-hash:19000:0:99999:7:::"
META = {"name": "evil", "hosts": ["n1"], "shared_dir": "/shared", "job_dir": "/shared/jobs/evil", "checkpoint_dir": "/shared/ckpt/evil"}


@pytest.fixture(autouse=True)
def _never_blocks():
    """A read that blocks (a FIFO opened for reading waits for a writer for ever) fails the test in 10 s."""

    def expired(*_):
        raise AssertionError("a read blocked")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(10)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _link_out(path: Path, outside: Path) -> None:
    path.symlink_to(outside)


def _link_in(path: Path, outside: Path) -> None:
    sibling = path.with_name("real-" + path.name)
    sibling.write_text(path.name)
    path.symlink_to(sibling.name)


def _fifo(path: Path, outside: Path) -> None:
    os.mkfifo(path)


def _device(path: Path, outside: Path) -> None:
    path.symlink_to("/dev/zero")


def _directory(path: Path, outside: Path) -> None:
    path.mkdir()


def _through_linked_directory(path: Path, outside: Path) -> None:
    # the entry's directory is a link to a directory outside, which holds a file of the same name
    (outside.parent / "elsewhere").mkdir(exist_ok=True)
    (outside.parent / "elsewhere" / path.name).write_text(SECRET)
    path.parent.rename(path.parent.with_name(path.parent.name + "-moved"))
    path.parent.symlink_to(outside.parent / "elsewhere")


KINDS = {
    "link out of the tree": (_link_out, "symbolic link"),
    "link inside the tree": (_link_in, "symbolic link"),
    "FIFO": (_fifo, "FIFO"),
    "link to /dev/zero": (_device, "symbolic link"),
    "directory": (_directory, "directory"),
    "path through a linked directory": (_through_linked_directory, "symbolic link"),
}


def job_tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A shared view with one job directory and a secret file outside it."""
    view = tmp_path / "view"
    local = view / "jobs" / "evil"
    (local / "logs").mkdir(parents=True)
    (local / "launch").mkdir()
    (local / "job.json").write_text(json.dumps(META))
    outside = tmp_path / "shadow"
    outside.write_text(SECRET)
    return view, local, outside


def job(local: Path) -> jobs.Job:
    return jobs.Job("evil", Path("/nonexistent.ini"), ["n1"], "/shared", "/shared/jobs/evil", local, "/shared/ckpt/evil", "megaprov-job-evil.service")


READERS = {
    "node log (job logs)": ("logs/n1.log", lambda local: jobs.node_log(job(local), "n1", 10)),
    "followed log (train, job status)": ("logs/n1.log", lambda local: follow.LogReader(local / "logs" / "n1.log", local.parent.parent).lines()),
    "GPU samples (verdict, doctor)": ("logs/gpu-n1.csv", lambda local: follow.gpu_samples(local / "logs" / "gpu-n1.csv", local.parent.parent)),
    "job.json (every job command)": ("job.json", lambda local: jobmeta.load(local / "job.json", "evil")),
    "spec.yml (status, attach, resume)": ("spec.yml", lambda local: jobs.job_spec(job(local))),
    "report.json (jobs)": ("report.json", lambda local: untrusted.read_json(local / "report.json", "report", 1 << 20, local.parent.parent)),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reader", READERS)
def test_every_reader_refuses_every_hostile_entry_by_name(tmp_path, kind, reader):
    _, local, outside = job_tree(tmp_path)
    rel, read = READERS[reader]
    make, problem = KINDS[kind]
    target = local / rel
    if rel == "job.json":
        target.unlink()
    make(target, outside)
    with pytest.raises(UsageError) as caught:
        read(local)
    assert caught.value.exit_code == ExitCode.USAGE
    assert Path(rel).name in caught.value.message or "logs" in caught.value.message
    assert problem in caught.value.message or "not a regular file" in caught.value.message
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize(
    ("reader", "limit"),
    [
        (lambda p, root: untrusted.read_bytes(p, "report", 4096, root), "4,096"),
        (lambda p, root: untrusted.read_json(p, "report", 4096, root), "4,096"),
    ],
)
def test_a_file_past_its_bound_is_refused_without_reading_it(tmp_path, reader, limit):
    _, local, _ = job_tree(tmp_path)
    big = local / "report.json"
    with big.open("wb") as handle:  # sparse: 8 GiB that take no disk
        handle.truncate(8 << 30)
    with pytest.raises(UsageError, match=limit):
        reader(big, local.parent.parent)


def test_a_log_past_its_bound_is_read_from_its_end(tmp_path):
    _, local, _ = job_tree(tmp_path)
    log = local / "logs" / "n1.log"
    with log.open("wb") as handle:
        handle.seek(4 << 30)  # 4 GiB of NULs (sparse)
        handle.write(b"\nlast line\n")
    data = untrusted.read_bytes(log, "node log", 1 << 20, local.parent.parent, tail=True)
    assert len(data) == 1 << 20 and data.endswith(b"last line\n")
    assert jobs.node_log(job(local), "n1", 1)[1] == ["last line"]


def test_a_followed_log_is_read_in_bounded_looks_and_a_replaced_one_from_its_start(tmp_path, monkeypatch):
    _, local, _ = job_tree(tmp_path)
    monkeypatch.setattr(follow, "MAX_READ", 64)
    log = local / "logs" / "n1.log"
    log.write_text("".join(f"line {i:04d}\n" for i in range(20)))  # 200 bytes
    reader = follow.LogReader(log, local.parent.parent)
    looks = [reader.lines() for _ in range(5)]
    assert [len(look) for look in looks][:4] == [6, 6, 7, 1] and sum(looks, []) == [f"line {i:04d}" for i in range(20)]
    log.write_text("new\n")  # truncated and written again
    assert reader.lines() == ["new"]


def test_a_line_without_end_is_cut_rather_than_held(tmp_path, monkeypatch):
    _, local, _ = job_tree(tmp_path)
    monkeypatch.setattr(follow, "MAX_PARTIAL", 100)
    log = local / "logs" / "n1.log"
    log.write_bytes(b"x" * 1000)
    assert follow.LogReader(log, local.parent.parent).lines() == ["x" * 1000]


def test_listings_leave_out_what_is_not_a_regular_file(tmp_path):
    view, local, outside = job_tree(tmp_path)
    (local / "logs" / "n1.log").write_text("ok\n")
    (local / "logs" / "n2.log").symlink_to(outside)
    os.mkfifo(local / "logs" / "n3.log")
    assert [p.name for p in untrusted.files(local / "logs", view, suffix=".log")] == ["n1.log"]
    assert untrusted.entries(local / "logs", view) == {"n1.log": "file", "n2.log": "other", "n3.log": "other"}
    # a linked job directory is not a job directory
    (view / "jobs" / "linked").symlink_to(outside.parent)
    assert untrusted.entries(view / "jobs", view)["linked"] == "other"


def test_a_directory_filled_on_purpose_is_refused(tmp_path):
    view, local, _ = job_tree(tmp_path)
    for i in range(30):
        (local / "logs" / f"n{i}.log").write_text("")
    with pytest.raises(UsageError, match="more than 20 entries"):
        untrusted.entries(local / "logs", view, limit=20)


def test_operator_files_may_be_links_but_never_fifos(tmp_path):
    real = tmp_path / "gpt.yml"
    real.write_text("name: x\n")
    (tmp_path / "link.yml").symlink_to(real)
    assert values.read_text(tmp_path / "link.yml", "job spec") == "name: x\n"
    os.mkfifo(tmp_path / "fifo.yml")
    with pytest.raises(UsageError, match="not a regular file"):
        values.read_text(tmp_path / "fifo.yml", "job spec")
    with pytest.raises(UsageError, match="not a regular file"):
        target.read(str(tmp_path / "fifo.yml"))


# ---- §3 facts are input


@pytest.mark.parametrize(
    "value",
    ["2.1\ntouch /tmp/owned #", "2.1; touch /tmp/owned", "$(id)", "2.1 --flag", "", "x" * 65, ["2.1"], 2.1, "\x1b[2J2.1"],
)  # fmt: skip
@pytest.mark.parametrize("key", ["transformer_engine", "torch", "torch_cuda", "transformers"])
def test_a_node_version_that_is_not_a_version_is_refused_with_the_node(key, value):
    fact = {"version": 1, key: value}
    if value == "":  # empty is "absent", as the python stage writes it
        assert getattr(nodefacts.node_from_fact(fact, "gpu07"), key) is None
        return
    with pytest.raises(UsageError, match=f"node gpu07: its fact megaprov_python.{key}="):
        nodefacts.node_from_fact(fact, "gpu07")


@pytest.mark.parametrize("version", ["2.9.0", "2.6.0a0+df5bbc09d1.nv24.12", "12.4", "1.13.0.dev20230101", "4.57.1"])
def test_real_versions_pass(version):
    assert nodefacts.node_from_fact({"version": 1, "transformer_engine": version}, "n").transformer_engine == version


RATE = {"version": 1, "backend": "torch-cuda", "dtype": "bfloat16", "tflops_per_device": 700.0, "devices": [{}] * 8, "measured_at": "t"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"tflops_per_device": 0}, "tflops_per_device=0"),
        ({"tflops_per_device": -3.0}, "tflops_per_device=-3.0"),
        ({"tflops_per_device": float("inf")}, "tflops_per_device=inf"),
        ({"tflops_per_device": float("nan")}, "tflops_per_device=nan"),
        ({"tflops_per_device": "700"}, "tflops_per_device='700'"),
        ({"tflops_per_device": True}, "tflops_per_device=True"),
        ({"backend": "rm -rf"}, "backend='rm -rf'"),
        ({"dtype": "bf16\n"}, "dtype="),
        ({"devices": "8"}, "devices="),
        ({"measured_at": "\x1b[2J"}, "measured_at="),
    ],
)
def test_a_recorded_rate_that_is_not_a_rate_is_refused_with_the_node(change, field):
    with pytest.raises(UsageError, match=f"node gpu03: its recorded compute rate .*{field[:12]}"):
        rates.rate_from_fact("gpu03", {**RATE, **change})


@pytest.mark.parametrize("text", ['"many"', "-1", "1e400", "[1]", "10000000000"])
def test_a_resume_count_that_is_not_a_count_is_bad_input(text):
    raw = json.dumps(META)[:-1] + f', "resumes": {text}}}'
    with pytest.raises(UsageError, match="resumes="):
        jobmeta.parse(raw, "job.json", "evil")
