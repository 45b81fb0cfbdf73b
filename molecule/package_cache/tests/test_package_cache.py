"""The head's package cache, as a node uses it: apt through apt-cacher-ng (a miss is fetched once, the next
download is a hit), an https remote through the HTTPS/// form, the offline bundle's apt repository, pip from the
head's PEP 503 index, git clones from the mirrors on the shared directory, and every service on the cluster address
only."""

import re
import shlex

import pytest
from conftest import address, fact, head, log_lines, worker

READ = "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode('latin-1'))"
APT = "DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Dpkg::Use-Pty=0"


def listeners(host):
    """(address, port) of every listening TCP socket."""
    out = host.check_output("ss -ltnH")
    found = set()
    for line in out.splitlines():
        local = line.split()[3]
        addr, _, port = local.rpartition(":")
        found.add((addr.strip("[]"), int(port)))
    return found


def test_services_listen_on_the_cluster_address_only():
    server = head()
    ip = address(server)
    found = listeners(server)
    for port in (3142, 3143):
        assert {a for a, p in found if p == port} == {ip}, (port, found)
    assert not [x for x in found if x[1] == 80], f"the web server's default site still listens on port 80: {found}"
    # the unit files wait for the address
    assert "After=network-online.target" in server.file("/etc/systemd/system/nginx.service.d/megaprov.conf").content_string


def test_the_fact_names_the_head_s_urls():
    ip = address(head())
    for host in (head(), worker()):
        data = fact(host)
        assert data["address"] == ip
        assert data["apt_proxy"] == f"http://{ip}:3142"
        assert data["apt_https_prefix"] == f"http://{ip}:3142/HTTPS///"
        assert data["index_url"] == f"http://{ip}:3143/simple/"  # the index holds projects
        assert data["bundle_apt"] == f"http://{ip}:3143/bundle/apt"
        assert data["git"] == {"probe": "/shared/cache/git/probe.git", "local": "/shared/cache/git/local.git"}


def test_a_node_s_apt_downloads_through_the_head_once():
    node = worker()
    ip = address(node)
    assert f'Acquire::http::Proxy "http://{address(head())}:3142";' in node.file("/etc/apt/apt.conf.d/01megaprov-cache").content_string
    assert not node.package("hello").is_installed, "the probe package must not be in the image"
    node.check_output(f"{APT} install hello")
    assert node.package("hello").is_installed
    fetched = [f for f in log_lines("/pool/main/h/hello/hello_") if f[1] == "I"]
    sent = [f for f in log_lines("/pool/main/h/hello/hello_") if f[1] == "O" and f[3] == ip]
    assert len(fetched) == 1 and len(sent) == 1, (fetched, sent)  # a miss: fetched from the mirror once, sent to the node
    # the node's own copy gone, the same file again: sent from the cache, nothing fetched
    node.check_output("apt-get clean && cd /tmp && apt-get -q download hello")
    fetched_again = [f for f in log_lines("/pool/main/h/hello/hello_") if f[1] == "I"]
    sent_again = [f for f in log_lines("/pool/main/h/hello/hello_") if f[1] == "O" and f[3] == ip]
    assert fetched_again == fetched and len(sent_again) == 2, (fetched_again, sent_again)


def test_an_https_remote_is_cached_through_the_https_form():
    """apt-cacher-ng fetches https://deb.debian.org/... once for http://HEAD:3142/HTTPS///deb.debian.org/..."""
    node = worker()
    uri = node.check_output("apt-get -q --print-uris download hello").split("'")[1]
    path = re.sub(r"^http://[^/]+/", "", uri)
    assert path.startswith("debian/pool/"), uri
    url = fact(node)["apt_https_prefix"] + "deb.debian.org/" + path
    for _ in range(2):
        node.check_output(f"python3 -c {shlex.quote(READ)} {shlex.quote(url)} > /dev/null")
    lines = log_lines("deb.debian.org/" + path)
    assert [f[1] for f in lines].count("I") == 1, lines  # fetched over https once
    assert [f[1] for f in lines].count("O") == 2, lines  # served twice


def test_the_bundle_s_apt_repository_installs_on_a_node():
    node = worker()
    ip = address(head())
    assert node.file("/etc/apt/sources.list.d/megaprov-bundle.list").content_string.strip().endswith(
        f"deb [trusted=yes] http://{ip}:3143/bundle/apt ./"
    )
    node.check_output(f"{APT} install megaprov-bundle-probe")
    assert node.file("/usr/share/megaprov-bundle-probe/marker").content_string == "from the offline bundle\n"


def test_pip_installs_from_the_head_s_index():
    """Wheels from the wheelhouse, the bundle and the pinned PyPI download, with their sha256 in the index."""
    node = worker()
    index = fact(node)["index_url"]
    page = node.check_output(f"python3 -c {shlex.quote(READ)} {index}six/")
    assert re.search(r'href="\.\./\.\./wheels/six-1\.16\.0-py2\.py3-none-any\.whl#sha256=[0-9a-f]{64}"', page), page
    node.check_output("rm -rf /tmp/pc-venv && python3 -m venv /tmp/pc-venv")
    # no --trusted-host: the node's /etc/xdg/pip/pip.conf trusts the head's plain-HTTP index
    node.check_output(f"/tmp/pc-venv/bin/pip install -q --no-cache-dir --index-url {index} megaprov-wheelhouse-probe megaprov-bundle-probe six==1.16.0")
    out = node.check_output("/tmp/pc-venv/bin/python -c 'import megaprov_wheelhouse_probe as a, megaprov_bundle_probe as b, six; print(a.NAME, b.NAME, six.__version__)'")
    assert out == "megaprov_wheelhouse_probe megaprov_bundle_probe 1.16.0"


STATUS = """import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1]).status)
except urllib.error.HTTPError as e:
    print(e.code)"""


def test_the_index_serves_nothing_else():
    node = worker()
    base = fact(node)["web_url"]
    assert node.check_output(f"python3 -c {shlex.quote(STATUS)} {base}/simple/") == "200"
    for path in ("/", "/downloads/", "/.wheel-index.json", "/wheels/", "/bundle/apt/../../"):
        code = node.check_output(f"python3 -c {shlex.quote(STATUS)} {shlex.quote(base + path)}")
        assert code in ("403", "404"), (path, code)


@pytest.mark.parametrize("user", ["root", "megaprov"])
def test_a_node_clones_from_the_git_mirrors(user):
    node = worker()
    mirrors = fact(node)["git"]
    run = (lambda c: node.run(c)) if user == "root" else (lambda c: node.run(f"runuser -u megaprov -- sh -c {shlex.quote(c)}"))
    for name, text in (("probe", "probe from the bundle\n"), ("local", "local upstream\n")):
        target = f"/tmp/clone-{user}-{name}"
        result = run(f"rm -rf {target} && git clone -q --branch v1.0 {mirrors[name]} {target} && cat {target}/README")
        assert result.rc == 0, result.stderr
        assert result.stdout == text


def test_the_mirrors_are_bare_and_the_cluster_user_s():
    server = head()
    for name in ("probe", "local"):
        mirror = server.file(f"/shared/cache/git/{name}.git")
        assert mirror.is_directory and mirror.user == "megaprov"
        assert server.check_output(f"git --git-dir=/shared/cache/git/{name}.git config --get core.bare") == "true"
        assert server.check_output(f"git --git-dir=/shared/cache/git/{name}.git config --get remote.origin.mirror") == "true"
    assert not server.file("/shared/cache/git/probe.git.part").exists
