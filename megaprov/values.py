"""Typed user strings: the one place where every string from a user or a file gets its type and its checks.

Everything megaprov reads from the inventory, group_vars/host_vars, a job spec, a job's ``job.json`` or the
command line is one of a few kinds: an identifier (job name, environment variable name, POSIX user), a host
name or address, an absolute path, a path inside a root, or free text. Each kind has one checker here; each
raises :class:`UsageError` with one line that names the field, the bad value (``repr``, shortened) and the fix.
Nothing here trusts a value because of where it came from.

Rendering a checked value into a target (a shell script, a systemd unit, an ``#SBATCH`` line) goes through that
target's quoting, also here: :func:`shell_quote`, :func:`systemd_value`, :func:`systemd_exec_arg` /
:func:`systemd_exec_line` and :func:`sbatch_value`.

Bounds (what a real cluster can have) are constants, documented in the README's "Input validation" section.
"""

from __future__ import annotations

import difflib
import errno
import ipaddress
import os
import posixpath
import re
import shlex
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from megaprov.errors import UsageError

# ---- bounds: what a real cluster can have
MAX_TEXT = 4096  # one free-text value (a path, a command-line argument, an environment value)
MAX_PATH = 4096  # Linux PATH_MAX
MAX_HOSTS = 10_000  # hosts in one inventory (the largest training clusters have a few thousand nodes)
MAX_LIST = 1_000  # items in one list of a job spec (extra_args, data prefixes)
MAX_FILE_BYTES = 1 << 20  # a job spec, a job.json, a -e @file: 1 MiB
MAX_VARS_FILE_BYTES = 16 << 20  # one group_vars/host_vars file

# C0 controls (newline, CR, NUL, tab, escape, ...), DEL, C1 controls and the Unicode line/paragraph separators:
# each can end a line or change a terminal in one of the targets (shell, systemd, sbatch, YAML, a TTY).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
JOB_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
JOB_NAME_HINT = "use lower-case letters, digits, '.', '_' and '-' (at most 63, starting with a letter or digit)"
HOST_NAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$")
POSIX_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# An Ansible variable name (a top-level extra var or group_vars key): ansible-runner pastes it into JSON unescaped.
VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
SCOPE_ID = re.compile(r"^[A-Za-z0-9_.-]{1,15}$")  # an IPv6 zone: an interface name (IFNAMSIZ 16) or its index
# Template and expansion syntax: a path megaprov renders itself must mean the same to megaprov, Ansible and a shell.
_TEMPLATE = re.compile(r"\{\{|\{%|\{#|\$|`")
MAX_DEPTH = 32  # nesting of a YAML/JSON document from a user
# #SBATCH lines are read by sbatch, not by a shell: no quoting exists there, so only plain words pass.
SBATCH_WORD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.,+:-]{0,127}$")
SBATCH_PATH = re.compile(r"^/[A-Za-z0-9_./+-]{0,1000}$")


def shown(value: Any, limit: int = 60) -> str:
    """A value for an error message: its repr on one line, shortened."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class BadValue(UsageError):
    """A value failed its type's check: ``problem`` says what is wrong with it, ``hint`` how to fix it."""

    def __init__(self, field: str, value: Any, problem: str, fix: str) -> None:
        super().__init__(f"{field}={shown(value)} {problem}" if field else f"{shown(value)} {problem}", fix)
        self.field = field
        self.value = value
        self.problem = problem


def _fail(field: str, value: Any, problem: str, fix: str) -> BadValue:
    return BadValue(field, value, problem, fix)


# What a terminal acts on besides printing: C0 and C1 controls (ESC starts every escape sequence: colours, cursor
# moves, window titles, OSC 52 clipboard writes, OSC 8 links), DEL, and the Unicode format characters that reorder
# or hide text (bidirectional overrides and isolates, zero-width characters, line and paragraph separators).
_FORMAT = "\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb"
_ESCAPED = re.compile(f"[\x00-\x1f{_FORMAT}]")
_ESCAPED_KEEP_LINES = re.compile(f"[\x00-\x08\x0b-\x1f{_FORMAT}]")  # newline and tab kept


def _escape_char(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(value: object, lines: bool = False) -> str:
    """The one escaping function for text that came from outside megaprov (a log line, a node or job name, a label,
    an answer from a node or Prometheus) on its way to a terminal: every control or format character becomes its
    escape (ESC shows as ``\\x1b``), so nothing repaints the screen, sets a title, writes the clipboard or hides
    text. ``lines`` keeps newlines and tabs (a whole rendered table). Rich markup is not interpreted by megaprov's
    consoles (:func:`megaprov.output.console`), so ``[link=...]`` stays text."""
    text = value if isinstance(value, str) else str(value)
    return (_ESCAPED_KEEP_LINES if lines else _ESCAPED).sub(_escape_char, text)


def control_character(value: str) -> str | None:
    """The first control character in ``value`` as an escape (``'\\n'``), or None."""
    match = _CONTROL.search(value)
    return repr(match.group(0))[1:-1] if match else None


def text(value: Any, field: str, max_len: int = MAX_TEXT, empty: bool = True) -> str:
    """Free text: a string without control characters, at most ``max_len`` characters."""
    if not isinstance(value, str):
        raise _fail(field, value, "must be a string", "quote the value")
    bad = control_character(value)
    if bad:
        raise _fail(field, value, f"contains the control character {bad}", "remove it: values are rendered into scripts and units")
    if len(value) > max_len:
        raise _fail(field, value, f"is {len(value)} characters long", f"use at most {max_len}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no file, script or unit can hold it
        raise _fail(field, value, "is not valid Unicode text", "remove the undecodable character") from None
    if not empty and not value:
        raise _fail(field, value, "is empty", "give a value")
    return value


def _matching(value: Any, field: str, pattern: re.Pattern[str], what: str, fix: str) -> str:
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise _fail(field, value, f"is not {what}", fix)
    return value


def job_name(value: Any, field: str = "job name") -> str:
    """A job name: directory, unit and Slurm job name (``JOB_NAME``); never a path."""
    return _matching(value, field, JOB_NAME, "a job name", JOB_NAME_HINT)


def identifier(value: Any, field: str) -> str:
    """A name made of letters, digits and ``_`` that does not start with a digit (a JSON key, a file suffix)."""
    return _matching(value, field, IDENTIFIER, "an identifier", "use letters, digits and _ (at most 64, not starting with a digit)")


GPU_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def model_name(value: Any, field: str) -> str:
    """A model or product name (a GPU model such as H100-SXM): letters, digits, ``_.-``."""
    return _matching(value, field, GPU_MODEL, "a model name", "use letters, digits and _.- (e.g. H100-SXM)")


def env_name(value: Any, field: str) -> str:
    return _matching(value, field, ENV_NAME, "an environment variable name", "use letters, digits and _, not starting with a digit")


def posix_user(value: Any, field: str) -> str:
    fix = "use lower-case letters, digits, _ and - (at most 32, not starting with a digit or -)"
    return _matching(value, field, POSIX_USER, "a user name", fix)


def host_name(value: Any, field: str) -> str:
    """An inventory host name: it goes into /etc/hosts, unit descriptions and log file names."""
    return _matching(value, field, HOST_NAME, "a valid host name", "use letters, digits, dots and dashes")


def host_address(value: Any, field: str = "ansible_host") -> str:
    """An address Ansible connects to: an IPv4/IPv6 address or a DNS host name, nothing else (no options, no
    shell). A name whose last label is all digits (``999.1.1.1``) is a mistyped IPv4 address, not a name."""
    if not isinstance(value, str) or not value:
        raise _fail(field, value, "is not an IP address or host name", "write an address such as 10.0.0.5 or a name such as node1.example.org")
    address, _, scope = value.partition("%")
    if scope and not SCOPE_ID.fullmatch(scope):  # fe80::1%eth0 only: ip_address() takes anything after the %
        raise _fail(field, value, "has a zone that is not an interface name", "write fe80::1%eth0, or leave the zone out")
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        pass
    if not scope and HOST_NAME.fullmatch(value) and not value.rstrip(".").rsplit(".", 1)[-1].isdigit():
        return value
    raise _fail(field, value, "is not an IP address or host name", "write an address such as 10.0.0.5 or a name such as node1.example.org")


def gpu_count_or_auto(value: Any, field: str) -> str | int:
    """GPUs a node offers to a scheduler: ``auto`` (those the node has when the stage runs) or a count from 0 to 64.
    Literal only, as every value megaprov types: a template would be resolved on the node, after every check."""
    text = str(value).strip().lower() if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
    if text == "auto":
        return "auto"
    if not re.fullmatch(r"\d{1,2}", text) or int(text) > 64:
        raise _fail(field, value, "is not auto or a GPU count from 0 to 64", f"set {field}: auto (the GPUs each node has) or a count")
    return int(text)


def absolute_path(value: Any, field: str) -> str:
    """An absolute path without control characters or ``..``, normalised (``/a//b/`` -> ``/a/b``)."""
    path: str = text(value, field, MAX_PATH, empty=False)
    if not path.startswith("/"):
        raise _fail(field, path, "is not an absolute path", "start it with /")
    if ".." in path.split("/"):
        raise _fail(field, path, "contains '..'", "write the path without '..'")
    if _TEMPLATE.search(path):
        raise _fail(field, path, "contains template or shell syntax ({{, {%, $ or `)", "write the path out literally")
    return "/" + posixpath.normpath(path).lstrip("/")


def relative_path(value: Any, field: str) -> str:
    """A relative path that stays inside whatever root it is joined to: normalised, never leaving it."""
    path: str = text(value, field, MAX_PATH, empty=False)
    if path.startswith("/"):
        raise _fail(field, path, "is not a relative path", "drop the leading /")
    normal = posixpath.normpath(path)
    if normal == ".." or normal.startswith("../"):
        raise _fail(field, path, "leaves its directory through '..'", "write a path inside it, without '..'")
    if normal == ".":
        raise _fail(field, path, "names no file", "give a path such as data/corpus")
    return normal


def path_in_root(value: Any, field: str, root: str | None = None) -> str:
    """A path that must stay inside ``root`` (the shared directory): a relative path, or an absolute one.
    With ``root``, the result is absolute and inside it; without, relative paths are only checked to stay inside
    whatever root they are joined to later."""
    if isinstance(value, str) and value.startswith("/"):
        path = absolute_path(value, field)
    else:
        path = relative_path(value, field)
        if root is None:
            return path
        path = posixpath.join(root, path)
    if root is not None and not inside(path, root):
        raise _fail(field, value, f"is not inside {root}", f"use a path under {root} (or a relative path)")
    return path


def inside(path: str, root: str) -> bool:
    """Whether normalised absolute ``path`` is ``root`` or below it (pure string test, no symlinks)."""
    root = root.rstrip("/") or "/"
    return root == "/" or path == root or path.startswith(root + "/")


def yaml_data(text: str, what: str) -> Any:
    """A YAML document from a user's file, as plain data: anchors and aliases (an alias bomb expands a few lines
    into gigabytes) and nesting deeper than MAX_DEPTH are refused before anything is built; a number Python will
    not convert (over 4,300 digits) is a one-line error. YAML syntax errors propagate as ``yaml.YAMLError`` for the
    caller to place. Pure."""
    import yaml

    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        line = event.start_mark.line + 1 if event.start_mark else 0
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise UsageError(f"{what}:{line}: YAML anchors and aliases are not allowed here", "write the values out")
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise UsageError(f"{what}:{line}: nested deeper than {MAX_DEPTH} levels", "flatten the document")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
    try:
        return yaml.safe_load(text)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{what}: a value cannot be read ({str(exc).splitlines()[0][:80]})", "write numbers with at most 4,300 digits") from None


def json_data(text: str, what: str) -> Any:
    """A JSON document from a file a user can write (job.json): nesting and huge numbers are one-line errors."""
    import json

    depth = deepest = 0
    in_string = escaped = False
    for char in text:  # bracket depth outside strings, before json.loads recurses into it
        if in_string:  # a backslash escapes the next character, a quote among them (\" does not end the string)
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    if deepest > MAX_DEPTH:
        raise UsageError(f"{what}: nested deeper than {MAX_DEPTH} levels", "it is not a file megaprov wrote: remove it")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{what}: not valid JSON ({str(exc).splitlines()[0][:80]})", "it is not a file megaprov wrote: remove it") from None


def bounded_int(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(field, value, "is not a whole number", "write an integer")
    if not low <= value <= high:
        raise _fail(field, value, "is out of range", f"use a value from {low} to {high}")
    return value


def check_tree(value: Any, field: str, depth: int = 0) -> None:
    """Every string in a nested value (lists, mappings, keys included) is free text; nesting is bounded."""
    if depth > 32:
        raise _fail(field, "...", "is nested too deeply", "flatten the value")
    if isinstance(value, str):
        text(value, field)
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                text(key, f"{field} key", 256)
            check_tree(item, f"{field}.{key}", depth + 1)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_tree(item, f"{field}[{index}]", depth + 1)


# ---- quoting per render target


def shell_quote(value: str, field: str = "value") -> str:
    """One shell word (bash): single-quoted where needed; control characters are refused, not quoted."""
    return shlex.quote(text(value, field))


def systemd_value(value: str, field: str = "value") -> str:
    """A value for a unit file setting (``Description=``, ``User=``, ``WorkingDirectory=``, ...), systemd.syntax(7):
    no control characters (a newline would start a new setting), no trailing backslash (it joins the next line),
    and ``%`` written ``%%`` (specifiers are expanded in most settings)."""
    text(value, field)
    if value.endswith("\\"):
        raise _fail(field, value, "ends with a backslash", "a unit file would join the next line to it: remove it")
    return value.replace("%", "%%")


_EXEC_PLAIN = re.compile(r"^[A-Za-z0-9_@%+=:,./$-]+$")


def systemd_exec_arg(value: str, field: str = "argument") -> str:
    """One word of ``ExecStart=`` (systemd.service(5) "Command lines"): ``%`` -> ``%%`` (specifiers) and ``$`` ->
    ``$$`` (environment expansion); a word with spaces, quotes, backslashes or other specials is double-quoted
    with C escapes; a lone ``;`` (the command separator) is written ``\\;``."""
    text(value, field)
    escaped = value.replace("%", "%%").replace("$", "$$")
    if value == ";":
        return "\\;"
    if escaped and _EXEC_PLAIN.fullmatch(escaped):
        return escaped
    return '"' + escaped.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_exec_line(argv: Sequence[str], field: str = "ExecStart") -> str:
    """A whole command line for ``ExecStart=``: an absolute executable (no ``@-:+!`` prefix), then its arguments."""
    if not argv:
        raise UsageError(f"{field}: empty command", "give an executable")
    absolute_path(argv[0], f"{field} executable")
    return " ".join(systemd_exec_arg(word, field) for word in argv)


def sbatch_value(value: Any, field: str) -> str:
    """A value for an ``#SBATCH --key=value`` line (partition, account, qos): sbatch reads these lines itself and
    quotes nothing, so only a plain word (letters, digits, ``_.,+:-``) is accepted."""
    if not isinstance(value, str) or not SBATCH_WORD.fullmatch(value):
        raise _fail(field, value, "is not a plain Slurm name", "use letters, digits and _.,+:- (at most 128), as sinfo/sacctmgr show them")
    return value


def sbatch_path(value: Any, field: str) -> str:
    """An absolute path for an ``#SBATCH`` line (``--output=``): plain path characters only, as for sbatch_value."""
    return _matching(value, field, SBATCH_PATH, "a path that can go on an #SBATCH line", "use a shared directory of letters, digits and /._-")


# ---- container images and mounts (a job's launch.container)

# An image reference as registries and podman read it (the distribution project's grammar): [REGISTRY[:PORT]/]NAME
# [:TAG][@sha256:DIGEST], NAME of lower-case components separated by /. No scheme, no spaces, no credentials.
_REGISTRY = r"(?:localhost|[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+)(?::[0-9]{1,5})?"
_REGISTRY_PORT = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?:[0-9]{1,5}"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(
    rf"^(?:(?P<registry>{_REGISTRY}|{_REGISTRY_PORT})/)?(?P<name>{_COMPONENT}(?:/{_COMPONENT})*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)
MAX_IMAGE_REFERENCE = 255
SQUASHFS_SUFFIXES = (".sqsh", ".squashfs")
# A path pyxis and podman take inside one mount option: ':' and ',' separate their fields, so plain characters only.
MOUNT_PATH = re.compile(r"^/[A-Za-z0-9_./-]{0,1000}$")
# Where a mount may not go: what the runtime itself provides inside the container.
RESERVED_TARGETS = ("/proc", "/sys", "/dev")
# Names of environment variables that hold secrets: a job spec is copied to the shared directory, where every job
# of the cluster reads it, and into the job's report.
SECRET_NAME = re.compile(r"(PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|CREDENTIAL)", re.IGNORECASE)
SECRET_FIX = (
    "keep secrets out of the job spec (it is copied to the shared directory): "
    "registry logins belong in the inventory's enroot_credentials (in a vault)"
)


def image_reference(value: Any, field: str) -> str:
    """A container image: a registry reference (nvcr.io/nvidia/pytorch:25.01-py3, with a tag or digest) or an
    absolute path of a squashfs file (.sqsh, made by ``megaprov image pull``/``enroot import``)."""
    ref: str = text(value, field, MAX_PATH, empty=False)
    if ref.startswith("/"):
        path = absolute_path(ref, field)
        if not MOUNT_PATH.fullmatch(path) or not path.endswith(SQUASHFS_SUFFIXES):
            raise _fail(field, value, "is not a squashfs image path", "give a .sqsh file of letters, digits and /._- (from megaprov image pull)")
        return path
    head = ref.split("/", 1)[0]
    if "://" in ref:
        raise _fail(field, value, "has a scheme", "write the reference without it, as podman pull takes it: nvcr.io/nvidia/pytorch:25.01-py3")
    if "@" in head and not head.split("@", 1)[1].startswith("sha256:"):  # USER[:PASSWORD]@REGISTRY/...
        raise _fail(field, value, "holds credentials", SECRET_FIX)
    if len(ref) > MAX_IMAGE_REFERENCE or not IMAGE_REFERENCE.fullmatch(ref):
        raise _fail(
            field,
            value,
            "is not an image reference",
            "write REGISTRY/NAME:TAG (lower-case name, no spaces), e.g. nvcr.io/nvidia/pytorch:25.01-py3, or an absolute .sqsh path",
        )
    return ref


def enroot_image(ref: str) -> str:
    """A checked registry reference as pyxis hands it to enroot: the registry separated by '#' (enroot's URI form,
    which every enroot release reads: ``nvcr.io#nvidia/pytorch:25.01-py3``); a squashfs path as it is. Pure."""
    match = IMAGE_REFERENCE.fullmatch(ref)
    if ref.startswith("/") or match is None or not match.group("registry"):
        return ref
    return f"{match.group('registry')}#{ref[len(match.group('registry')) + 1 :]}"


def mount_path(value: Any, field: str) -> str:
    """An absolute path for a container mount (a source on the node or a target inside the container)."""
    path = absolute_path(value, field)
    if not MOUNT_PATH.fullmatch(path):
        raise _fail(field, value, "is not a plain path", "use letters, digits and /._- (':' and ',' separate mount options)")
    return path


def secret_name(name: str) -> bool:
    """Whether an environment variable's name says it holds a secret (HF_TOKEN, WANDB_API_KEY, AWS_SECRET_ACCESS_KEY)."""
    return SECRET_NAME.search(name) is not None


# ---- files read from users


def read_bytes(path: str | Path, what: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """A file's bytes, or one clear line why not: does not exist, is a directory, symlink loop, unreadable, too big."""
    file = Path(path)
    try:
        info = file.stat()
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(f"{what} {file} is a symlink loop", "point the link at a real file") from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            dangling = " (a dangling symlink)" if file.is_symlink() else ""
            raise UsageError(f"{what} {file} does not exist{dangling}", "check the path") from None
        raise UsageError(f"{what} {file} cannot be read ({exc.strerror or exc.__class__.__name__})", "check its permissions") from None
    if file.is_dir():
        raise UsageError(f"{what} {file} is a directory", "pass the path of a file")
    if not stat.S_ISREG(info.st_mode):  # a FIFO would block the read for ever, a device never end
        raise UsageError(f"{what} {file} is not a regular file", "pass the path of a file")
    if info.st_size > max_bytes:
        raise UsageError(f"{what} {file} is {info.st_size:,} bytes", f"keep it under {max_bytes:,} bytes")
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced since the stat above
                raise UsageError(f"{what} {file} is not a regular file", "pass the path of a file")
            os.set_blocking(fd, True)
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise UsageError(f"{what} {file} cannot be read ({exc.strerror or exc.__class__.__name__})", "check its permissions") from None
    if len(data) > max_bytes:
        raise UsageError(f"{what} {file} is larger than {max_bytes:,} bytes", f"keep it under {max_bytes:,} bytes")
    return data


def decode_utf8(data: bytes, what: str) -> str:
    """UTF-8 text (a leading byte-order mark is kept: callers decide), or one line naming the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UsageError(f"{what} is not UTF-8 (byte 0x{data[exc.start]:02x} on line {line})", "save it as UTF-8") from None


def read_text(path: str | Path, what: str, max_bytes: int = MAX_FILE_BYTES) -> str:
    """A UTF-8 text file (see :func:`read_bytes`); a leading byte-order mark is dropped."""
    return decode_utf8(read_bytes(path, what, max_bytes), f"{what} {path}").removeprefix("\ufeff")


def close(word: str, choices: Iterable[str]) -> str | None:
    """The one choice a mistyped word most likely meant, or None (for "did you mean" in a refusal)."""
    found = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return found[0] if found else None
