"""job schema / job check / plan / train --dry-run / data prepare: argv -> exit code, stdout, one-line errors."""

import json
import textwrap
from pathlib import Path

import pytest

from megaprov.cli import main
from megaprov.errors import ExitCode

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "examples" / "jobs"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def cpu_inventory(tmp_path, nodes=2, shared="/shared"):
    path = tmp_path / "inventory.ini"
    lines = ["[head]", "head ansible_host=10.1.0.1", "[gpu_nodes]"] + [f"node{i} ansible_host=10.1.0.{i + 10}" for i in range(1, nodes + 1)]
    path.write_text("\n".join(lines) + f"\n[all:vars]\nmegaprov_gpu_expected=false\nmegaprov_shared_dir={shared}\n")
    return path


def gpu_inventory(tmp_path, model="H100-SXM", gpus=8):
    path = tmp_path / "inventory.ini"
    path.write_text(
        textwrap.dedent(f"""\
        [head]
        head ansible_host=10.2.0.1
        [gpu_nodes]
        gpu[01:02]
        [gpu_nodes:vars]
        megaprov_gpus_per_node={gpus}
        megaprov_gpu_model={model}
        """)
    )
    return path


def test_job_schema_is_json(capsys):
    code, out, _ = run(capsys, "job", "schema")
    assert code == ExitCode.OK
    doc = json.loads(out)
    assert doc["title"].startswith("megaprov training job")
    assert "model" in doc["required"] and "train" in doc["required"]


def test_schema_file_in_the_repository_is_current(capsys):
    # examples point editors at schemas/job-v1.json: it must be what `megaprov job schema` prints
    _, out, _ = run(capsys, "job", "schema")
    assert json.loads((ROOT / "schemas" / "job-v1.json").read_text()) == json.loads(out)


@pytest.mark.parametrize("name", sorted(p.name for p in JOBS.glob("*.yml")))
def test_job_check_examples(capsys, name):
    code, out, err = run(capsys, "job", "check", "-f", JOBS / name)
    assert code == ExitCode.OK, err
    assert "valid job" in out


def test_job_check_reports_every_problem_with_lines(capsys, tmp_path):
    bad = tmp_path / "gpt.yml"
    bad.write_text(
        (JOBS / "gpt-345m-1node.yml").read_text().replace("  tensor: 1\n", "  tensor: 3\n").replace("  micro_batch_size: 8", "  micro_batch_size: 7")
    )
    code, _, err = run(capsys, "job", "check", "-f", bad)
    assert code == ExitCode.USAGE
    lines = err.strip().splitlines()
    assert any(
        line.endswith("parallel.tensor=3 does not divide model.num_attention_heads=16; use 1, 2, 4, 8 or 16") and f"{bad}:" in line for line in lines
    ), err
    assert any("train.global_batch_size=256 is not a multiple of train.micro_batch_size=7" in line for line in lines), err
    assert "Traceback" not in err


def test_job_check_json_lists_problems(capsys, tmp_path):
    bad = tmp_path / "gpt.yml"
    bad.write_text("name: x\nmodel: {num_layers: 2}\n")
    code, out, _ = run(capsys, "job", "check", "-f", bad, "--output", "json")
    assert code == ExitCode.USAGE
    doc = json.loads(out)
    assert doc["ok"] is False and len(doc["errors"]) >= 3 and doc["command"] == "job check"
    # each problem is an object with the spec's field, the file and the line where the field is
    assert all(e["code"] == 2 and e["file"] == str(bad) and e["field"] for e in doc["errors"]), doc["errors"]


def test_plan_json_on_flags(capsys):
    code, out, err = run(capsys, "plan", "--job", JOBS / "gpt3-175b-128nodes.yml", "--gpu", "H100-SXM", "--output", "json")
    assert code == ExitCode.OK, err
    result = json.loads(out)["result"]
    assert result["cluster"] == {"nodes": 128, "gpus_per_node": 8, "gpu": "H100-SXM", "world": 1024}
    assert result["layout"]["data"] == 8 and result["parameters"] == 174_615_846_912
    assert result["fits"] is True


def test_plan_from_inventory(capsys, tmp_path):
    inv = gpu_inventory(tmp_path, "A100-80GB")
    code, out, err = run(capsys, "plan", "--job", JOBS / "llama-8b-2nodes.yml", "-i", inv, "--output", "json")
    assert code == ExitCode.OK, err
    assert json.loads(out)["result"]["cluster"]["gpu"] == "A100-80GB"


def test_plan_that_does_not_fit_exits_6_with_fixes(capsys):
    code, out, err = run(capsys, "plan", "--job", JOBS / "llama-8b-2nodes.yml", "--gpu", "A10")
    assert code == ExitCode.VERDICT_FAILED
    assert "DOES NOT FIT" in out
    assert err.startswith("megaprov: error: llama-8b does not fit A10: ") and "fixes:" in err


def test_plan_suggest(capsys):
    code, out, err = run(capsys, "plan", "--job", JOBS / "gpt3-175b-128nodes.yml", "--gpu", "H100-SXM", "--suggest", "--top", "3", "--output", "json")
    assert code == ExitCode.OK, err
    layouts = json.loads(out)["result"]["layouts"]
    assert len(layouts) == 3 and layouts[0]["tokens_per_second"] >= layouts[-1]["tokens_per_second"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["plan", "--job", "nope.yml", "--gpu", "H100-SXM"], "megaprov: error: job spec nope.yml does not exist"),
        (["plan", "--job", str(JOBS / "gpt-345m-1node.yml")], "megaprov: error: the GPU model is unknown: pass --gpu MODEL"),
        (["plan", "--job", str(JOBS / "gpt-345m-1node.yml"), "--gpu", "TPUv9"], "megaprov: error: --gpu='TPUv9' is not a known GPU: use one of"),
        (
            ["plan", "--job", str(JOBS / "gpt-345m-1node.yml"), "--gpu", "H100", "--mfu", "2"],
            "megaprov: error: megaprov plan: argument --mfu: 2.0 must be above 0",
        ),
        (["train", "--job", str(JOBS / "lab-tiny.yml"), "--dry-run"], "megaprov: error: megaprov train needs -i INVENTORY"),
    ],
)
def test_bad_flags_one_line(capsys, argv, message):
    code, _, err = run(capsys, *argv)
    assert code == ExitCode.USAGE
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), err


def test_inventory_without_gpu_model(capsys, tmp_path):
    inv = gpu_inventory(tmp_path, model='""')
    code, _, err = run(capsys, "plan", "--job", JOBS / "llama-8b-2nodes.yml", "-i", inv)
    assert code == ExitCode.USAGE
    assert "megaprov_gpu_model is unset: set it in group_vars/gpu_nodes.yml" in err


def test_train_dry_run_prints_each_node(capsys, tmp_path):
    inv = cpu_inventory(tmp_path, nodes=3, shared="/srv/shared")
    code, out, err = run(capsys, "train", "--job", JOBS / "lab-tiny.yml", "-i", inv, "--dry-run", "--all-nodes")
    assert code == ExitCode.OK, err
    assert out.index("plan: lab-tiny") < out.index("# ---- node1 (node rank 0)") < out.index("# ---- node2 (node rank 1)")
    assert "node3" not in out  # the job asks for 2 nodes
    assert "--master-addr 10.1.0.11" in out
    assert "--data-path 1.0 /srv/shared/data/lab_text_document" in out


def test_train_dry_run_json(capsys, tmp_path):
    inv = gpu_inventory(tmp_path)
    # llama-8b forces Transformer Engine and reads a Hugging Face tokenizer: refused on nodes set up by the roles'
    # defaults, in one line, before anything runs
    code, out, err = run(capsys, "train", "--job", JOBS / "llama-8b-2nodes.yml", "-i", inv, "--dry-run", "--output", "json")
    assert code != ExitCode.OK and "forces --transformer-impl transformer_engine but the nodes have no Transformer Engine" in err
    with inv.open("a") as f:  # an inventory that installs both
        f.write("megatron_transformer_engine=true\nmegatron_huggingface=true\n")
    code, out, err = run(capsys, "train", "--job", JOBS / "llama-8b-2nodes.yml", "-i", inv, "--dry-run", "--output", "json")
    assert code == ExitCode.OK, err
    launch = json.loads(out)["result"]["launch"]
    assert [n["host"] for n in launch["nodes"]] == ["gpu01", "gpu02"]
    assert launch["nodes"][1]["argv"][launch["nodes"][1]["argv"].index("--node-rank") + 1] == "1"


def test_train_refuses_a_job_that_does_not_fit(capsys, tmp_path):
    inv = gpu_inventory(tmp_path, "A10")
    code, out, err = run(capsys, "train", "--job", JOBS / "llama-8b-2nodes.yml", "-i", inv, "--dry-run")
    assert code == ExitCode.VERDICT_FAILED
    assert "llama-8b does not fit" in err and out == ""


def test_train_where_this_machine_cannot_see_the_shared_directory(capsys, tmp_path, monkeypatch):
    """No mount here: the job directory is read through the head (megaprov.training.jobdir); a head that does not
    answer SSH is exit 4 before anything runs. A mount the inventory names that is not there is this machine's fault."""
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    inv = cpu_inventory(tmp_path, shared=str(tmp_path / "not-mounted"))
    inv.write_text(inv.read_text().replace("head ansible_host=10.1.0.1", "head ansible_host=127.0.0.1 ansible_port=1"))
    code, _, err = run(capsys, "train", "--job", JOBS / "lab-tiny.yml", "-i", inv)
    assert code == ExitCode.UNREACHABLE, err
    assert "the job directory cannot be read through the head head" in err and "Connection refused" in err
    assert not (tmp_path / "state" / "runs").exists()  # refused before any Ansible run
    with inv.open("a") as f:
        f.write(f"megaprov_controller_shared_dir={tmp_path / 'mnt'}\n")
    code, _, err = run(capsys, "train", "--job", JOBS / "lab-tiny.yml", "-i", inv)
    assert code == ExitCode.ENVIRONMENT and "megaprov_controller_shared_dir=" in err and "through the head" in err, err


def test_train_flags_are_checked_before_anything_runs(capsys, tmp_path):
    code, _, err = run(capsys, "train", "-i", cpu_inventory(tmp_path))
    assert code == ExitCode.USAGE and "needs -f JOB.yml" in err
    code, _, err = run(capsys, "train", "--job", JOBS / "lab-tiny.yml", "--name", "Bad Name", "-i", cpu_inventory(tmp_path))
    assert code == ExitCode.USAGE and "--name 'Bad Name' is not a job name" in err
    code, _, err = run(capsys, "train", "--resume", "x", "--job", JOBS / "lab-tiny.yml")
    assert code == ExitCode.USAGE and "--resume NAME takes the spec stored with the job" in err


def test_job_status_of_an_unknown_job(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    code, _, err = run(capsys, "job", "status", "nope")
    assert code == ExitCode.USAGE and "no job 'nope' is known on this machine" in err


def test_data_corpus_is_deterministic(capsys, tmp_path):
    for name in ("a.jsonl", "b.jsonl"):
        code, _, err = run(capsys, "data", "corpus", "--output-file", tmp_path / name, "--documents", "50")
        assert code == ExitCode.OK, err
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    docs = [json.loads(line) for line in (tmp_path / "a.jsonl").read_text().splitlines()]
    assert len(docs) == 50 and all(d["text"].endswith(".") for d in docs)


def test_data_prepare_json(capsys, tmp_path):
    pytest.importorskip("megatron.core", reason="megatron-core is not installed in this environment")
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(50)))
    code, out, err = run(capsys, "data", "prepare", "--input", src, "--output-prefix", tmp_path / "ds", "--workers", "2", "--output", "json")
    assert code == ExitCode.OK, err
    result = json.loads(out)["result"]
    assert result["documents"] == 50 and result["prefixes"]["text"] == str(tmp_path / "ds_text_document")
    assert (tmp_path / "ds_text_document.bin").stat().st_size == result["tokens"] * 2  # uint16 tokens


def test_data_prepare_bad_input_one_line(capsys, tmp_path):
    code, _, err = run(capsys, "data", "prepare", "--input", tmp_path / "none.jsonl", "--output-prefix", tmp_path / "x")
    assert code == ExitCode.USAGE
    assert err.strip() == f"megaprov: error: --input {tmp_path / 'none.jsonl'} does not exist: pass JSONL files, one JSON object per line"


def _job_on_disk(tmp_path, name, spec_file, state):
    """A job's directory as train leaves it, on a shared directory this machine mounts (job.json, spec.yml)."""
    shared = tmp_path / "shared"
    inv = cpu_inventory(tmp_path, nodes=3, shared=str(shared))
    with inv.open("a") as f:
        f.write(f"megaprov_controller_shared_dir={shared}\n")
    jdir = shared / "jobs" / name
    (jdir / "logs").mkdir(parents=True)
    (jdir / "spec.yml").write_text((JOBS / spec_file).read_text().replace("name: lab-elastic\n", f"name: {name}\n"))
    meta = {
        "name": name,
        "hosts": ["node1", "node2"],
        "job_hosts": ["node1", "node2", "node3"],
        "shared_dir": str(shared),
        "job_dir": str(jdir),
        "checkpoint_dir": str(shared / "checkpoints" / name),
        "state": state,
    }
    (jdir / "job.json").write_text(json.dumps(meta))
    return inv


@pytest.mark.parametrize(
    ("spec_file", "state", "message"),
    [
        ("lab-tiny.yml", "running", "job el has no launch.elastic: it runs on its 2 nodes or not at all: give a new job launch.elastic"),
        ("lab-elastic.yml", "finished", "job el is finished, not running: `megaprov train --resume el` starts it again on all its nodes"),
    ],
)
def test_job_grow_refuses_a_job_it_cannot_grow_in_one_line(capsys, tmp_path, monkeypatch, spec_file, state, message):
    monkeypatch.setenv("MEGAPROV_STATE", str(tmp_path / "state"))
    inv = _job_on_disk(tmp_path, "el", spec_file, state)
    code, _, err = run(capsys, "job", "grow", "el", "-i", inv)
    assert code == ExitCode.USAGE
    assert err.strip() == f"megaprov: error: {message}"


def test_job_check_says_where_an_elastic_job_continues(capsys, tmp_path):
    code, out, _ = run(capsys, "job", "check", "-f", JOBS / "lab-elastic.yml", "-i", cpu_inventory(tmp_path, nodes=3))
    assert code == ExitCode.OK
    assert "elastic: runs on 3 nodes (DP 3 x 2 micro-batches); after a node is lost continues on 2 (DP 2 x 3" in out
    code, out, _ = run(capsys, "job", "check", "-f", JOBS / "lab-elastic.yml", "-i", cpu_inventory(tmp_path, nodes=3), "-o", "json")
    doc = json.loads(out)
    assert doc["result"]["plan"]["min_nodes"] == 2 and [c["nodes"] for c in doc["result"]["plan"]["continues_on"]] == [2]
