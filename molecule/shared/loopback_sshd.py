#!/usr/bin/env python3
"""An SSH server of the fleet tests' own: the current user, 127.0.0.1, a free port, keys generated here.

The simulated Sparks are this machine; Ansible reaches each of them through its ordinary `ssh` connection, so
something must answer ssh without root and without a system sshd. This is asyncssh's server with what Ansible
and testinfra use from OpenSSH's: `exec` requests run through the user's login shell (stdin, stdout, stderr and
the exit status passed through), and the `sftp` subsystem. No shell sessions, no pty, no forwarding, public-key
login for the current user only.

    loopback_sshd.py start DIR   generate the keys (once), start the server in the background, wait until it
                                 listens, print its port
    loopback_sshd.py stop DIR    stop it (and the commands its sessions still run)
    loopback_sshd.py serve DIR   run it in the foreground (what `start` runs)

DIR receives everything, and nothing is written anywhere else: `host_ed25519` (the server's key), `id_ed25519`
(the client's, with `authorized_keys`), `known_hosts` (the host key under the alias `ds4-fleet`), `port`,
`sshd.pid`, `sshd.log`, and `ssh_config`, which is all a client needs: `ssh -F DIR/ssh_config spark1` reaches
this server as any host name, checks the host key against DIR/known_hosts only, and reads no ~/.ssh file.

Sessions get the HOME this server was started with (so a test that points HOME at an empty directory sees
anything a "host" writes there) and, as sshd does, a standard PATH rather than the caller's.
"""
from __future__ import annotations

import asyncio
import getpass
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import asyncssh

HOST_ALIAS = "ds4-fleet"  # what known_hosts names the server, whatever host name a client asked for
SESSION_PATH = "/usr/local/bin:/usr/bin:/bin"
START_TIMEOUT_S = 20
STOP_TIMEOUT_S = 10


def _write(path: Path, text: str, mode: int = 0o600) -> None:
    """Write atomically: a reader never sees half a port number or half a key."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


def make_keys(state: Path) -> None:
    """The server's host key and the client's key, once; ssh refuses private keys others can read (0600)."""
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    for name in ("host_ed25519", "id_ed25519"):
        if not (state / name).exists():
            key = asyncssh.generate_private_key("ssh-ed25519", comment=f"ds4-fleet {name}")
            _write(state / name, key.export_private_key().decode())
            _write(state / f"{name}.pub", key.export_public_key().decode(), 0o644)
    _write(state / "authorized_keys", (state / "id_ed25519.pub").read_text())
    host_key = (state / "host_ed25519.pub").read_text().split()[:2]
    _write(state / "known_hosts", f"{HOST_ALIAS} {' '.join(host_key)}\n", 0o644)


def ssh_config(state: Path, port: int) -> str:
    return "\n".join([
        "# Written by loopback_sshd.py: every host name is this machine's test ssh server.",
        "Host *",
        "  HostName 127.0.0.1",
        f"  Port {port}",
        f"  User {getpass.getuser()}",
        f"  IdentityFile {state / 'id_ed25519'}",
        "  IdentitiesOnly yes",
        "  IdentityAgent none",
        "  PasswordAuthentication no",
        "  KbdInteractiveAuthentication no",
        "  BatchMode yes",
        f"  HostKeyAlias {HOST_ALIAS}",
        f"  UserKnownHostsFile {state / 'known_hosts'}",
        "  GlobalKnownHostsFile /dev/null",
        "  StrictHostKeyChecking yes",
        "  UpdateHostKeys no",
        "  ConnectTimeout 10",
        "",
    ])


class OnlyMe(asyncssh.SSHServer):
    """Public-key login, and only as the user this server runs as (commands run as that user anyway)."""

    def begin_auth(self, username: str) -> bool:
        self._allowed = username == getpass.getuser()
        return True

    def public_key_auth_supported(self) -> bool:
        return self._allowed

    def password_auth_supported(self) -> bool:
        return False


class Sessions:
    """Runs each exec request as `$SHELL -c COMMAND` in a new session, as sshd does, and forgets it after."""

    def __init__(self) -> None:
        account = pwd.getpwuid(os.getuid())
        self.shell = account.pw_shell if account.pw_shell and os.access(account.pw_shell, os.X_OK) else "/bin/sh"
        self.home = os.environ.get("HOME") or account.pw_dir
        path = SESSION_PATH if os.getuid() else "/usr/local/sbin:/usr/sbin:/sbin:" + SESSION_PATH
        self.env = {"HOME": self.home, "USER": account.pw_name, "LOGNAME": account.pw_name, "SHELL": self.shell,
                    "PATH": path}
        self.running: set[int] = set()

    async def handle(self, process: asyncssh.SSHServerProcess) -> None:
        if not process.command:
            process.stderr.write(b"this server runs commands only (no interactive shell)\n")
            process.exit(1)
            return
        peer, local = process.get_extra_info("peername"), process.get_extra_info("sockname")
        env = dict(self.env)
        env.update({str(k): str(v) for k, v in process.env.items() if str(k) == "LANG" or str(k).startswith("LC_")})
        env["SSH_CONNECTION"] = f"{peer[0]} {peer[1]} {local[0]} {local[1]}"
        env["SSH_CLIENT"] = f"{peer[0]} {peer[1]} {local[1]}"
        child = await asyncio.create_subprocess_exec(
            self.shell, "-c", process.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env=env, cwd=self.home, start_new_session=True)
        self.running.add(child.pid)
        try:
            feeding = asyncio.ensure_future(self._feed(process, child))
            await asyncio.gather(self._drain(child.stdout, process.stdout), self._drain(child.stderr, process.stderr))
            status = await child.wait()
            feeding.cancel()
        finally:
            self.running.discard(child.pid)
        if status < 0:
            process.exit_with_signal(signal.Signals(-status).name.removeprefix("SIG"))
        else:
            process.exit(status)

    @staticmethod
    async def _feed(process: asyncssh.SSHServerProcess, child: asyncio.subprocess.Process) -> None:
        """The client's stdin to the command, then EOF (Ansible's pipelining sends the module this way)."""
        try:
            while data := await process.stdin.read(65536):
                child.stdin.write(data)
                await child.stdin.drain()
        except (asyncssh.Error, BrokenPipeError, ConnectionResetError):
            pass
        finally:
            child.stdin.close()

    @staticmethod
    async def _drain(source: asyncio.StreamReader, sink: asyncssh.SSHWriter) -> None:
        while data := await source.read(65536):
            try:
                sink.write(data)
                await sink.drain()
            except (asyncssh.Error, BrokenPipeError, ConnectionResetError):
                pass  # the client went away: keep reading so the command never blocks on a full pipe

    def stop_all(self) -> None:
        for pid in list(self.running):
            try:
                os.killpg(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


async def serve(state: Path) -> None:
    make_keys(state)
    sessions = Sessions()
    os.chdir(sessions.home)  # sftp's relative paths start in HOME, as with OpenSSH's sftp-server
    server = await asyncssh.listen(
        "127.0.0.1", 0, server_factory=OnlyMe, server_host_keys=[str(state / "host_ed25519")],
        authorized_client_keys=str(state / "authorized_keys"), process_factory=sessions.handle, encoding=None,
        sftp_factory=True, allow_scp=False, allow_pty=False, agent_forwarding=False, x11_forwarding=False,
        line_editor=False, keepalive_interval=0)
    port = server.sockets[0].getsockname()[1]
    _write(state / "ssh_config", ssh_config(state, port), 0o644)
    _write(state / "sshd.pid", f"{os.getpid()}\n", 0o644)
    _write(state / "port", f"{port}\n", 0o644)  # last: its presence means "listening"
    print(f"listening on 127.0.0.1:{port} as {getpass.getuser()}", flush=True)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopped.set)
    await stopped.wait()
    server.close()
    sessions.stop_all()
    await server.wait_closed()
    for name in ("port", "sshd.pid"):
        (state / name).unlink(missing_ok=True)
    print("stopped", flush=True)


def _running_pid(state: Path) -> int | None:
    """The pid in DIR/sshd.pid when it is alive and is this server for this DIR (not a recycled pid)."""
    try:
        pid = int((state / "sshd.pid").read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    return pid if b"serve" in cmdline and str(state).encode() in cmdline else None


def _listens(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def start(state: Path) -> int:
    state.mkdir(mode=0o700, parents=True, exist_ok=True)
    if _running_pid(state) and (state / "port").exists():
        port = int((state / "port").read_text())
        if _listens(port):
            print(port)
            return 0
    (state / "port").unlink(missing_ok=True)
    with open(state / "sshd.log", "ab") as log:
        server = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "serve", str(state)],
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True, close_fds=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            break
        if (state / "port").exists():
            port = int((state / "port").read_text())
            if _listens(port):
                print(port)
                return 0
        time.sleep(0.05)
    log_tail = (state / "sshd.log").read_text(errors="replace")[-2000:]
    if server.poll() is None:
        server.terminate()
    print(f"the test ssh server did not start within {START_TIMEOUT_S}s:\n{log_tail}", file=sys.stderr)
    return 1


def stop(state: Path) -> int:
    pid = _running_pid(state)
    if pid is None:
        print("not running")
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline:
        if _running_pid(state) is None:
            print(f"stopped {pid}")
            return 0
        time.sleep(0.05)
    print(f"the test ssh server {pid} did not stop within {STOP_TIMEOUT_S}s", file=sys.stderr)
    return 1


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop", "serve"):
        print(__doc__.split("\n\n")[2], file=sys.stderr)
        return 2
    command, state = argv[0], Path(argv[1]).resolve()
    if command == "serve":
        asyncio.run(serve(state))
        return 0
    return start(state) if command == "start" else stop(state)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
