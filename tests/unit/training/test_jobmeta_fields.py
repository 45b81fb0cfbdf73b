"""job.json's typed fields (megaprov.training.jobmeta): every field as megaprov reads it back, the defaults an older
job.json gets, each bound at its edge, and the exact one-line refusal (message and hint) an operator reads when the
cluster user changed the file."""

import json

import pytest

from megaprov import values
from megaprov.errors import UsageError
from megaprov.training import jobmeta

HINT = "job.json is written by megaprov (the cluster user can change it): restore it or remove the job directory"
BASE = {
    "name": "el",
    "hosts": ["node1", "node2"],
    "shared_dir": "/shared",
    "job_dir": "/shared/jobs/el",
    "checkpoint_dir": "/shared/checkpoints/el",
}


def meta(**changes):
    doc = {**BASE, **changes}
    return jobmeta.parse(json.dumps({k: v for k, v in doc.items() if v is not DROP}), "job.json", "el")


DROP = object()


def refusal(**changes):
    with pytest.raises(UsageError) as info:
        meta(**changes)
    return info.value.message, info.value.hint


def test_every_field_is_read_back_as_written():
    got = meta(
        hosts=["node2"],
        state="running",
        started="2026-12-05T20:00:00Z",
        nodes=3,
        gpus_per_node=8,
        gpu="H100-SXM",
        launcher="slurm",
        slurm_job_id="4242",
        submit_host="head",
        resumes=2,
        first_started="2026-12-04T10:00:00Z",
        job_hosts=["node1", "node2", "node3"],
        segments=[{"hosts": ["node1", "node2", "node3"], "started": "t0", "why": "started"}, {"hosts": ["node2"], "started": "t1", "why": "lost"}],
        stop_grace_s=30,
    )
    assert (got.name, got.hosts, got.shared_dir, got.job_dir, got.checkpoint_dir) == (
        "el",
        ("node2",),
        "/shared",
        "/shared/jobs/el",
        "/shared/checkpoints/el",
    )
    assert got.unit == "megaprov-job-el.service"
    assert (got.state, got.started, got.nodes, got.gpus_per_node, got.gpu) == ("running", "2026-12-05T20:00:00Z", 3, 8, "H100-SXM")
    assert (got.launcher, got.slurm_id, got.submit_host, got.resumes, got.first_started) == ("slurm", "4242", "head", 2, "2026-12-04T10:00:00Z")
    assert got.job_hosts == ("node1", "node2", "node3")
    assert got.segments == (jobmeta.Segment(("node1", "node2", "node3"), "t0", "started"), jobmeta.Segment(("node2",), "t1", "lost"))
    assert got.raw["stop_grace_s"] == 30  # fields megaprov reads elsewhere stay in raw


def test_an_older_job_json_gets_the_defaults():
    got = meta()
    assert (got.state, got.started, got.first_started) == ("unknown", None, None)
    assert (got.nodes, got.gpus_per_node, got.gpu) == (2, 1, "cpu")  # nodes: as many as its hosts
    assert (got.launcher, got.slurm_id, got.submit_host, got.resumes) == ("systemd", "", "", 0)
    assert got.job_hosts == ("node1", "node2") and got.segments == ()
    assert meta(started="t").first_started == "t"  # first_started: the start when never resumed


def test_the_unit_is_derived_from_the_name_never_read():
    assert meta(unit="sshd.service").unit == "megaprov-job-el.service"


def test_a_systemd_job_keeps_no_submit_host_that_is_not_text():
    assert meta(submit_host=["head"]).submit_host == ""


def test_a_directory_name_that_is_no_job_name_is_refused_before_the_file_is_read():
    with pytest.raises(UsageError) as info:
        jobmeta.parse("not json", "job.json", "Bad Name")
    assert info.value.message == "job name='Bad Name' is not a job name"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"name": "other"}, "job.json: name='other' is not the job's directory name 'el'"),
        ({"name": "Bad"}, "job.json: name='Bad' is not a job name"),
        ({"name": DROP}, "job.json: name=None is not a job name"),
        ({"shared_dir": "/", "job_dir": "/jobs/el", "checkpoint_dir": "/c"}, "job.json: shared_dir='/' is not a shared directory"),
        ({"shared_dir": "shared"}, "job.json: shared_dir='shared' is not an absolute path"),
        ({"job_dir": "/shared/jobs/other"}, "job.json: job_dir='/shared/jobs/other' is not /shared/jobs/el"),
        ({"job_dir": "jobs/el"}, "job.json: job_dir='jobs/el' is not an absolute path"),
        ({"checkpoint_dir": "/etc"}, "job.json: checkpoint_dir='/etc' is not inside /shared"),
        ({"checkpoint_dir": "/shared"}, "job.json: checkpoint_dir='/shared' is not inside /shared"),
        ({"checkpoint_dir": "/shared/../etc"}, "job.json: checkpoint_dir='/shared/../etc' contains '..'"),
        ({"hosts": "node1"}, "job.json: hosts='node1' must be a list of 1 to 10,000 host names"),
        ({"hosts": []}, "job.json: hosts=[] must be a list of 1 to 10,000 host names"),
        ({"hosts": ["node1", "node2;reboot"]}, "job.json: hosts[1]='node2;reboot' is not a valid host name"),
        ({"state": 5}, "job.json: state=5 is not a job state"),
        ({"state": "Running"}, "job.json: state='Running' is not a job state"),
        ({"state": "r" * 33}, f"job.json: state='{'r' * 33}' is not a job state"),
        ({"started": "t" * 65}, "job.json: started='" + "t" * 56 + "... is 65 characters long"),
        ({"nodes": 0}, "job.json: nodes=0 is out of range"),
        ({"nodes": 10_001}, "job.json: nodes=10001 is out of range"),
        ({"nodes": None}, "job.json: nodes=None is not a whole number"),
        ({"gpus_per_node": 0}, "job.json: gpus_per_node=0 is out of range"),
        ({"gpus_per_node": 65}, "job.json: gpus_per_node=65 is out of range"),
        ({"gpu": "H100 SXM"}, "job.json: gpu='H100 SXM' is not a model name"),
        ({"launcher": "kubernetes"}, "job.json: launcher='kubernetes' is not systemd or slurm"),
        ({"slurm_job_id": "1234567890123"}, "job.json: slurm_job_id='1234567890123' is not a Slurm job id"),
        ({"slurm_job_id": "12a"}, "job.json: slurm_job_id='12a' is not a Slurm job id"),
        ({"slurm_job_id": 12}, "job.json: slurm_job_id=12 is not a Slurm job id"),
        ({"resumes": -1}, "job.json: resumes=-1 is out of range"),
        ({"resumes": 1_000_001}, "job.json: resumes=1000001 is out of range"),
        ({"first_started": "t" * 65}, "job.json: first_started='" + "t" * 56 + "... is 65 characters long"),
        ({"first_started": 7}, "job.json: first_started=7 must be a string"),
        ({"job_hosts": "node1"}, "job.json: job_hosts='node1' must be a list of 1 to 10,000 host names"),
        ({"job_hosts": []}, "job.json: job_hosts=[] must be a list of 1 to 10,000 host names"),
        ({"job_hosts": ["node1", "node2", "x y"]}, "job.json: job_hosts[2]='x y' is not a valid host name"),
        ({"job_hosts": ["node1", "node3"]}, "job.json: hosts ['node1', 'node2'] are not among job_hosts ['node1', 'node3']"),
        ({"segments": {}}, "job.json: segments must be a list of at most 1000"),
        ({"segments": ["x"]}, "job.json: segments[0] must be an object with a list of hosts"),
        ({"segments": [{"hosts": "node1"}]}, "job.json: segments[0] must be an object with a list of hosts"),
        ({"segments": [{"hosts": []}]}, "job.json: segments[0] must be an object with a list of hosts"),
        ({"segments": [{"hosts": ["node1"]}, {"hosts": ["a;b"]}]}, "job.json: segments[1].hosts='a;b' is not a valid host name"),
        ({"segments": [{"hosts": ["node1"], "started": "s" * 65}]}, "job.json: segments[0].started='" + "s" * 56 + "... is 65 characters long"),
        ({"segments": [{"hosts": ["node1"], "started": None}]}, "job.json: segments[0].started=None must be a string"),
        ({"segments": [{"hosts": ["node1"], "why": "w" * 513}]}, "job.json: segments[0].why='" + "w" * 56 + "... is 513 characters long"),
        ({"segments": [{"hosts": ["node1"], "why": None}]}, "job.json: segments[0].why=None must be a string"),
        ({"launcher": "slurm", "submit_host": "head;x"}, "job.json: submit_host='head;x' is not a valid host name"),
        ({"launcher": "slurm"}, "job.json: submit_host='' is not a valid host name"),
    ],
)
def test_what_the_cluster_user_could_plant_is_refused_in_one_line(changes, message):
    assert refusal(**changes) == (message, HINT)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[1, 2]", "job.json: must be a JSON object"),
        ('"el"', "job.json: must be a JSON object"),
    ],
)
def test_a_job_json_that_is_no_object_is_refused(text, message):
    with pytest.raises(UsageError) as info:
        jobmeta.parse(text, "job.json", "el")
    assert (info.value.message, info.value.hint) == (message, HINT)


def test_a_job_json_that_is_not_json_says_so():
    with pytest.raises(UsageError) as info:
        jobmeta.parse('{"name": ', "job.json", "el")
    assert info.value.message.startswith("job.json: not valid JSON (")


def test_each_bound_holds_at_its_edge():
    """The largest (and smallest) value of each field is read, one past it is refused (the refusals above)."""
    assert meta(hosts=["node1"], job_hosts=["node1"]).hosts == ("node1",)
    assert meta(state="r" * 32).state == "r" * 32
    assert meta(state="a-b").state == "a-b"
    assert meta(started="t" * 64).started == "t" * 64 and meta(first_started="f" * 64).first_started == "f" * 64
    assert meta(nodes=1).nodes == 1 and meta(nodes=values.MAX_HOSTS).nodes == values.MAX_HOSTS
    assert meta(gpus_per_node=1).gpus_per_node == 1 and meta(gpus_per_node=64).gpus_per_node == 64
    assert meta(slurm_job_id="123456789012").slurm_id == "123456789012" and meta(slurm_job_id="").slurm_id == ""
    assert meta(resumes=0).resumes == 0 and meta(resumes=jobmeta.MAX_RESUMES).resumes == jobmeta.MAX_RESUMES
    assert meta(launcher="systemd").launcher == "systemd"
    seg = {"hosts": ["node1"], "started": "s" * 64, "why": "w" * 512}
    assert meta(segments=[seg]).segments == (jobmeta.Segment(("node1",), "s" * 64, "w" * 512),)
    assert meta(segments=[{"hosts": ["node1"]}]).segments == (jobmeta.Segment(("node1",), "", ""),)


def test_the_largest_cluster_and_the_longest_history_are_read():
    many = [f"n{i}" for i in range(values.MAX_HOSTS)]
    got = meta(hosts=many, segments=[{"hosts": many, "started": "t", "why": "w"}])
    assert len(got.hosts) == len(got.job_hosts) == len(got.segments[0].hosts) == values.MAX_HOSTS
    assert refusal(hosts=[*many, "n-last"])[0].endswith("must be a list of 1 to 10,000 host names")
    assert refusal(hosts=["node1"], job_hosts=[*many, "n-last"])[0].endswith("must be a list of 1 to 10,000 host names")
    assert refusal(segments=[{"hosts": [*many, "n-last"]}]) == ("job.json: segments[0] must be an object with a list of hosts", HINT)
    seg = {"hosts": ["node1"], "started": "t", "why": "w"}
    assert len(meta(segments=[seg] * jobmeta.MAX_SEGMENTS).segments) == jobmeta.MAX_SEGMENTS
    assert refusal(segments=[seg] * (jobmeta.MAX_SEGMENTS + 1)) == ("job.json: segments must be a list of at most 1000", HINT)


def test_load_reads_the_file_of_the_job_directory(tmp_path):
    local = tmp_path / "jobs" / "el"
    local.mkdir(parents=True)
    (local / "job.json").write_text(json.dumps(BASE))
    got = jobmeta.load(local / "job.json", "el")
    assert got.hosts == ("node1", "node2")
    (local / "job.json").write_text(json.dumps({**BASE, "name": "other"}))
    with pytest.raises(UsageError) as info:
        jobmeta.load(local / "job.json", "el")
    assert info.value.message == f"{local / 'job.json'}: name='other' is not the job's directory name 'el'"
