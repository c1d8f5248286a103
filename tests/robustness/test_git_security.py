"""No spec or installer value ever becomes a git option or reaches a transport we do not mean: a hostile
engine.repo, or an install.sh whose DS4_REPO/DS4_REF carry one, runs no command, in check mode and in a converge."""
import http.server
import threading

import pytest

from ds4_converge.engine.git import EngineRepo, RepoError
from ds4_converge.engine.installer import InstallerError, parse_pin

HOSTILE_REPOS = ["--upload-pack=touch {marker} #://x", "ext::sh -c touch% {marker}",
                 "-oProxyCommand=touch {marker}:x"]


@pytest.mark.parametrize("repo", HOSTILE_REPOS)
def test_git_itself_never_reads_a_repo_as_an_option_or_runs_a_helper(tmp_path, repo):
    """Defence in depth, below the spec's own check: `--` before positionals and GIT_ALLOW_PROTOCOL."""
    marker = tmp_path / "PWNED"
    with pytest.raises(RepoError):
        EngineRepo(repo.format(marker=marker), tmp_path / "cache.git").resolve("v0.2.0")
    with pytest.raises(Exception):
        EngineRepo(repo.format(marker=marker), tmp_path / "cache.git").fetch("1" * 40)
    assert not marker.exists()


@pytest.mark.parametrize("line, problem", [
    ('DS4_REPO="${DS4_REPO:---upload-pack=touch /tmp/x #://x}"', "DS4_REPO: '--upload-pack"),
    ('DS4_REPO="${DS4_REPO:-ext::sh -c touch% /tmp/x}"', "DS4_REPO: git transport helpers"),
    ('DS4_REF="${DS4_REF:---output=/tmp/x}"', "DS4_REF: '--output=/tmp/x' begins with '-'"),
])
def test_an_installer_pin_is_checked_like_the_spec(line, problem):
    text = f'#!/bin/sh\nDS4_REPO="${{DS4_REPO:-https://example.invalid/ds4.git}}"\nDS4_REF="${{DS4_REF:-v1}}"\n'
    name = line.split("=", 1)[0]
    text = "\n".join(line if l.startswith(name + "=") else l for l in text.splitlines()) + "\n"
    with pytest.raises(InstallerError) as info:
        parse_pin(text, "install.sh")
    assert str(info.value).startswith(f"install.sh:{2 if name == 'DS4_REPO' else 3}: {problem}")


def _hostile_installer(marker):
    return (f'#!/bin/sh\nDS4_REPO="${{DS4_REPO:---upload-pack=touch {marker} #://x}}"\n'
            f'DS4_REF="${{DS4_REF:-v0.2.0}}"\n')


@pytest.mark.parametrize("check", [True, False])
def test_a_hostile_local_installer_runs_nothing(box, tmp_path, check):
    marker = tmp_path / "PWNED"
    installer = tmp_path / "install.sh"
    installer.write_text(_hostile_installer(marker))
    del box.spec["engine"]["repo"], box.spec["engine"]["ref"]
    box.spec["engine"]["installer"] = str(installer)
    box.write()
    rc, document = box.converge(*(["--check"] if check else []))
    assert rc == 1 and not document["ok"], document
    assert f"{installer}:2: DS4_REPO: '--upload-pack=touch" in document["error"]
    assert not marker.exists() and not (box.root / "releases").exists()


@pytest.fixture
def installer_server(tmp_path):
    """A compromised installer URL: a loopback HTTP server that serves a hostile install.sh."""
    marker = tmp_path / "PWNED-remote"
    body = _hostile_installer(marker).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}/install.sh", marker
    server.shutdown()


@pytest.mark.parametrize("check", [True, False])
def test_a_compromised_installer_url_runs_nothing(box, installer_server, check):
    url, marker = installer_server
    del box.spec["engine"]["repo"], box.spec["engine"]["ref"]
    box.spec["engine"]["installer"] = url
    box.write()
    rc, document = box.converge(*(["--check"] if check else []))
    assert rc == 1 and f"{url}:2: DS4_REPO: " in document["error"], document
    assert not marker.exists()


def test_a_hostile_repo_in_a_converge_is_refused_before_anything(box, tmp_path):
    marker = tmp_path / "PWNED"
    box.spec["engine"]["repo"] = f"--upload-pack=touch {marker} #://x"
    box.write()
    proc = box.cli(str(box.spec_path))
    assert proc.returncode == 2 and "engine.repo: " in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists() and not box.root.exists()


def test_an_exported_tree_has_nothing_group_or_others_may_write_on_every_python(tmp_path, monkeypatch):
    """git archive writes 0664/0775 modes; Python before 3.11.4 (Debian 12's 3.11.2) has no "tar" filter to clear
    them, and a root's extraction keeps them: the release's trust check (core/root_trust.py) then refused every
    build. Without the filter, as there, the tree still comes out 0644/0755."""
    import subprocess
    import tarfile

    source = tmp_path / "src"
    (source / "tools").mkdir(parents=True)
    (source / "tools" / "run.sh").write_text("#!/bin/sh\n")
    (source / "tools" / "run.sh").chmod(0o755)
    (source / "Makefile").write_text("all:\n")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@invalid", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "one"]):
        subprocess.run(["git", "-C", str(source), *argv], check=True, env=env)
    commit = subprocess.run(["git", "-C", str(source), "rev-parse", "HEAD"], check=True, env=env,
                            capture_output=True, text=True).stdout.strip()
    monkeypatch.delattr(tarfile, "tar_filter", raising=False)  # as on 3.11.2
    repo = EngineRepo(str(source), tmp_path / "cache.git")
    repo.fetch(commit)
    repo.export(commit, tmp_path / "tree")
    modes = {path.relative_to(tmp_path / "tree").as_posix(): path.stat().st_mode & 0o777
             for path in (tmp_path / "tree").rglob("*")}
    assert modes == {"Makefile": 0o644, "tools": 0o755, "tools/run.sh": 0o755}, modes
