"""Domain code reports through a Reporter (megaprov.output), never through ``quiet`` flags: the command line makes one
from ``--output`` and passes it down. That no function takes a ``quiet`` flag is read from the source
(tests/static/test_architecture.py)."""

from megaprov.commands import build_parser
from megaprov.commands.base import reporter
from megaprov.output import SHOWN, SILENT


def test_shown_says_lines_on_stderr_as_data_and_silent_says_nothing(capsys):
    SHOWN.say("stage [/] done \\[link=x]")
    SILENT.say("never")
    out, err = capsys.readouterr()
    assert out == "" and err == "stage [/] done \\[link=x]\n"  # rich markup in the line is printed, not interpreted
    assert SHOWN.run(3).quiet is False and SILENT.run(3).quiet is True


def test_the_command_line_makes_the_reporter_from_the_output_format():
    parser = build_parser()
    assert reporter(parser.parse_args(["jobs", "-o", "json"])) is SILENT
    assert reporter(parser.parse_args(["jobs"])) is SHOWN
