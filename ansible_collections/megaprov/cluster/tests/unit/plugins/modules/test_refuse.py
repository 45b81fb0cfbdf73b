"""The refuse module (ansible_collections/megaprov/cluster/plugins/modules/refuse.py): it always fails, with the
message given and usage_error, which megaprov reads as a refusal of the request's own settings (exit 2)."""

from ansible_collections.megaprov.cluster.plugins.modules import refuse
from ansible_collections.megaprov.cluster.tests.unit.plugins.modules import utils as modules


def test_it_fails_with_the_message_and_says_the_settings_are_at_fault(capsys):
    code, result = modules.run_module(refuse.main, {"msg": "Slurm does not answer on head: set megaprov_scheduler: slurm"}, capsys)
    assert code == 1
    assert result["failed"] is True and result["usage_error"] is True
    assert result["msg"] == "Slurm does not answer on head: set megaprov_scheduler: slurm"
    assert not result.get("changed")


def test_it_refuses_in_check_mode_too(capsys):
    code, result = modules.run_module(refuse.main, {"msg": "no", "_ansible_check_mode": True}, capsys)
    assert code == 1 and result["usage_error"] is True
