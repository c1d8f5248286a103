"""Service role: supervisord config and the ds4-server program, switched only when something differs."""
from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path

from ds4_converge.service import render, start_log
from ds4_converge.core.context import Context
from ds4_converge.core.layout import write_atomic
from ds4_converge.core.plan import Change, Finding, RoleFailed, RolePlan
from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.engine.server_args import UnsupportedSettings, not_rendered, server_argv
from ds4_converge.core.state import Deployment
from ds4_converge.service.supervisor import supervisord_argv

NAME = "service"
LOCK_ENV = load_knowledge()["lock"]["env"]  # every ds4 program flock()s this file; one per instance
SYSTEMD_DIR = Path("/etc/systemd/system")


def has_systemd() -> bool:
    return Path("/run/systemd/system").is_dir()


def unit_path(ctx: Context) -> Path:
    return SYSTEMD_DIR / f"ds4-converge-{ctx.spec.server.name}.service"


def desired_deployment(ctx: Context) -> Deployment:
    server = ctx.spec.server
    kv_dir = ctx.host_path(server.kv_disk_dir) if server.kv_disk_dir else None
    try:
        argv = server_argv(ctx.release, server, ctx.models, kv_dir)
    except UnsupportedSettings as exc:
        raise RoleFailed(str(exc)) from None
    env = {LOCK_ENV: str(ctx.layout.engine_lock(server.name)), **ctx.service_env, **server.env}
    # `env K=V … ds4-server`: every value is passed through shlex quoting, none through INI key=value parsing
    command = [shutil.which("env") or "/usr/bin/env", *(f"{k}={v}" for k, v in sorted(env.items())), *argv]
    try:
        conf = render.program_conf(name=server.name, release=ctx.release.id, argv=command,
                                   directory=str(ctx.release.path), log=str(ctx.layout.engine_log(server.name)),
                                   user=server.user, stop_wait_s=server.stop_wait_s)
    except render.UnsafeValue as exc:
        raise RoleFailed(f"cannot render the program config: {exc}") from None
    files = [str(p) for p in (ctx.models.main, ctx.models.mtp, ctx.models.dspark) if p]
    conf = conf + "".join(f"; model {p}: {_identity(Path(p))}\n" for p in files)
    return Deployment(release=ctx.release.id, program_conf=conf, command=command, endpoint=ctx.endpoint,
                      model_files=files)


def _identity(path: Path) -> str:
    """The model file's identity in the config, so that new bytes under the same path restart the engine.
    Derived from stat alone: adding a sha256 to the spec later must not look like a new model."""
    stat = path.stat()
    return f"inode {stat.st_ino} size {stat.st_size} mtime_ns {stat.st_mtime_ns}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def plan(ctx: Context) -> RolePlan:
    name, layout, supervisor = ctx.spec.server.name, ctx.layout, ctx.supervisor
    changes: list[Change] = []
    main_conf = render.supervisord_conf(layout)
    if _read(layout.supervisord_conf) != main_conf:
        changes.append(Change(str(layout.supervisord_conf), _read(layout.supervisord_conf), main_conf))
    if has_systemd():
        unit = _unit(ctx)
        if _read(unit_path(ctx)) != unit:
            changes.append(Change(str(unit_path(ctx)), _read(unit_path(ctx)), unit))
    running = supervisor.is_running()
    if not running:
        changes.append(Change("start supervisord" + ("" if has_systemd() else
                                                      " directly (no systemd here: it will not come back after a reboot)")))
    pid = supervisor.running_pid(name) if running else None
    current_conf = _read(layout.program_conf(name))
    if ctx.release is None:
        # check mode before the build: the exact command line is known only once the binary lists its flags
        changes.append(Change(f"restart {name} on release {ctx.build.release_id}", current_conf,
                              "(command line rendered after the build, from the flags ds4-server --help lists)\n",
                              restarts=True))
    else:
        ctx.desired = desired_deployment(ctx)
        if current_conf != ctx.desired.program_conf:
            changes.append(Change(str(layout.program_conf(name)), current_conf, ctx.desired.program_conf,
                                  restarts=True))
        elif pid is None:
            changes.append(Change(f"start {name} (not running)", restarts=True))
    changes += [Change(f"remove program {p.stem} (renamed to {name})", before=_read(p), restarts=True)
                for p in stale_programs(ctx)]
    ctx.restart_needed = any(c.restarts for c in changes)
    findings = port_findings(ctx) if ctx.restart_needed else []
    if ctx.release is not None:
        findings += [Finding("info", note) for note in not_rendered(ctx.release, ctx.spec.server)]
    reason = (f"{name} runs release {ctx.release.id} (pid {pid}), config unchanged" if not changes
              else f"{'restart' if ctx.restart_needed else 'update'} {name}")
    return RolePlan(NAME, changes, reason=reason, findings=findings)


def port_findings(ctx: Context) -> list[Finding]:
    """The engine binds only after minutes of loading: a port held by anyone but us must fail now, not then."""
    from ds4_converge.facts import HostFacts
    from ds4_converge.facts.port import port_holders
    from ds4_converge.preflight.rules import port_findings as rule

    return rule(ctx.spec, HostFacts(listeners=port_holders(ctx.spec.server.port)), managed_pids(ctx))


def managed_pids(ctx: Context) -> set[int]:
    """Every process our supervisord runs under this root, with descendants: never a foreign port holder."""
    pids = {info["pid"] for info in ctx.supervisor.all_processes() if info["pid"]}
    return set().union(*(_family(pid) for pid in pids)) if pids else set()


def _family(pid: int) -> set[int]:
    """A process and its descendants (the env wrapper execs, but be safe with forks)."""
    family, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            family.add(child)
            frontier.append(child)
    return family


def stale_programs(ctx: Context) -> list[Path]:
    """Program files of another server.name under this root (a rename): they would run beside ours."""
    return sorted(p for p in ctx.layout.program_dir.glob("*.conf") if p.stem != ctx.spec.server.name)


def apply(ctx: Context, plan: RolePlan) -> str:
    layout, name, supervisor = ctx.layout, ctx.spec.server.name, ctx.supervisor
    layout.ensure()
    write_atomic(layout.supervisord_conf, render.supervisord_conf(layout))
    if has_systemd() and _read(unit_path(ctx)) != _unit(ctx):
        _install_unit(ctx)
    if not supervisor.is_running():
        _start_supervisord(ctx)
    if ctx.restart_needed:
        for stale in stale_programs(ctx):
            supervisor.remove(stale.stem)
            stale.unlink()
        errors = port_findings(ctx)  # facts again: right before stopping
        if errors:
            raise RoleFailed(str(errors[0]))
        if supervisor.running_pid(name):
            ctx.say(f"stopping {name} (SIGTERM, waiting for its process group)")
        prepare_engine_lock(ctx)
        ctx.switched = True
        switch_to(ctx, ctx.desired.stamped())
        return f"started {name} on release {ctx.desired.release}"
    return "supervisord config updated"


def prepare_engine_lock(ctx: Context) -> Path:
    """The engine's lock file, created 0600 (as ds4 would) and owned by the user the engine runs as."""
    lock = ctx.layout.engine_lock(ctx.spec.server.name)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    if ctx.spec.server.user:
        entry = pwd.getpwnam(ctx.spec.server.user)
        os.chown(lock, entry.pw_uid, entry.pw_gid)
    return lock


def _unit(ctx: Context) -> str:
    return render.systemd_unit(name=ctx.spec.server.name,
                               command=render.command_line(supervisord_argv(ctx.layout.supervisord_conf,
                                                                            foreground=True)),
                               stop_wait_s=ctx.spec.server.stop_wait_s)


def _install_unit(ctx: Context) -> None:
    """Enabled, so supervisord and the engine come back after a reboot; started by _start_supervisord."""
    write_atomic(unit_path(ctx), _unit(ctx))
    subprocess.run(["systemctl", "daemon-reload"], check=True)
    subprocess.run(["systemctl", "enable", unit_path(ctx).name], check=True)


def _start_supervisord(ctx: Context) -> None:
    if has_systemd():
        subprocess.run(["systemctl", "start", unit_path(ctx).name], check=True)
        ctx.supervisor.wait_ready()
    else:
        ctx.say("no systemd on this host: starting supervisord directly (it will not come back after a reboot)")
        ctx.supervisor.start_daemon()


def switch_to(ctx: Context, deployment: Deployment) -> None:
    """Stop what runs (whole process group), then start `deployment` exactly as recorded."""
    name = ctx.spec.server.name
    ctx.supervisor.stop(name, grace=ctx.spec.server.stop_wait_s)
    ctx.state.current = deployment
    ctx.state.save(ctx.layout.state_file)
    write_atomic(ctx.layout.program_conf(name), deployment.program_conf)
    ctx.say(f"starting {name} on release {deployment.release}")
    ctx.start = start_log.mark(ctx.layout, name)  # a failure report shows only what this start wrote
    ctx.supervisor.load(name)
