"""The Ansible module `ds4.converge.ds4_converge` and the role's interface, run by real Ansible (no ssh, no molecule).

The collection is this checkout, linked into build/collections (`make collection`; ansible.cfg looks there).
Documentation: `ansible-doc` shows the module and the role from the repository root, and what it documents is
what Ansible validates (options, types, defaults; the role's defaults). Behaviour: the module run by `ansible`
with a local connection against the simulated engine's repository - check mode plans without touching the spec
file or the root, diff mode shows both, and failures carry the tool's own words. Converging, idempotence and the
revert are the molecule scenarios' (test_molecule.py).

The collection's HAProxy runtime client (plugins/module_utils/haproxy_runtime.py) and the module
`ds4.converge.haproxy_server` that uses it, against a real HAProxy with an admin socket: read, set, refused, bounded.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from boxes import MODEL, free_port
from ds4_converge.facts import programs

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ROLE = REPO / "roles" / "ds4_converge"
LIBRARY = REPO / "plugins" / "modules"
MODULE = "ds4.converge.ds4_converge"
HAPROXY_MODULE = "ds4.converge.haproxy_server"
ANSI = re.compile(r"\x1b\[[0-9;]*m")

pytestmark = pytest.mark.skipif(importlib.util.find_spec("ansible") is None,
                                reason="fleet extra not installed: pip install -e '.[test,fleet]'")


@pytest.fixture(scope="module", autouse=True)
def collection():
    from molecule_support import link_collection

    link_collection()


@pytest.fixture
def ansible_env(tmp_path):
    """Ansible's home and temporary directories in the test's own, no colours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_HOME=str(tmp_path / "ansible"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible" / "tmp"),
               ANSIBLE_REMOTE_TEMP=str(tmp_path / "ansible" / "remote"), ANSIBLE_NOCOLOR="1",
               NO_COLOR="1")
    return env


def _run(argv: list[str], env: dict, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _module(env: dict, args: dict, *flags: str, module: str = MODULE) -> tuple[dict, str]:
    """One ad-hoc run of a module on localhost: its result (ansible --tree), and what Ansible printed."""
    tree = Path(env["ANSIBLE_HOME"]) / "tree"
    proc = _run([str(BIN / "ansible"), "localhost", "-i", "localhost,", "-c", "local",
                 "-e", f"ansible_python_interpreter={sys.executable}", "--tree", str(tree), "-m", module,
                 "-a", json.dumps(args), *flags], env)
    try:
        result = json.loads((tree / "localhost").read_text())
    except (OSError, ValueError):
        raise AssertionError(f"no result from ansible (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}") from None
    shown = ANSI.sub("", proc.stdout)
    result["failed"] = "localhost | FAILED!" in shown  # what Ansible made of it (--tree does not keep it)
    return result, shown


def _module_source(monkeypatch):
    # the module imports the collection's module_utils by their full names: ansible_collections lives in
    # build/collections (the link `make collection` and the fixture above make)
    monkeypatch.syspath_prepend(str(REPO / "build" / "collections"))
    spec = importlib.util.spec_from_file_location("ds4_converge_module", LIBRARY / "ds4_converge.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def spec(tmp_path, sim_repo) -> dict:
    return {
        "engine": {"repo": str(sim_repo), "ref": "v0.2.0", "target": "cpu", "jobs": 2},
        "model": {"main": str(MODEL)},
        "server": {"port": free_port(), "ctx": 32768},
        "health": {"deadline_s": 15, "soak_s": 1, "interval_s": 0.2},
        "paths": {"root": str(tmp_path / "root")},
    }


def test_ansible_doc_shows_the_module_from_the_repository_root(ansible_env):
    proc = _run([str(BIN / "ansible-doc"), MODULE], ansible_env)  # ansible.cfg: collections_path = build/collections
    assert proc.returncode == 0, proc.stderr
    text = ANSI.sub("", proc.stdout)
    assert f"MODULE {MODULE} (" in text and "plugins/modules/ds4_converge.py)" in text
    for option in ("spec", "path", "mode", "overrides", "executable", "state"):
        assert re.search(rf"^[-=\s]+{option}\s", text, re.MULTILINE), option
    assert "EXAMPLES:" in text and "Converge this Spark" in text and "overrides: [server.ctx=65536]" in text
    assert "RETURN VALUES:" in text and "reverted" in text
    assert "check_mode:" in text and "diff_mode:" in text


def test_documented_options_are_the_validated_ones(ansible_env, monkeypatch):
    """What ansible-doc shows is what AnsibleModule checks: names, types, defaults, aliases, elements."""
    proc = _run([str(BIN / "ansible-doc"), "--json", MODULE], ansible_env)
    assert proc.returncode == 0, proc.stderr
    documented = json.loads(proc.stdout)[MODULE]
    validated = _module_source(monkeypatch).ARGUMENT_SPEC
    assert set(documented["doc"]["options"]) == set(validated)
    for name, spec in validated.items():
        doc = documented["doc"]["options"][name]
        for key in ("type", "default", "aliases", "elements", "required", "choices"):
            assert doc.get(key) == spec.get(key), (name, key)
    yaml.safe_load(documented["examples"])  # the examples are valid YAML
    assert documented["doc"]["attributes"]["check_mode"]["support"] == "full"


def test_role_documents_every_variable_it_defaults(ansible_env):
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    options = specs["main"]["options"]
    # every default is an option of the entry point that uses it: main, or prometheus (the controller's scrape
    # config, rules and dashboard); a required option's empty default is only a placeholder
    documented = {**options, **specs["prometheus"]["options"]}
    assert set(documented) == set(defaults) | {"ds4_converge_spec"}
    assert options["ds4_converge_spec"]["required"] is True
    for name, value in defaults.items():
        assert documented[name].get("required") or documented[name]["default"] == value, name
    for name, option in specs["status"]["options"].items():
        assert option["default"] == defaults[name], name
    proc = _run([str(BIN / "ansible-doc"), "-t", "role", MODULE], ansible_env)
    assert proc.returncode == 0, proc.stderr
    text = ANSI.sub("", proc.stdout)
    assert re.search(r"ENTRY POINT: \W?main\W? - ", text) and re.search(r"ENTRY POINT: \W?status\W? - ", text)
    assert re.search(r"^[-=\s]+ds4_converge_spec\s", text, re.MULTILINE)
    assert "role's library" not in text and "runs the module `ds4.converge.ds4_converge'" in " ".join(text.split()), text


def test_check_mode_plans_the_new_spec_and_touches_nothing(ansible_env, spec, tmp_path):
    spec_path = tmp_path / "etc" / "spec.yaml"  # its directory does not exist yet
    result, shown = _module(ansible_env, {"spec": spec, "path": str(spec_path),
                                          "executable": str(BIN / "ds4-converge")}, "--check", "--diff")
    assert result["failed"] is False, result
    assert result["changed"] is True and result["spec_changed"] is True and result["rc"] == 0
    roles = {role["name"]: role for role in result["report"]["roles"]}
    assert roles["engine"]["msg"].startswith("would build v0.2.0")
    assert result["cmd"] == [str(BIN / "ds4-converge"), str(spec_path), "--json", "--check", "--diff"]
    # nothing written: no spec directory, no root, no scratch spec left in Ansible's temporary directory
    assert not spec_path.parent.exists() and not (tmp_path / "root").exists()
    assert not list((tmp_path / "ansible").rglob("*.yaml"))
    # diff mode: the spec file's before/after, and the tool's own diffs of what it would render and build
    assert f"--- before: {spec_path}\n+++ after: {spec_path}\n" in shown
    assert "\n+engine:\n+  jobs: 2\n+  ref: v0.2.0\n" in shown
    assert "\n+v0.2.0 = " in shown and "\n+make -j2 cpu\n--- before: " in shown
    assert f"\n+file={tmp_path / 'root'}/run/supervisor.sock\n" in shown


def test_check_mode_beside_an_existing_spec_leaves_it_as_it_was(ansible_env, spec, tmp_path):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text("# the spec before\n" + yaml.safe_dump(spec))
    before = (spec_path.read_text(), spec_path.stat().st_mtime_ns)
    changed = dict(spec, engine=dict(spec["engine"], ref="v0.3.0"))
    result, shown = _module(ansible_env, {"spec": changed, "path": str(spec_path),
                                          "executable": str(BIN / "ds4-converge")}, "--check")
    assert result["changed"] is True and result["failed"] is False, result
    assert "would build v0.3.0" in {r["name"]: r for r in result["report"]["roles"]}["engine"]["msg"]
    assert (spec_path.read_text(), spec_path.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ansible", "spec.yaml"])  # no scratch file left
    assert "--- before" not in shown  # no diff: not asked for


def _line_of(text: str, message: str) -> str:
    """The line of `text` that an error `<new spec from …>:LINE:COL: …` points at."""
    line = int(re.search(r"<new spec from [^>]+>:(\d+):", message).group(1))
    return text.splitlines()[line - 1]


def test_invalid_spec_fails_with_the_tools_words_naming_the_new_spec(ansible_env, spec, tmp_path):
    """In check mode the new spec is planned from a scratch copy: the error names what produced it, not the file."""
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    broken = dict(spec, engine={"repo": spec["engine"]["repo"], "reff": "v0.2.0"})
    result, _ = _module(ansible_env, {"spec": broken, "spec_source": "ds4_converge_spec", "path": str(spec_path),
                                      "executable": str(BIN / "ds4-converge")}, "--check")
    assert result["failed"] is True and result["rc"] == 2, result
    assert result["msg"].startswith("ds4-converge exited 2 (invalid spec or usage): "
                                    "<new spec from ds4_converge_spec>:"), result["msg"]
    assert "engine.reff: unknown key; did you mean 'ref'?" in result["msg"]
    assert f"not written: {spec_path} holds the spec before" in result["msg"]
    assert _line_of(result["spec_text"], result["msg"]).strip().startswith("reff:"), result
    assert "reverted" not in result["msg"] and result["reverted"] is False


def test_an_invalid_spec_leaves_the_hosts_spec_file_as_it_was(ansible_env, spec, tmp_path):
    """Validated before it replaces anything: the file (and every command that reads it) stays as it was."""
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text("# the spec before\n" + yaml.safe_dump(spec))
    before = (spec_path.read_text(), spec_path.stat().st_mtime_ns)
    broken = dict(spec, server=dict(spec["server"], port=70000))
    result, _ = _module(ansible_env, {"spec": broken, "path": str(spec_path), "executable": str(BIN / "ds4-converge")})
    assert result["failed"] is True and result["rc"] == 2 and result["changed"] is False, result
    # the file still holds the old, valid port: the error names the new text (the module's `spec` by default)
    assert result["msg"].startswith("ds4-converge exited 2 (invalid spec or usage): <new spec from spec>:"), result
    assert "server.port" in result["msg"] and str(spec_path) + ":" not in result["msg"]
    assert _line_of(result["spec_text"], result["msg"]).strip() == "port: 70000", result
    assert (spec_path.read_text(), spec_path.stat().st_mtime_ns) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ansible", "spec.yaml"])  # no scratch file left
    # and where there was no spec yet, no file and no directory
    fresh = tmp_path / "etc" / "spec.yaml"
    result, _ = _module(ansible_env, {"spec": broken, "path": str(fresh), "executable": str(BIN / "ds4-converge")})
    assert result["failed"] is True and result["rc"] == 2, result
    assert not fresh.parent.exists()


def test_ansible_validates_the_arguments(ansible_env, tmp_path):
    common = {"path": str(tmp_path / "spec.yaml"), "executable": str(BIN / "ds4-converge")}
    result, _ = _module(ansible_env, dict(common, spec="engine: {}"))
    assert result["failed"] is True
    assert result["msg"].startswith("argument 'spec' is of type str and we were unable to convert to dict")
    result, _ = _module(ansible_env, dict(common, spec={}, colour="red"))
    assert result["failed"] is True and "Unsupported parameters" in result["msg"] and "colour" in result["msg"]
    assert not (tmp_path / "spec.yaml").exists()


def test_no_spec_anywhere_is_said_plainly(ansible_env, tmp_path):
    result, _ = _module(ansible_env, {"path": str(tmp_path / "missing.yaml"), "executable": str(BIN / "ds4-converge")})
    assert result["failed"] is True
    assert result["msg"] == f"no spec: give `spec`, or put a spec file at {tmp_path}/missing.yaml"


def test_a_crash_of_the_tool_is_named_by_what_it_died_of(ansible_env, spec, tmp_path):
    """No JSON report, a traceback on stderr: the message says what the tool died of; stderr keeps the rest."""
    crashing = tmp_path / "ds4-converge"
    crashing.write_text("#!/bin/sh\nprintf 'Traceback (most recent call last):\\n  File \"x.py\", line 1\\n"
                        "TypeError: it broke\\n' >&2\nexit 1\n")
    crashing.chmod(0o755)
    result, _ = _module(ansible_env, {"spec": spec, "path": str(tmp_path / "spec.yaml"), "executable": str(crashing)})
    assert result["failed"] is True and result["rc"] == 1
    assert result["msg"] == ("ds4-converge exited 1 (failed): crashed: TypeError: it broke"
                             f" | details: ds4-converge logs {tmp_path}/spec.yaml")
    assert "File \"x.py\", line 1" in result["stderr"] and "report" not in result


def test_stopped_and_rolled_back_on_a_box(ansible_env, spec, tmp_path):
    """state: stopped and rolled_back run the tool's stop and rollback; check mode predicts them from status."""
    common = {"spec": spec, "path": str(tmp_path / "spec.yaml"), "executable": str(BIN / "ds4-converge")}
    result, _ = _module(ansible_env, dict(common, state="rolled_back"), "--check")
    assert result["failed"] is True and result["rc"] == 4, result  # never converged: nothing to roll back to
    assert "never converged" in result["msg"]
    result, _ = _module(ansible_env, dict(common, state="stopped"), "--check")
    assert result["failed"] is False and result["changed"] is True, result  # only the spec file would change
    result, _ = _module(ansible_env, common)
    assert result["failed"] is False and result["changed"] is True and result["release"], result
    try:
        result, _ = _module(ansible_env, dict(common, state="rolled_back"))
        assert result["failed"] is True and result["rc"] == 1, result  # no earlier good release
        assert result["cmd"][1:3] == ["rollback", common["path"]]
        result, _ = _module(ansible_env, dict(common, state="stopped"), "--check")
        assert (result["failed"], result["changed"]) == (False, True), result
        assert result["report"]["pid"], result  # the status it asked
        result, _ = _module(ansible_env, dict(common, state="stopped"))
        assert (result["failed"], result["changed"]) == (False, True) and result["report"]["stopped"], result
        result, _ = _module(ansible_env, dict(common, state="stopped"))
        assert (result["failed"], result["changed"]) == (False, False), result  # stopped already
    finally:
        subprocess.run([str(BIN / "ds4-converge"), "stop", common["path"]], capture_output=True, timeout=60)


# ------------------------------------------------------------------------------------------------ HAProxy

HAPROXY_CFG = """global
    stats socket {socket} level admin
defaults
    mode http
    timeout connect 1s
    timeout client 5s
    timeout server 5s
frontend fleet
    bind 127.0.0.1:{port}
    default_backend ds4
backend ds4
    server spark1 127.0.0.1:{spark1}
    server spark2 127.0.0.1:{spark2}
"""


@pytest.fixture
def haproxy():
    """A real HAProxy with backend ds4 (servers spark1 and spark2, no health checks) and its admin socket."""
    binary = programs.haproxy()
    if binary is None:
        pytest.fail(f"haproxy is not installed (looked in {programs.haproxy_looked_in()}): .ci/system-deps.sh")
    # not pytest's tmp_path: an AF_UNIX socket's path holds ~107 bytes
    with tempfile.TemporaryDirectory(prefix="ds4h.") as folder:
        admin = Path(folder) / "admin.sock"
        config = Path(folder) / "haproxy.cfg"
        config.write_text(HAPROXY_CFG.format(socket=admin, port=free_port(), spark1=free_port(), spark2=free_port()))
        proc = subprocess.Popen([binary, "-db", "-f", str(config)], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 20
            while not admin.exists():
                assert proc.poll() is None and time.monotonic() < deadline, "haproxy did not open its admin socket"
                time.sleep(0.05)
            yield str(admin)
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def _runtime():
    spec = importlib.util.spec_from_file_location("haproxy_runtime",
                                                  REPO / "plugins" / "module_utils" / "haproxy_runtime.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_runtime_client_reads_and_sets_a_servers_state(haproxy, tmp_path):
    runtime = _runtime()
    client = runtime.RuntimeClient(haproxy)
    assert client.statuses() == {"spark1": "no check", "spark2": "no check"}
    row = client.server("ds4", "spark1")
    assert runtime.admin_state(row) == {"state": "ready", "status": "no check", "sessions": 0}
    assert client.server("ds4", "spark9") is None and client.server("other", "spark1") is None
    assert client.set_state("ds4", "spark1", "maint") == ""  # HAProxy says nothing when it worked
    assert runtime.admin_state(client.server("ds4", "spark1"))["state"] == "maint"
    assert client.statuses() == {"spark1": "MAINT", "spark2": "no check"}
    assert client.set_state("ds4", "spark1", "drain") == ""
    assert runtime.admin_state(client.server("ds4", "spark1"))["state"] == "drain"
    assert "No such server" in client.set_state("ds4", "spark9", "drain")  # HAProxy's own refusal
    with pytest.raises(OSError):
        runtime.RuntimeClient(str(tmp_path / "no.sock")).stat()


def test_the_runtime_client_is_bounded_by_a_socket_that_never_answers():
    """Accepted and then silence (a stopped HAProxy): the whole exchange ends within the bound, as an OSError."""
    with tempfile.TemporaryDirectory(prefix="ds4h.") as folder, \
            socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as mute:
        mute.bind(str(Path(folder) / "mute.sock"))
        mute.listen(1)
        client = _runtime().RuntimeClient(str(Path(folder) / "mute.sock"), timeout=0.5)
        started = time.monotonic()
        with pytest.raises(OSError):
            client.ask("show stat")
        assert time.monotonic() - started < 10


def test_haproxy_server_takes_a_server_out_and_puts_it_back(ansible_env, haproxy):
    """check mode says what it would do and sends nothing; maint, again (no change), ready; an unknown server."""
    client = _runtime().RuntimeClient(haproxy)
    common = {"socket": haproxy, "backend": "ds4", "server": "spark1", "timeout": 20}
    result, shown = _module(ansible_env, dict(common, state="maint"), "--check", "--diff", module=HAPROXY_MODULE)
    assert (result["failed"], result["changed"]) == (False, True), result
    assert result["before"]["state"] == "ready" and result["after"]["state"] == "maint", result
    assert "-ds4/spark1: ready\n+ds4/spark1: maint" in shown, shown
    assert client.statuses()["spark1"] == "no check"  # nothing sent
    result, _ = _module(ansible_env, dict(common, state="maint"), module=HAPROXY_MODULE)
    assert (result["failed"], result["changed"]) == (False, True), result
    assert result["after"] == {"state": "maint", "status": "MAINT", "sessions": 0}, result
    assert client.statuses() == {"spark1": "MAINT", "spark2": "no check"}
    result, _ = _module(ansible_env, dict(common, state="maint"), module=HAPROXY_MODULE)
    assert (result["failed"], result["changed"]) == (False, False), result
    result, _ = _module(ansible_env, dict(common, state="ready"), module=HAPROXY_MODULE)
    assert (result["failed"], result["changed"]) == (False, True), result
    assert result["after"]["status"] == "no check" and client.statuses()["spark1"] == "no check", result
    result, _ = _module(ansible_env, dict(common, server="spark9", state="drain"), module=HAPROXY_MODULE)
    assert result["failed"] is True and result["msg"] == "HAProxy has no server ds4/spark9 (show stat)", result
