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


def test_a_proof_answer_missing_its_words_reads_as_empty_and_its_time_as_unknown():
    """A proof module's answer with only its verdict and its recorded result: an empty name, reason and time in the
    proof list, "verified at ?" in the cached note, and the task's own name kept on the result put in its place."""
    bare = TaskResult("node1", "Look for a recorded proof", provision.PROOF_ACTION, {"valid": True, "action": MESH, "result": PAIRS})
    out, proofs = provision.expand_proofs([bare], (MESH,))
    assert proofs == [{"host": "node1", "name": "", "valid": True, "reason": "", "verified_at": ""}]
    assert [(r.host, r.task, r.action) for r in out] == [("node1", "Look for a recorded proof", MESH)]
    assert out[0].res == {**PAIRS, "cached": "verified at ?, inputs unchanged; --verify re-proves"}
    # asked again under the same (empty) name for another check (a later stage): the first cached result stays as it
    # was when the mesh check then runs for the host
    again = TaskResult("node1", "Look again", provision.PROOF_ACTION, {"valid": True, "action": provision.FACTS_ACTION, "result": {"node": {}}})
    real = TaskResult("node1", "Check the mesh", MESH, PAIRS)
    out, proofs = provision.expand_proofs([bare, again, real], (MESH, provision.FACTS_ACTION))
    assert [(r.task, r.action) for r in out] == [
        ("Look for a recorded proof", MESH),
        ("Look again", provision.FACTS_ACTION),
        ("Check the mesh", MESH),
    ]
    assert [p["valid"] for p in proofs] == [True, True]


def test_a_check_that_runs_after_its_proof_held_replaces_only_that_cached_result():
    """Another result before the proof (its place in the results is not its place among the proofs), a recorded
    answer that is skipped without ending the list, then the check itself for the same host."""
    facts = TaskResult("node1", "Collect node facts", provision.FACTS_ACTION, {"node": {}})
    recorded = TaskResult("node1", "Record the proof", provision.PROOF_ACTION, {"recorded": True, "valid": True})
    real = TaskResult("node1", "Check the mesh", MESH, PAIRS)
    after = TaskResult("node2", "Collect node facts", provision.FACTS_ACTION, {"node": {}})
    out, proofs = provision.expand_proofs([facts, query("node1", True), recorded, real, after], (provision.FACTS_ACTION, MESH))
    assert out == [facts, real, after]
    assert [(p["host"], p["valid"], p["reason"]) for p in proofs] == [("node1", False, "ran with its peers, whose inputs changed")]
