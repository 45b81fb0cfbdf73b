"""Every hostile example exits 2 with one line, fast, before any host is contacted, and writes nothing
outside where it belongs. Runs the real CLI (megaprov.cli.main, and the console script where the import time
matters)."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from megaprov.cli import main
from megaprov.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]
TOUCH = "{{ lookup('pipe', 'touch /tmp/megaprov-canary-cli') }}"
CANARY = Path("/tmp/megaprov-canary-cli")
TINY = yaml.safe_load((ROOT / "examples" / "jobs" / "lab-tiny.yml").read_text())


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    CANARY.unlink(missing_ok=True)
    yield
    assert not CANARY.exists(), "a template ran"
    assert not (tmp_path / "state" / "runs").exists(), "ansible-runner was started"


def run(capsys, *argv, budget=5.0):
    # CPU seconds of this process, not the wall clock: a bound on work (a regex gone quadratic, an unbounded read)
    # that holds on a loaded machine, where a wall-clock budget fails for reasons that are not the code's.
    start = time.process_time()
    code = main([str(a) for a in argv])
    seconds = time.process_time() - start
    out, err = capsys.readouterr()
    assert seconds < budget, f"took {seconds:.1f} CPU s"
    return code, out, err


def one_line(err):
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("megaprov: error: ") and "Traceback" not in err and "internal error" not in err
    return lines[0]


def usage(capsys, *argv, needle="", budget=5.0):
    code, _, err = run(capsys, *argv, budget=budget)
    assert code == ExitCode.USAGE, err
    line = one_line(err)
    assert needle in line, line
    return line


def inventory(tmp_path, hosts="n1 ansible_host=10.0.0.1", extra="", all_vars=None):
    path = tmp_path / "inventory.ini"
    path.write_text(f"[head]\n{hosts}\n[gpu_nodes]\nn1\n{extra}")
    if all_vars is not None:
        (tmp_path / "group_vars").mkdir(exist_ok=True)
        (tmp_path / "group_vars" / "all.yml").write_text(all_vars)
    return path


def spec(tmp_path, **sections):
    doc = json.loads(json.dumps(TINY))
    for dotted, value in sections.items():
        node = doc
        *parents, leaf = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    path = tmp_path / "gpt.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


# ---- Jinja evaluated on the controller


def test_a_template_in_a_spec_value_is_refused(capsys, tmp_path):
    usage(capsys, "job", "check", "-f", spec(tmp_path, launch__python=TOUCH), needle="launch.python=")


def shared_job(tmp_path, meta):
    shared = tmp_path / "shared"
    (shared / "jobs" / "evil").mkdir(parents=True)
    (shared / "jobs" / "evil" / "job.json").write_text(json.dumps(meta))
    inv = inventory(tmp_path, extra=f"[all:vars]\nmegaprov_controller_shared_dir={shared}\n")
    return inv


GOOD_META = {"name": "evil", "hosts": ["n1"], "shared_dir": "/shared", "job_dir": "/shared/jobs/evil", "checkpoint_dir": "/shared/checkpoints/evil"}


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"hosts": [TOUCH]}, "hosts[0]="),
        ({"name": TOUCH}, "name="),
        ({"job_dir": "/shared/jobs/../../etc"}, "job_dir="),
        ({"checkpoint_dir": "/etc"}, "checkpoint_dir='/etc' is not inside /shared"),
        ({"shared_dir": "/shared\ntouch /x"}, "control character"),
        ({"nodes": 10**30}, "nodes="),
        ({"gpus_per_node": "8; touch /x"}, "gpus_per_node="),
        ({"gpu": "H100$(touch /x)"}, "gpu="),
    ],
)
@pytest.mark.parametrize("action", ["status", "stop", "logs"])
def test_a_hostile_job_json_is_refused_before_ansible(capsys, tmp_path, change, needle, action):
    inv = shared_job(tmp_path, {**GOOD_META, **change})
    usage(capsys, "job", action, "evil", "-i", inv, needle=needle)


def test_the_unit_is_never_read_from_job_json(tmp_path):
    from megaprov.training import jobs

    inv = shared_job(tmp_path, {**GOOD_META, "unit": TOUCH})
    assert jobs.find("evil", str(inv)).unit == "megaprov-job-evil.service"


def test_a_hostile_job_lists_as_invalid(capsys, tmp_path):
    inv = shared_job(tmp_path, {**GOOD_META, "hosts": [TOUCH]})
    code, out, _ = run(capsys, "jobs", "-i", inv, "--output", "json")
    assert code == ExitCode.OK
    assert json.loads(out)["result"]["jobs"][0]["state"] == "invalid"


# ---- control characters in rendered shell, units and sbatch


@pytest.mark.parametrize(
    ("all_vars", "needle"),
    [
        ('megaprov_shared_dir: "/shared\\ntouch /x #"\n', "megaprov_shared_dir="),
        ('megaprov_cluster_user: "megaprov\\nExecStartPre=/bin/touch /x"\n', "megaprov_cluster_user="),
        ('megaprov_cluster_user: "Root Admin"\n', "is not a user name"),
        ('nccl_tests_repo: "https://x\\r\\nfoo"\n', "control character"),
    ],
)
def test_control_characters_in_variables_are_refused(capsys, tmp_path, all_vars, needle):
    usage(capsys, "bootstrap", "-i", inventory(tmp_path, all_vars=all_vars), needle=needle)


def test_control_characters_in_ini_vars_are_refused(capsys, tmp_path):
    usage(capsys, "bootstrap", "-i", inventory(tmp_path, hosts="n1 ansible_host=10.0.0.1 ansible_user='a\x1bb'"), needle="control character")


def test_a_newline_in_a_slurm_partition_is_refused(capsys, tmp_path):
    usage(capsys, "job", "check", "-f", spec(tmp_path, launch__slurm={"partition": "gpu\ntouch /x"}), needle="launch.slurm.partition=")


@pytest.mark.parametrize("field", ["launch__megatron_dir", "checkpoint__directory"])
def test_newlines_in_spec_paths_are_refused(capsys, tmp_path, field):
    usage(capsys, "job", "check", "-f", spec(tmp_path, **{field: "/shared/x\nrm -rf /"}), needle="control character")


def test_env_names_must_be_names(capsys, tmp_path):
    usage(capsys, "job", "check", "-f", spec(tmp_path, launch__env={"A=1; touch /x; B": "1"}), needle="not an environment variable name")


# ---- hosts contacted before validation


@pytest.mark.parametrize("address", ["999.1.1.1", '""', "'10.0.0.1;touch /x'", "'$(touch /x)'", "-oProxyCommand=touch", "'{{ x }}'"])
def test_bad_addresses_exit_2_before_anything_is_contacted(capsys, tmp_path, address):
    usage(capsys, "bootstrap", "-i", inventory(tmp_path, hosts=f"n1 ansible_host={address}"), needle="is not an IP address or host name")


# ---- path traversal


def test_a_data_prefix_outside_the_shared_directory_is_refused(capsys, tmp_path):
    usage(capsys, "job", "check", "-f", spec(tmp_path, data__prefixes=[{"path": "data/../../../etc/shadow"}]), needle="leaves its directory")


def test_an_output_prefix_outside_the_shared_directory_is_refused(capsys, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    inv = inventory(tmp_path, extra=f"[all:vars]\nmegaprov_controller_shared_dir={shared}\n")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "hello"}\n')
    before = sorted(tmp_path.rglob("*"))
    usage(capsys, "data", "prepare", "--input", corpus, "--output-prefix", "../../escaped/x", "-i", inv, needle="leaves its directory")
    assert sorted(tmp_path.rglob("*")) == before and not (tmp_path.parent / "escaped").exists()


def test_a_symlink_out_of_the_shared_directory_is_refused(capsys, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data").symlink_to(tmp_path)
    inv = inventory(tmp_path, extra=f"[all:vars]\nmegaprov_controller_shared_dir={shared}\n")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "hello"}\n')
    usage(capsys, "data", "prepare", "--input", corpus, "--output-prefix", "data/x", "-i", inv, needle="leads outside the shared directory")


def test_json_keys_cannot_name_paths(capsys, tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"text": "hello"}\n')
    argv = ["data", "prepare", "--input", corpus, "--output-prefix", tmp_path / "out" / "x", "--json-keys", "a/../../x"]
    usage(capsys, *argv, needle="not an identifier")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("action", ["status", "logs", "stop"])
def test_job_names_are_not_paths(capsys, tmp_path, action):
    usage(capsys, "job", action, "../jobs/evil", "-i", inventory(tmp_path), needle="is not a job name")


def test_resume_takes_a_job_name_not_a_path(capsys, tmp_path):
    usage(capsys, "train", "--resume", "../jobs/evil", "-i", inventory(tmp_path), needle="is not a job name")


# ---- hangs and memory blow-ups

BOMB = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]" for i in range(9)]
    + ["name: j"]
)


def test_an_alias_bomb_is_refused_at_once(capsys, tmp_path):
    path = tmp_path / "bomb.yml"
    path.write_text(BOMB + "\n")
    assert len(BOMB.splitlines()) == 11
    usage(capsys, "job", "check", "-f", path, needle="anchors and aliases are not allowed", budget=2.0)


@pytest.mark.parametrize("value", [10**30, 1e30, "1e30"])
def test_huge_layer_counts_are_refused(capsys, tmp_path, value):
    usage(capsys, "plan", "--job", spec(tmp_path, model__num_layers=value), "--gpu", "H100-SXM", needle="model.num_layers=")


@pytest.mark.parametrize(("flag", "value"), [("--nodes", "1000000000000000000"), ("--gpus-per-node", "100000"), ("--top", "10" * 40)])
def test_huge_plan_flags_are_refused(capsys, flag, value):
    usage(capsys, "plan", "--job", ROOT / "examples" / "jobs" / "lab-tiny.yml", flag, value, needle=f"argument {flag}:")


def test_a_huge_host_range_is_refused(capsys, tmp_path):
    usage(capsys, "bootstrap", "-i", inventory(tmp_path, extra="[gpu_nodes]\nnode[0:99999999]\n"), needle="expands to 100,000,000 hosts")


def test_too_many_hosts_are_refused_fast(capsys, tmp_path):
    hosts = "\n".join(f"node{i}" for i in range(40_000))
    usage(capsys, "bootstrap", "-i", inventory(tmp_path, extra=f"[gpu_nodes]\n{hosts}\n"), needle="more than 10,000 hosts")


def test_workers_are_bounded(capsys, tmp_path):
    usage(capsys, "data", "prepare", "--input", "x.jsonl", "--output-prefix", "x", "--workers", "10000", needle="argument --workers:")


# ---- exit 1 for bad input


def test_non_utf8_files_are_bad_input(capsys, tmp_path):
    inv = inventory(tmp_path, all_vars="")
    (tmp_path / "group_vars" / "all.yml").write_bytes(b"megaprov_cluster_user: caf\xe9\n")
    usage(capsys, "bootstrap", "-i", inv, needle="is not UTF-8 (byte 0xe9 on line 1)")
    inv.write_bytes(b"[head]\nn\xff1\n")
    usage(capsys, "bootstrap", "-i", inv, needle="not UTF-8 (byte 0xff)")


def test_a_non_utf8_extra_vars_file_is_bad_input(capsys, tmp_path):
    bad = tmp_path / "vars.yml"
    bad.write_bytes(b"x: \xff\n")
    line = usage(capsys, "bootstrap", "-i", inventory(tmp_path), "-e", f"@{bad}", needle="is not UTF-8")
    assert str(bad) in line
    usage(capsys, "bootstrap", "-i", inventory(tmp_path), "-e", f"@{tmp_path}", needle="is a directory")


def test_a_directory_and_a_symlink_loop_are_named(capsys, tmp_path):
    usage(capsys, "job", "check", "-f", tmp_path, needle="is a directory")
    loop = tmp_path / "loop.yml"
    loop.symlink_to(loop)
    usage(capsys, "job", "check", "-f", loop, needle="is a symlink loop")
    inv = inventory(tmp_path, all_vars="")
    (tmp_path / "group_vars" / "all.yml").unlink()
    (tmp_path / "group_vars" / "all.yml").symlink_to(tmp_path / "group_vars" / "all.yml")
    usage(capsys, "bootstrap", "-i", inv, needle="is a symlink loop")


def test_json_output_on_bad_input_is_an_envelope(capsys, tmp_path):
    code, out, _ = run(capsys, "bootstrap", "-i", inventory(tmp_path, hosts="n1 ansible_host=999.1.1.1"), "--output", "json")
    assert code == ExitCode.USAGE and json.loads(out)["ok"] is False


def test_a_corpus_into_a_directory_is_bad_input(capsys, tmp_path):
    usage(capsys, "data", "corpus", "--output-file", tmp_path, needle="is a directory")


def test_a_limit_that_matches_nothing_is_refused(capsys, tmp_path):
    usage(capsys, "bootstrap", "-i", inventory(tmp_path), "--limit", "rack*", needle="'rack*' matches no host or group")
    usage(capsys, "bootstrap", "-i", inventory(tmp_path), "--limit", "~(", needle="is not a regular expression")


# ---- messages


def test_a_byte_order_mark_is_named(capsys, tmp_path):
    inv = tmp_path / "inventory.ini"
    inv.write_bytes(b"\xef\xbb\xbf[head]\nn1\n[gpu_nodes]\nn1\n")
    usage(capsys, "bootstrap", "-i", inv, needle="byte-order mark")


@pytest.mark.parametrize(
    ("lines", "needle"),
    [
        ('{"text": null}\n', "the record has null under 'text'"),
        ('{"text": "a"}\n{"text": "caf\xe9"}\n', "c.jsonl:2: not UTF-8"),
        ('{"other": "a"}\n', "the record has no key 'text'"),
    ],
)
def test_data_prepare_bad_records_are_one_line(capsys, tmp_path, lines, needle):
    corpus = tmp_path / "c.jsonl"
    corpus.write_bytes(lines.encode("latin-1"))
    usage(capsys, "data", "prepare", "--input", corpus, "--output-prefix", tmp_path / "out", needle=needle, budget=60.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl", "state"] or sorted(p.name for p in tmp_path.iterdir()) == ["c.jsonl"]


def test_data_prepare_checks_arguments_before_loading_torch(tmp_path):
    """The console script, as a user runs it: a bad argument is answered before torch (seconds to import, and its
    warnings) is loaded. `-X importtime` lists every module the process imported."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "megaprov", "data", "prepare", "--input", str(tmp_path), "--output-prefix", str(tmp_path / "x")],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:") and line.count("|") == 2}
    assert "megaprov.cli" in imported and "json" in imported, "-X importtime listed no imports"
    assert not {name for name in imported if name.split(".")[0] in {"torch", "megatron", "tokenizers"}}
    errors = [line for line in lines if not line.startswith("import time:")]
    assert errors == [f"megaprov: error: --input {tmp_path} is a directory: pass JSONL files, one JSON object per line"]


# ---- found by an adversarial review after the first pass


def test_extra_var_names_from_a_file_must_be_names(capsys, tmp_path):
    # ansible-runner writes each top-level name into the JSON of -e as it is: a name holding '", "x": "{{...}}' would
    # smuggle a templated variable past the unsafe marking
    bad = tmp_path / "q.yml"
    bad.write_text(yaml.safe_dump({f'zz": 1, "megaprov_lab": "{TOUCH}", "y': 1}))
    usage(capsys, "bootstrap", "-i", inventory(tmp_path), "--check", "-e", f"@{bad}", needle="is not a variable name")
    usage(capsys, "bootstrap", "-i", inventory(tmp_path), "--check", "-e", "ñ=1", needle="is not KEY=VALUE")


def test_group_vars_names_must_be_names(capsys, tmp_path):
    usage(capsys, "job", "check", "-f", spec(tmp_path), "-i", inventory(tmp_path, all_vars='"bad key": 1\n'), needle="is not a variable name")


@pytest.mark.parametrize("address", ["fe80::1%eth0 -oProxyCommand=id", "fe80::1%$(id)", "::1%{{ x }}"])
def test_an_ipv6_zone_is_an_interface_name(capsys, tmp_path, address):
    usage(capsys, "job", "check", "-f", spec(tmp_path), "-i", inventory(tmp_path, hosts=f"n1 ansible_host='{address}'"), needle="zone")


@pytest.mark.parametrize("shared", ["/shared/{{ lookup('pipe','id') }}", "/shared/{% raw %}x{% endraw %}", "/shared/$(id)", "/shared/`id`"])
def test_a_shared_directory_means_the_same_everywhere(capsys, tmp_path, shared):
    inv = inventory(tmp_path, all_vars=f"megaprov_shared_dir: {json.dumps(shared)}\n")
    usage(capsys, "job", "check", "-f", spec(tmp_path), "-i", inv, needle="megaprov_shared_dir")


def test_many_groups_sharing_children_load_fast(capsys, tmp_path):
    sections = "".join(f"[g{i}:children]\n" + "".join(f"g{j}\n" for j in range(i + 1, min(i + 41, 400))) for i in range(399))
    inv = inventory(tmp_path, extra=sections + "[g399]\nn1\n", all_vars="megaprov_gpu_expected: false\n")
    code, _, err = run(capsys, "job", "check", "-f", spec(tmp_path), "-i", inv, budget=10)
    assert code == 0, err


def test_a_long_chain_of_children_is_no_internal_error(capsys, tmp_path):
    sections = "".join(f"[g{i}:children]\ng{i + 1}\n" for i in range(3000)) + "[g3000]\nn1\n"
    inv = inventory(tmp_path, extra=sections, all_vars="megaprov_gpu_expected: false\n")
    code, _, err = run(capsys, "job", "check", "-f", spec(tmp_path), "-i", inv, budget=10)
    assert code == 0, err


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("a: &a [1, 1, 1]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b]\n", "anchors and aliases are not allowed"),
        ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than"),
        ("a: " + "9" * 5000 + "\n", "cannot be read"),
    ],
)
def test_vars_files_and_extra_vars_files_are_bounded(capsys, tmp_path, text, needle):
    usage(capsys, "job", "check", "-f", spec(tmp_path), "-i", inventory(tmp_path, all_vars=text), needle=needle)
    bad = tmp_path / "e.yml"
    bad.write_text(text)
    usage(capsys, "bootstrap", "-i", inventory(tmp_path), "--check", "-e", f"@{bad}", needle=needle)


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"name": ' + "9" * 5000 + "}"])
def test_a_hostile_job_json_shape_is_refused(capsys, tmp_path, text):
    shared = tmp_path / "shared"
    (shared / "jobs" / "evil").mkdir(parents=True)
    (shared / "jobs" / "evil" / "job.json").write_text(text)
    inv = inventory(tmp_path, extra=f"[all:vars]\nmegaprov_controller_shared_dir={shared}\n")
    usage(capsys, "job", "logs", "evil", "-i", inv, needle="job.json")


def test_a_huge_world_gets_its_batch_hint_at_once(capsys, tmp_path):
    path = spec(tmp_path, train__micro_batch_size=1024, train__global_batch_size=1025)
    code, _, err = run(capsys, "job", "check", "-f", path, "--nodes", "10000", "--gpus-per-node", "8", "--gpu", "H100-SXM")
    assert code == ExitCode.USAGE and "use 81920000 " in err, err


def test_the_job_marker_is_not_a_spec_variable(capsys, tmp_path):
    path = spec(tmp_path, launch__env={"MEGAPROV_JOB_UNIT": "megaprov-job-other.service"})
    usage(capsys, "job", "check", "-f", path, needle="set by megaprov itself")


@pytest.mark.parametrize("content", ["x: !!binary aGVsbG8=\n", "__ansible_unsafe: 1\n"])
def test_extra_vars_ansible_cannot_take_are_refused_before_a_run_directory_exists(capsys, tmp_path, content):
    bad = tmp_path / "e.yml"
    bad.write_text(content)
    usage(capsys, "bootstrap", "-i", inventory(tmp_path), "--check", "-e", f"@{bad}")  # the fixture asserts no run directory


def test_job_directories_are_printed_without_control_characters(capsys, tmp_path):
    shared = tmp_path / "shared"
    meta = dict(GOOD_META, name="ok")
    (shared / "jobs" / "ok").mkdir(parents=True)
    (shared / "jobs" / "ok" / "job.json").write_text(json.dumps(dict(meta, job_dir="/shared/jobs/ok", checkpoint_dir="/shared/checkpoints/ok")))
    (shared / "jobs" / "Bad\x1b[31m").mkdir()
    (shared / "jobs" / "Bad\x1b[31m" / "job.json").write_text(json.dumps(meta))
    inv = inventory(tmp_path, extra=f"[all:vars]\nmegaprov_controller_shared_dir={shared}\n")
    code, out, err = run(capsys, "jobs", "-i", inv)
    assert code == 0, err
    assert "\x1b" not in out and "ok:" in out


def test_a_jobs_log_lines_reach_the_terminal_with_their_escapes_escaped(capsys, tmp_path):
    # the job writes its log: a window-title and a clipboard-write sequence are shown as text, never sent to the terminal
    shared = tmp_path / "shared"
    (shared / "jobs" / "evil" / "logs").mkdir(parents=True)
    (shared / "jobs" / "evil" / "job.json").write_text(json.dumps(GOOD_META))
    (shared / "jobs" / "evil" / "logs" / "n1.log").write_text("iteration 1\n\x1b]0;owned\x07\n\x1b]52;c;ZXZpbA==\x07 loss\n")
    inv = inventory(tmp_path, extra=f"[all:vars]\nmegaprov_controller_shared_dir={shared}\n")
    code, out, err = run(capsys, "job", "logs", "evil", "-i", inv)
    assert code == 0, err
    assert "\x1b" not in out and "iteration 1" in out and "]52;c;ZXZpbA==" in out
    code, out, err = run(capsys, "job", "logs", "evil", "-i", inv, "-o", "json")
    assert code == 0 and json.loads(out)["result"]["lines"][1] == "\x1b]0;owned\x07", err  # the data itself, in JSON


# ---- megaprov logs and megaprov top (the observe stage)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("--since", "$(touch /tmp/megaprov-canary-cli)"), "--since"),
        (("--since", "1h; id"), "--since"),
        (("--grep", "("), "--grep"),
        (("--grep", "a\nb"), "--grep"),
        (("--node", "n9"), "--node n9 is not a host"),
        (("--lines", "0"), "--lines"),
    ],
)
def test_hostile_logs_arguments_exit_2_before_ansible(capsys, tmp_path, argv, needle):
    path = inventory(tmp_path, all_vars="megaprov_observe: true\n")
    usage(capsys, "logs", "-i", path, *argv, needle=needle)


def test_logs_and_top_say_when_the_observe_stage_is_off(capsys, tmp_path):
    path = inventory(tmp_path)
    usage(capsys, "logs", "-i", path, needle="the observe stage is off")
    usage(capsys, "top", "-i", path, "--once", needle="the observe stage is off")


@pytest.mark.parametrize("url", ["file:///etc/passwd", "gopher://x", "http://", "javascript:alert(1)"])
def test_top_takes_only_an_http_url(capsys, tmp_path, url):
    usage(capsys, "top", "-i", inventory(tmp_path), "--url", url, "--once", needle="--url")


# ---- what the cluster hands back (job files, logs, facts, Prometheus) is hostile too

# Sequences a terminal acts on (clipboard write, clear screen, window title, an OSC 8 link, the 8-bit CSI, a
# bidirectional override) and rich markup (a link, a closing tag that crashed rich, an emoji code).
HOSTILE = [
    "\x1b]52;c;ZXZpbA==\x07",
    "\x1b[2J\x1b[H",
    "\x1b]0;owned\x07",
    "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\",
    "\x9b31m",
    "\u202eexe.txt",
    "[link=https://evil.example]click[/link]",
    "[/]",
    "[bold red]alarm[/]",
    ":warning:",
]
RAW = ("\x1b", "\x9b", "\x07", "\u202e")


def clean(text):
    """Nothing from HOSTILE reaches the terminal raw: no escape byte, and markup stays text (not a link, not a crash)."""
    assert not any(c in text for c in RAW), repr(text)
    assert "\u26a0" not in text  # :warning: stayed a code
    return text


def hostile_job(tmp_path, log="", state="stopped", **files):
    shared = tmp_path / "shared"
    local = shared / "jobs" / "evil"
    (local / "logs").mkdir(parents=True)
    (local / "job.json").write_text(json.dumps({**GOOD_META, "state": state}))
    (local / "logs" / "n1.log").write_text(log)
    for name, text in files.items():
        (local / name.replace("__", "/")).write_text(text)
    return inventory(tmp_path, extra=f"[all:vars]\nmegaprov_controller_shared_dir={shared}\n"), local


# doctor shows the first line of a finding as its evidence: that one carries the markup and an escape up front.
FIRST = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB [/] [link=https://evil.example]click[/link] \x1b]52;c;ZXZpbA==\x07\n"
LOG = FIRST + "".join(f"iteration 1 {s}\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB {s}\n" for s in HOSTILE)


@pytest.mark.parametrize(
    "argv",
    [
        ("job", "logs", "evil"),
        ("job", "logs", "evil", "-f"),
        ("logs", "--name", "evil"),
        ("doctor", "--name", "evil"),
    ],
)
def test_hostile_log_lines_reach_no_terminal_raw(capsys, tmp_path, argv):
    inv, _ = hostile_job(tmp_path, LOG)
    code, out, err = run(capsys, *argv, "-i", inv)
    assert code in (ExitCode.OK, ExitCode.VERDICT_FAILED, ExitCode.RUN_FAILED), err
    clean(out), clean(err)
    assert "[/]" in out and "[link=https://evil.example]" in out and "\\x1b]52;c;ZXZpbA==" in out


def test_doctor_on_a_hostile_log_file_prints_its_markup_as_text(capsys, tmp_path):
    log = tmp_path / "node.log"
    log.write_text(LOG)
    code, out, err = run(capsys, "doctor", "--log", log)
    assert code != ExitCode.INTERNAL, err
    assert "CUDA_OOM" in clean(out) and "[/]" in out


def test_top_renders_hostile_labels_as_text():
    import io

    from megaprov.ops import top
    from megaprov.output import console

    answers = {
        "up": [{"metric": {"node": s}, "value": [0, "1"]} for s in HOSTILE],
        "gpus": [{"metric": {"node": HOSTILE[0]}, "value": [0, "NaN"]}, {"metric": {"node": HOSTILE[1]}, "value": [0, "+Inf"]}],
        "job_running": [{"metric": {"job": s, "node": "n1"}, "value": [0, "1"]} for s in HOSTILE],
        "job_iteration": [{"metric": {"job": HOSTILE[0], "node": "n1"}, "value": [0, "NaN"]}],
        "alerts": [{"metric": {"alertname": s, "severity": s, "node": s}, "value": [0, "1"]} for s in HOSTILE],
    }
    out = console()
    out.file = io.StringIO()
    out.print(top.render(top.fold("http://prometheus:9090", answers)))
    assert "[/]" in clean(out.file.getvalue())


def test_a_prometheus_that_trickles_is_cut_off_at_its_deadline():
    import socket
    import threading

    from megaprov.ops import top

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    stop = threading.Event()

    def trickle():
        conn, _ = server.accept()
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n")
        while not stop.wait(0.2):  # a byte every 0.2 s: each read is within urllib's timeout, the whole never ends
            try:
                conn.sendall(b"{")
            except OSError:
                return

    threading.Thread(target=trickle, daemon=True).start()
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        top.fetch(f"http://127.0.0.1:{server.getsockname()[1]}/api/v1/query", deadline=2.0)
    assert time.monotonic() - start < 10
    stop.set()
    server.close()


@pytest.mark.parametrize(
    ("entry", "make"),
    [
        ("logs/n1.log", lambda p, secret: (p.unlink(), p.symlink_to(secret))),
        ("logs/n1.log", lambda p, secret: (p.unlink(), os.mkfifo(p))),
        ("logs/n1.log", lambda p, secret: (p.unlink(), p.symlink_to("/dev/zero"))),
        ("logs", lambda p, secret: (shutil.rmtree(p), p.symlink_to(secret.parent))),
        ("job.json", lambda p, secret: (p.unlink(), os.mkfifo(p))),
        ("job.json", lambda p, secret: (p.unlink(), p.symlink_to(secret))),
    ],
)
@pytest.mark.parametrize("argv", [("job", "logs", "evil"), ("logs", "--name", "evil")])
def test_links_and_fifos_in_a_job_directory_are_refused_by_name(capsys, tmp_path, entry, make, argv):
    inv, local = hostile_job(tmp_path, "iteration 1\n")
    secret = tmp_path / "outside" / "n1.log"
    secret.parent.mkdir()
    secret.write_text("root:$6$hash:19000::::::\n")
    make(local / entry, secret)
    signal.alarm(20)  # a FIFO must never block
    try:
        code, out, err = run(capsys, *argv, "-i", inv)
    finally:
        signal.alarm(0)
    assert code == ExitCode.USAGE, err
    assert "$6$hash" not in out + err
    assert Path(entry).name in one_line(err)


def test_doctor_reports_a_hostile_log_and_reads_the_others(capsys, tmp_path):
    inv, local = hostile_job(tmp_path, "iteration 1\n")
    (local / "logs" / "n2.log").write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    (local / "logs" / "n1.log").unlink()
    (local / "logs" / "n1.log").symlink_to("/dev/zero")
    (local / "logs" / "gpu-n1.csv").mkdir()  # a directory where the GPU samples should be
    code, out, err = run(capsys, "doctor", "--name", "evil", "-i", inv, "-o", "json")
    assert code != ExitCode.INTERNAL, err
    found = {(f["code"], f["node"]) for f in json.loads(out)["result"]["findings"]}
    assert ("CUDA_OOM", "n2") in found
    refused = sorted(f["source"].rsplit("/", 1)[-1] for f in json.loads(out)["result"]["findings"] if f["code"] == "JOB_FILE_REFUSED")
    assert refused == ["gpu-n1.csv", "n1.log"] and ("JOB_FILE_REFUSED", "n1") in found, refused


def test_doctor_reads_slurms_batch_output_where_pyxis_says_why_no_node_script_ran(capsys, tmp_path):
    """A container job whose image pyxis cannot import never runs a node script: what went wrong is in Slurm's output
    of the batch script (logs/slurm-JOBID.out), the lines of tests/doctor_corpus/upstream/pyxis_import_unauthorized.log."""
    inv, local = hostile_job(tmp_path, "")
    corpus = ROOT / "tests" / "doctor_corpus" / "upstream" / "pyxis_import_unauthorized.log"
    (local / "logs" / "slurm-4411.out").write_text(corpus.read_text())
    (local / "logs" / "slurm-notes.out").write_text(corpus.read_text())  # not Slurm's name for a job's output: not read
    code, out, err = run(capsys, "doctor", "--name", "evil", "-i", inv, "-o", "json")
    assert code == ExitCode.VERDICT_FAILED, err
    doc = json.loads(out)["result"]
    found = {(f["code"], f["source"].rsplit("/", 1)[-1]) for f in doc["findings"]}
    assert found == {("CONTAINER_IMPORT_FAILED", "slurm-4411.out"), ("REGISTRY_REFUSED", "slurm-4411.out")}, found
    assert sorted(Path(p).name for p in doc["checked"]) == ["n1.log", "slurm-4411.out"]


def test_one_job_without_its_spec_does_not_hide_the_others(capsys, tmp_path):
    inv, local = hostile_job(tmp_path, "iteration 1\n", state="running")
    other = local.parent / "fine"
    other.mkdir()
    (other / "job.json").write_text(json.dumps({**GOOD_META, "name": "fine", "job_dir": "/shared/jobs/fine", "state": "stopped"}))
    code, out, err = run(capsys, "jobs", "-i", inv, "-o", "json")
    assert code == ExitCode.OK, err
    rows = {r["name"]: r for r in json.loads(out)["result"]["jobs"]}
    assert set(rows) == {"evil", "fine"} and "spec.yml" in rows["evil"]["problem"]


def test_a_fifo_as_a_report_or_a_spec_never_blocks_the_listing(capsys, tmp_path):
    inv, local = hostile_job(tmp_path, "iteration 1\n", state="running")
    os.mkfifo(local / "report.json")
    os.mkfifo(local / "spec.yml")
    signal.alarm(20)
    try:
        code, out, err = run(capsys, "jobs", "-i", inv, "-o", "json")
    finally:
        signal.alarm(0)
    assert code == ExitCode.OK, err
    assert json.loads(out)["result"]["jobs"][0]["verdict"] is None


CPU_NODES = "[gpu_nodes:vars]\nmegaprov_gpu_model=cpu\nmegaprov_gpus_per_node=1\n"


def test_a_node_fact_that_would_write_a_line_into_a_launch_script_is_refused(capsys, tmp_path, monkeypatch):
    from megaprov.paths import fact_cache_dir

    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    inv = inventory(tmp_path, extra=CPU_NODES)
    cache = fact_cache_dir(inv)
    cache.mkdir(parents=True)
    fact = {"version": 1, "transformer_engine": "2.1\ntouch /tmp/megaprov-canary-cli #", "torch": "2.9.0"}
    (cache / "n1").write_text(json.dumps({"megaprov_python": fact}))
    usage(capsys, "train", "--dry-run", "-f", spec(tmp_path), "-i", inv, needle="node n1: its fact megaprov_python.transformer_engine=")


@pytest.mark.parametrize("rate", [0, -1.0, "inf", "nan"])
def test_a_recorded_rate_of_zero_or_infinity_is_refused_with_the_node(capsys, tmp_path, monkeypatch, rate):
    from megaprov.paths import fact_cache_dir

    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    inv = inventory(tmp_path, extra=CPU_NODES)
    cache = fact_cache_dir(inv)
    cache.mkdir(parents=True)
    fact = {"version": 1, "backend": "torch-cpu", "dtype": "float32", "tflops_per_device": float(rate), "devices": [{}], "measured_at": "t"}
    (cache / "n1").write_text(json.dumps({"megaprov_compute": fact}))
    usage(capsys, "plan", "-f", spec(tmp_path), "-i", inv, needle="node n1: its recorded compute rate tflops_per_device=")


def test_markup_in_a_recorded_time_is_printed_as_text(capsys, tmp_path, monkeypatch):
    from megaprov.paths import fact_cache_dir

    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    inv = inventory(tmp_path, extra=CPU_NODES)
    cache = fact_cache_dir(inv)
    cache.mkdir(parents=True)
    fact = {"version": 1, "backend": "torch-cpu", "dtype": "float32", "tflops_per_device": 0.02, "devices": [{}], "measured_at": "[/] [link=x]"}
    (cache / "n1").write_text(json.dumps({"megaprov_compute": fact}))
    code, out, err = run(capsys, "plan", "-f", spec(tmp_path), "-i", inv)
    assert code == ExitCode.OK, err
    assert "[/] [link=x]" in out


def test_a_walltime_of_five_thousand_digits_is_bad_input(capsys, tmp_path):
    usage(capsys, "job", "check", "-f", spec(tmp_path, launch__slurm={"time": "9" * 5000 + "-00:00:00"}), needle="launch.slurm.time")
