"""Reading a job's node logs (megaprov.training.jobs.read_log): every node's file, folded with the job's log interval."""

from pathlib import Path

from megaprov.training import jobs, trainer


def test_read_log_folds_every_nodes_file_with_the_jobs_log_interval(tmp_path):
    """--log-interval 5, checkpoint at 20, the ranks die after 25 and log 25 again: the restart resumed from 20 (the
    interval the caller passes, as `job status` and the report pass the spec's train.log_interval)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = [trainer.log_line(i, 60, i * 8, 50.0, 0.1, 1e-3, 8, 6.0 - 0.05 * i, 1.0, 0, 0) for i in (5, 10, 15, 20, 25, 25)]
    (logs / "node2.log").write_text("\n".join(lines) + "\n")
    (logs / "node1.log").write_text("  successfully saved checkpoint from iteration      20 to /shared/c [ t 1/1, p 1/1 ]\n")
    job = jobs.Job("j", Path("inv"), ["node1", "node2"], "/shared", "/shared/jobs/j", tmp_path, "/shared/c", "megaprov-job-j")
    log = jobs.read_log(job, 128, 5)
    assert (log.seq_length, log.log_interval, log.saves, log.furthest) == (128, 5, [20], 25)
    assert [(r.last_iteration, r.resumed_from, r.lost_iterations) for r in log.restarts] == [(25, 20, 5)]


def test_a_slurm_job_over_while_it_was_asked_is_judged_on_the_nodes_last_lines(tmp_path, monkeypatch):
    """The nodes write their exit lines while the follower asks Slurm (an Ansible play of seconds); Slurm then says
    COMPLETED. The follower reads those lines before it judges: the job finished (a full suite once failed it with
    "torchrun did not finish cleanly on node1 (running), node2 (running)" and "slurm job 4 COMPLETED, exit 0:0")."""
    from megaprov.training.launchers.slurm import SlurmLauncher, SlurmState

    (tmp_path / "logs").mkdir()
    (tmp_path / "launch").mkdir()
    (tmp_path / "launch" / "nodes").write_text("node1\nnode2\n")
    (tmp_path / "launch" / "slurm-jobs").write_text("4\n")
    node_line = "megaprov: node {h} (node rank {r}): torchrun {what} at 2026-12-02T02:34:26.294Z\n"
    for rank, host in enumerate(("node1", "node2")):
        iters = [trainer.log_line(i, 3, i * 8, 50.0, 0.1, 1e-3, 8, 6.0 - 0.1 * i, 1.0, 0, 0) for i in (1, 2, 3)] if host == "node2" else []
        (tmp_path / "logs" / f"{host}.log").write_text(node_line.format(h=host, r=rank, what="starting") + "".join(x + "\n" for x in iters))
    asked = []

    class Slurm(SlurmLauncher):  # Slurm's own answers, without a play
        def log_hosts(self, job):
            return ["node1", "node2"]

        def state(self, job, report=None):
            asked.append(1)
            for rank, host in enumerate(("node1", "node2")):  # written while Slurm was asked
                with (tmp_path / "logs" / f"{host}.log").open("a") as handle:
                    handle.write(node_line.format(h=host, r=rank, what="exited with 0"))
            return SlurmState("4", "COMPLETED", nodes="node[1-2]", exit_code="0:0")

    monkeypatch.setattr(jobs.launchers, "of", lambda name: Slurm())
    monkeypatch.setattr(jobs, "RUNNING_POLL", 0.0)
    job = jobs.Job("j", Path("inv"), ["node1", "node2"], "/shared", "/shared/jobs/j", tmp_path, "/shared/c", "megaprov-job-j", "slurm", "4")
    outcome = jobs.follow_job(job, 128, lambda progress: None, stall_timeout=60, poll=0.01)
    assert asked and (outcome.state, outcome.reason) == ("finished", "")
