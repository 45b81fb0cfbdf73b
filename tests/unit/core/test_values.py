"""megaprov.values: every kind of user string, its checks and its quoting per render target."""

import shlex
import subprocess

import pytest

from megaprov import values
from megaprov.errors import UsageError

CONTROL = ["a\nb", "a\rb", "a\x00b", "a\x1bb", "a\x7fb", "a\x85b", "a\u2028b", "a\tb"]


@pytest.mark.parametrize("bad", CONTROL)
def test_free_text_refuses_control_characters(bad):
    with pytest.raises(UsageError) as info:
        values.text(bad, "launch.python")
    line = info.value.one_line()
    assert line.startswith("launch.python=") and "control character" in line and len(line.splitlines()) == 1


def test_free_text_is_bounded():
    with pytest.raises(UsageError, match="is 5000 characters long: use at most 4096"):
        values.text("x" * 5000, "f")


@pytest.mark.parametrize("good", ["10.0.0.1", "::1", "fe80::1", "node1", "node-1.example.org", "localhost"])
def test_host_addresses(good):
    assert values.host_address(good)


@pytest.mark.parametrize("bad", ["999.1.1.1", "", "10.0.0.1;touch /x", "$(touch /x)", "-oProxyCommand=touch /x", "a b", "1.2.3", "x" * 300, None])
def test_bad_host_addresses_are_refused(bad):
    with pytest.raises(UsageError, match="is not an IP address or host name"):
        values.host_address(bad)


@pytest.mark.parametrize(("value", "expected"), [("/a//b/", "/a/b"), ("/a/./b", "/a/b"), ("/", "/")])
def test_absolute_paths_are_normalised(value, expected):
    assert values.absolute_path(value, "p") == expected


@pytest.mark.parametrize("bad", ["relative", "/a/../etc", "/a\n", ""])
def test_bad_absolute_paths(bad):
    with pytest.raises(UsageError):
        values.absolute_path(bad, "p")


def test_paths_inside_a_root():
    assert values.path_in_root("data/x", "p") == "data/x"
    assert values.path_in_root("data/../x", "p", "/shared") == "/shared/x"
    assert values.path_in_root("/shared/a", "p", "/shared") == "/shared/a"
    for bad in ("data/../../../etc/shadow", "..", "../x", "."):
        with pytest.raises(UsageError):
            values.path_in_root(bad, "p", "/shared")
    with pytest.raises(UsageError, match="is not inside /shared"):
        values.path_in_root("/elsewhere", "p", "/shared")
    assert not values.inside("/sharedx", "/shared") and values.inside("/shared/x", "/shared/")


def test_identifiers_and_names():
    assert values.job_name("gpt-1.b_c") == "gpt-1.b_c"
    for bad in ("../jobs/evil", "Upper", "-x", "", "a" * 64, "a\n"):
        with pytest.raises(UsageError, match="is not a job name"):
            values.job_name(bad)
    assert values.posix_user("megaprov", "u") == "megaprov"
    for bad in ("root\nExecStartPre=/x", "1abc", "A"):
        with pytest.raises(UsageError):
            values.posix_user(bad, "megaprov_cluster_user")
    with pytest.raises(UsageError):
        values.env_name("A B", "launch.env")
    with pytest.raises(UsageError):
        values.identifier("a/../../x", "--json-keys")


@pytest.mark.parametrize("word", ["plain", "a b", "it's", 'say "hi"', "$(touch /x)", "`id`", "{{ x }}", "\\", "*", "~", "日本"])
def test_shell_quote_gives_one_inert_word(word):
    quoted = values.shell_quote(word)
    assert shlex.split(quoted) == [word]
    out = subprocess.run(["bash", "-c", f"printf %s {quoted}"], capture_output=True, text=True, check=True)
    assert out.stdout == word


def test_systemd_value_escapes_specifiers_and_refuses_line_breaks():
    assert values.systemd_value("50% of /srv") == "50%% of /srv"
    for bad in ("a\nUser=root", "trailing\\"):
        with pytest.raises(UsageError):
            values.systemd_value(bad)


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("/bin/bash", "/bin/bash"),
        ("/shared/jobs/a b/x.sh", '"/shared/jobs/a b/x.sh"'),
        ("$HOME", "$$HOME"),
        ("100%", "100%%"),
        ('a"b', '"a\\"b"'),
        ("back\\slash", '"back\\\\slash"'),
        (";", "\\;"),
        ("", '""'),
    ],
)
def test_systemd_exec_words(word, expected):
    assert values.systemd_exec_arg(word) == expected


def test_systemd_exec_line_needs_an_absolute_executable():
    assert values.systemd_exec_line(["/bin/bash", "/shared/x y.sh"]) == '/bin/bash "/shared/x y.sh"'
    for bad in (["-/bin/true"], ["bash"], []):
        with pytest.raises(UsageError):
            values.systemd_exec_line(bad)


@pytest.mark.parametrize("bad", ["gpu\ntouch /x", "gpu touch", "a;b", "$(x)", "", "-x"])
def test_sbatch_values_are_plain_words(bad):
    with pytest.raises(UsageError, match="is not a plain Slurm name"):
        values.sbatch_value(bad, "launch.slurm.partition")
    assert values.sbatch_value("gpu,cpu", "p") == "gpu,cpu"


def test_files_give_one_clear_line(tmp_path):
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    (tmp_path / "bad.yml").write_bytes(b"a: \xff\n")
    big = tmp_path / "big"
    big.write_bytes(b"x" * 20)
    cases = [
        (loop, "is a symlink loop"),
        (tmp_path, "is a directory"),
        (tmp_path / "nope", "does not exist"),
        (tmp_path / "bad.yml", "is not UTF-8 (byte 0xff on line 1)"),
    ]
    for path, needle in cases:
        with pytest.raises(UsageError) as info:
            values.read_text(path, "job spec")
        assert needle in info.value.one_line()
    with pytest.raises(UsageError, match="is 20 bytes"):
        values.read_text(big, "f", max_bytes=10)
    (tmp_path / "bom").write_bytes(b"\xef\xbb\xbfa: 1\n")
    assert values.read_text(tmp_path / "bom", "f") == "a: 1\n"
