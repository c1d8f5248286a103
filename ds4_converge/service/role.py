"""Service role: supervisord config and the ds4-server program, switched only when something differs.

The plan renders every file once and compares it with what is on disk; each change carries the rendered text
it writes (``Change.after``), so applying writes exactly what the plan showed.
"""
from __future__ import annotations

import os
import pwd
import shutil
from functools import partial
from pathlib import Path

from ds4_converge.core.context import Context
from ds4_converge.core.crashpoints import crash_point
from ds4_converge.core.layout import write_atomic
from ds4_converge.core.plan import Change, Finding, RoleFailed, RolePlan
from ds4_converge.core.shell import CommandFailed
from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.core.state import Deployment
from ds4_converge.models.gguf import judge_files
from ds4_converge.engine.server_args import UnsupportedSettings, not_rendered, server_argv
from ds4_converge.models.placement import SLOTS
from ds4_converge.service import front, render, secrets, switch, systemd, watchdog
from ds4_converge.service.supervisor import SupervisorError, supervisord_argv

NAME = "service"
LOCK_ENV = load_knowledge()["lock"]["env"]  # every ds4 program flock()s this file; one per instance


def desired_deployment(ctx: Context, current_conf: str | None = None, *, beside: bool = False) -> Deployment:
    """What should run. With a front door, on the slot HAProxy points at when nothing changes (a restart), else
    on the idle one: a new engine is reached by clients only once the probe passed (service/front.py). `beside`:
    the new engine is probed as a candidate on the idle slot (:func:`candidate_deployment`) and ends on the slot
    HAProxy points at."""
    if not front.enabled(ctx):
        return _deployment(ctx, ctx.spec.server, ctx.endpoint)
    for port in (front.live_port(ctx),) if beside else (front.live_port(ctx), front.idle_port(ctx)):
        deployment = _deployment(ctx, *_on_slot(ctx, port))
        if deployment.program_conf == current_conf:
            break
    return deployment


def candidate_deployment(ctx: Context) -> Deployment:
    """The new engine as a candidate beside the serving one: its own program, lock and log, on the idle slot."""
    return _deployment(ctx, *_on_slot(ctx, front.idle_port(ctx)), program=switch.candidate_program(ctx))


def _on_slot(ctx: Context, port: int):
    return ctx.spec.server.model_copy(update={"host": "127.0.0.1", "port": port}), f"http://127.0.0.1:{port}"


def _deployment(ctx: Context, server, endpoint: str, program: str | None = None) -> Deployment:
    program = program or server.name
    _check_models_for(ctx)
    kv_dir = ctx.host_path(server.kv_disk_dir) if server.kv_disk_dir else None
    try:
        argv = server_argv(ctx.release, server, ctx.models, kv_dir, ctx.spec.distributed)
    except UnsupportedSettings as exc:
        raise RoleFailed(str(exc)) from None
    env = {LOCK_ENV: str(ctx.layout.engine_lock(program)), **ctx.service_env, **server.env}
    worker = ctx.spec.distributed is not None and ctx.spec.distributed.worker
    hidden = {k: v for k, v in env.items() if k in server.env and secrets.is_secret(k)}
    # `env K=V … ds4-server`: every value is passed through shlex quoting, none through INI key=value parsing;
    # a secret goes through supervisord's environment= instead, sealed (service/secrets.py)
    command = [shutil.which("env") or "/usr/bin/env",
               *(f"{k}={v}" for k, v in sorted(env.items()) if k not in hidden), *argv]
    try:
        conf = render.program_conf(name=program, release=ctx.release.id, argv=command,
                                   directory=str(ctx.release.path), log=str(ctx.layout.engine_log(program)),
                                   user=server.user, stop_wait_s=switch.stop_grace(ctx.spec),
                                   ignores_first_term=worker, environment=secrets.environment_line(hidden),
                                   watchdog=switch.watched(ctx), cache=ctx.renders)
    except render.UnsafeValue as exc:
        raise RoleFailed(f"cannot render the program config: {exc}") from None
    files = [str(p) for p in (getattr(ctx.models, slot) for slot in SLOTS) if p]
    conf = conf + "".join(f"; model {p}: {_identity(Path(p))}\n" for p in files)
    return Deployment(release=ctx.release.id, program_conf=conf, command=command, endpoint=endpoint,
                      model_files=files)


def _check_models_for(ctx: Context) -> None:
    """The model files as the built engine version sees them (the models role could only guess the version)."""
    paths = {slot: getattr(ctx.models, slot) for slot in SLOTS}
    if not all(p is None or p.is_file() for p in paths.values()):
        return  # check mode before the download: the models role says when it is checked
    errors = judge_files(paths["main"], paths["mtp"], paths["dspark"], ctx.release.knowledge)
    if errors:
        raise RoleFailed("; ".join(errors) + f" (judged by the rules of engine {ctx.release.engine}: "
                         f"{ctx.release.engine_why or 'its release record'}); nothing was stopped")


def _identity(path: Path) -> str:
    """The model file's identity in the config, so that new bytes under the same path restart the engine.
    Derived from stat alone: adding a sha256 to the spec later must not look like a new model."""
    try:
        stat = path.stat()
    except OSError:  # check mode: the models role has not downloaded it yet
        return "inode (not downloaded yet)"
    return f"inode {stat.st_ino} size {stat.st_size} mtime_ns {stat.st_mtime_ns}"


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def plan(ctx: Context) -> RolePlan:
    name, layout, supervisor = ctx.spec.server.name, ctx.layout, ctx.supervisor
    changes: list[Change] = []
    notes: list[Finding] = []
    haproxy = front.executable() if front.enabled(ctx) else None
    try:
        main_conf = render.supervisord_conf(layout, front=front.haproxy_argv(layout, haproxy) if haproxy else None,
                                            cache=ctx.renders)
    except render.UnsafeValue as exc:  # paths.root is checked at validation; this guards the renderer's rule
        raise RoleFailed(f"paths.root: cannot render supervisord's config: {exc}") from None
    running = supervisor.is_running()
    if front.enabled(ctx):  # the front door's config first: supervisord may start HAProxy from it below
        try:
            front_conf = front.config(ctx, active=front.live_port(ctx))
        except (render.UnsafeValue, front.FrontError) as exc:
            raise RoleFailed(f"front: cannot render HAProxy's config: {exc}") from None
        path = front.config_path(layout)
        if _read(path) != front_conf:
            changes.append(Change(str(path), _read(path), front_conf,
                                  action=partial(_write_front, text=front_conf)))
    main_before = _read(layout.supervisord_conf)
    if main_before != main_conf:
        changes.append(Change(str(layout.supervisord_conf), main_before, main_conf,
                              action=partial(_write_config, path=layout.supervisord_conf, text=main_conf,
                                             before=main_before)))
    elif front.enabled(ctx) and running and not front.running(ctx):
        changes.append(Change(f"start the front door ({front.PROGRAM}, not running)",
                              action=partial(_start_front, before=None)))
    elif front.enabled(ctx) and running and ctx.state.last_good is not None:
        # HAProxy runs this config: it must send clients to last good (a run that died holding them, say)
        live = front.live_port(ctx)
        points_at = front.describe(ctx)["points_at"]
        if points_at != f"127.0.0.1:{live}":
            changes.append(Change(f"point the front door at 127.0.0.1:{live} (it sends clients to "
                                  f"{points_at or 'no engine'})", action=partial(_point_front, port=live)))
    with_systemd = systemd.has_systemd()
    unit = systemd.unit_path(name)
    if with_systemd:
        text = _unit(ctx)
        if _read(unit) != text:
            changes.append(Change(str(unit), _read(unit), text, action=partial(_install_unit, path=unit, text=text)))
    start = "start supervisord" + ("" if with_systemd else
                                   " directly (no systemd here: it will not come back after a reboot)")
    if not running and ctx.release is None:  # --check before the build; otherwise the cold start below
        changes.append(Change(start, action=partial(_start_supervisord, unit=unit if with_systemd else None)))
    info = supervisor.info(name) if running else None
    # STARTING, or RUNNING but still loading: supervisord is (re)starting it; the probe waits for it
    pid = info["pid"] if info and info["statename"] in ("RUNNING", "STARTING") else None
    current_conf = secrets.seal(_read(layout.program_conf(name)), layout)
    first = current_conf is None and pid is None  # nothing ran under this root: a first start, in check mode too
    # stale programs go before the switch: they would run beside ours
    changes += [Change(f"remove program {p.stem} " + ("(the candidate of a switch whose run died)"
                                                       if p.stem == switch.candidate_program(ctx)
                                                       else f"(renamed to {name})"),
                       before=_read(p), restarts=p.stem != switch.candidate_program(ctx),
                       action=partial(_remove_program, path=p, running=running))
                for p in stale_programs(ctx)]
    if ctx.release is None:
        # check mode before the build: the exact command line is known only once the binary lists its flags
        verb = "start" if first else "restart"
        changes.append(Change(f"{verb} {name} on release {ctx.build.release_id}", current_conf,
                              "(command line rendered after the build, from the flags ds4-server --help lists)\n",
                              restarts=True))
    else:
        beside, why = overlap(ctx, pid)
        ctx.desired = desired_deployment(ctx, current_conf, beside=beside)
        if not running:
            # a cold start: supervisord starts what its program file says, so write the new one first and
            # the engine starts once (never the old program, only to be stopped a moment later: an 81 GB load)
            changes.append(Change(str(layout.program_conf(name)), current_conf, ctx.desired.program_conf,
                                  restarts=True, action=partial(_cold_start, deployment=ctx.desired,
                                                                unit=unit if with_systemd else None)))
            notes.append(Finding("info", f"{start}, which starts {name} on release {ctx.desired.release}"))
        elif current_conf != ctx.desired.program_conf:
            candidate = candidate_deployment(ctx) if beside else None
            changes.append(Change(str(layout.program_conf(name)), current_conf, ctx.desired.program_conf,
                                  restarts=True, action=partial(_switch, deployment=ctx.desired, candidate=candidate)))
            if why:
                notes.append(Finding("info", why))
        elif pid is None or any(c.restarts for c in changes):
            changes.append(Change(f"start {name} (not running)" if pid is None else f"restart {name}",
                                  restarts=True, action=partial(_switch, deployment=ctx.desired)))
    ctx.restart_needed = any(c.restarts for c in changes)
    if ctx.release is not None and not ctx.restart_needed:
        changes += watch_changes(ctx)  # a restart's commit tells the watchdog itself (service/switch.py)
    findings = list(notes)  # a port held by someone else is preflight's finding (from the facts); apply re-checks
    if ctx.release is not None:
        findings += [Finding("info", note) for note in not_rendered(ctx.release, ctx.spec.server)]
    reason = (f"{name} runs release {ctx.release.id} (pid {pid}), config unchanged" if not changes
              else f"start {name} (first start)" if first and ctx.restart_needed
              else f"{'restart' if ctx.restart_needed else 'update'} {name}")
    return RolePlan(NAME, changes, reason=reason, findings=findings)


def overlap(ctx: Context, pid: int | None) -> tuple[bool, str]:
    """Does the new engine load beside the serving one (the front door's overlap switch, service/switch.py), and
    why, in words ('' without a front door)? Only with last good serving on one box, and memory for both
    (models/budget.py beside): otherwise the serving engine stops first and the front door holds requests."""
    from ds4_converge.models import budget

    if not front.enabled(ctx):
        return False, ""
    stops = "the serving engine stops before the new one loads (the front door holds requests meanwhile): "
    held = f"; {switch.held_for(ctx, ctx.release.id)}"
    last_good, estimate = ctx.state.last_good, ctx.memory_estimate
    if ctx.spec.front.overlap == "off":
        return False, stops + "front.overlap is off" + held
    if ctx.spec.distributed is not None:
        return False, stops + "a distributed part" + held
    if pid is None or last_good is None or not last_good.same_config(ctx.state.current):
        return False, stops + "last good does not serve" + held
    if estimate is None:
        return False, stops + "the memory budget is not known yet" + held
    shared = ctx.spec.engine.target in ctx.release.knowledge["load"].get("shared_mapping_targets", ())
    fits, numbers = budget.beside(estimate, ctx.memory_room, shared_weights=shared)
    if not fits:
        return False, stops + numbers + held
    return True, (f"the new engine loads beside the serving one on 127.0.0.1:{front.idle_port(ctx)}, and clients "
                  f"move to it once it passed the probe ({numbers})")


def watch_changes(ctx: Context) -> list[Change]:
    """health.watchdog changed while the engine did not: what the watchdog watches is written anew."""
    if ctx.state.last_good is None or not ctx.desired.same_config(ctx.state.last_good):
        return []
    path = watchdog.settings_path(ctx.layout)
    before, after = _read(path), switch.watch_text(ctx)
    if (before or None) == after:
        return []
    return [Change(str(path), before or None, after, action=lambda c: switch.watch_last_good(c) or "")]


def port_findings(ctx: Context, port: int | None = None) -> list[Finding]:
    """The engine binds only after minutes of loading: a port held by anyone but us must fail now, not then.
    Read again right before stopping what runs: another process may have taken the port since the facts.
    `port`: the slot the engine starts on (a front door's), else server.port."""
    from ds4_converge.facts import HostFacts
    from ds4_converge.facts.port import port_holders
    from ds4_converge.preflight.rules import port_findings as rule

    spec = ctx.spec
    if port is not None and port != spec.server.port:
        spec = spec.model_copy(update={"server": spec.server.model_copy(update={"port": port})})
    listeners = port_holders(spec.server.port)
    ours = ctx.supervisor.owns(l.pid for l in listeners if l.pid)
    return rule(spec, HostFacts(listeners=listeners), ours)


def stale_programs(ctx: Context) -> list[Path]:
    """Program files of another server.name under this root (a rename): they would run beside ours."""
    return sorted(p for p in ctx.layout.program_dir.glob("*.conf") if p.stem != ctx.spec.server.name)


def prepare_engine_lock(ctx: Context, program: str | None = None) -> Path:
    """The engine's lock file, created 0600 (as ds4 would) and owned by the user the engine runs as."""
    lock = ctx.layout.engine_lock(program or ctx.spec.server.name)
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
                               stop_wait_s=ctx.spec.server.stop_wait_s, cache=ctx.renders)


# ------------------------------------------------------------------------------------- what applying does


def _systemctl(*args: str) -> None:
    try:
        systemd.systemctl(*args)
    except CommandFailed as exc:
        raise RoleFailed(f"systemctl {' '.join(args)} {exc.what}", exc.tail) from None


def _write_config(ctx: Context, *, path: Path, text: str, before: str | None = None) -> str:
    ctx.layout.ensure()
    write_atomic(path, text)
    crash_point("supervisord-conf")
    if not front.enabled(ctx):  # no front door (any more): no slots for Prometheus to join on
        front.forget_textfile(ctx.layout)
    if ctx.supervisor.is_running():  # a front door added, changed or removed: supervisord learns it now
        if front.enabled(ctx):
            return "supervisord config updated; " + _start_front(ctx, before=before)
        ctx.supervisor.apply_program(front.PROGRAM)
    return "supervisord config updated"


def _write_front(ctx: Context, *, text: str) -> str:
    """HAProxy's config (and the files it names); a running HAProxy reloads it gracefully (in-flight requests
    finish on the old worker). A reload that fails fails the run, with the old files back: the old worker never
    stopped serving them."""
    ctx.layout.ensure()
    saved = front.saved_files(ctx.layout)
    front.write_files(ctx, text)
    if front.running(ctx):
        try:
            front.reload(ctx.layout, ctx.supervisor, front.executable())
        except front.FrontError as exc:
            front.restore_files(ctx.layout, saved)
            raise RoleFailed(f"front: {exc}; the front door's config was put back and HAProxy serves as it did",
                             _log_tail(ctx.layout.logs / "front.log")) from None
        return "front door config updated (HAProxy reloaded)"
    return "front door config written"


def _point_front(ctx: Context, *, port: int) -> str:
    front.point_at(ctx, port)
    return f"front door sends clients to 127.0.0.1:{port}"


def _log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return ""


def _start_front(ctx: Context, *, before: str | None) -> str:
    """supervisord runs the front door from its config now. When HAProxy cannot start (it cannot bind, say),
    supervisord's config goes back to what it was: the box is left as it was, and the run fails."""
    try:
        ctx.supervisor.apply_program(front.PROGRAM, wait_running=True)
    except SupervisorError as exc:
        tail = _log_tail(ctx.layout.logs / "front.log")
        if before is not None:
            write_atomic(ctx.layout.supervisord_conf, before)
            ctx.supervisor.apply_program(front.PROGRAM)
        raise RoleFailed(f"front: HAProxy does not start: {exc}" + ("; supervisord's config was put back"
                                                                     if before is not None else ""), tail) from None
    return f"front door {front.public_url(ctx)} up"


def _install_unit(ctx: Context, *, path: Path, text: str) -> str:
    """Enabled, so supervisord and the engine come back after a reboot; started by _start_supervisord."""
    write_atomic(path, text)
    _systemctl("daemon-reload")
    _systemctl("enable", path.name)
    return f"installed and enabled {path.name}"


def _start_supervisord(ctx: Context, *, unit: Path | None) -> str:
    ctx.layout.ensure()
    if unit is not None:
        _systemctl("start", unit.name)
        ctx.supervisor.wait_ready()
        return f"started supervisord ({unit.name})"
    ctx.say("no systemd on this host: starting supervisord directly (it will not come back after a reboot)")
    ctx.supervisor.start_daemon()
    return "started supervisord"


def _remove_program(ctx: Context, *, path: Path, running: bool = True) -> str:
    if running:
        ctx.supervisor.remove(path.stem)
    path.unlink(missing_ok=True)
    return f"removed program {path.stem}"


def _engine_port(deployment: Deployment) -> int | None:
    return front.port_of(deployment)


def _switch(ctx: Context, *, deployment: Deployment, candidate: Deployment | None = None) -> str:
    errors = [f for f in port_findings(ctx, _engine_port(candidate or deployment)) if f.level == "error"]
    if errors:
        raise RoleFailed(str(errors[0]))
    name = ctx.spec.server.name
    if candidate is not None:
        prepare_engine_lock(ctx, switch.candidate_program(ctx))
        prepare_engine_lock(ctx)
        switch.switch_beside(ctx, candidate)
        return f"started {switch.candidate_program(ctx)} on release {candidate.release} beside {name}"
    if ctx.supervisor.running_pid(name):
        ctx.say(f"stopping {name} (SIGTERM, waiting for its process group)")
    prepare_engine_lock(ctx)
    switch.switch(ctx, deployment)
    drained = f" ({ctx.drained.describe()})" if ctx.drained and ctx.drained.in_flight else ""
    return f"started {name} on release {deployment.release}{drained}"


def _cold_start(ctx: Context, *, deployment: Deployment, unit: Path | None) -> str:
    """supervisord is down: the switch writes the new program file, then starts supervisord (service/switch.py)."""
    errors = [f for f in port_findings(ctx, _engine_port(deployment)) if f.level == "error"]
    if errors:
        raise RoleFailed(str(errors[0]))
    ctx.layout.ensure()
    prepare_engine_lock(ctx)
    deployment = switch.cold_start(ctx, deployment, start_supervisord=partial(_start_supervisord, ctx, unit=unit))
    said = f"started {ctx.spec.server.name} on release {deployment.release}"
    return said + (f"; {_start_front(ctx, before=None)}" if front.enabled(ctx) else "")
