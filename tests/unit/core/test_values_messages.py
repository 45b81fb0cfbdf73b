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


@pytest.mark.parametrize(
    ("args", "line"),
    [
        ((5, "f"), "f=5 must be a string: quote the value"),
        (("a\x00b", "f"), "f='a\\x00b' contains the control character \\x00: remove it: values are rendered into scripts and units"),
        (("ab", "f", 1), "f='ab' is 2 characters long: use at most 1"),
        (("\ud800", "f"), "f='\\ud800' is not valid Unicode text: remove the undecodable character"),
        (("", "f", 10, False), "f='' is empty: give a value"),
    ],
)
def test_free_text_is_refused_in_one_line(args, line):
    assert refusal(values.text, *args) == line


def test_free_text_at_its_edges():
    assert values.text("", "f") == "" and values.text("a", "f", 1) == "a" and values.text("a\u00e9", "f", 2, False) == "a\u00e9"
    assert values.control_character("a\tb") == "\\t" and values.control_character("ab") is None
    assert values.shown("x" * 58) == repr("x" * 58) and values.shown("x" * 100) == repr("x" * 100)[:57] + "..."


ADDRESS_FIX = "write an address such as 10.0.0.5 or a name such as node1.example.org"


@pytest.mark.parametrize(
    ("value", "kept"), [("10.0.0.5", "10.0.0.5"), ("fe80::1%eth0", "fe80::1%eth0"), ("::1", "::1"), ("node1.example", "node1.example")]
)
def test_an_address_ansible_connects_to(value, kept):
    assert values.host_address(value) == kept


@pytest.mark.parametrize(
    ("value", "line"),
    [
        ("fe80::1%e th", "ansible_host='fe80::1%e th' has a zone that is not an interface name: write fe80::1%eth0, or leave the zone out"),
        ("999.1.1.1", f"ansible_host='999.1.1.1' is not an IP address or host name: {ADDRESS_FIX}"),
        ("", f"ansible_host='' is not an IP address or host name: {ADDRESS_FIX}"),
        ("-oProxy", f"ansible_host='-oProxy' is not an IP address or host name: {ADDRESS_FIX}"),
        (5, f"ansible_host=5 is not an IP address or host name: {ADDRESS_FIX}"),
    ],
)
def test_another_address_is_refused(value, line):
    assert refusal(values.host_address, value) == line


@pytest.mark.parametrize(
    ("value", "line"),
    [
        ("a", "f='a' is not an absolute path: start it with /"),
        ("/a/../b", "f='/a/../b' contains '..': write the path without '..'"),
        ("/a/{{x}}", "f='/a/{{x}}' contains template or shell syntax ({{, {%, $ or `): write the path out literally"),
        ("/a/$x", "f='/a/$x' contains template or shell syntax ({{, {%, $ or `): write the path out literally"),
        ("/a/`x`", "f='/a/`x`' contains template or shell syntax ({{, {%, $ or `): write the path out literally"),
        ("/a/{%x", "f='/a/{%x' contains template or shell syntax ({{, {%, $ or `): write the path out literally"),
        ("", "f='' is empty: give a value"),
    ],
)
def test_an_absolute_path_is_refused_in_one_line(value, line):
    assert refusal(values.absolute_path, value, "f") == line


def test_an_absolute_path_is_normalised():
    assert values.absolute_path("/a//b/", "f") == "/a/b" and values.absolute_path("/", "f") == "/" and values.absolute_path("//a", "f") == "/a"
    assert values.absolute_path("/a/..b/{x}", "f") == "/a/..b/{x}"


def test_yaml_from_a_user_is_plain_data():
    assert values.yaml_data("[" * DEEP + "]" * DEEP, "spec.yml") == json.loads(nested(DEEP))
    assert (
        refusal(values.yaml_data, "a: &x 1\nb: *x\n", "spec.yml") == "spec.yml:1: YAML anchors and aliases are not allowed here: write the values out"
    )
    assert (
        refusal(values.yaml_data, "a: 1\nb: &x 2\n", "spec.yml") == "spec.yml:2: YAML anchors and aliases are not allowed here: write the values out"
    )
    assert refusal(values.yaml_data, "x:\n  " + nested(DEEP + 1), "spec.yml") == f"spec.yml:2: nested deeper than {DEEP} levels: flatten the document"
    assert refusal(values.yaml_data, "a: " + "1" * 5000, "spec.yml").startswith("spec.yml: a value cannot be read (Exceeds the limit (4300 digits)")
    assert refusal(values.yaml_data, "a: " + "1" * 5000, "spec.yml").endswith(": write numbers with at most 4,300 digits")
    # siblings at one level are not nesting
    assert values.yaml_data("[" + ", ".join([nested(DEEP - 1)] * 3) + "]", "spec.yml") == json.loads("[" + ", ".join([nested(DEEP - 1)] * 3) + "]")


def test_every_string_of_a_tree_is_text():
    values.check_tree({"a": ["x", {"b": ("y", 1, None)}], 2: "z"}, "env")
    control = "contains the control character \\n: remove it: values are rendered into scripts and units"
    assert refusal(values.check_tree, {"a": ["x\n"]}, "env") == f"env.a[0]='x\\n' {control}"
    assert refusal(values.check_tree, {"a": ("y", "x\n")}, "env") == f"env.a[1]='x\\n' {control}"
    assert refusal(values.check_tree, {"k\n": 1}, "env") == f"env key='k\\n' {control}"
    assert refusal(values.check_tree, {"k" * 257: 1}, "env") == f"env key='{'k' * 56}... is 257 characters long: use at most 256"
    values.check_tree({"k" * 256: 1}, "env")
    deep: object = "x"
    for _ in range(32):
        deep = [deep]
    values.check_tree(deep, "env")
    assert refusal(values.check_tree, [deep], "env") == "env" + "[0]" * 33 + "='...' is nested too deeply: flatten the value"


def test_a_users_file_is_read_or_refused_in_one_line(tmp_path):
    import os

    (tmp_path / "big").write_bytes(b"x" * 11)
    (tmp_path / "bad").write_bytes(b"ok\n\xff\xfe")
    (tmp_path / "bom").write_bytes("\ufeffhi".encode())
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    (tmp_path / "dangling").symlink_to(tmp_path / "none")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert values.read_bytes(tmp_path / "big", "the spec", 11) == b"x" * 11
    assert refusal(values.read_bytes, tmp_path / "big", "the spec", 10) == f"the spec {tmp_path}/big is 11 bytes: keep it under 10 bytes"
    assert refusal(values.read_bytes, tmp_path / "none", "the spec") == f"the spec {tmp_path}/none does not exist: check the path"
    assert refusal(values.read_bytes, tmp_path / "dangling", "the spec") == (
        f"the spec {tmp_path}/dangling does not exist (a dangling symlink): check the path"
    )
    assert refusal(values.read_bytes, tmp_path / "loop", "the spec") == f"the spec {tmp_path}/loop is a symlink loop: point the link at a real file"
    assert refusal(values.read_bytes, tmp_path / "big" / "x", "the spec") == f"the spec {tmp_path}/big/x does not exist: check the path"
    assert refusal(values.read_bytes, tmp_path / "fifo", "the spec") == f"the spec {tmp_path}/fifo is not a regular file: pass the path of a file"
    assert refusal(values.read_bytes, tmp_path / "dir", "the spec") == f"the spec {tmp_path}/dir is a directory: pass the path of a file"
    assert values.read_text(tmp_path / "bom", "the spec") == "hi" and values.decode_utf8("\ufeffhi".encode(), "x") == "\ufeffhi"
    assert refusal(values.read_text, tmp_path / "bad", "the spec") == f"the spec {tmp_path}/bad is not UTF-8 (byte 0xff on line 2): save it as UTF-8"
    assert refusal(values.read_text, tmp_path / "big", "the spec", 5) == f"the spec {tmp_path}/big is 11 bytes: keep it under 5 bytes"


def test_the_survivors_of_the_first_mutation_run():
    """Inputs that tell apart what the mutation benchmark's first run of values could not."""
    # outside strings only brackets count: letters are invalid JSON, closings lower the depth by one
    assert refusal(values.json_data, "X" * 40, "job.json").startswith("job.json: not valid JSON (Expecting value")
    climb = "[[[]," + "[" * (DEEP - 1) + "]" * (DEEP - 1) + "]]"
    assert "nested deeper than" in refusal(values.json_data, climb, "job.json")
    fits = "[[]," + "[" * (DEEP - 1) + "]" * (DEEP - 1) + "]"
    assert values.json_data(fits, "job.json") == json.loads(fits)
    assert refusal(values.json_data, "1" * 5000, "job.json") == (
        "job.json: not valid JSON (Exceeds the limit (4300 digits) for integer string conversion: value has 5000 di): "
        "it is not a file megaprov wrote: remove it"
    )
    assert values.absolute_path("/Xa", "f") == "/Xa" and values.absolute_path("/.a", "f") == "/.a"
    assert values.image_reference("ubuntu@sha256:" + "a" * 64, "i") == "ubuntu@sha256:" + "a" * 64
    for odd in ("nvcr.io/u@x/y", "a@sha256:b@c/x"):
        assert refusal(values.image_reference, odd, "i") == f"i={odd!r} is not an image reference: {IMAGE_FIX}"
    assert values.host_address("1.2.3.4X") == "1.2.3.4X"  # a last label that is not all digits is a name
    assert values.printable(5) == "5" and values.printable(None) == "None"
    assert refusal(values.systemd_exec_line, []) == "ExecStart: empty command: give an executable"
    assert refusal(values.systemd_exec_line, ["x"]) == "ExecStart executable='x' is not an absolute path: start it with /"
