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
