#!/usr/bin/python
# Copyright: megaprov contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
"""A role's configuration files and directories in one module call per host: each entry's content, mode and owner
compared with the host and changed only where they differ (what a copy, template or file task does for one path,
at the cost of one module run instead of two or three per path)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: files
short_description: Make a set of files and directories match their content, mode and owner in one call
description:
  - Each entry of O(files) is a path with its state (a regular file with the given content, a directory, or absent).
    Entries are applied in order, so a directory can precede the files in it.
  - A file is rewritten only when its content differs (it is written to a temporary file in the same directory and
    renamed over the old one, or written in place with O(files[].unsafe_writes) for a bind-mounted file); mode, owner
    and group are set only where they differ. A symbolic link at a file's path is replaced by the file, as the
    template module does by default.
  - Render templates on the controller with C(lookup('ansible.builtin.template', ...)) into O(files[].content).
  - Reports changed when any entry changed, and which (RV(changed_paths)), so a handler is notified once for the set;
    check mode reports the same without changing anything, and diff mode shows each changed file's old and new
    content (for a world-readable file; of a file with a stricter mode, a key or a password, only that it changed).
  - A directory is created with its missing parents (mode 0755, as C(mkdir -p)). A file whose directory is neither on
    the host nor an earlier entry fails the task with the path named, before anything is changed.
options:
  files:
    description: The paths, in the order they are applied.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path.
        type: path
        required: true
      state:
        description: C(file) (the default), C(directory) or C(absent).
        type: str
        choices: [file, directory, absent]
        default: file
      content:
        description: The file's whole content (C(state=file)); required for a file.
        type: str
      mode:
        description: Octal permissions such as C("0644") (required for a file or a directory).
        type: str
      owner:
        description: Owning user (name).
        type: str
        default: root
      group:
        description: Owning group (name).
        type: str
        default: root
      unsafe_writes:
        description: Write a file's content in place (for a bind-mounted file, where a rename fails).
        type: bool
        default: false
author:
  - megaprov contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Write the limits and the kernel settings
  megaprov.cluster.files:
    files:
      - path: /etc/security/limits.d/90-megaprov.conf
        content: "{{ lookup('ansible.builtin.template', 'limits.conf.j2') }}"
        mode: "0644"
      - path: /etc/systemd/system.conf.d
        state: directory
        mode: "0755"
  notify: Apply kernel settings
"""

RETURN = r"""
changed_paths:
  description: The paths that changed (or would change, in check mode), in the order of O(files).
  type: list
  elements: str
  returned: always
reasons:
  description: For each changed path, what changed (create, content, mode/owner, create directory, remove).
  type: dict
  returned: always
"""

import grp
import os
import pwd
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule

DIFF_MAX = 64 * 1024


def parse_mode(text):
    """Pure: an octal mode string ('0644', '644') -> int, else None."""
    text = str(text or "").strip()
    if not text or len(text) > 5 or any(c not in "01234567" for c in text):
        return None
    return int(text, 8)


def problems(entries):
    """Pure: what is wrong with the entries themselves (one line each, naming the entry)."""
    out = []
    for i, entry in enumerate(entries):
        where = "files[%d] (%s)" % (i, entry.get("path"))
        path = entry.get("path") or ""
        if not os.path.isabs(path) or path != os.path.normpath(path) or path == "/":
            out.append("%s: path must be absolute and normalised, not the root" % where)
        state = entry.get("state") or "file"
        if state == "file" and entry.get("content") is None:
            out.append("%s: a file needs content" % where)
        if state != "file" and entry.get("content"):
            out.append("%s: content is for state=file only" % where)
        if state in ("file", "directory") and parse_mode(entry.get("mode")) is None:
            out.append("%s: mode must be octal such as \"0644\", got %r" % (where, entry.get("mode")))
    return out


def ids(owner, group):
    try:
        uid = pwd.getpwnam(owner).pw_uid
    except KeyError:
        raise ValueError("no user %r" % owner)
    try:
        gid = grp.getgrnam(group).gr_gid
    except KeyError:
        raise ValueError("no group %r" % group)
    return uid, gid


def read_bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


def attrs_differ(st, mode, uid, gid):
    return stat.S_IMODE(st.st_mode) != mode or st.st_uid != uid or st.st_gid != gid


def text_for_diff(data):
    if data is None or len(data) > DIFF_MAX or b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def plan_entry(entry, created_dirs):
    """What applying one entry would change: (reasons, diff or None); raises ValueError for a missing parent or
    owner, or a path of the wrong kind that it will not replace."""
    path, state = entry["path"], entry["state"]
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if state == "absent":
        if st is None:
            return [], None
        if stat.S_ISDIR(st.st_mode):
            raise ValueError("%s is a directory; this module removes files only" % path)
        return ["remove"], {"before_header": path, "after_header": path, "before": "present\n", "after": "absent\n"}
    mode = parse_mode(entry["mode"])
    uid, gid = ids(entry["owner"], entry["group"])
    parent = os.path.dirname(path)
    # a directory is made with its missing parents (as the file module's state=directory); a file needs its directory
    if st is None and state == "file" and not os.path.isdir(parent) and parent not in created_dirs:
        raise ValueError("%s: its directory %s does not exist (add it as an earlier entry with state=directory)" % (path, parent))
    if state == "directory":
        if st is None:
            return ["create directory"], None
        if stat.S_ISLNK(st.st_mode) and os.path.isdir(path):
            st = os.stat(path)  # a link to a directory stands for it, as the file module follows it
        if not stat.S_ISDIR(st.st_mode):
            raise ValueError("%s exists and is not a directory" % path)
        return (["mode/owner"] if attrs_differ(st, mode, uid, gid) else []), None
    new = entry["content"].encode("utf-8")
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ValueError("%s is a directory, not a file" % path)
    old = read_bytes(path) if st is not None and stat.S_ISREG(st.st_mode) else None
    reasons = []
    if old != new:
        reasons.append("create" if st is None else "content")
    elif attrs_differ(st, mode, uid, gid):
        reasons.append("mode/owner")
    diff = None
    if old != new and mode & 0o004:
        diff = {"before_header": path, "after_header": path, "before": text_for_diff(old) or "", "after": text_for_diff(new) or ""}
    elif old != new:  # a key, a password: what the file holds stays out of the result
        diff = {"before_header": path, "after_header": path, "before": "(not world-readable: content not shown)\n", "after": "(changed)\n"}
    return reasons, diff


def write_file(module, entry):
    path, data = entry["path"], entry["content"].encode("utf-8")
    mode = parse_mode(entry["mode"])
    uid, gid = ids(entry["owner"], entry["group"])
    st = None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    if st is not None and stat.S_ISREG(st.st_mode) and read_bytes(path) == data:
        os.chown(path, uid, gid)
        os.chmod(path, mode)
        return
    if entry["unsafe_writes"] and st is not None and stat.S_ISREG(st.st_mode):
        with open(path, "wb") as handle:
            handle.write(data)
        os.chown(path, uid, gid)
        os.chmod(path, mode)
        return
    fd, tmp = tempfile.mkstemp(prefix=".megaprov.", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chown(tmp, uid, gid)
        os.chmod(tmp, mode)
        os.rename(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def apply_entry(module, entry):
    path, state = entry["path"], entry["state"]
    if state == "absent":
        os.unlink(path)
    elif state == "directory":
        uid, gid = ids(entry["owner"], entry["group"])
        if not os.path.isdir(path):
            os.makedirs(path, mode=0o755)
        os.chown(path, uid, gid)
        os.chmod(path, parse_mode(entry["mode"]))
    else:
        write_file(module, entry)


def main():
    module = AnsibleModule(
        argument_spec={
            "files": {
                "type": "list",
                "elements": "dict",
                "required": True,
                "options": {
                    "path": {"type": "path", "required": True},
                    "state": {"type": "str", "choices": ["file", "directory", "absent"], "default": "file"},
                    "content": {"type": "str"},
                    "mode": {"type": "str"},
                    "owner": {"type": "str", "default": "root"},
                    "group": {"type": "str", "default": "root"},
                    "unsafe_writes": {"type": "bool", "default": False},
                },
            }
        },
        supports_check_mode=True,
    )
    entries = module.params["files"]
    bad = problems(entries)
    if bad:
        module.fail_json(msg="; ".join(bad))
    # Plan everything first: a missing parent or owner fails the task before any entry is applied.
    plans, created_dirs = [], set()
    for entry in entries:
        try:
            reasons, diff = plan_entry(entry, created_dirs)
        except (ValueError, OSError) as exc:
            module.fail_json(msg=str(exc), changed=False, changed_paths=[])
        if entry["state"] == "directory":
            created_dirs.add(entry["path"])
        plans.append((entry, reasons, diff))
    changed_paths = [entry["path"] for entry, reasons, _diff in plans if reasons]
    if not module.check_mode:
        for entry, reasons, _diff in plans:
            if not reasons:
                continue
            try:
                apply_entry(module, entry)
            except (ValueError, OSError) as exc:
                module.fail_json(msg="%s: %s" % (entry["path"], exc), changed=True, changed_paths=changed_paths)
    result = {"changed": bool(changed_paths), "changed_paths": changed_paths,
              "reasons": {entry["path"]: reasons for entry, reasons, _diff in plans if reasons}}
    if module._diff:
        result["diff"] = [diff for _entry, reasons, diff in plans if reasons and diff]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
