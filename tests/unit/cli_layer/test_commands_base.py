"""What every command shares (megaprov.commands.base), through megaprov's real parser in-process: a mistyped command,
action or choice as one line with the close choice or the list to choose from, a bad number for a size or share flag,
the 'did you mean' of a word, and a note on stderr. Nothing is stood in."""

import pytest

from megaprov.commands import base, build_parser
from megaprov.errors import UsageError


def refused(*argv: str) -> tuple[str, str | None]:
    with pytest.raises(UsageError) as error:
        build_parser().parse_args(list(argv))
    return error.value.message, error.value.hint


def test_a_mistyped_command_is_refused_with_the_close_one():
    assert refused("bootstrp") == ("megaprov: argument COMMAND: invalid choice: 'bootstrp'", "did you mean 'bootstrap'? (see `megaprov --help`)")


def test_a_mistyped_action_of_a_command_is_its_action_with_the_commands_help():
    assert refused("job", "chek") == ("megaprov job: argument ACTION: invalid choice: 'chek'", "did you mean 'check'? (see `megaprov job --help`)")


def test_a_word_close_to_nothing_lists_the_choices():
    assert refused("job", "qqqqqq") == (
        "megaprov job: argument ACTION: invalid choice: 'qqqqqq'",
        "choose from status, logs, stop, schema, check, attach, grow",
    )
    message, hint = refused("zzzzzz")
    assert message == "megaprov: argument COMMAND: invalid choice: 'zzzzzz'"
    assert hint.startswith("choose from bootstrap, preflight, inventory, init, ") and hint.endswith(", completion")


def test_a_flags_bad_choice_names_the_flag():
    assert refused("--output", "xml", "plan") == ("megaprov: argument -o/--output: invalid choice: 'xml'", "choose from text, json")
    assert refused("--output", "jsn", "plan") == (
        "megaprov: argument -o/--output: invalid choice: 'jsn'",
        "did you mean 'json'? (see `megaprov --help`)",
    )


def test_any_other_mistake_is_the_parsers_line_with_the_commands_help():
    assert refused("plan") == ("megaprov plan: the following arguments are required: -f/--job", "see `megaprov plan --help`")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--nodes", "x"], "megaprov plan: argument --nodes: 'x' is not a whole number"),
        (["--nodes", "0"], "megaprov plan: argument --nodes: 0 must be at least 1"),
        (["--nodes", "10001"], "megaprov plan: argument --nodes: '10001' is more than 10,000"),
        (["--nodes", "9" * 30], f"megaprov plan: argument --nodes: '{'9' * 24}' is more than 10,000"),
        (["--mfu", "half"], "megaprov plan: argument --mfu: 'half' is not a number"),
        (["--mfu", "0"], "megaprov plan: argument --mfu: 0.0 must be above 0 and at most 1"),
        (["--mfu", "1.5"], "megaprov plan: argument --mfu: 1.5 must be above 0 and at most 1"),
    ],
)
def test_a_size_or_share_flag_out_of_its_range_is_refused_by_name(flags, message):
    assert refused("plan", "-f", "gpt.yml", *flags) == (message, "see `megaprov plan --help`")


def test_sizes_and_shares_within_their_range_are_read():
    args = build_parser().parse_args(["plan", "-f", "gpt.yml", "--nodes", "10000", "--mfu", "1", "--top", "1"])
    assert (args.nodes, args.mfu, args.top) == (10_000, 1.0, 1)
    assert base.fraction("0.25") == 0.25
    assert base.upto(5)("5") == 5


def test_did_you_mean_says_the_close_word_or_nothing():
    assert base.did_you_mean("chek", ["check", "stop"]) == "; did you mean 'check'?"
    assert base.did_you_mean("qqqq", ["check", "stop"]) == ""


def test_a_note_goes_to_stderr_as_it_is(capsys, monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    base.note("the [b]spec[/b] names 3 nodes")
    out = capsys.readouterr()
    assert (out.out, out.err) == ("", "megaprov: note: the [b]spec[/b] names 3 nodes\n")


# ---- the default inventory: $MEGAPROV_INVENTORY, then the config file


@pytest.fixture
def config(tmp_path, monkeypatch):
    """The config file under an XDG_CONFIG_HOME of the test's own, no MEGAPROV_INVENTORY."""
    monkeypatch.delenv("MEGAPROV_INVENTORY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    path = tmp_path / "xdg" / "megaprov" / "config.toml"
    path.parent.mkdir(parents=True)
    return path


def test_the_config_file_is_under_xdg_config_home_or_the_homes_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert base.config_file() == tmp_path / "xdg" / "megaprov" / "config.toml"
    monkeypatch.setenv("XDG_CONFIG_HOME", "")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert base.config_file() == tmp_path / "home" / ".config" / "megaprov" / "config.toml"


def test_the_environment_wins_over_the_config_file(config, monkeypatch, tmp_path):
    config.write_text('inventory = "/srv/other.ini"\n')
    monkeypatch.setenv("MEGAPROV_INVENTORY", str(tmp_path / "inv.ini"))
    assert base.default_inventory() == (str(tmp_path / "inv.ini"), "MEGAPROV_INVENTORY")


def test_without_either_there_is_no_default(config):
    assert base.default_inventory() is None
    config.write_text("# nothing set\n")
    assert base.default_inventory() is None


def test_the_config_files_inventory_is_absolute_home_relative_or_next_to_the_file(config, monkeypatch, tmp_path):
    config.write_text('inventory = "/srv/cluster/inventory.ini"\n')
    assert base.default_inventory() == ("/srv/cluster/inventory.ini", str(config))
    config.write_text('inventory = "clusters/a.ini"\n')
    assert base.default_inventory() == (str(config.parent / "clusters" / "a.ini"), str(config))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config.write_text('inventory = "~/inv.ini"\n')
    assert base.default_inventory() == (str(tmp_path / "home" / "inv.ini"), str(config))


@pytest.mark.parametrize(
    ("text", "message", "fix"),
    [
        ("inventory = ", "not valid TOML (", 'write inventory = "/path/to/inventory.ini"'),
        ('inventry = "/a.ini"\n', "unknown setting 'inventry'; did you mean 'inventory'?", "the config file has: inventory"),
        ('colour = "red"\ninventory = "/a.ini"\n', "unknown setting 'colour'", "the config file has: inventory"),
        ('inventory = ""\n', "inventory must be a path", 'write inventory = "/path/to/inventory.ini"'),
        ("inventory = 3\n", "inventory must be a path", 'write inventory = "/path/to/inventory.ini"'),
    ],
)
def test_a_bad_config_file_is_refused_in_one_line_naming_it(config, text, message, fix):
    config.write_text(text)
    with pytest.raises(UsageError) as refused:
        base.default_inventory()
    assert refused.value.message.startswith(f"{config}: {message}")
    assert refused.value.message == f"{config}: {message}" or message.endswith("(")
    assert refused.value.hint == fix


def test_a_config_file_past_its_bound_is_refused(config):
    config.write_text("# " + "x" * (64 * 1024) + "\n")
    with pytest.raises(UsageError) as refused:
        base.default_inventory()
    assert (refused.value.message, refused.value.hint) == (f"config file {config} is 65,539 bytes", "keep it under 65,536 bytes")


# ---- the inventory a command needs: -i, the deprecated positional form, or the default


def inventory_args(tmp_path, inventory=None, positional=None):
    import argparse

    return argparse.Namespace(inventory=inventory, inventory_positional=positional, command_path="bootstrap")


def test_the_positional_form_is_taken_with_a_note_naming_the_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "300")
    monkeypatch.chdir(tmp_path)
    args = inventory_args(tmp_path, positional="site.ini")
    assert base.need_inventory(args) == str(tmp_path / "site.ini")
    assert args.inventory == str(tmp_path / "site.ini")
    assert capsys.readouterr().err == (
        "megaprov: note: `megaprov bootstrap INVENTORY` is deprecated and goes in the next release: write -i site.ini\n"
    )


def test_the_positional_form_and_the_same_flag_are_one_inventory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = inventory_args(tmp_path, inventory=str(tmp_path / "site.ini"), positional="./site.ini")
    assert base.need_inventory(args) == str(tmp_path / "site.ini")


def test_two_different_inventories_are_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = inventory_args(tmp_path, inventory=str(tmp_path / "a.ini"), positional="b.ini")
    with pytest.raises(UsageError) as error:
        base.need_inventory(args)
    assert (error.value.message, error.value.hint) == (f"two inventories: b.ini and -i {tmp_path / 'a.ini'}", "give one, as -i INVENTORY")
    assert capsys.readouterr().err == ""  # refused before the note


def test_a_command_without_the_positional_form_reads_the_flag(tmp_path):
    import argparse

    args = argparse.Namespace(inventory=str(tmp_path / "a.ini"), command_path="preflight")
    assert base.need_inventory(args) == str(tmp_path / "a.ini")


def test_without_any_inventory_the_refusal_names_the_command_why_and_each_way(tmp_path, monkeypatch):
    monkeypatch.delenv("MEGAPROV_INVENTORY", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    with pytest.raises(UsageError) as error:
        base.need_inventory(inventory_args(tmp_path), " (the head runs the job)")
    assert error.value.message == "megaprov bootstrap needs -i INVENTORY (the head runs the job)"
    assert error.value.hint == (
        f'pass the cluster\'s inventory, or set MEGAPROV_INVENTORY or inventory = "PATH" in {tmp_path / "xdg" / "megaprov" / "config.toml"}'
    )


def test_the_default_inventory_fills_the_flag(tmp_path, monkeypatch):
    monkeypatch.setenv("MEGAPROV_INVENTORY", str(tmp_path / "env.ini"))
    args = inventory_args(tmp_path)
    assert base.need_inventory(args) == str(tmp_path / "env.ini")
    assert args.inventory == str(tmp_path / "env.ini")


# ---- -e: KEY=VALUE and @FILE


def test_a_value_is_read_as_yaml_scalars_lists_and_mappings():
    got = base.extravars(["a=1", "b=true", "c=[1, 2]", "d={x: y}", "e=text with spaces", "f=", "g=1.5", "h=null"])
    assert got == {"a": 1, "b": True, "c": [1, 2], "d": {"x": "y"}, "e": "text with spaces", "f": "", "g": 1.5, "h": None}


def test_a_value_that_is_no_yaml_or_no_plain_type_is_its_text():
    got = base.extravars(["a=[unclosed", "b=2026-12-06", "c=!!binary aGVsbG8=", "d=: x", "e=a=b"])
    assert got == {"a": "[unclosed", "b": "2026-12-06", "c": "!!binary aGVsbG8=", "d": ": x", "e": "a=b"}


@pytest.mark.parametrize("raw", ["novalue", "=1", "bad-name=1", "1x=2", "a b=1"])
def test_what_is_not_key_value_is_refused(raw):
    with pytest.raises(UsageError) as error:
        base.extravars([raw])
    assert (error.value.message, error.value.hint) == (f"-e {raw!r} is not KEY=VALUE", "write -e name=value (or -e @vars.yml)")


def test_a_file_of_variables_is_merged_in_order(tmp_path):
    (tmp_path / "v.yml").write_text("a: 1\nb: [x]\n")
    assert base.extravars(["a=0", f"@{tmp_path / 'v.yml'}", "b=2"]) == {"a": 1, "b": 2}


def test_a_missing_file_is_refused_naming_it(tmp_path):
    missing = tmp_path / "nope.yml"
    with pytest.raises(UsageError) as error:
        base.extravars([f"@{missing}"])
    assert (error.value.message, error.value.hint) == (f"-e @{missing}: file {missing} does not exist", "pass -e @FILE with an existing YAML file")


def test_a_dangling_link_is_refused_by_the_reader_as_one(tmp_path):
    link = tmp_path / "v.yml"
    link.symlink_to(tmp_path / "gone.yml")
    with pytest.raises(UsageError) as error:
        base.extravars([f"@{link}"])
    assert (error.value.message, error.value.hint) == (f"-e @{link}: file {link} does not exist (a dangling symlink)", "check the path")


def test_a_file_of_bad_yaml_or_no_mapping_is_refused(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("a: [1\n")
    with pytest.raises(UsageError) as error:
        base.extravars([f"@{bad}"])
    assert (error.value.message, error.value.hint) == (f"-e @{bad}: invalid YAML (ParserError)", "fix the file's YAML syntax")
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(UsageError) as error:
        base.extravars([f"@{bad}"])
    assert (error.value.message, error.value.hint) == (f"-e @{bad}: must hold a mapping of name: value", "write name: value lines")


def test_an_alias_is_refused_naming_the_variable_or_the_file_and_its_line(tmp_path):
    with pytest.raises(UsageError) as error:
        base.extravars(["x=[&a 1, *a]"])
    assert (error.value.message, error.value.hint) == ("-e x:1: YAML anchors and aliases are not allowed here", "write the values out")
    aliased = tmp_path / "v.yml"
    aliased.write_text("a: 1\nb: &a [1]\nc: *a\n")
    with pytest.raises(UsageError) as error:
        base.extravars([f"@{aliased}"])
    assert error.value.message == f"-e @{aliased}:2: YAML anchors and aliases are not allowed here"


def test_an_empty_inventory_flag_is_no_inventory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert base.inventory_path("") == ""
    monkeypatch.setenv("MEGAPROV_INVENTORY", str(tmp_path / "env.ini"))
    args = inventory_args(tmp_path, inventory=base.inventory_path(""))
    assert base.need_inventory(args) == str(tmp_path / "env.ini")


def test_a_command_without_an_output_flag_reports_as_text():
    import argparse

    from megaprov.output import SHOWN, SILENT

    assert base.reporter(argparse.Namespace()) is SHOWN
    assert base.reporter(argparse.Namespace(output="text")) is SHOWN
    assert base.reporter(argparse.Namespace(output="json")) is SILENT
