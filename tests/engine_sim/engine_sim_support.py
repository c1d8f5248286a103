"""Helpers for the simulated ds4 engine tests: paths, free ports, process runner."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
ENGINE = REPO_ROOT / "engine"
MODELS = ENGINE / "models"
for _p in (str(ENGINE), str(MODELS)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

# build with a bare interpreter: the built programs must not need third-party packages
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
LOAD_SECONDS = "0.2"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run(cmd, cwd=None, env=None, timeout=60):
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DS4_")}
    env["DS4_SIM_LOAD_SECONDS"] = LOAD_SECONDS
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Proc:
    """A ds4-server process with its stderr in a file."""

    def __init__(self, binary, args, env, log_path):
        self.log_path = log_path
        self.err = open(log_path, "w")
        self.p = subprocess.Popen([str(binary)] + [str(a) for a in args], env=env,
                                  stdout=subprocess.PIPE, stderr=self.err, text=True)

    def log(self):
        return Path(self.log_path).read_text()

    def wait_for(self, text, timeout=10.0):
        end = time.time() + timeout
        while time.time() < end:
            if text in self.log():
                return True
            if self.p.poll() is not None:
                return text in self.log()
            time.sleep(0.02)
        return False

    def wait(self, timeout=10.0):
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, sig=signal.SIGTERM, timeout=10.0):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        rc = self.wait(timeout)
        if rc is None:
            self.p.kill()
            rc = self.p.wait()
        self.err.close()
        return rc


def serve(start, binary, *args, **kw):
    p, port = start(binary, *args, **kw)
    assert p.wait_for("ds4-server: listening on http://127.0.0.1:%d" % port), p.log()
    return p, "http://127.0.0.1:%d" % port
