"""The bootstrap report's proofs (megaprov/cluster/provision.py): a cached proof's recorded result stands in for the
check it proved, marked as cached, and one line per proof says where it was cached, where it ran, and why."""

from megaprov.cluster import provision
from megaprov.cluster.runner import TaskResult

MESH = "megaprov.cluster.ssh_check"
PAIRS = {"pairs": [{"source": "node1", "peer": "node2", "ok": True, "seconds": 0.1, "line": "node1 -> node2: ok (0.10s)"}], "left_out": []}


def query(host, valid, reason="inputs unchanged", name="ssh_mesh", action=MESH, result=None):
    res = {
        "name": name,
        "recorded": False,
        "valid": valid,
        "reason": reason,
        "verified_at": "2026-01-01T00:00:00Z" if valid else "",
        "action": action,
        "result": (PAIRS if result is None else result) if valid else {},
    }
    return TaskResult(host, "Look for a recorded proof", provision.PROOF_ACTION, res)


def test_a_cached_proof_becomes_the_result_of_its_check_in_place():
    before = TaskResult("node1", "Collect node facts", provision.FACTS_ACTION, {"node": {}})
    out, proofs = provision.expand_proofs([before, query("node1", True)], (provision.FACTS_ACTION, MESH))
    assert out[0] is before
    assert out[1].action == MESH and out[1].host == "node1"
    assert out[1].res["pairs"] == PAIRS["pairs"]
    assert out[1].res["cached"] == "verified at 2026-01-01T00:00:00Z, inputs unchanged; --verify re-proves"
    assert proofs == [{"host": "node1", "name": "ssh_mesh", "valid": True, "reason": "inputs unchanged", "verified_at": "2026-01-01T00:00:00Z"}]


def test_a_proof_that_must_run_and_a_record_add_no_result():
    record = TaskResult("node1", "Record", provision.PROOF_ACTION, {"name": "ssh_mesh", "recorded": True, "valid": True, "result": {}})
    out, proofs = provision.expand_proofs([query("node1", False, "no record"), record], (MESH,))
    assert out == []
    assert [(p["host"], p["valid"], p["reason"]) for p in proofs] == [("node1", False, "no record")]


def test_a_recorded_result_of_a_module_not_collected_is_not_reported_as_one():
    out, proofs = provision.expand_proofs([query("node1", True, action="megaprov.cluster.other")], (MESH,))
    assert out == [] and len(proofs) == 1


def test_cached_mesh_pairs_say_so_in_the_report():
    out, _ = provision.expand_proofs([query("node1", True)], (MESH,))
    mesh = [{**pair, "cached": item.res["cached"]} for item in out for pair in item.res["pairs"]]
    line = provision.mesh_lines(mesh, [])[0]
    assert line == (
        "ssh mesh: 1/1 pairs among node1, node2 connect without a prompt (slowest 0.10s)"
        " (verified at 2026-01-01T00:00:00Z, inputs unchanged; --verify re-proves)"
    )


def test_proof_lines_group_hosts_by_what_happened():
    proofs = [
        {"host": "node2", "name": "ssh_mesh", "valid": True, "reason": "inputs unchanged", "verified_at": "2026-01-02T00:00:00Z"},
        {"host": "node1", "name": "ssh_mesh", "valid": True, "reason": "inputs unchanged", "verified_at": "2026-01-01T00:00:00Z"},
        {"host": "node3", "name": "ssh_mesh", "valid": False, "reason": "no record", "verified_at": ""},
        {"host": "node1", "name": "compute_rate", "valid": False, "reason": "inputs changed: node shape", "verified_at": "2026-01-01T00:00:00Z"},
    ]
    assert provision.proof_lines(proofs, verify=False) == [
        "proof compute_rate: proved this run on node1 (inputs changed: node shape)",
        "proof ssh_mesh: cached on node1, node2 (verified at 2026-01-01T00:00:00Z or later, inputs unchanged; --verify re-proves);"
        " proved this run on node3 (no record)",
    ]


def test_verify_is_visible_even_when_nothing_was_asked():
    forced = [{"host": "node1", "name": "ssh_mesh", "valid": False, "reason": "forced (--verify)", "verified_at": ""}]
    assert provision.proof_lines(forced, verify=True) == [
        "proof ssh_mesh: proved this run on node1 (forced (--verify))",
        "--verify: every proof ran again",
    ]
    assert provision.proof_lines([], verify=True) == ["--verify: every proof ran again (no proof was asked: were the stages with checks skipped?)"]
    assert provision.proof_lines([], verify=False) == []


def test_a_host_whose_proof_held_but_checked_with_its_peers_counts_as_run():
    real = TaskResult("node1", "Connect", MESH, PAIRS)
    out, proofs = provision.expand_proofs([query("node1", True), query("node2", False, "inputs changed: path /etc/hosts"), real], (MESH,))
    assert out == [real]
    assert [(p["host"], p["valid"], p["reason"]) for p in proofs] == [
        ("node1", False, "ran with its peers, whose inputs changed"),
        ("node2", False, "inputs changed: path /etc/hosts"),
    ]


def test_a_later_proof_of_the_same_host_keeps_the_earlier_cached_result():
    # The compute rate: cached in preflight, measured again in the python stage after the environment changed.
    compute = "megaprov.cluster.compute_rate"
    first = query("node1", True, name="compute_rate", action=compute, result={"summary": "old"})
    second = query("node1", False, "inputs changed: path /venv", name="compute_rate", action=compute)
    real = TaskResult("node1", "Measure", compute, {"summary": "new"})
    out, proofs = provision.expand_proofs([first, second, real], (compute,))
    assert [i.res["summary"] for i in out] == ["old", "new"]
    assert [p["valid"] for p in proofs] == [True, False]


def test_the_slurm_line_says_when_its_step_was_proved():
    proofs = [{"host": "node1", "name": "slurm_step", "valid": True, "reason": "inputs unchanged", "verified_at": "2026-01-01T00:00:00Z"}]
    assert provision._step_note("node1", proofs) == "; srun step verified at 2026-01-01T00:00:00Z, inputs unchanged; --verify re-proves"
    assert provision._step_note("node2", proofs) == ""
    assert provision._step_note("node1", [{**proofs[0], "valid": False}]) == ""
