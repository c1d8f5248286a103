"""The repository is the Ansible collection ds4.converge: it builds, installs, documents itself and passes
`ansible-test sanity`, offline.

The collection is built from this checkout with `ansible-galaxy collection build` (galaxy.yml's build_ignore
decides what goes in) and installed into a temporary collections path, as a user would; the installed copy is what
`ansible-doc` and `ansible-test sanity` see (ansible-test needs the collection under ansible_collections/NS/NAME).

ansible-test runs each sanity test in a virtualenv of its own, with the packages it pins. They come through pip
from build/ansible-test/wheels (`.ci/ansible-test-wheels.sh` downloads them; `make test` and `.ci/fleet-deps.sh`
run it), and pip itself is bootstrapped from that folder's pip wheel (a small stand-in for ansible-test's
get-pip script, which it would otherwise download): nothing is fetched while the test runs. The virtualenvs are
kept in build/ansible-test/home (ansible-test's ~/.ansible/test), so only the first run creates them.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WHEELS = REPO / "build" / "ansible-test" / "wheels"
TEST_HOME = REPO / "build" / "ansible-test" / "home"
SANITY_TIMEOUT_S = 900
# every sanity test ansible-test has for a collection, but these: pylint (minutes on two cores for two small
# modules that pep8 and validate-modules already check), and the ones with nothing here to look at (pslint:
# PowerShell, shellcheck: shell scripts, changelog: no changelogs/)
SKIPPED = ("pylint", "pslint", "shellcheck", "changelog")
ALLOWED_TOP = {"MANIFEST.json", "FILES.json", "LICENSE", "COLLECTION.md", "CHANGELOG.md", "meta", "plugins", "roles", "playbooks",
               "tests"}

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("ansible_test") is None,
                       reason="fleet extra not installed: pip install -e '.[test,fleet]'"),
]


def _env(home: Path) -> dict[str, str]:
    home.mkdir(parents=True, exist_ok=True)  # ansible-doc prints nothing at all without a HOME to write to
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PIP_"))}
    # the remote temporary folder too: left unset, Ansible makes the account's ~/.ansible/tmp (from the password
    # database, not $HOME) on every host, localhost included
    env.update(HOME=str(home), ANSIBLE_HOME=str(home / ".ansible"), ANSIBLE_REMOTE_TEMP=str(home / ".ansible" / "remote"),
               ANSIBLE_NOCOLOR="1", NO_COLOR="1", PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}")
    return env


# what the tools a developer runs leave in a checkout (git ignores each): none of it may reach the tarball
TOOL_STATE = (".ansible/collections/ansible_collections/x/y/galaxy.yml", ".ansible/roles/r/tasks/main.yml",
              ".venv/bin/python", ".pytest_cache/v/cache/lastfailed", ".hypothesis/examples/x", ".molecule/x",
              "build/wheels/x.whl", "plugins/modules/__pycache__/x.pyc", "ds4_converge.egg-info/PKG-INFO")


def _checkout_after_tools(dest: Path) -> Path:
    """This checkout's tracked files, plus what ansible-lint, molecule, pytest and pip leave beside them."""
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if name and (REPO / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, dest / name)
    for name in TOOL_STATE:
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_text("tool state\n")
    return dest


def test_git_ignores_what_the_tools_leave():
    """The same tool state that build_ignore keeps out of the tarball is kept out of git."""
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *TOOL_STATE], cwd=REPO, capture_output=True,
                             text=True).stdout.split()
    assert sorted(ignored) == sorted(TOOL_STATE)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The collection built from a checkout (with the tools' state in it) and installed: ansible_collections/ds4/converge."""
    scratch = tmp_path_factory.mktemp("collection")
    env = _env(scratch / "home")
    source = _checkout_after_tools(tmp_path_factory.mktemp("checkout"))
    # run outside the checkout: its ansible.cfg points at build/collections, where `make collection` links it
    build = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--output-path", str(scratch), str(source)],
                           cwd=scratch, env=env, capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stdout + build.stderr
    tarball, = scratch.glob("ds4-converge-*.tar.gz")
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    assert {name.split("/")[0] for name in names} <= ALLOWED_TOP, sorted(names)
    assert not [n for n in names if n.endswith((".pyc", ".whl")) or "__pycache__" in n], names
    assert "playbooks/canary.yml" in names and "playbooks/status.yml" in names
    # what Prometheus and Grafana need (docs/observability.md)
    assert {"playbooks/prometheus.yml", "roles/ds4_converge/files/prometheus/ds4-converge-rules.yml",
            "roles/ds4_converge/files/grafana/ds4-converge-dashboard.json"} <= set(names), sorted(names)
    assert not [n for n in names if n.startswith("tests/") and not n.startswith("tests/sanity")], names
    install = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "-p", str(scratch / "c"),
                              str(tarball)], cwd=scratch, env=env, capture_output=True, text=True, timeout=120)
    assert install.returncode == 0, install.stdout + install.stderr
    return scratch / "c" / "ansible_collections" / "ds4" / "converge"


def test_installed_collection_documents_its_modules_role_and_playbooks(installed):
    env = _env(installed.parents[3] / "home") | {"ANSIBLE_COLLECTIONS_PATH": str(installed.parents[2])}
    for plugin in ("ds4.converge.ds4_converge", "ds4.converge.haproxy_server"):
        doc = subprocess.run([str(BIN / "ansible-doc"), plugin], env=env, capture_output=True, text=True, timeout=60)
        assert doc.returncode == 0, doc.stderr
        text = doc.stdout
        assert "check_mode:" in text and "diff_mode:" in text and "platforms: posix" in text, text
        assert "ds4-converge maintainers (@ds4-converge)" in text
    role = subprocess.run([str(BIN / "ansible-doc"), "-t", "role", "ds4.converge.ds4_converge"],
                          cwd=installed.parents[3], env=env, capture_output=True, text=True, timeout=60)
    assert role.returncode == 0 and re.search(r"ENTRY POINT: \W?rollout\W?", role.stdout), role.stderr
    # the playbooks by their collection names (i21's playbooks/distributed.yml lands there too)
    for playbook in ("ds4.converge.canary", "ds4.converge.status"):
        listed = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "--syntax-check", playbook],
                                cwd=installed.parents[3], env=env, capture_output=True, text=True, timeout=60)
        assert listed.returncode == 0, listed.stdout + listed.stderr
    runtime = yaml.safe_load((installed / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"].startswith(">=")


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> Path:
    """The collection as `make collection-build` builds it (the tool's wheel inside), installed; no checkout."""
    scratch = tmp_path_factory.mktemp("shipped")
    source = _checkout_after_tools(tmp_path_factory.mktemp("checkout"))
    env = _env(scratch / "home")
    # -o: the copy's pyproject.toml may be newer than the venv's stamp (a developer just edited it); make must not
    # then reinstall the running venv from the copy, which is removed after the test (an editable install of it)
    stamp = BIN.parent / ".installed-dev"
    make = subprocess.run(["make", "-o", str(stamp), "-o", str(stamp.with_name(".installed-run")), "collection-build",
                           f"VENV={BIN.parent}"], cwd=source, env=env,
                          capture_output=True, text=True, timeout=300)
    assert make.returncode == 0, make.stdout + make.stderr
    tarball, = (source / "build").glob("ds4-converge-*.tar.gz")
    with tarfile.open(tarball) as archive:
        wheels = [n for n in archive.getnames() if n.endswith(".whl")]
    assert len(wheels) == 1 and re.fullmatch(r"roles/ds4_converge/files/ds4_converge-[^/]+-py3-none-any\.whl",
                                             wheels[0]), wheels
    install = subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "-p", str(scratch / "c"),
                              str(tarball)], cwd=scratch, env=env, capture_output=True, text=True, timeout=120)
    assert install.returncode == 0, install.stdout + install.stderr
    return scratch / "c" / "ansible_collections" / "ds4" / "converge"


# the fresh host's virtualenv sees the controller's libraries and pip (as molecule/shared/create.yml makes them),
# so the wheel installs offline (--no-index)
MAKE_VENV = """import sys, sysconfig, venv
from pathlib import Path
env = Path(sys.argv[1])
venv.EnvBuilder(with_pip=False).create(env)
purelib = env / "lib" / f"python{sysconfig.get_python_version()}" / "site-packages"
(purelib / "_controller.pth").write_text(sysconfig.get_path("purelib") + "\\n")
for name in ("pip", "pip3"):
    (env / "bin" / name).write_text(f"#!{env}/bin/python\\nimport sys\\nfrom pip._internal.cli.main import main\\nsys.exit(main())\\n")
    (env / "bin" / name).chmod(0o755)
"""


def test_the_installed_collection_installs_the_tool_on_a_fresh_host(shipped, sim_repo, tmp_path):
    """ds4.converge.canary from the installed tarball, no checkout, no ds4_converge_source: the host gets the tool
    from the wheel the collection ships and converges."""
    from boxes import MODEL, free_port

    host = tmp_path / "fresh"
    # the root's supervisord socket must fit AF_UNIX's ~107 bytes: a short folder of its own, removed at the end
    short = tempfile.TemporaryDirectory(prefix="ds4c-f.")
    root = Path(short.name) / "root"
    subprocess.run([sys.executable, "-c", MAKE_VENV, str(host / "venv")], check=True, timeout=60)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"sparks": {"hosts": {"fresh": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "ds4_converge_install_venv": str(host / "venv"), "ds4_converge_install_python": sys.executable,
        "ds4_converge_install_pip_args": ["--no-index"], "ds4_converge_spec_path": str(host / "spec.yaml"),
        "ds4_converge_spec": {
            "engine": {"repo": str(sim_repo), "ref": "v0.2.0", "target": "cpu", "jobs": 2},
            "model": {"main": str(MODEL)}, "server": {"port": free_port(), "ctx": 32768},
            "health": {"deadline_s": 20, "soak_s": 1, "interval_s": 0.2}, "paths": {"root": str(root)}},
    }}}}))
    env = _env(tmp_path / "home") | {"ANSIBLE_COLLECTIONS_PATH": str(shipped.parents[2]),
                                     "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp")}
    tool = host / "venv" / "bin" / "ds4-converge"
    host_env = env | {"XDG_CACHE_HOME": str(tmp_path / "home" / ".cache")}  # the tool's receipts stay in the test
    try:
        run = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), "ds4.converge.canary"],
                             cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-3000:]
        status = subprocess.run([str(tool), "status", str(host / "spec.yaml"), "--json"], capture_output=True,
                                env=host_env, text=True, timeout=60)
        assert json.loads(status.stdout)["healthy"] is True, status.stdout
        # the tool on the host is the collection's wheel, not this checkout
        where = subprocess.run([str(host / "venv" / "bin" / "python"), "-c", "import ds4_converge; print(ds4_converge.__file__)"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert where.stdout.startswith(str(host / "venv")), where.stdout + where.stderr
    finally:
        if tool.exists():
            subprocess.run([str(tool), "stop", str(host / "spec.yaml")], env=host_env, capture_output=True,
                           timeout=120)
        short.cleanup()


def test_a_collection_without_a_wheel_names_ds4_converge_source(installed, tmp_path):
    """Built without the wheel (plain ansible-galaxy build) and run without a checkout: it fails at once, saying
    what to set, before any host is touched."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"sparks": {"hosts": {"fresh": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "ds4_converge_spec": {"paths": {"root": str(tmp_path / "root")}}}}}}))
    env = _env(tmp_path / "home") | {"ANSIBLE_COLLECTIONS_PATH": str(installed.parents[2])}
    run = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), "ds4.converge.wheel"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2, run.stdout[-3000:]
    assert "No wheel of ds4-converge to install" in run.stdout and "Set ds4_converge_source to" in run.stdout
    assert not (tmp_path / "root").exists()


def shipped_files() -> list[str]:
    """The files the project ships (git's), not whatever else lies in a checkout: a spec a developer wrote with
    `ds4-converge init`, a scratch inventory. Without git (an unpacked tarball holds only what ships): none named,
    and ansible-lint looks at the whole tree."""
    proc = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, text=True)
    if proc.returncode:
        return []
    return sorted(name for name in proc.stdout.split("\0") if name)


def test_ansible_lint_production_profile_passes(tmp_path):
    """ansible-lint --profile production (.ansible-lint) on the repository, which is the collection: its
    playbooks, role, galaxy.yml, and the molecule scenarios' playbooks and task files: the files git ships."""
    if not (BIN / "ansible-lint").exists():
        pytest.fail("ansible-lint is not installed: pip install -e '.[test,fleet]'")
    env = _env(tmp_path / "home")
    proc = subprocess.run([str(BIN / "ansible-lint"), "--nocolor", "-f", "pep8", *shipped_files()], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-8000:]
    assert "Profile 'production' was required, and it passed." in output, output[-3000:]
    assert "0 failure(s), 0 warning(s)" in output, output[-3000:]


def test_ansible_test_sanity_is_clean(installed):
    if not (WHEELS / ".downloaded").exists():
        pytest.fail(f"no wheels for ansible-test's sanity virtualenvs in {WHEELS}: run "
                    f"`bash .ci/ansible-test-wheels.sh {BIN.parent} {WHEELS}` (make test and .ci/fleet-deps.sh do)")
    pip_version = (WHEELS / ".downloaded").read_text().strip()
    pip_wheel, = WHEELS.glob(f"pip-{pip_version}-*.whl")
    cache = TEST_HOME / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    # ansible-test runs this file with the new virtualenv's python to put pip there: pip from its own wheel does it
    (cache / f"get_pip_{pip_version.replace('.', '_')}.py").write_text(
        '"""Stand-in for get-pip.py (tests/fleet/test_collection.py): pip installs itself from its wheel."""\n'
        "import sys\n"
        f"sys.path.insert(0, {str(pip_wheel)!r})\n"
        "from pip._internal.cli.main import main\n"
        "sys.exit(main(['install'] + [a for a in sys.argv[1:] if a not in ('--no-setuptools', '--no-wheel')]))\n")
    env = _env(TEST_HOME) | {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(WHEELS), "PIP_CONFIG_FILE": os.devnull,
                             "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    argv = [str(BIN / "ansible-test"), "sanity", "--python", python, "--color", "no"]
    for test in SKIPPED:
        argv += ["--skip-test", test]
    proc = subprocess.run(argv, cwd=installed, env=env, capture_output=True, text=True, timeout=SANITY_TIMEOUT_S)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-8000:]
    ran = set(re.findall(r'Running sanity test "([^"]+)"', output))
    assert {"pep8", "validate-modules", "yamllint", "ansible-doc", "import", "compile", "runtime-metadata",
            "ignores"} <= ran, sorted(ran)
    assert "ERROR" not in output, output[-8000:]
