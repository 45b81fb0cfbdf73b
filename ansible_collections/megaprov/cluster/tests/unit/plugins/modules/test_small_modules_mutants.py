"""Three small node modules, what their callers read: ib_write_bw (perftest's table read, main() against a stood-in
ib_write_bw on PATH: the figure, the threshold refusal, a failed run's words, check mode), slurm_node's CPU
arithmetic (Linux CPU lists, Slurm's core numbering over several sockets) and its CPU topology reader (a fake sysfs
tree, and by default the running kernel's own /sys)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.megaprov.cluster.plugins.modules import ib_write_bw as bw
from ansible_collections.megaprov.cluster.plugins.modules import slurm_node
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules.utils import run_module

# perftest's result table (ib_write_bw -D 5 -F --report_gbits), as the client prints it
TABLE = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : mlx5_0
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      3741120          0.00               392.27               0.748204
---------------------------------------------------------------------------------------
"""


# --- ib_write_bw ---------------------------------------------------------------------------------------------------


def test_a_table_whose_result_row_never_came_has_no_figure():
    cut = TABLE.split(" 65536", maxsplit=1)[0] + " Failed to complete run_iter_bw function successfully\n\n"
    assert bw.parse_average_gbps(cut) is None
    assert bw.parse_average_gbps(TABLE) == 392.27


@pytest.fixture
def perftest(tmp_path, monkeypatch):
    """ib_write_bw on PATH: records its argv, prints what $0.out holds on stdout and $0.err on stderr, exits $0.rc."""
    tools = tmp_path / "tools"
    tools.mkdir()
    tool = tools / "ib_write_bw"
    tool.write_text(
        '#!/bin/sh\nprintf "%s\\n" "$*" >> "$0.calls"\n'
        'cat "$0.out" 2>/dev/null\ncat "$0.err" >&2 2>/dev/null\nexit "$(cat "$0.rc" 2>/dev/null || echo 0)"\n'
    )
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}:/usr/bin:/bin")
    return tool


def side(tool: Path, name: str, text: str) -> None:
    Path(f"{tool}.{name}").write_text(text)


def bw_calls(tool: Path) -> list[str]:
    log = Path(f"{tool}.calls")
    return log.read_text().splitlines() if log.exists() else []


ARGS = {"peer": "10.0.0.2", "device": "mlx5_0", "seconds": 5, "threshold_gbps": 300.0}


def test_the_client_measures_the_peer_and_reports_the_figure(perftest, capsys):
    side(perftest, "out", TABLE)
    code, result = run_module(bw.main, ARGS, capsys)
    assert code == 0 and result == {
        "changed": False,
        "peer": "10.0.0.2",
        "device": "mlx5_0",
        "gbps": 392.27,
        "threshold_gbps": 300.0,
        "rc": 0,
        "invocation": result["invocation"],
    }
    assert bw_calls(perftest) == ["-d mlx5_0 -i 1 -p 18515 -D 5 -F --report_gbits 10.0.0.2"]


def test_a_figure_below_the_threshold_fails_with_both_numbers(perftest, capsys):
    side(perftest, "out", TABLE)
    code, result = run_module(bw.main, {**ARGS, "threshold_gbps": 400.0}, capsys)
    assert code == 1 and result["gbps"] == 392.27
    assert result["msg"] == "ib_write_bw to 10.0.0.2 on mlx5_0: 392.3 Gb/s is below infiniband_bw_threshold_gbps=400.0"


def test_a_failed_run_says_perftests_last_words(perftest, capsys):
    side(perftest, "err", "Couldn't connect to 10.0.0.2:18515\nUnable to open file descriptor for socket connection\n")
    side(perftest, "rc", "1")
    code, result = run_module(bw.main, {**ARGS, "gid_index": 3, "ib_port": 2, "port": 18600}, capsys)
    assert (code, result["rc"], result["gbps"]) == (1, 1, None)
    assert result["msg"] == (
        "ib_write_bw to 10.0.0.2 on mlx5_0 failed: Couldn't connect to 10.0.0.2:18515\nUnable to open file descriptor for socket connection"
    )
    assert bw_calls(perftest) == ["-d mlx5_0 -i 2 -p 18600 -D 5 -F --report_gbits -x 3 10.0.0.2"]


def test_a_run_without_a_table_fails_with_its_stdout(perftest, capsys):
    side(perftest, "out", " RDMA_Write BW Test\n" + "x" * 400 + "\n")
    code, result = run_module(bw.main, ARGS, capsys)
    assert code == 1 and result["msg"] == "ib_write_bw to 10.0.0.2 on mlx5_0 failed: " + ("x" * 400)[-300:]


def test_check_mode_sends_no_traffic(perftest, capsys):
    code, result = run_module(bw.main, {**ARGS, "_ansible_check_mode": True}, capsys)
    assert code == 0 and result["skipped"] is True and result["msg"] == "check mode: no traffic sent" and bw_calls(perftest) == []


# --- slurm_node: CPU lists and Slurm's core numbers --------------------------------------------------------------


def test_a_cpu_list_with_an_empty_item_reads_past_it():
    assert slurm_node.cpu_list("0-2,,8,10-11\n") == [0, 1, 2, 8, 10, 11]
    assert slurm_node.cpu_list(",4") == [4]
    assert slurm_node.ranges([11, 0, 1, 2, 8, 10]) == "0-2,8,10-11"


def test_cores_are_numbered_socket_by_socket_whatever_the_os_numbering():
    # three sockets of 2, 3 and 2 cores, their core ids not dense and not the same from socket to socket; the OS
    # interleaves the sockets and gives each core two hyperthreads (cpu N and N + 7)
    cores = [(0, 0), (1, 4), (2, 0), (0, 1), (1, 5), (2, 9), (1, 6)]
    topology = {n: cores[n % 7] for n in range(14)}
    assert slurm_node.slurm_cores(topology, range(14)) == list(range(7))
    assert slurm_node.slurm_cores(topology, [2, 5]) == [5, 6]  # socket 2's cores come after the 2 + 3 before them
    assert slurm_node.slurm_cores(topology, [1, 8, 13]) == [2, 4]  # socket 1's cores 4 and 6, whichever thread
    assert slurm_node.slurm_cores(topology, [0, 3, 10]) == [0, 1]
    assert slurm_node.slurm_cores(topology, [6, 99]) == [4]  # a CPU the topology does not know is left out


def cpu(root: Path, n: int, package: str | None, core: str | None) -> None:
    folder = root / f"cpu{n}" / "topology"
    folder.mkdir(parents=True)
    if package is not None:
        (folder / "physical_package_id").write_text(package)
    if core is not None:
        (folder / "core_id").write_text(core)


def test_the_topology_is_read_per_cpu_and_unreadable_cpus_are_skipped(tmp_path):
    for n in range(8):
        if n % 2:  # every other CPU unreadable: a missing file, or one that is not a number
            cpu(tmp_path, n, "0\n" if n % 4 == 1 else "x\n", None if n % 4 == 1 else "0\n")
        else:
            cpu(tmp_path, n, f"{n // 4}\n", f"{n % 4}\n")
    (tmp_path / "cpufreq").mkdir()  # not a CPU
    (tmp_path / "cpu9").mkdir()  # offline: no topology directory
    assert slurm_node.read_topology(str(tmp_path)) == {0: (0, 0), 2: (0, 2), 4: (1, 0), 6: (1, 2)}


@pytest.mark.skipif(not Path("/sys/devices/system/cpu/cpu0/topology/core_id").exists(), reason="no CPU topology in /sys here")
def test_by_default_the_running_kernels_topology_is_read():
    topology = slurm_node.read_topology()
    assert set(os.sched_getaffinity(0)) <= set(topology)
    with open("/sys/devices/system/cpu/cpu0/topology/physical_package_id") as f:
        package = int(f.read())
    with open("/sys/devices/system/cpu/cpu0/topology/core_id") as f:
        assert topology[0] == (package, int(f.read()))
