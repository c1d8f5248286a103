"""Where a fleet run with nothing to change spends its time, against a plain Ansible no-op of the same inventory.

The fleet of the molecule `haproxy` scenario: three simulated Sparks on this machine, each behind its own front
door (HAProxy under its supervisord), the fleet's HAProxy in front of them, each reached over real ssh
(molecule/shared/loopback_sshd.py). `molecule create` builds it; then, with the same inventory and environment
as the scenario's nested runs:

- a fresh fleet: `ansible-playbook ds4.converge.canary` on new boxes (build, install, first start);
- a run with nothing to change, several times (the median is reported), and `--check --diff` with nothing to change;
- a plain Ansible no-op of the same inventory: one `ping` per host, the hosts in parallel, and one host at a
  time (`serial: 1`, as the rollout's turns go), so the floor Ansible itself sets is beside what the role adds.

Ansible's builtin `junit` callback (ansible-core has no profile_tasks: that is ansible.posix's) records each
task's time on each host: the report lists where the no-change run spends it, summed over the hosts.

    .venv/bin/python benchmarks/fleet_noop.py              # ~3 min on 2 cores; updates REPORT.md
    .venv/bin/python benchmarks/fleet_noop.py --runs 5 --no-report
"""
from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from report_file import measured_on, write_section

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
HEADING = "## Fleet: a run with nothing to change, against a plain Ansible no-op"
PLAIN = """---
- name: One ping per host (the hosts in parallel)
  hosts: sparks
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""
TURNS = """---
- name: One ping per host, one host at a time (the floor of a rollout's turns)
  hosts: sparks
  serial: 1
  gather_facts: false
  tasks:
    - name: Ping
      ansible.builtin.ping:
"""

def environment(scratch: Path) -> dict[str, str]:
    """The environment of the scenario's runs (.config/molecule/config.yml's provisioner env), in `scratch`."""
    eph = scratch / "m"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MOLECULE_", "ANSIBLE_"))}
    (scratch / "home").mkdir(exist_ok=True)
    (scratch / "tmp").mkdir(exist_ok=True)
    env.update(PATH=os.pathsep.join([str(BIN), "/usr/bin", "/bin", "/usr/sbin", "/sbin"]), HOME=str(scratch / "home"),
               TMPDIR=str(scratch / "tmp"), NO_COLOR="1", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               MOLECULE_EPHEMERAL_DIRECTORY=str(eph), MOLECULE_PROJECT_DIRECTORY=str(REPO),
               ANSIBLE_HOME=str(scratch / "ansible"))  # molecule's own (as tests/fleet/molecule_support.py)
    return env


def ansible_env(env: dict, scratch: Path, junit: Path | None) -> dict[str, str]:
    eph = scratch / "m"
    installed = scratch / "c"  # install_collection's, when the collection is measured installed
    out = dict(env, ANSIBLE_HOME=str(eph / "ansible"), ANSIBLE_LOCAL_TEMP=str(eph / "ansible" / "tmp"),
               ANSIBLE_REMOTE_TEMP=str(eph / "ansible" / "remote-tmp"), ANSIBLE_SSH_CONTROL_PATH_DIR=str(eph / "cp"),
               ANSIBLE_SSH_COMMON_ARGS=f"-F {eph}/fleet/ssh/ssh_config",
               ANSIBLE_COLLECTIONS_PATH=str(installed if installed.is_dir() else REPO / "build" / "collections"),
               ANSIBLE_PIPELINING="true", ANSIBLE_FORKS="5")
    if junit is not None:
        out.update(ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.junit", JUNIT_OUTPUT_DIR=str(junit),
                   JUNIT_TASK_CLASS="yes", JUNIT_INCLUDE_SETUP_TASKS_IN_REPORT="yes")
    return out


def install_collection(env: dict, scratch: Path, source: Path = REPO) -> None:
    """As an operator has it: `make collection-build` (the tool's wheel inside), the tarball installed with
    ansible-galaxy; no checkout for the playbook to build a wheel from. Another `source` (an export of an earlier
    commit, to compare) is built by the same two steps, without make (its Makefile would reinstall this venv)."""
    if source == REPO:
        build = [["make", "collection-build", f"VENV={BIN.parent}"]]
        out = REPO / "build"
    else:
        out = scratch / "collection-build"
        (out / "wheel").mkdir(parents=True, exist_ok=True)
        (out / "setup.cfg").write_text(f"[build]\nbuild_base = {out}/wheel/build\n[egg_info]\negg_base = {out}/wheel\n"
                                       f"[bdist_wheel]\nbdist_dir = {out}/wheel/bdist\n")
        env = dict(env, DIST_EXTRA_CONFIG=str(out / "setup.cfg"), SOURCE_DATE_EPOCH="315532800")
        build = [[str(BIN / "python"), "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
                  "--no-build-isolation", "--no-cache-dir", "--wheel-dir", str(source / "roles/ds4_converge/files"),
                  str(source)],
                 [str(BIN / "ansible-galaxy"), "collection", "build", "--force", "--output-path", str(out), str(source)]]
    for argv in build:
        _checked(argv, env, source)
    _checked([str(BIN / "ansible-galaxy"), "collection", "install", "--force", "-p", str(scratch / "c"),
              *map(str, sorted(out.glob("ds4-converge-*.tar.gz")))], env, source)


def _checked(argv: list[str], env: dict, cwd: Path) -> None:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv[:4])} exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")


def molecule(env: dict, *args: str) -> None:
    proc = subprocess.run([str(BIN / "molecule"), "--base-config", str(REPO / ".config" / "molecule" / "config.yml"),
                           *args, "--scenario-name", "haproxy"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    if proc.returncode:
        raise SystemExit(f"molecule {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}")


def playbook(env: dict, scratch: Path, *args: str, junit: Path | None = None) -> float:
    """One ansible-playbook run against the scenario's inventory: its wall time (s)."""
    started = time.monotonic()
    proc = subprocess.run([str(BIN / "ansible-playbook"), "--inventory", str(scratch / "m" / "inventory"), *args],
                          cwd=REPO, env=ansible_env(env, scratch, junit), capture_output=True, text=True, timeout=900)
    elapsed = time.monotonic() - started
    if proc.returncode:
        raise SystemExit(f"ansible-playbook {' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-4000:]}")
    return elapsed


def task_times(junit: Path) -> tuple[dict[str, float], dict[str, float], int]:
    """Seconds per task (summed over hosts) and per host, and how many task results, from the junit files.
    Includes (include_role, include_tasks) span the tasks they include: left out, so nothing counts twice."""
    per_task, per_host, results = collections.defaultdict(float), collections.defaultdict(float), 0
    for path in junit.glob("*.xml"):
        for case in ET.parse(path).getroot().iter("testcase"):
            name, seconds = case.get("name") or "", float(case.get("time") or 0)
            task = name.split("] ", 1)[-1].split(": ", 1)[-1]
            host = name[1:].split("]", 1)[0] if name.startswith("[") else "?"
            if any(word in name for word in ("include_role", "include_tasks", "_raw_params=", "tasks_from=")):
                continue
            per_task[_short(task)] += seconds
            per_host[host] += seconds
            results += 1
    return per_task, per_host, results


def _short(task: str) -> str:
    """The task's name without its arguments (junit appends them)."""
    for cut in (" argv=", " path=", " url=", " src=", " spec=", " socket=", " msg=", " cmd=", " that=", " state=",
                " argument_spec=", " name=", " ds4_converge_", " seconds=", " content=", " data="):
        if cut in task:
            task = task.split(cut, 1)[0]
    return task.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="no-change runs (median reported)")
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--collection-from", type=Path, default=REPO, metavar="DIR",
                        help="build the collection from DIR (e.g. `git archive` of an earlier commit) instead of "
                             "this checkout; the fleet is this checkout's molecule scenario all the same")
    parser.add_argument("--from-checkout", action="store_true",
                        help="the collection linked from this checkout (each run builds the wheel) instead of the "
                             "installed tarball")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ds4-bench-fleet.") as tmp:  # short: ssh's control sockets live below it
        scratch = Path(tmp)
        env = environment(scratch)
        if not args.from_checkout:
            install_collection(env, scratch, args.collection_from.resolve())
        molecule(env, "create")
        try:
            fresh = playbook(env, scratch, "ds4.converge.canary")
            noop, junits = [], []
            for index in range(args.runs):
                junits.append(scratch / f"junit-{index}")
                noop.append(playbook(env, scratch, "ds4.converge.canary", junit=junits[-1]))
            check = playbook(env, scratch, "ds4.converge.canary", "--check", "--diff")
            (scratch / "plain.yml").write_text(PLAIN)
            (scratch / "turns.yml").write_text(TURNS)
            ping = [playbook(env, scratch, str(scratch / "plain.yml")) for _ in range(args.runs)]
            turns = [playbook(env, scratch, str(scratch / "turns.yml")) for _ in range(args.runs)]
        finally:
            molecule(env, "destroy")
        per_task, per_host, results = task_times(junits[-1])
    load_end = os.getloadavg()[0]
    rows = sorted(per_task.items(), key=lambda item: -item[1])
    text = "\n".join([
        HEADING, "",
        f"{measured_on('fleet_noop.py')}, ansible-core {_ansible_version()}; load average {load:.1f} at the "
        f"start, {load_end:.1f} at the end (a shared machine: other engineers' tests ran meanwhile). The molecule "
        f"`haproxy` fleet: three simulated Sparks, each behind its own front door, the fleet's HAProxy in front, "
        f"each reached over real ssh (`ANSIBLE_PIPELINING`, control persist, 5 forks); "
        + ("the collection linked from this checkout (each run builds the wheel on the controller)."
           if args.from_checkout else "the collection built with `make collection-build` and installed from its "
           "tarball (the tool's wheel inside, no checkout), as an operator has it."),
        "",
        "| run | wall time |", "|---|---|",
        f"| a fresh fleet (build, install, first start) | {fresh:.1f} s |",
        f"| nothing to change, median of {len(noop)} | **{statistics.median(noop):.1f} s** "
        f"({', '.join(f'{t:.1f}' for t in noop)}) |",
        f"| nothing to change, `--check --diff` | {check:.1f} s |",
        f"| plain Ansible: one `ping` per host, the hosts in parallel, median of {len(ping)} | "
        f"{statistics.median(ping):.1f} s |",
        f"| plain Ansible: one `ping` per host, `serial: 1` (a rollout's turns), median of {len(turns)} | "
        f"{statistics.median(turns):.1f} s |",
        "",
        f"Nothing to change / plain `ping`: **{statistics.median(noop) / statistics.median(ping):.1f}×**; / "
        f"`ping` one host at a time: {statistics.median(noop) / statistics.median(turns):.1f}×. Target: under 45 s "
        f"for three hosts.",
        "",
        "A turn with nothing to change, per host and one host after the other: reach it (`ping`), read its "
        "installed build (`cat`), plan (`--json --check`: the tool answers from its no-op receipt), read its "
        "place in the balancer (`haproxy_server` in check mode), converge (the no-op, from the receipt), ask "
        "`/v1/models` from the host; then the closing plays, with nothing to do for a host its turn left in the "
        "balancer. Not done any more in such a run (issue 38): the wheel pushed to every host (now only where the "
        "installed build's checksum differs), the wheel's checksum taken in each host's turn (now once), the full "
        "plan (now the receipt), and the closing play's second `status`, probe and `ready` of every host.",
        "",
        f"Where the last no-change run spent its time (junit callback: {results} task results, includes left "
        f"out; seconds summed over the hosts, the hosts of a turn one after the other), per host: "
        + ", ".join(f"{host} {seconds:.1f} s" for host, seconds in sorted(per_host.items())) + ".",
        "",
        "| task | s (all hosts) |", "|---|---|",
        *[f"| {name} | {seconds:.2f} |" for name, seconds in rows[:15]],
    ])
    print(text)
    if not args.no_report:
        write_section(HEADING, text + "\n")
    return 0


def _ansible_version() -> str:
    try:
        from ansible.release import __version__
    except ImportError:
        return "?"
    return __version__


if __name__ == "__main__":
    sys.exit(main())
