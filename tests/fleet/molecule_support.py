"""What the molecule tests share: the environment of a scenario run and the run itself (each scenario has its own
test file, so that the two test workers can run two scenarios at once)."""
from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SCENARIO_TIMEOUT_S = 1200
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# where molecule, Ansible, ansible-compat, pip and ssh keep things in a home directory (other tools on PATH may
# write there when merely asked their version: pip asks rustc, and rustup's rustc writes ~/.rustup)
HOME_OF_THE_FLEET_TOOLS = {".ansible", ".cache", ".config", ".local", ".ssh"}


def _missing() -> list[str]:
    missing = [module for module in ("ansible", "molecule", "testinfra", "asyncssh")
               if importlib.util.find_spec(module) is None]
    missing += [tool for tool in ("molecule", "ansible-playbook")
                if not (BIN / tool).exists() and shutil.which(tool) is None]
    return missing


PYTESTMARK = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(_missing()), reason=f"fleet extra not installed ({', '.join(_missing())} missing): "
                                                 "pip install -e '.[test,fleet]'"),
]


def _path_without_sshd() -> str:
    """The caller's PATH, the venv first, and no directory that holds an sshd."""
    dirs = [str(BIN)] + [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and d != str(BIN)]
    return os.pathsep.join(d for d in dirs if not (Path(d) / "sshd").exists())


def _env(scratch: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MOLECULE_", "ANSIBLE_"))}
    (scratch / "home").mkdir()
    (scratch / "tmp").mkdir()
    env.update(
        PATH=_path_without_sshd(), HOME=str(scratch / "home"), TMPDIR=str(scratch / "tmp"),
        # short: ssh's control sockets live below it, and a unix socket path holds ~100 bytes
        MOLECULE_EPHEMERAL_DIRECTORY=str(scratch / "m"), ANSIBLE_HOME=str(scratch / "ansible"),
        # the hosts' temporary files: by default ~/.ansible/tmp as the ssh login expands it, the account's home,
        # which a plain user's run found created there (the hosts are this machine)
        ANSIBLE_REMOTE_TMP=str(scratch / "ansible" / "remote"),
        NO_COLOR="1", PY_COLORS="0", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    return env


def link_collection() -> None:
    """The collection ds4.converge is this checkout: build/collections holds a link to it (`make collection`)."""
    link = REPO / "build" / "collections" / "ansible_collections" / "ds4" / "converge"
    if not link.is_symlink() or link.resolve() != REPO:
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".converge.{os.getpid()}")
        tmp.symlink_to("../../../..")
        os.replace(tmp, link)


def _molecule(env: dict[str, str], *args: str, timeout: float) -> subprocess.CompletedProcess:
    # the shared base config named explicitly: molecule finds it on its own only at the root of a git checkout
    molecule = str(BIN / "molecule") if (BIN / "molecule").exists() else "molecule"
    return subprocess.run([molecule, "--base-config", str(REPO / ".config" / "molecule" / "config.yml"), *args],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


@contextlib.contextmanager
def scratch_dir():
    # not pytest's tmp_path: its paths are too long for ssh's control sockets
    with tempfile.TemporaryDirectory(prefix="ds4-fleet.") as path:
        yield Path(path)


def run_scenario(scenario: str, scratch: Path) -> None:
    """`molecule test` of one scenario, and what it may not leave behind."""
    link_collection()
    env = _env(scratch)
    # Ansible also finds the account's home without $HOME (`echo ~USER` for its temporary directories): where
    # that home has no .ansible or .ssh yet, it must have none afterwards either
    account_home = Path(pwd.getpwuid(os.getuid()).pw_dir)
    absent = [name for name in HOME_OF_THE_FLEET_TOOLS if not (account_home / name).exists()]
    try:
        proc = _molecule(env, "test", "--scenario-name", scenario, timeout=SCENARIO_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        _molecule(env, "destroy", "--scenario-name", scenario, timeout=120)  # engines, ssh server, the fleet dir
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        pytest.fail(f"molecule test -s {scenario} ran past {SCENARIO_TIMEOUT_S}s:\n{ANSI.sub('', out)[-6000:]}")
    output = ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"molecule test -s {scenario} exited {proc.returncode}:\n{output[-12000:]}"
    assert re.search(rf"{scenario}\s+: actions=\d+\s+successful=\d+\s+.*failed=0", output), output[-3000:]
    home = scratch / "home"
    written = sorted(p.name for p in home.iterdir() if p.name in HOME_OF_THE_FLEET_TOOLS - {".cache"})
    # ds4-converge keeps its no-op receipts in the host user's ~/.cache/ds4-converge (docs/performance.md: "A converged box
    # answers in about 0.1 s"): the hosts' own state, not a fleet tool's leftover
    written += sorted(f".cache/{p.name}" for p in (home / ".cache").glob("*") if p.name != "ds4-converge")
    assert written == [], f"written to HOME: {written}"
    created = sorted(name for name in absent if (account_home / name).exists())
    assert created == [], f"created in {account_home}: {created}"
    assert not (scratch / "m" / "fleet").exists(), "destroy left the fleet directory behind"
