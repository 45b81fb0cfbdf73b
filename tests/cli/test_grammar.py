"""One grammar for every command: -i/--inventory, -o/--output, -f/--job, global flags anywhere, "did you mean",
examples in every --help, one table of exit codes (each cause run against the commands that meet it), and one
versioned JSON envelope that every command's output validates against (schemas/envelope-v2.json)."""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import pytest

from megaprov.commands import build_parser, leaf, main
from megaprov.errors import EXIT_CODES, ExitCode

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "examples" / "jobs"
SCHEMA = json.loads((ROOT / "schemas" / "envelope-v2.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def envelope(out):
    doc = json.loads(out)
    errors = sorted(VALIDATOR.iter_errors(doc), key=str)
    assert not errors, f"{errors[0].message} in {out[:2000]}"
    return doc


def leaves(parser=None, path=()):
    """Every runnable command's path and parser (job check, bundle build, bootstrap, ...)."""
    parser = parser or build_parser()
    children = next((a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    if children is None:
        yield path, parser
        return
    if path:  # a family (job, lab, ...) is a command too: its --help must help
        yield path, parser
    for name, child in children.items():
        yield from leaves(child, (*path, name))


ALL = sorted(leaves(), key=lambda item: item[0])
RUNNABLE = [p for p, parser in ALL if parser.get_default("handler") is not None]


def test_every_command_is_found():
    names = {" ".join(p) for p in RUNNABLE}
    assert {"bootstrap", "preflight", "inventory check", "init", "train", "plan", "job check", "job attach", "job logs", "bundle build"} <= names


@pytest.mark.parametrize("path", [p for p, _ in ALL], ids=[" ".join(p) for p, _ in ALL])
def test_every_help_has_examples_and_the_global_flags(path):
    parser, _ = leaf(build_parser(), path)
    text = parser.format_help()
    examples = text.split("examples:\n", 1)[1] if "examples:\n" in text else ""
    assert examples.startswith("  ") and "megaprov " + path[0] in examples, text
    assert "-o {text,json}, --output {text,json}" in text and "--debug" in text, text


@pytest.mark.parametrize("path", RUNNABLE, ids=[" ".join(p) for p in RUNNABLE])
def test_an_unknown_flag_is_usage_on_every_command(capsys, path):
    code, out, err = run(capsys, *path, "--frobnicate", "-o", "json")
    assert code == ExitCode.USAGE, err
    doc = envelope(out)
    assert doc["command"] == " ".join(path) and doc["error"]["kind"] == "usage"
    assert "--frobnicate" in doc["error"]["message"] or "arguments are required" in doc["error"]["message"], doc["error"]
    assert len([line for line in err.splitlines() if line.strip()]) == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (["-o", "json", "job", "check", "-f", JOBS / "lab-tiny.yml"], ["job", "check", "-f", JOBS / "lab-tiny.yml", "-o", "json"]),
        (
            ["--output", "json", "plan", "-f", JOBS / "gpt-345m-1node.yml", "--gpu", "H100-SXM"],
            ["plan", "--job", JOBS / "gpt-345m-1node.yml", "--gpu", "H100-SXM", "--output", "json"],
        ),
    ],
)
def test_global_flags_before_or_after_the_command(capsys, before, after):
    first = run(capsys, *before)
    second = run(capsys, *after)
    assert first[0] == second[0] == ExitCode.OK, first[2] + second[2]
    assert envelope(first[1]) == envelope(second[1])


def test_debug_after_the_command_shows_the_traceback(capsys, tmp_path):
    (tmp_path / "inventory.ini").write_text("[head]\nn1\n")
    code, _, err = run(capsys, "bootstrap", "-i", tmp_path / "inventory.ini", "--debug")
    assert code == ExitCode.USAGE and "Traceback" in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["traim"], "did you mean 'train'?"),
        (["job", "chekc"], "did you mean 'check'?"),
        (["lab", "stauts"], "did you mean 'status'?"),
        (["plan", "-f", "x.yml", "--nodse", "2"], "did you mean --nodes?"),
        (["bootstrap", "-i", "INV", "--tags", "gpu,slurmm"], "did you mean 'slurm'?"),
        (["bootstrap", "-i", "INV", "--tags", "pythn"], "did you mean 'python'?"),
    ],
)
def test_did_you_mean(capsys, tmp_path, argv, needle):
    (tmp_path / "inventory.ini").write_text("[head]\nn1 ansible_host=192.0.2.1\n[gpu_nodes]\nn1\n")
    code, _, err = run(capsys, *[tmp_path / "inventory.ini" if a == "INV" else a for a in argv])
    assert code == ExitCode.USAGE and needle in err, err
    assert len(err) < 400, err  # a suggestion, not the list of 90 names


def test_the_exit_codes_page_is_the_code_table():
    page = (ROOT / "docs" / "reference" / "exit-codes.md").read_text()
    rows = re.findall(r"^\| (\d+) \| `([a-z-]+)` \| (.+) \|$", page, re.M)
    assert [(int(c), k, m) for c, k, m in rows] == [(int(c), k, m) for c, (k, m) in EXIT_CODES.items()]


def test_the_envelope_schema_knows_every_code():
    assert SCHEMA["$defs"]["error"]["properties"]["code"]["enum"] == [int(c) for c in EXIT_CODES if c]
    assert SCHEMA["$defs"]["error"]["properties"]["kind"]["enum"] == [k for c, (k, _) in EXIT_CODES.items() if c]


# ---- the table, cause by cause, against the commands that meet the cause


def unreachable_inventory(tmp_path):
    """A cluster whose every host refuses SSH at once (127.0.0.1, port 1), with Prometheus on the head's port 1."""
    (tmp_path / "group_vars").mkdir(exist_ok=True)
    (tmp_path / "group_vars" / "all.yml").write_text("megaprov_observe: true\nprometheus_port: 1\nmegaprov_gpu_expected: false\n")
    path = tmp_path / "inventory.ini"
    path.write_text("[head]\nhead ansible_host=127.0.0.1 ansible_port=1\n[gpu_nodes]\nhead\n")
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["bootstrap", "-i", "INV", "--tags", "preflight"],
        ["preflight", "-i", "INV"],
        ["doctor", "-i", "INV"],
        ["logs", "-i", "INV"],
        ["top", "-i", "INV", "--once"],
    ],
    ids=["bootstrap", "preflight", "doctor", "logs", "top"],
)
def test_an_unreachable_cluster_is_exit_4_everywhere(capsys, tmp_path, monkeypatch, argv):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    inv = unreachable_inventory(tmp_path)
    code, out, err = run(capsys, *[inv if a == "INV" else a for a in argv], "-o", "json")
    doc = envelope(out)
    assert code == ExitCode.UNREACHABLE, err[-2000:]
    assert doc["ok"] is False and doc["command"] == argv[0] and doc["error"]["kind"] == "unreachable", doc


@pytest.mark.parametrize(
    "argv",
    [
        ["job", "check", "-f", JOBS / "llama-8b-2nodes.yml", "--gpu", "A100-40GB"],
        ["plan", "-f", JOBS / "llama-8b-2nodes.yml", "--gpu", "A100-40GB"],
        ["train", "-f", JOBS / "llama-8b-2nodes.yml", "--gpu", "A100-40GB", "-i", "GPU_INV", "--dry-run"],
    ],
    ids=["job check", "plan", "train"],
)
def test_a_job_that_does_not_fit_is_exit_6_in_every_check(capsys, tmp_path, argv):
    """job check said "valid job llama-8b on 16 GPUs" for what plan and train refuse (52.6 of 39.4 GiB)."""
    inv = tmp_path / "inventory.ini"
    inv.write_text("[head]\nh ansible_host=10.0.0.1\n[gpu_nodes]\ng[1:2]\n[gpu_nodes:vars]\nmegaprov_gpus_per_node=8\nmegaprov_gpu_model=A100-40GB\n")
    code, out, err = run(capsys, *[inv if a == "GPU_INV" else a for a in argv], "-o", "json")
    doc = envelope(out)
    assert code == ExitCode.VERDICT_FAILED, err
    assert re.search(r"llama-8b does not fit A100-40GB: 5\d\.\d GiB per GPU of 39\.4", doc["error"]["message"]), doc["error"]


def test_a_missing_tool_is_exit_5(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no podman here
    code, out, err = run(capsys, "lab", "image", "-o", "json")
    doc = envelope(out)
    assert code == ExitCode.ENVIRONMENT and doc["error"]["kind"] == "environment", err


# ---- every command's JSON output validates against the schema


def test_json_output_of_the_offline_commands_validates(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    corpus = tmp_path / "c.jsonl"
    cases = [
        (["self-check"], None),
        (["inventory", "check", "-i", ROOT / "inventories" / "example"], ExitCode.OK),
        (["init", "--head", "10.0.0.1", "--nodes", "10.0.0.2", "--gpu", "H200", "--dir", tmp_path / "new"], ExitCode.OK),
        (["job", "check", "-f", JOBS / "lab-tiny.yml"], ExitCode.OK),
        (["plan", "-f", JOBS / "gpt3-175b-128nodes.yml", "--gpu", "H100-SXM", "--suggest", "--top", "2"], ExitCode.OK),
        (["jobs"], ExitCode.OK),
        (["status", "-i", ROOT / "inventories" / "example", "--recorded"], ExitCode.OK),
        (["data", "corpus", "--output-file", corpus, "--documents", "10"], ExitCode.OK),
        (["data", "corpus", "--output-file", tmp_path / "missing" / "c.jsonl"], ExitCode.USAGE),
        (["doctor", "--log", ROOT / "tests" / "doctor_corpus" / "lab" / "nan_loss.log"], None),
        (["job", "status", "nope"], ExitCode.USAGE),
        (["job", "logs", "nope"], ExitCode.USAGE),
        (["job", "stop", "nope"], ExitCode.USAGE),
        (["job", "attach", "nope"], ExitCode.USAGE),
        (["lab", "inventory", "--name", "nope"], ExitCode.USAGE),
        (["bundle", "verify", tmp_path / "nope"], ExitCode.USAGE),
        (["bundle", "build", "-i", ROOT / "inventories" / "example"], ExitCode.USAGE),
        (["bootstrap"], ExitCode.USAGE),
        (["top", "-i", ROOT / "inventories" / "example", "--url", "ftp://x"], ExitCode.USAGE),
        (["job", "check", "-f", tmp_path / "missing.yml"], ExitCode.USAGE),
    ]
    for argv, expected in cases:
        code, out, err = run(capsys, *argv, "-o", "json")
        doc = envelope(out)
        path = " ".join(a for a in map(str, argv) if re.fullmatch(r"[a-z][a-z-]*", a))
        assert doc["command"] == " ".join(path.split()[: len(doc["command"].split())]) and doc["command"], (argv, doc["command"])
        assert doc["ok"] is (code == ExitCode.OK), (argv, code, err)
        if expected is not None:
            assert code == expected, (argv, code, err)


def test_the_command_path_is_whole_and_argv_order_free(capsys):
    code, out, _ = run(capsys, "--output", "json", "job", "check", "-f", JOBS / "lab-tiny.yml")
    assert envelope(out)["command"] == "job check"  # was "json" with the flag first
    code, out, _ = run(capsys, "--output", "json", "job", "check", "-f", "/nonexistent.yml")
    doc = envelope(out)
    assert code == ExitCode.USAGE and doc["command"] == "job check"  # was "job" on error
    code, out, _ = run(capsys, "-o", "json", "job", "check", "-f", "x.yml", "--nodse", "2")
    doc = envelope(out)
    assert code == ExitCode.USAGE and doc["command"] == "job check" and "did you mean --nodes?" in doc["error"]["fix"], doc


def test_a_spec_error_is_an_object_with_its_field_file_and_line(capsys, tmp_path):
    spec = tmp_path / "gpt.yml"
    spec.write_text((JOBS / "gpt-345m-1node.yml").read_text().replace("  tensor: 1\n", "  tensor: 3\n"))
    code, out, _ = run(capsys, "job", "check", "-f", spec, "-o", "json")
    error = envelope(out)["error"]
    line = next(i for i, text in enumerate(spec.read_text().splitlines(), 1) if "tensor: 3" in text)
    assert (error["field"], error["file"], error["line"], error["code"]) == ("parallel.tensor", str(spec), line, 2), error
    assert error["fix"].startswith("use 1, 2, 4"), error


def test_an_inventory_error_names_its_file_and_line(capsys, tmp_path):
    inv = tmp_path / "inventory.ini"
    inv.write_text("[head]\nn1\n[gpu_nodes]\nn2\nn2\n")
    code, out, _ = run(capsys, "inventory", "check", "-i", inv, "-o", "json")
    error = envelope(out)["error"]
    assert code == ExitCode.USAGE and error["file"] == str(inv) and error["line"] == 5, error


# ---- -i everywhere, the default inventory, and the deprecated forms


def test_the_positional_inventory_still_works_with_a_note(capsys, tmp_path):
    inv = tmp_path / "inventory.ini"
    inv.write_text("[head]\nn1\n")
    code, _, err = run(capsys, "bootstrap", inv)
    assert code == ExitCode.USAGE and "is deprecated" in err and "write -i" in err and "gpu_nodes" in err


def test_the_default_inventory_from_the_environment_and_the_config_file(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("MEGAPROV_INVENTORY", raising=False)
    code, _, err = run(capsys, "inventory", "check")
    assert code == ExitCode.USAGE and "needs -i INVENTORY" in err and "config.toml" in err
    monkeypatch.setenv("MEGAPROV_INVENTORY", str(ROOT / "inventories" / "example"))
    code, out, err = run(capsys, "inventory", "check", "-o", "json")
    assert code == ExitCode.OK and envelope(out)["result"]["head"] == "head01", err
    monkeypatch.delenv("MEGAPROV_INVENTORY")
    config = tmp_path / "config" / "megaprov" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'inventory = "{ROOT / "inventories" / "example"}"\n')
    code, out, err = run(capsys, "inventory", "check", "-o", "json")
    assert code == ExitCode.OK and envelope(out)["result"]["gpu_nodes"] == ["gpu01", "gpu02", "gpu03", "gpu04"], err
    config.write_text('inventry = "x"\n')
    code, _, err = run(capsys, "inventory", "check")
    assert code == ExitCode.USAGE and "unknown setting 'inventry'; did you mean 'inventory'?" in err


def test_old_job_flags_keep_working_with_a_note(capsys, tmp_path):
    code, out, err = run(capsys, "job", "check", JOBS / "lab-tiny.yml")
    assert code == ExitCode.OK and "deprecated" in err and "valid job lab-tiny" in out
    log = ROOT / "tests" / "doctor_corpus" / "lab" / "nan_loss.log"
    code, _, err = run(capsys, "doctor", "--job", "nope", "--log", log)
    assert code == ExitCode.USAGE and "write --name nope" in err


# ---- inventory check offline, init


def test_inventory_check_runs_with_the_network_off(tmp_path):
    """In a network namespace of its own (no interface up): nothing could be contacted, and it says so."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode:
        pytest.skip("unshare --net is not permitted here")
    env = dict(os.environ, NO_COLOR="1", MEGAPROV_STATE=str(tmp_path / "state"))
    proc = subprocess.run(
        ["unshare", "--net", sys.executable, "-m", "megaprov", "inventory", "check", "-i", str(ROOT / "inventories" / "example")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "valid; no host was contacted" in proc.stdout and "megaprov_gpu_model     H100-SXM" in proc.stdout


def test_init_writes_an_inventory_that_checks(capsys, tmp_path):
    code, out, err = run(
        capsys, "init", "--head", "head01=10.0.0.10", "--nodes", "gpu[01:04]", "--gpu", "NVIDIA H100 80GB HBM3", "--scheduler", "slurm",
        "--fabric", "infiniband", "--dir", tmp_path / "c",
    )  # fmt: skip
    assert code == ExitCode.OK, err
    text = (tmp_path / "c" / "group_vars" / "gpu_nodes.yml").read_text()
    assert "megaprov_gpu_model: H100-SXM" in text and "infiniband_required: true" in text
    assert "megaprov_scheduler: slurm" in (tmp_path / "c" / "group_vars" / "all.yml").read_text()
    code, out, err = run(capsys, "inventory", "check", "-i", tmp_path / "c", "-o", "json")
    result = envelope(out)["result"]
    assert code == ExitCode.OK and result["gpu_nodes"] == ["gpu01", "gpu02", "gpu03", "gpu04"] and result["notes"] == [], err
    code, _, err = run(capsys, "init", "--head", "10.0.0.1", "--nodes", "10.0.0.2", "--dir", tmp_path / "c")
    assert code == ExitCode.USAGE and "exists and is not empty" in err
    code, _, err = run(capsys, "init", "--head", "10.0.0.1", "--nodes", "10.0.0.2;touch /x", "--dir", tmp_path / "d")
    assert code == ExitCode.USAGE and not (tmp_path / "d" / "inventory.ini").exists(), err
    code, _, err = run(capsys, "init", "--head", "10.0.0.1", "--nodes", "10.0.0.2", "--gpu", "Quadro", "--dir", tmp_path / "e")
    assert code == ExitCode.USAGE and "--gpu 'Quadro' is not a GPU megaprov knows" in err


# ---- the planner's GPU names and run length, the dry run


@pytest.mark.parametrize(
    ("smi", "ours"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("NVIDIA GH200 480GB", "GH200"),
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA B200", "B200"),
        ("Tesla V100-SXM2-32GB", "V100"),
    ],
)
def test_plan_takes_the_names_nvidia_smi_prints(capsys, smi, ours):
    code, out, err = run(capsys, "plan", "-f", JOBS / "gpt-345m-1node.yml", "--gpu", smi, "-o", "json")
    assert code in (ExitCode.OK, ExitCode.VERDICT_FAILED), err
    assert envelope(out)["result"]["cluster"]["gpu"] == ours


def test_plan_says_how_long_the_run_takes(capsys):
    code, out, err = run(capsys, "plan", "-f", JOBS / "gpt3-175b-128nodes.yml", "--gpu", "H100-SXM", "-o", "json")
    est = envelope(out)["result"]["estimate"]
    assert est["iterations"] == 500_000 and est["run_seconds"] == pytest.approx(est["step_seconds"] * 500_000, rel=1e-3)
    assert est["gpu_hours"] == pytest.approx(est["run_seconds"] * 1024 / 3600, rel=1e-3)
    code, out, err = run(capsys, "plan", "-f", JOBS / "gpt3-175b-128nodes.yml", "--gpu", "H100-SXM")
    days = est["run_seconds"] / 86400
    shown = re.search(r"500,000 iterations: ([0-9.]+) days, ([0-9,]+) GPU-hours", out)
    assert shown, out
    assert shown[1] == f"{days:.1f}"
    assert int(shown[2].replace(",", "")) == pytest.approx(est["gpu_hours"], abs=1)  # JSON rounds to 0.1, text to 1


def cpu_inventory(tmp_path):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yml").write_text("megaprov_gpu_expected: false\nmegaprov_shared_dir: /srv/shared\n")
    path = tmp_path / "inventory.ini"
    path.write_text("[head]\nnode1 ansible_host=10.1.0.11\n[gpu_nodes]\nnode1\nnode2 ansible_host=10.1.0.12\n")
    return path


def test_the_dry_run_shows_the_plan_then_one_node(capsys, tmp_path):
    inv = cpu_inventory(tmp_path)
    code, out, err = run(capsys, "train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run")
    assert code == ExitCode.OK, err
    assert out.index("plan: lab-tiny") < out.index("# ---- node1 (node rank 0)") and "# ---- node2" not in out
    assert "1 more node(s) differ in their node rank" in out
    code, out, err = run(capsys, "train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--node", "node2")
    assert "# ---- node2 (node rank 1)" in out and "# ---- node1" not in out
    code, out, err = run(capsys, "train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--dir", tmp_path / "out")
    assert code == ExitCode.OK, err
    written = sorted(str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert written == ["launch/node1.sh", "launch/node2.sh", "megatron-args.txt", "plan.json"]
    assert "torchrun" in (tmp_path / "out" / "launch" / "node2.sh").read_text()
    assert json.loads((tmp_path / "out" / "plan.json").read_text())["job"] == "lab-tiny"
    code, _, err = run(capsys, "train", "-f", JOBS / "lab-tiny.yml", "-i", inv, "--node", "node2")
    assert code == ExitCode.USAGE and "add --dry-run" in err


def test_an_alias_bomb_in_one_extra_var_is_refused(capsys, tmp_path):
    inv = tmp_path / "inventory.ini"
    inv.write_text("[head]\nn1 ansible_host=192.0.2.1\n[gpu_nodes]\nn1\n")
    bomb = "[" + ",".join(["&a [1,1,1,1,1,1,1,1,1]"] + ["*a"] * 60) + "]"
    code, _, err = run(capsys, "bootstrap", "-i", inv, "-e", f"x={bomb}")
    assert code == ExitCode.USAGE and "anchors and aliases are not allowed" in err, err


def test_data_corpus_does_not_make_directories(capsys, tmp_path):
    code, _, err = run(capsys, "data", "corpus", "--output-file", tmp_path / "no" / "such" / "c.jsonl")
    assert code == ExitCode.USAGE and "does not exist" in err and not (tmp_path / "no").exists()


def test_the_positional_forms_are_hidden_from_help():
    text = textwrap.dedent(leaf(build_parser(), ["bootstrap"])[0].format_help())
    assert "inventory_positional" not in text and "-i INVENTORY, --inventory INVENTORY" in text


def readme_commands():
    """Every `megaprov ...` line of the README's shell blocks, as argv (comments and variables as a shell leaves them)."""
    import shlex

    text = (ROOT / "README.md").read_text()
    found = []
    for block in re.findall(r"```(?:sh|bash)\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = re.sub(r"^(\w+=\S+ )+", "", line.strip())  # MEGAPROV_STRATEGY=mitogen megaprov ...
            if not line.startswith("megaprov "):
                continue
            words = shlex.split(line, comments=True)
            argv = [w.replace("$INV", "inv.ini").replace("$(megaprov lab inventory)", "inv.ini") for w in words[1:]]
            ends = [i for i, w in enumerate(argv) if w in ("&&", "|", ">", "||", ";")]
            found.append(argv[: ends[0]] if ends else argv)
    return found


@pytest.mark.parametrize("argv", readme_commands(), ids=lambda a: " ".join(a)[:60])
def test_every_readme_command_parses_with_this_grammar(argv):
    """The README's commands are copy-pasteable: each one parses (no unknown flag, no missing value, no old form)."""
    if argv in (["--version"],):
        return
    args = build_parser().parse_args(argv)
    assert getattr(args, "handler", None) is not None, argv
    assert not getattr(args, "inventory_positional", None) and not getattr(args, "spec", None), f"old form in the README: {argv}"
    assert not getattr(args, "job_deprecated", None), f"old form in the README: {argv}"


@pytest.mark.parametrize(("line", "expected"), [("megaprov boo", {"bootstrap"}), ("megaprov job ", {"check", "attach", "logs", "status"})])
def test_shell_completion_answers_from_the_parser(tmp_path, line, expected):
    """What bash's completion function asks (argcomplete's protocol): the words that complete the line."""
    env = dict(os.environ, COMP_LINE=line, COMP_POINT=str(len(line)), _ARGCOMPLETE="1", _ARGCOMPLETE_IFS="\n")
    exe = Path(sys.executable).parent / "megaprov"
    # the completion function hands megaprov fd 8 for the answer and fd 9 for debug output
    proc = subprocess.run(["bash", "-c", '"$0" 8>&1 9>/dev/null', str(exe)], env=env, capture_output=True, text=True, timeout=60)
    words = {w.strip() for w in proc.stdout.split("\n") if w.strip()}
    assert proc.returncode == 0, proc.stderr
    assert expected <= words, words


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_the_shell_code(capsys, shell):
    code, out, _ = run(capsys, "completion", shell)
    assert code == ExitCode.OK and "_ARGCOMPLETE" in out and "megaprov" in out


def test_data_prepare_says_its_figures_once_and_leaks_no_cuda_warning(tmp_path):
    """The last progress line came twice (stderr, then the summary on stdout), and torch's extension builder warned
    "No CUDA runtime is found" on a machine that names a CUDA_HOME but has no GPU; the rates left start-up out."""
    pytest.importorskip("megatron.core")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"document {i} " * 20}) + "\n" for i in range(300)))
    cuda_home = tmp_path / "cuda"
    (cuda_home / "bin").mkdir(parents=True)
    env = dict(os.environ, NO_COLOR="1", CUDA_HOME=str(cuda_home))
    proc = subprocess.run(
        [sys.executable, "-m", "megaprov", "data", "prepare", "--input", str(corpus), "--output-prefix", str(tmp_path / "ds")],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "No CUDA runtime" not in proc.stderr + proc.stdout, proc.stderr
    said = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("data: 300 docs")]
    assert len(said) == 1 and "docs/s" in said[0], proc.stdout + proc.stderr
