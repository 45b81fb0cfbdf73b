"""The Slurm launcher's reading of slurmctld's answers, field by field and as the operator reads them (issue 36: the
mutation benchmark's survivors in parse_state, SlurmState.describe, fields and job_id)."""

import pytest

from megaprov.errors import UsageError
from megaprov.training.launchers import slurm

RUNNING = (
    "JobId=38 JobName=wrap UserId=megaprov(2000) JobState=RUNNING Reason=None Requeue=1 Restarts=2 BatchFlag=1 ExitCode=0:0 "
    "NodeList=node[1-2] BatchHost=node1 NumNodes=2-2"
)


def test_every_field_of_a_running_job_is_read():
    found = slurm.parse_state("38", RUNNING + "\n--- pending\n")
    assert found == slurm.SlurmState("38", "RUNNING", "", "node[1-2]", 2, None, 0, "0:0")
    assert found.describe() == "slurm job 38 RUNNING on node[1-2], requeued 2 time(s)"


def test_a_record_without_the_optional_fields_reads_as_nothing_said():
    found = slurm.parse_state("38", "JobId=38 JobName=x\n--- pending\n")
    assert (found.state, found.reason, found.nodes, found.restarts, found.exit_code) == ("UNKNOWN", "", "", 0, "")
    assert found.describe() == "slurm job 38 UNKNOWN"


@pytest.mark.parametrize(("restarts", "read"), [("Restarts=7", 7), ("Restarts=x", 0), ("Restarts=", 0)])
def test_the_requeue_count_is_a_number_or_zero(restarts, read):
    found = slurm.parse_state("38", RUNNING.replace("Restarts=2", restarts) + "\n--- pending\n")
    assert found.restarts == read


def test_the_queue_starts_at_the_marker_the_play_printed_after_the_record():
    # the job's own words (a name or comment the cluster user chose) may hold the marker: the record is read whole and
    # the queue from the last marker, which the status play prints after scontrol's record
    record = RUNNING.replace("JobState=RUNNING Reason=None", "JobState=PENDING Reason=Priority").replace("BatchHost=node1", "Comment=--- pending 99")
    found = slurm.parse_state("38", record + "\n--- pending\n41\n38\n")
    assert (found.state, found.reason, found.position, found.pending) == ("PENDING", "Priority", 2, 2)
    assert found.describe() == "slurm job 38 PENDING (Priority, 2 of 2 in the queue)"


def test_a_pending_job_without_a_reason_or_place_says_so():
    text = RUNNING.replace("JobState=RUNNING", "JobState=PENDING") + "\n--- pending\n"
    found = slurm.parse_state("38", text)
    assert found.reason == "" and found.position is None
    assert found.describe() == "slurm job 38 PENDING (None)"


def test_a_forgotten_job_says_no_more_and_an_unknown_answer_keeps_its_words():
    gone = slurm.parse_state("15", "slurm_load_jobs error: Invalid job id specified\n--- pending\n7\n")
    assert gone == slurm.SlurmState("15", "GONE", "", pending=1)
    assert gone.describe() == "slurm job 15 no longer known to slurmctld"
    unknown = slurm.parse_state("15", "  slurm_load_jobs error: Unable to contact slurm controller  \n--- pending\n")
    assert unknown.state == "UNKNOWN" and unknown.reason == "slurm_load_jobs error: Unable to contact slurm controller"
    assert unknown.job_id == "15" and unknown.alive


def test_node_lists_and_exit_codes_are_bounded_and_a_null_node_list_is_not_shown():
    long = slurm.parse_state("38", RUNNING.replace("NodeList=node[1-2]", "NodeList=" + "n" * 300).replace("ExitCode=0:0", "ExitCode=" + "9" * 30))
    assert len(long.nodes) == 200 and len(long.exit_code) == 16
    ended = slurm.parse_state("38", RUNNING.replace("JobState=RUNNING", "JobState=FAILED").replace("NodeList=node[1-2]", "NodeList=(null)"))
    assert ended.describe() == "slurm job 38 FAILED, exit 0:0, requeued 2 time(s)"


def test_fields_join_the_words_of_a_value_with_spaces_and_read_the_first_equals_sign():
    assert slurm.fields("JobId=1 Reason=a b c Comment=x=y") == {"JobId": "1", "Reason": "a b c", "Comment": "x=y"}
    assert slurm.fields("stray words JobId=1") == {"JobId": "1"}  # words before any key belong to nothing
    assert slurm.fields("1bad=x JobId=2") == {"JobId": "2"}  # a key starts with a letter


def test_a_job_id_that_is_not_one_is_refused_naming_what_sbatch_printed():
    with pytest.raises(UsageError) as info:
        slurm.job_id("Submitted batch job\n", "sbatch --parsable")
    assert info.value.message == "sbatch --parsable: 'Submitted batch job' is not a Slurm job id"
    assert info.value.hint == "see the job's submission on the Slurm controller"
    with pytest.raises(UsageError) as info:
        slurm.job_id("", "sbatch --parsable")
    assert info.value.message == "sbatch --parsable: '' is not a Slurm job id"
