"""Distributed mode of ds4 b030961 (ds4_distributed.c), simulated: --role/--layers/--listen/--coordinator.

Compiled into a build only when its sim.conf says `distributed = 1` (then `--help` lists the four flags under
"Distributed Inference", as b030961's `--help distributed` does); other builds are unchanged.

- worker: after the load, binds its data port (--listen; it accepts for as long as the worker runs, connected
  or not), logs the real worker's lines and reaches for the coordinator, retrying every DS4_SIM_RETRY_S
  (default 1; the real worker ~6.1 s), sends `HELLO <layers>`, and on EOF logs `coordinator disconnected;
  reconnecting`. It never binds HTTP. Like the real worker it ignores the first SIGTERM; the second exits 130.
  Each `WORK <token ids>` it is sent is checked as the real worker checks it: an id at or above its own
  vocabulary (the length of its GGUF's token table) is answered `ERR WORK token id is outside the model
  vocabulary`, else `OK`.
- coordinator: listens on --listen for workers and, like the real one, binds its HTTP port right after its load:
  until its own range and the workers' cover layers 0..42 and the output head, every completion is answered
  HTTP 500 `distributed route incomplete: missing layer N` (/v1/models answers). Once complete, each completion
  sends its prompt's token ids to the workers first, and a worker's refusal is the completion's 500.
"""
import os
import socket
import sys
import threading
import time

import ds4_common as C

N_LAYERS = 43
FLAGS = {"--role": 1, "--layers": 1, "--listen": 2, "--coordinator": 2}
HELP = """
Distributed Inference

  --role ROLE                    Distributed role: coordinator or worker.
  --layers A:B                   Inclusive layer slice, e.g. 0:20 or 21:output.
  --listen HOST PORT             Coordinator listen address; workers may use it for their data listener.
  --coordinator HOST PORT        Coordinator address for --role worker.
"""


def enabled():
    return C._conf("distributed", "0") == "1"


def _bad(msg):
    C.log("ds4-server: %s" % msg)
    sys.exit(2)


def parse_layers(text):
    start, colon, end = text.partition(":")
    if not colon or not start or not end:
        _bad("invalid --layers %s: expected A:B or A:output" % text)
    if not start.isdigit() or not (end == "output" or end.isdigit()):
        _bad("invalid --layers %s: invalid layer in %s" % (text, text))
    if end != "output" and int(end) < int(start):
        _bad("invalid --layers %s: layer range end precedes start in %s" % (text, text))
    return int(start), (N_LAYERS - 1 if end == "output" else int(end)), end == "output"


def split(argv):
    """(argv without the distributed flags, their values); the engine's checks and exit 2 on a bad one."""
    rest, opts, i = [], {}, 0
    while i < len(argv):
        arg = argv[i]
        if arg in FLAGS and enabled():
            n = FLAGS[arg]
            if i + n >= len(argv):
                _bad("%s requires an argument" % arg)
            values = argv[i + 1:i + 1 + n]
            if n == 2 and not (values[1].isdigit() and 0 < int(values[1]) <= 65535):
                _bad("invalid value for %s: %s" % (arg, values[1]))
            opts[arg] = values[0] if n == 1 else (values[0], int(values[1]))
            i += 1 + n
            continue
        rest.append(arg)
        i += 1
    role = opts.get("--role")
    if role is None:
        if opts:
            _bad("distributed options require --role coordinator or --role worker")
        return rest, None
    if role not in ("coordinator", "worker"):
        _bad("invalid distributed role: %s (valid roles: none, coordinator, worker)" % role)
    if "--layers" not in opts:
        _bad("--role %s requires --layers" % role)
    opts["layers"] = parse_layers(opts["--layers"])
    if role == "coordinator" and "--listen" not in opts:
        _bad("--role coordinator requires --listen HOST PORT")
    if role == "coordinator" and "--coordinator" in opts:
        _bad("--role coordinator must not use --coordinator")
    if role == "worker" and "--coordinator" not in opts:
        _bad("--role worker requires --coordinator HOST PORT")
    if role == "coordinator" and opts["layers"][0] != 0:
        C.log("ds4: coordinator layer range must start at layer 0")
        sys.exit(2)
    return rest, opts


def _addr(host):
    return "127.0.0.1" if host in ("localhost", "0.0.0.0", "*") else host


def _listener(host, port):
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((_addr(host), port))
    sock.listen(16)
    return sock


def run_worker(opts, vocab):
    """Never returns: the process ends by a second signal or SIGKILL, as the real worker does.
    vocab: the length of its model's token table (the real worker's ds4_engine_vocab_size())."""
    layers = opts["--layers"]
    host, port = opts.get("--listen", ("*", 0))
    c_host, c_port = opts["--coordinator"]
    try:
        data = _listener(host, port)
    except OSError as e:
        C.die("ds4: distributed worker: failed to listen on %s:%d: %s" % (host, port, e.strerror), 1)

    def accept_forever():
        while True:
            conn, _ = data.accept()
            conn.close()

    threading.Thread(target=accept_forever, daemon=True).start()
    C.log("ds4: distributed worker: layers %s model_id=0 data_listen=%s:%d connecting to coordinator %s:%d"
          % (layers, host, data.getsockname()[1], c_host, c_port))
    retry = C.setting_float("DS4_SIM_RETRY_S", "retry_s", "1")
    while True:
        try:
            conn = socket.create_connection((_addr(c_host), c_port), timeout=5)
        except OSError as e:
            C.log("ds4: distributed worker: unable to connect to %s:%d: %s; retrying"
                  % (c_host, c_port, e.strerror or e))
            time.sleep(retry)
            continue
        C.log("ds4: distributed worker: connected to coordinator %s:%d" % (c_host, c_port))
        try:
            conn.settimeout(None)
            conn.sendall(("HELLO %s\n" % layers).encode())
            for line in conn.makefile("rb"):
                ids = [int(t) for t in line.split()[1:]]
                bad = any(i >= vocab for i in ids)
                conn.sendall(b"ERR WORK token id is outside the model vocabulary\n" if bad else b"OK\n")
        except (OSError, ValueError):
            pass
        conn.close()
        C.log("ds4: distributed worker: coordinator disconnected; reconnecting")
        time.sleep(retry)


class Route:
    """The coordinator's view of which layers are served: its own range and each connected worker's."""

    def __init__(self, own, debug=False):
        self.own, self.workers, self.lock, self.debug = own, {}, threading.Lock(), debug
        self.ready = threading.Event()
        self.missing = 0
        self.work_lock = threading.Lock()  # one WORK at a time on each worker's connection

    def update(self):
        with self.lock:
            ranges = sorted([self.own] + [w[0] for w in self.workers.values()])
        nxt, head = 0, False
        for start, end, output in ranges:
            if start > nxt:
                break
            nxt, head = max(nxt, end + 1), head or output
        # the real coordinator logs its route only with --debug (dist_coordinator_report_plan())
        if nxt >= N_LAYERS and head:
            self.missing = None
            if not self.ready.is_set() and self.debug:
                C.log("ds4: distributed coordinator: complete route ready: local %d:%d" % self.own[:2])
            self.ready.set()
        else:
            self.missing = min(nxt, N_LAYERS - 1)
            self.ready.clear()
            if self.debug:
                C.log("ds4: distributed coordinator: route incomplete; next needed layer %d" % self.missing)

    def problem(self, token_ids):
        """Why a completion of these token ids cannot run now (the engine's words), or None. A worker that went
        away leaves the route (the real coordinator notices on its connection)."""
        with self.work_lock:
            with self.lock:
                workers = list(self.workers.items())
            for key, (_, (conn, replies)) in workers:
                try:
                    conn.sendall(("WORK %s\n" % " ".join(map(str, token_ids))).encode())
                    answer = replies.readline().decode().strip()
                except OSError:
                    answer = ""
                if answer.startswith("ERR "):
                    return answer[4:]
                if answer != "OK":
                    with self.lock:
                        self.workers.pop(key, None)
                    conn.close()
                    self.update()
        if not self.ready.is_set():
            return "distributed route incomplete: missing layer %d" % (self.missing or 0)
        return None


def run_coordinator(opts):
    """Accept workers in the background and return at once (the caller binds HTTP): the Route it keeps."""
    host, port = opts["--listen"]
    try:
        listener = _listener(host, port)
    except OSError as e:
        C.die("ds4: distributed coordinator: failed to listen on %s:%d: %s" % (host, port, e.strerror), 1)
    route = Route(opts["layers"], debug="--debug" in sys.argv)

    def serve(conn):
        replies = conn.makefile("rb")
        try:
            text = replies.readline().decode().split()[1]
            with route.lock:
                route.workers[id(conn)] = (parse_layers(text), (conn, replies))
            route.update()
        except (OSError, IndexError, UnicodeDecodeError):
            conn.close()

    def accept_forever():
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept_forever, daemon=True).start()
    route.update()
    return route
