"""Property: hostile strings and numbers in any field of the job spec or in the inventory variables that
are rendered give a clean one-line error, or a launch script, sbatch script and systemd unit that are inert: they
parse, running them in a sandbox with a ``canary`` on PATH never runs it, and no unit line is injected."""

import json
import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from megaprov.cluster import inventory as inv
from megaprov.errors import UsageError
from megaprov.training import jobs, jobspec, planner, render
from megaprov.training.launchers import systemd

ROOT = Path(__file__).resolve().parents[3]
BASE = yaml.safe_load((ROOT / "examples" / "jobs" / "lab-tiny.yml").read_text())
PIECES = [
    "\n", "\r", "\x00", "\x1b[31m", "\x85", "\u2028", "'", '"', "\\", "`canary`", "$(canary)", "${IFS}", ";canary;", "|canary", "&canary&",
    "{{ lookup('pipe','canary') }}", "{% raw %}", "..", "../..", "/", " ", "%h", "$$", "#", "*", "~", "-oProxyCommand=canary", "ÿ", "日本",
    "\udcff", "x" * 300,
]  # fmt: skip
PRINTABLE = [p for p in PIECES if p.isprintable() and len(p) < 100] + ["/shared/", "data/", "a"]
hostile = st.one_of(
    st.lists(st.sampled_from(PRINTABLE), min_size=1, max_size=6).map("".join),
    st.lists(st.sampled_from(PRINTABLE), min_size=1, max_size=6).map(lambda parts: "/shared/" + "".join(parts)),
    st.lists(st.sampled_from(PIECES) | st.text(max_size=8), min_size=1, max_size=6).map("".join),
    st.sampled_from(["/shared/$(canary)", "/opt/x;canary", "data/../../../etc/shadow", "/shared/a b/%n", "gpu\ncanary", "x" * 5000]),
)
huge = st.sampled_from([10**30, -1, 0, 2**63, 1e308, float("inf"), "1e30", 10**6])

STRING_FIELDS = [
    ("name",),
    ("launch", "python"),
    ("launch", "megatron_dir"),
    ("launch", "extra_args"),
    ("launch", "env", "key"),
    ("launch", "env", "value"),
    ("launch", "slurm", "partition"),
    ("launch", "slurm", "account"),
    ("launch", "slurm", "qos"),
    ("launch", "slurm", "time"),
    ("data", "prefixes"),
    ("data", "split"),
    ("data", "tokenizer", "path"),
    ("checkpoint", "directory"),
]
NUMBER_FIELDS = [("model", "num_layers"), ("model", "hidden_size"), ("model", "seq_length"), ("train", "train_iters"), ("launch", "nodes")]
INVENTORY_VARS = ["megaprov_shared_dir", "megaprov_cluster_user", "ansible_host"]


def with_value(field, value):
    doc = json.loads(json.dumps(BASE))
    doc["launch"]["python"] = "/sandbox/bin/python"  # the stub in the sandbox
    doc["launch"]["slurm"] = {"partition": "gpu"}
    doc["launch"]["launcher"] = "slurm"
    if field == ("launch", "extra_args"):
        doc["launch"]["extra_args"] = ["--seed", value]
    elif field[:2] == ("launch", "env"):
        doc["launch"]["env"] = {value: "1"} if field[2] == "key" else {"NCCL_DEBUG": value}
    elif field == ("data", "prefixes"):
        doc["data"]["prefixes"] = [{"path": value}]
    elif field == ("data", "tokenizer", "path"):
        doc["data"]["tokenizer"] = {"type": "huggingface", "path": value}
        doc["model"]["vocab_size"] = 256
    else:
        node = doc
        for part in field[:-1]:
            node = node.setdefault(part, {})
        node[field[-1]] = value
    return doc


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory):
    """A PATH of stubs: every command the scripts run exists and does nothing, except ``canary``, which leaves a mark."""
    root = tmp_path_factory.mktemp("sandbox")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    mark = root / "CANARY-RAN"
    stubs = {
        "canary": f"#!/bin/bash\n: > {mark}\n",
        "python": "#!/bin/bash\nexit 0\n",
        "date": "#!/bin/bash\necho 2025-01-01T00:00:00.000Z\n",
        "scontrol": "#!/bin/bash\necho node1\n",
        "head": "#!/bin/bash\ncat\n",
        "cat": '#!/bin/bash\nwhile IFS= read -r l; do echo "$l"; done\n',
        "mkdir": "#!/bin/bash\nexit 0\n",
        "srun": '#!/bin/bash\nwhile [ "${1#-}" != "$1" ]; do shift; done\nexec "$@"\n',
    }
    for name, body in stubs.items():
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "bash").symlink_to("/bin/bash")
    return root, mark


def run_inert(script, sandbox):
    root, mark = sandbox
    parsed = subprocess.run(["/bin/bash", "-n"], input=script, capture_output=True, text=True, timeout=10)
    assert parsed.returncode == 0, parsed.stderr
    text = script.replace("/sandbox/bin/python", str(root / "bin" / "python"))
    env = {"PATH": str(root / "bin"), "SLURM_JOB_NODELIST": "node1", "SLURM_NODEID": "0", "SLURM_JOB_ID": "1", "HOME": str(root)}
    subprocess.run(["/bin/bash", "-c", text], cwd=root, env=env, capture_output=True, timeout=20)
    assert not mark.exists(), "the canary ran:\n" + script


def check_unit(unit, shared, user):
    keys = []
    for line in unit.splitlines():
        if not line or line.startswith("#") or re.fullmatch(r"\[[A-Za-z]+\]", line):
            continue
        key, sep, value = line.partition("=")
        assert sep and re.fullmatch(r"[A-Za-z]+", key), line
        assert not value.endswith("\\"), line  # would join the next line
        assert "%" not in value.replace("%%", ""), line  # a lone % is a specifier
        keys.append(key)
    baseline = [line.partition("=")[0] for line in unit_for("/shared", "megaprov").splitlines() if "=" in line and not line.startswith("#")]
    assert keys == baseline


def unit_for(shared, user, spec=None):
    spec = spec or jobspec.parse(yaml.safe_dump(with_value(("name",), "job")))
    job_dir, checkpoints = f"{shared}/jobs/{spec.name}", f"{shared}/checkpoints/x"
    job = jobs.Job(spec.name, Path("/inv"), ["n1"], shared, job_dir, Path("/x"), checkpoints, render.unit_name(spec.name))
    return systemd.unit_text(spec, job, "n1", 0, user, False)


def clean_error(exc):
    line = exc.one_line()
    assert line and len(line.splitlines()) == 1, line
    for detail in exc.details:
        assert len(detail.splitlines()) == 1, detail


def render_all(spec, shared, address, user, sandbox):
    cluster = planner.Cluster(spec.launch.nodes, spec.launch.gpus_per_node, planner.GPUS["cpu"], shared, ("n1", "n2"))
    try:
        rendered = render.render(spec, cluster, [("n1", address), ("n2", "10.0.0.2")])
    except UsageError as exc:
        clean_error(exc)
        return
    for node in rendered.nodes:
        run_inert(node.script, sandbox)
    assert rendered.sbatch is not None
    for line in rendered.sbatch.splitlines():
        if line.startswith("#SBATCH"):
            assert re.fullmatch(r"#SBATCH --[a-z-]+(=\S+)?", line), line
    run_inert(rendered.sbatch, sandbox)
    try:
        unit = unit_for(shared, user, spec)
    except UsageError as exc:
        clean_error(exc)
        return
    check_unit(unit, shared, user)


# Under the mutation benchmark (MEGAPROV_MUTATION=1: every mutant of render and jobspec reruns this, each example runs
# bash) fewer examples, the same for every mutant (derandomized: no database, a seed from the test's name).
MUTATION = bool(os.environ.get("MEGAPROV_MUTATION"))
SETTINGS = settings(
    max_examples=30 if MUTATION else 300,
    derandomize=MUTATION,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@SETTINGS
@given(field=st.sampled_from(STRING_FIELDS + NUMBER_FIELDS), value=hostile | huge)
def test_hostile_spec_values_are_refused_or_inert(sandbox, field, value):
    try:
        spec = jobspec.parse(yaml.safe_dump(with_value(field, value), allow_unicode=True), "gpt.yml")
    except UsageError as exc:
        event("refused by the spec")
        clean_error(exc)
        return
    except yaml.YAMLError:
        return  # the value cannot even be written as YAML (a lone surrogate): nothing to parse
    event("rendered and run")
    render_all(spec, "/shared", "10.0.0.1", "megaprov", sandbox)


@SETTINGS
@given(name=st.sampled_from(INVENTORY_VARS), value=hostile)
def test_hostile_inventory_values_are_refused_or_inert(sandbox, name, value):
    bad = inv.typed_problem(name, value)
    event("refused by the inventory" if bad else "rendered and run")
    if bad is not None:
        assert len(bad.one_line().splitlines()) == 1
        return
    spec = jobspec.parse(yaml.safe_dump(with_value(("name",), "job")))
    shared = value if name == "megaprov_shared_dir" else "/shared"
    address = value if name == "ansible_host" else "10.0.0.1"
    user = value if name == "megaprov_cluster_user" else "megaprov"
    render_all(spec, shared, address, user, sandbox)


def test_the_sandbox_catches_an_injection(sandbox, tmp_path):
    """The property above cannot pass vacuously: an unquoted value in a script does run the canary."""
    with pytest.raises(AssertionError, match="the canary ran"):
        run_inert(textwrap.dedent("#!/bin/bash\necho $(canary)\n"), sandbox)
    root, mark = sandbox
    mark.unlink()
    assert os.path.isdir(root)
