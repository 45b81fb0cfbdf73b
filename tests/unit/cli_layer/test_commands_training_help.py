"""The --help of every training command (train, plan, job and each of its actions, jobs) as the operator reads it:
each command's description, every option with its help and metavar, the actions of `job`, and the examples. The usage
line argparse writes from the same options is left out. In-process through megaprov.cli.main with the real parser;
nothing is stood in. Also the bound of --gpus-per-node, shared by plan, train and job check."""

from __future__ import annotations

import pytest

from megaprov.cli import main
from megaprov.errors import ExitCode

HELP = {
    "train": """\
Start a training job on the cluster, follow it and judge it.

options:
  -h, --help            show this help message and exit
  --debug               show tracebacks
  -o {text,json}, --output {text,json}
                        text (default) or json: one JSON document on stdout
  -f JOB.yml, --job JOB.yml
                        the job spec
  -i INVENTORY, --inventory INVENTORY
                        cluster inventory: training nodes are [gpu_nodes]
  --nodes NODES         nodes (default: the spec's launch.nodes)
  --gpus-per-node GPUS_PER_NODE
                        GPUs per node (default: inventory, then launch.gpus_per_node)
  --gpu GPU             GPU model, e.g. H100-SXM, H200, A100-80GB, or as nvidia-smi names it (default: the inventory's megaprov_gpu_model)
  --name NAME           job name (default: the spec's name)
  --resume NAME         start an existing job again; it continues from its latest checkpoint
  --detach              start and return; `megaprov job attach NAME` follows it later
  --stall-timeout STALL_TIMEOUT
                        seconds without output from any node before giving up (default 600)
  --dry-run             plan and render, start nothing: the plan, then one node's launch
  --node NODE           with --dry-run: this node's launch (default: the first)
  --all-nodes           with --dry-run: every node's launch
  --dir DIR             with --dry-run: write the plan and every node's launch files into this new directory
  --exclude-unhealthy   leave out the nodes with error findings in the last `megaprov doctor -i INVENTORY` (within 24 h)
  --strategy {linear,free,mitogen}
                        Ansible strategy of the launch (mitogen: faster)

examples:
  megaprov train -f gpt.yml -i inventory.ini
  megaprov train -f gpt.yml -i inventory.ini --dry-run              # the plan, then node 1's launch script
  megaprov train -f gpt.yml -i inventory.ini --dry-run --dir out/    # every node's files into out/
  megaprov train -f gpt.yml -i inventory.ini --detach && megaprov job attach NAME
  megaprov train --resume NAME
""",
    "plan": """\
Parallelism, parameters, FLOPs, memory per GPU, fit, step time and the run's length.

options:
  -h, --help            show this help message and exit
  --debug               show tracebacks
  -o {text,json}, --output {text,json}
                        text (default) or json: one JSON document on stdout
  -f JOB.yml, --job JOB.yml
                        the job spec
  -i INVENTORY, --inventory INVENTORY
                        cluster inventory: training nodes are [gpu_nodes]
  --nodes NODES         nodes (default: the spec's launch.nodes)
  --gpus-per-node GPUS_PER_NODE
                        GPUs per node (default: inventory, then launch.gpus_per_node)
  --gpu GPU             GPU model, e.g. H100-SXM, H200, A100-80GB, or as nvidia-smi names it (default: the inventory's megaprov_gpu_model)
  --mfu MFU             share of the per-GPU rate a large GEMM sustains in training (default 0.77 of a measured GEMM rate, else of the isolated rate)
  --suggest             rank the splits that fit by estimated step time and say why the best wins
  --top TOP             layouts to list with --suggest

examples:
  megaprov plan -f gpt.yml -i inventory.ini
  megaprov plan -f gpt.yml --gpu 'NVIDIA H100 80GB HBM3' --nodes 4
  megaprov plan -f gpt.yml --gpu H200 --suggest --top 5
""",
    "job": """\
Job spec (schema, check) and running jobs (status, logs, stop).

positional arguments:
  ACTION
    status              state, progress and verdict of a job
    logs                print a node's log
    stop                stop a job on every node
    schema              print the JSON Schema of gpt.yml
    check               validate a job spec (and, with -i, --gpu or --nodes, its fit on a cluster, as plan and train judge it)
    attach              follow a running job's live progress again (after --detach or a lost terminal), to its verdict
    grow                bring a job with launch.elastic back onto its nodes that returned (it saves a checkpoint and continues on more)

options:
  -h, --help            show this help message and exit
  --debug               show tracebacks
  -o {text,json}, --output {text,json}
                        text (default) or json: one JSON document on stdout

examples:
  megaprov job check -f gpt.yml --gpu H100-SXM --nodes 2
  megaprov job status NAME
  megaprov job logs NAME -f
""",
    "job check": """\
Validate a job spec (and, with -i, --gpu or --nodes, its fit on a cluster, as plan and train judge it).

options:
  -h, --help            show this help message and exit
  --debug               show tracebacks
  -o {text,json}, --output {text,json}
                        text (default) or json: one JSON document on stdout
  -f JOB.yml, --job JOB.yml
                        the job spec
  -i INVENTORY, --inventory INVENTORY
                        cluster inventory: training nodes are [gpu_nodes]
  --nodes NODES         nodes (default: the spec's launch.nodes)
  --gpus-per-node GPUS_PER_NODE
                        GPUs per node (default: inventory, then launch.gpus_per_node)
  --gpu GPU             GPU model, e.g. H100-SXM, H200, A100-80GB, or as nvidia-smi names it (default: the inventory's megaprov_gpu_model)

examples:
  megaprov job check -f gpt.yml
  megaprov job check -f gpt.yml -i inventory.ini
  megaprov job check -f llama-8b.yml --gpu A100-40GB --nodes 2
""",
    "job schema": """\
Print the JSON Schema of gpt.yml.

options:
  -h, --help            show this help message and exit
  --debug               show tracebacks
  -o {text,json}, --output {text,json}
                        text (default) or json: one JSON document on stdout

examples:
  megaprov job schema > gpt.schema.json
""",
    "job attach": """\
Follow a running job's live progress again (after --detach or a lost terminal), to its verdict.

positional arguments:
  NAME                  the job's name

options:
  -h, --help            show this help message and exit
  --debug               show tracebacks
  -o {text,json}, --output {text,json}
                        text (default) or json: one JSON document on stdout
  -i INVENTORY, --inventory INVENTORY
                        the cluster's inventory (default: the one the job was started with)
  --stall-timeout STALL_TIMEOUT
                        seconds without output before giving up (default 600)

examples:
  megaprov job attach gpt-lab
  megaprov job attach gpt-lab -o json
""",
    "job grow": """\
Bring a job with launch.elastic back onto its nodes that returned (it saves a checkpoint and continues on more).

positional arguments:
  NAME                  the job's name

options:
  -h, --help            show this help message and exit
  --debug               show tracebacks
  -o {text,json}, --output {text,json}
                        text (default) or json: one JSON document on stdout
  -i INVENTORY, --inventory INVENTORY
                        the cluster's inventory (default: the one the job was started with)

examples:
  megaprov job grow gpt-lab
""",
    "job status": """\
State, progress and verdict of a job.

positional arguments:
  NAME                  the job's name

options:
  -h, --help            show this help message and exit
  --debug               show tracebacks
  -o {text,json}, --output {text,json}
                        text (default) or json: one JSON document on stdout
  -i INVENTORY, --inventory INVENTORY
                        the cluster's inventory (default: the one the job was started with)

examples:
  megaprov job status gpt-lab
  megaprov job status gpt-lab -o json
""",
    "job logs": """\
Print a node's log.

positional arguments:
  NAME                  the job's name

options:
  -h, --help            show this help message and exit
  --debug               show tracebacks
  -o {text,json}, --output {text,json}
                        text (default) or json: one JSON document on stdout
  -i INVENTORY, --inventory INVENTORY
                        the cluster's inventory (default: the one the job was started with)
  --node NODE           this node's log (default: the last node, where the last rank prints)
  --lines LINES         last N lines
  -f, --follow          keep printing new lines until the job ends (Ctrl-C stops following)

examples:
  megaprov job logs gpt-lab
  megaprov job logs gpt-lab --node node2 --lines 200
  megaprov job logs gpt-lab -f
""",
    "job stop": """\
Stop a job on every node.

positional arguments:
  NAME                  the job's name

options:
  -h, --help            show this help message and exit
  --debug               show tracebacks
  -o {text,json}, --output {text,json}
                        text (default) or json: one JSON document on stdout
  -i INVENTORY, --inventory INVENTORY
                        the cluster's inventory (default: the one the job was started with)

examples:
  megaprov job stop gpt-lab
""",
    "jobs": """\
List training jobs.

options:
  -h, --help            show this help message and exit
  --debug               show tracebacks
  -o {text,json}, --output {text,json}
                        text (default) or json: one JSON document on stdout
  -i INVENTORY, --inventory INVENTORY
                        also list the jobs in this cluster's shared directory (default: $MEGAPROV_INVENTORY or the config file's)

examples:
  megaprov jobs
  megaprov jobs -i inventory.ini -o json
""",
}


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "300")


@pytest.mark.parametrize("command", sorted(HELP))
def test_the_help_of_each_training_command(capsys, command):
    with pytest.raises(SystemExit) as exit_:
        main([*command.split(), "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.split("\n\n", 1)[1] == HELP[command]


@pytest.mark.parametrize("command", ["plan", "train", "job check"])
def test_gpus_per_node_is_1_to_64(capsys, tmp_path, command):
    spec = tmp_path / "gpt.yml"
    spec.write_text("name: x\n")
    assert main([*command.split(), "-f", str(spec), "--gpus-per-node", "65"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert f"megaprov {command}: argument --gpus-per-node: '65' is more than 64" in err
