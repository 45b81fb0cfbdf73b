"""The package_cache role's wheel index (roles/package_cache/files/wheel_index.py): a PEP 503 simple index with sha256
fragments, links to the wheels, exact in check mode, nothing rewritten on a second run, stale entries removed."""

import hashlib
import json

from tests.conftest import ROOT, load_module

SCRIPT = ROOT / "ansible_collections/megaprov/cluster/roles/package_cache/files/wheel_index.py"
index = load_module(SCRIPT, "wheel_index")


def wheel(directory, name):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(name.encode())
    return path


def run(capsys, *argv):
    assert index.main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_names_are_normalized_as_pep_503_says():
    assert index.normalize("Megatron_Core") == "megatron-core"
    assert index.normalize("zope.interface") == "zope-interface"
    assert index.normalize("a--b__c") == "a-b-c"


def test_the_index_lists_every_wheel_with_its_sha256_and_links_it(tmp_path, capsys):
    house, bundle, root = tmp_path / "house", tmp_path / "bundle", tmp_path / "root"
    torch = wheel(house, "torch-2.13.0+cpu-cp311-cp311-linux_x86_64.whl")
    core = wheel(bundle, "megatron_core-0.16.1-cp311-cp311-manylinux_2_17_x86_64.whl")
    (house / "notes.txt").write_text("not a wheel")
    (house / "broken.whl").write_text("not a wheel name")
    result = run(capsys, "--root", str(root), "--source", str(house), "--source", str(bundle))
    assert result["changed"] and result["projects"] == 2 and result["wheels"] == 2
    page = (root / "simple/megatron-core/index.html").read_text()
    digest = hashlib.sha256(core.read_bytes()).hexdigest()
    assert f'href="../../wheels/{core.name}#sha256={digest}"' in page
    assert '<a href="torch/">torch</a>' in (root / "simple/index.html").read_text()
    assert (root / "wheels" / torch.name).resolve() == torch.resolve()
    assert not (root / "wheels/broken.whl").exists()
    # a second run changes nothing
    assert run(capsys, "--root", str(root), "--source", str(house), "--source", str(bundle))["changed"] is False


def test_check_mode_reports_and_writes_nothing(tmp_path, capsys):
    house, root = tmp_path / "house", tmp_path / "root"
    wheel(house, "six-1.16.0-py2.py3-none-any.whl")
    result = run(capsys, "--root", str(root), "--source", str(house), "--check")
    assert result["changed"] and result["projects"] == 1
    assert not root.exists()


def test_a_wheel_gone_from_the_sources_leaves_the_index(tmp_path, capsys):
    house, root = tmp_path / "house", tmp_path / "root"
    six = wheel(house, "six-1.16.0-py2.py3-none-any.whl")
    wheel(house, "idna-3.7-py3-none-any.whl")
    run(capsys, "--root", str(root), "--source", str(house))
    six.unlink()
    result = run(capsys, "--root", str(root), "--source", str(house))
    assert result["changed"] and result["projects"] == 1
    assert not (root / "simple/six").exists() and not (root / "wheels" / six.name).is_symlink()
    assert "six" not in (root / "simple/index.html").read_text()


def test_an_optional_source_may_be_missing_a_required_one_may_not(tmp_path, capsys):
    root = tmp_path / "root"
    assert run(capsys, "--root", str(root), "--optional-source", str(tmp_path / "none"))["projects"] == 0
    assert index.main(["--root", str(root), "--source", str(tmp_path / "none")]) == 2
    assert "wheel source directory missing" in json.loads(capsys.readouterr().out)["msg"]
