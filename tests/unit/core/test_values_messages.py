"""Each typed value's refusal, exactly as the operator reads it (the field, the value, what is wrong, the fix), and
what each accepts, at the edges: the one-line error is the behaviour, so a test that only asserts "it raised" lets a
wrong field name or fix through."""

import json

import pytest

from megaprov import values
from megaprov.errors import UsageError

DEEP = values.MAX_DEPTH


def refusal(function, *args) -> str:
    with pytest.raises(UsageError) as exc:
        function(*args)
    return exc.value.one_line()


@pytest.mark.parametrize(
    ("value", "line"),
    [
        ("/data/x", "data.path='/data/x' is not a relative path: drop the leading /"),
        ("../x", "data.path='../x' leaves its directory through '..': write a path inside it, without '..'"),
        ("..", "data.path='..' leaves its directory through '..': write a path inside it, without '..'"),
        ("a/../..", "data.path='a/../..' leaves its directory through '..': write a path inside it, without '..'"),
        (".", "data.path='.' names no file: give a path such as data/corpus"),
        ("", "data.path='' is empty: give a value"),
        ("x" * 4097, f"data.path='{'x' * 56}... is 4097 characters long: use at most 4096"),
    ],
)
def test_a_relative_path_that_leaves_its_root_is_refused(value, line):
    assert refusal(values.relative_path, value, "data.path") == line


@pytest.mark.parametrize(("value", "kept"), [("a/./b/../c", "a/c"), ("..x/y", "..x/y"), ("x" * 4096, "x" * 4096), ("data/", "data")])
def test_a_relative_path_inside_is_normalised(value, kept):
    assert values.relative_path(value, "data.path") == kept


def test_a_path_in_a_root():
    assert values.path_in_root("/shared/x", "p", "/shared") == "/shared/x"
    assert values.path_in_root("x/y", "p", "/shared") == "/shared/x/y"
    assert values.path_in_root("x/y", "p") == "x/y" and values.path_in_root("/other", "p") == "/other"
    assert (
        refusal(values.path_in_root, "/sharedx/y", "p", "/shared")
        == "p='/sharedx/y' is not inside /shared: use a path under /shared (or a relative path)"
    )
    assert refusal(values.path_in_root, "../y", "p", "/shared") == "p='../y' leaves its directory through '..': write a path inside it, without '..'"
    assert values.inside("/shared", "/shared/") and values.inside("/x", "/") and not values.inside("/sharedx", "/shared")


def nested(levels: int) -> str:
    return "[" * levels + "]" * levels


def test_json_nesting_is_counted_outside_strings_only():
    assert values.json_data(nested(DEEP), "job.json") == json.loads(nested(DEEP))
    assert (
        refusal(values.json_data, nested(DEEP + 1), "job.json")
        == f"job.json: nested deeper than {DEEP} levels: it is not a file megaprov wrote: remove it"
    )
    # brackets in a string are text, also after an escaped quote or an escaped backslash
    for inner in ("[" * 70, '\\"' + "[" * 70, "\\\\" + "[" * 70, '\\\\\\"' + "{" * 70):
        text = '{"a": "' + inner + '"}'
        assert values.json_data(text, "job.json") == json.loads(text)
    # an escaped quote does not end the string: the nesting after the real end is counted
    hidden = '["\\"", ' + nested(DEEP + 1) + "]"
    assert "nested deeper than" in refusal(values.json_data, hidden, "job.json")


def test_json_that_does_not_parse_is_one_line():
    assert refusal(values.json_data, '{"a": 1', "job.json") == (
        "job.json: not valid JSON (Expecting ',' delimiter: line 1 column 8 (char 7)): it is not a file megaprov wrote: remove it"
    )
    assert refusal(values.json_data, "1" * 5000, "job.json").startswith("job.json: not valid JSON (Exceeds the limit (4300 digits)")


@pytest.mark.parametrize(("value", "count"), [("AUTO ", "auto"), ("auto", "auto"), (64, 64), ("08", 8), (0, 0), ("0", 0), (" 7", 7)])
def test_a_gpu_count_or_auto_is_read(value, count):
    assert values.gpu_count_or_auto(value, "slurm_gpus_per_node") == count


@pytest.mark.parametrize("value", [65, True, False, "-1", "100", "1.5", None, 2.0, "", "automatic"])
def test_another_gpu_count_is_refused_naming_the_field(value):
    assert refusal(values.gpu_count_or_auto, value, "slurm_gpus_per_node") == (
        f"slurm_gpus_per_node={values.shown(value)} is not auto or a GPU count from 0 to 64: "
        "set slurm_gpus_per_node: auto (the GPUs each node has) or a count"
    )


def test_a_bounded_int_at_its_edges():
    assert values.bounded_int(5, "x", 5, 10) == 5 and values.bounded_int(10, "x", 5, 10) == 10
    assert refusal(values.bounded_int, 4, "x", 5, 10) == "x=4 is out of range: use a value from 5 to 10"
    assert refusal(values.bounded_int, 11, "x", 5, 10) == "x=11 is out of range: use a value from 5 to 10"
    for value in (True, "5", 5.0, None):
        assert refusal(values.bounded_int, value, "x", 0, 10) == f"x={values.shown(value)} is not a whole number: write an integer"


def test_a_systemd_command_line_is_quoted_word_by_word():
    argv = ["/bin/x", "a b", "50%", "$HOME", ";", 'q"\\', "", "plain-word_1.2,a=b:c@d+e"]
    assert values.systemd_exec_line(argv) == '/bin/x "a b" 50%% $$HOME \\; "q\\"\\\\" "" plain-word_1.2,a=b:c@d+e'
    assert values.systemd_exec_arg("%h$x") == "%%h$$x" and values.systemd_exec_arg("a;b") == '"a;b"'
    assert refusal(values.systemd_exec_line, [], "ExecStart") == "ExecStart: empty command: give an executable"
    assert refusal(values.systemd_exec_line, ["bin/x"], "ExecStart") == "ExecStart executable='bin/x' is not an absolute path: start it with /"
    assert refusal(values.systemd_exec_line, ["/bin/x", "a\nb"], "ExecStartPre") == (
        "ExecStartPre='a\\nb' contains the control character \\n: remove it: values are rendered into scripts and units"
    )


def test_a_systemd_setting_value():
    assert values.systemd_value("50% done", "Description") == "50%% done"
    assert values.systemd_value("a\\b", "Description") == "a\\b"
    assert refusal(values.systemd_value, "x\\", "Description") == (
        "Description='x\\\\' ends with a backslash: a unit file would join the next line to it: remove it"
    )
    assert refusal(values.systemd_value, "a\nb", "Description") == (
        "Description='a\\nb' contains the control character \\n: remove it: values are rendered into scripts and units"
    )


USER_FIX = "use lower-case letters, digits, _ and - (at most 32, not starting with a digit or -)"


@pytest.mark.parametrize(
    ("function", "value", "line"),
    [
        (values.model_name, "H100 SXM", "megaprov_gpu_model='H100 SXM' is not a model name: use letters, digits and _.- (e.g. H100-SXM)"),
        (values.host_name, "node_1", "host='node_1' is not a valid host name: use letters, digits, dots and dashes"),
        (
            values.posix_user,
            "Root",
            "u='Root' is not a user name: use lower-case letters, digits, _ and - (at most 32, not starting with a digit or -)",
        ),
        (values.posix_user, "-x", "u='-x' is not a user name: use lower-case letters, digits, _ and - (at most 32, not starting with a digit or -)"),
        (
            values.job_name,
            "a b",
            "name='a b' is not a job name: use lower-case letters, digits, '.', '_' and '-' (at most 63, starting with a letter or digit)",
        ),
        (
            values.mount_path,
            "/a:b",
            "mounts[0].source='/a:b' is not a plain path: use letters, digits and /._- (':' and ',' separate mount options)",
        ),
        (values.mount_path, "a/b", "mounts[0].source='a/b' is not an absolute path: start it with /"),
        (values.shell_quote, "a\nb", "v='a\\nb' contains the control character \\n: remove it: values are rendered into scripts and units"),
    ],
)
def test_a_name_of_the_wrong_shape_is_refused_with_its_fix(function, value, line):
    field = line.split("=", 1)[0]
    assert refusal(function, value, field) == line


def test_names_of_the_right_shape_pass_as_they_are():
    assert values.model_name("H100-SXM_80.GB", "m") == "H100-SXM_80.GB"
    assert values.host_name("node-1.example", "h") == "node-1.example"
    assert values.mount_path("/a//b/", "m") == "/a/b"
    assert values.shell_quote("a'b", "v") == "'a'\"'\"'b'" and values.shell_quote("plain", "v") == "plain"


IMAGE_FIX = "write REGISTRY/NAME:TAG (lower-case name, no spaces), e.g. nvcr.io/nvidia/pytorch:25.01-py3, or an absolute .sqsh path"


@pytest.mark.parametrize(
    ("value", "line"),
    [
        (
            "https://nvcr.io/x:1",
            "i='https://nvcr.io/x:1' has a scheme: write the reference without it, as podman pull takes it: nvcr.io/nvidia/pytorch:25.01-py3",
        ),
        ("u:p@nvcr.io/x:1", f"i='u:p@nvcr.io/x:1' holds credentials: {values.SECRET_FIX}"),
        ("u@nvcr.io/x:1", f"i='u@nvcr.io/x:1' holds credentials: {values.SECRET_FIX}"),
        (
            "/shared/x.tar",
            "i='/shared/x.tar' is not a squashfs image path: give a .sqsh file of letters, digits and /._- (from megaprov image pull)",
        ),
        (
            "/shared/a b.sqsh",
            "i='/shared/a b.sqsh' is not a squashfs image path: give a .sqsh file of letters, digits and /._- (from megaprov image pull)",
        ),
        ("/shared/../x.sqsh", "i='/shared/../x.sqsh' contains '..': write the path without '..'"),
        ("Nvcr.io/X:1", f"i='Nvcr.io/X:1' is not an image reference: {IMAGE_FIX}"),
        ("a" * 256, f"i='{'a' * 56}... is not an image reference: {IMAGE_FIX}"),
        ("", "i='' is empty: give a value"),
        (5, "i=5 must be a string: quote the value"),
    ],
)
def test_an_image_reference_is_refused_in_one_line(value, line):
    assert refusal(values.image_reference, value, "i") == line


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io/nvidia/pytorch:25.01-py3"),
        ("nvcr.io/x@sha256:" + "a" * 64, "nvcr.io/x@sha256:" + "a" * 64),
        ("localhost/x", "localhost/x"),
        ("a" * 255, "a" * 255),
        ("/shared/x.squashfs", "/shared/x.squashfs"),
        ("/shared//x.sqsh", "/shared/x.sqsh"),
    ],
)
def test_an_image_reference_is_kept_or_normalised(value, kept):
    assert values.image_reference(value, "i") == kept


@pytest.mark.parametrize(
    ("ref", "uri"),
    [
        ("nvcr.io/nvidia/pytorch:25.01-py3", "nvcr.io#nvidia/pytorch:25.01-py3"),
        ("localhost:5000/x:1", "localhost:5000#x:1"),
        ("ubuntu:22.04", "ubuntu:22.04"),
        ("/shared/x.sqsh", "/shared/x.sqsh"),
    ],
)
def test_enroot_reads_the_registry_before_a_hash(ref, uri):
    assert values.enroot_image(ref) == uri


def test_a_mistyped_word_finds_its_closest_choice_or_none():
    assert values.close("trian", ["train", "plan"]) == "train" and values.close("zzz", ["train", "plan"]) is None


def test_the_default_field_names_are_said():
    control = "contains the control character \\n: remove it: values are rendered into scripts and units"
    assert refusal(values.systemd_exec_arg, "a\nb") == f"argument='a\\nb' {control}"
    assert refusal(values.shell_quote, "a\nb") == f"value='a\\nb' {control}"
    assert refusal(values.systemd_value, "a\nb") == f"value='a\\nb' {control}"
    assert refusal(values.job_name, "A") == f"job name='A' is not a job name: {values.JOB_NAME_HINT}"
    assert refusal(values.path_in_root, "/a/../b", "p", "/shared") == "p='/a/../b' contains '..': write the path without '..'"


def test_a_control_character_shows_as_its_escape():
    assert values.printable("a\x1b[31mb\x7f\u202ec\n") == "a\\x1b[31mb\\x7f\\u202ec\\x0a"
    assert values.printable("a\tb\nc\x1b", lines=True) == "a\tb\nc\\x1b"
    assert values.printable("\u0100\u00e9") == "\u0100\u00e9"  # letters beyond Latin-1 are text


def test_a_root_ending_in_a_letter_or_slash():
    assert values.inside("/dataX/y", "/dataX") and values.inside("/dataX/y", "/dataX/") and not values.inside("/dataXY", "/dataX")


def test_an_unchecked_string_is_handed_to_enroot_as_it_is():
    assert values.enroot_image("not a reference!") == "not a reference!"
