"""ds4-server: OpenAI/Anthropic compatible HTTP server for DeepSeek V4 Flash."""

import hashlib
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
import zlib
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import ds4_common as C
import ds4_distributed as D
import ds4_gen as G
import ds4_speed as S

MODEL_ID = "deepseek-v4-flash"
CREATED = 1767225600
SUPPORTED_PARAMETERS = ["tools", "tool_choice", "max_tokens", "temperature", "top_p", "top_k",
                        "min_p", "stop", "seed", "stream", "reasoning_effort"]
MAX_BODY = 64 << 20

# --------------------------------------------------------------------------- options
# C.Opt(names, metavar, key, kind, help, check, fork): kinds as in ds4_common.Opt; fork: the option exists in
# fork builds only. Plain strings print as they are: the layout and wording of upstream ds4-server --help.
MARGIN = C.check(lambda f: 0.0 <= f <= 1000.0)
STEERING = C.check(lambda f: -100.0 <= f <= 100.0)
POWER = C.check(lambda n: n <= 100)
EFFORT = C.check(lambda v: v in ("low", "high", "max", "off"))
PRESET = C.check(lambda v: v == "spark")

OPTIONS = [
    "Model and runtime:",
    C.Opt(("-m", "--model"), "FILE", "model", "str", "GGUF model path. Default: ds4flash.gguf"),
    C.Opt(("--mtp",), "FILE", "mtp", "str", "Optional MTP support GGUF used for draft-token probes."),
    C.Opt(("--mtp-draft",), "N", "mtp_draft", "int",
          "Maximum autoregressive MTP draft tokens per speculative step. Default: 1"),
    C.Opt(("--mtp-margin",), "F", "mtp_margin", "float",
          "Minimum recursive-draft confidence for the fast N=2 verifier. Default: 3", MARGIN),
    C.Opt(("-c", "--ctx"), "N", "ctx", "int", "Context size allocated at startup. Default: 32768"),
    C.Opt(("-n", "--tokens"), "N", "tokens", "int",
          "Default max output tokens when the client omits a limit. Default: 393216 (384K)"),
    C.Opt(("-t", "--threads"), "N", "threads", "int", "CPU helper threads for lightweight host-side work."),
    C.Opt(("--chdir",), "DIR", "chdir", "str",
          "Change working directory before loading the model or runtime assets."),
    C.Opt(("--quality",), None, "quality", "flag",
          "Prefer exact kernels where faster approximate paths exist; MTP uses strict verification."),
    C.Opt(("--dir-steering-file",), "FILE", "steer_file", "str",
          "Load one f32 direction vector per layer for directional steering."),
    C.Opt(("--dir-steering-ffn",), "F", "steer_ffn", "float",
          "Apply steering after FFN outputs: y -= F*v*dot(v,y). Default with file: 1", STEERING),
    C.Opt(("--dir-steering-attn",), "F", "steer_attn", "float",
          "Apply steering after attention outputs. Default: 0", STEERING),
    C.Opt(("--warm-weights",), None, "warm", "flag",
          "Touch mapped tensor pages before serving. Slower startup, fewer first-use stalls."),
    "  --metal | --cuda | --cpu | --backend NAME",
    "      Select backend explicitly. Defaults to Metal on macOS and CUDA on CUDA builds.",
    C.Opt(("--metal",), None, "backend", "const:metal", None),
    C.Opt(("--cuda",), None, "backend", "const:cuda", None),
    C.Opt(("--cpu",), None, "backend", "const:cpu", None),
    C.Opt(("--backend",), "NAME", "backend", "str", None),
    "",
    "HTTP API:",
    C.Opt(("--host",), "HOST", "host", "str", "Bind address. Default: 127.0.0.1"),
    C.Opt(("--port",), "N", "port", "int", "Bind port. Default: 8000"),
    C.Opt(("--cors",), None, "cors", "flag",
          "Add Access-Control-Allow-* headers for browser JS clients. Does not change --host."),
    C.Opt(("--trace",), "FILE", "trace", "str",
          "Write a human-readable session trace: prompts, cache decisions, output, tool calls."),
    "",
    "Disk KV cache:",
    C.Opt(("--kv-disk-dir",), "DIR", "kv_dir", "str",
          "Enable disk KV checkpoints in DIR. The directory is created if needed."),
    C.Opt(("--kv-disk-space-mb",), "N", "kv_mb", "int", "Disk budget for checkpoint files. Default when enabled: 4096"),
    C.Opt(("--kv-cache-min-tokens",), "N", "kv_min", "int",
          "Do not save or load checkpoints shorter than N tokens. Default: 512"),
    C.Opt(("--kv-cache-cold-max-tokens",), "N", "kv_cold_max", "int0",
          "Cold first prompts in [min,N] are saved automatically. 0 disables cold saves. Default: 30000"),
    C.Opt(("--kv-cache-continued-interval-tokens",), "N", "kv_interval", "int0",
          "Save at absolute aligned frontiers spaced about N tokens apart. 0 disables. Default: 10000"),
    C.Opt(("--kv-cache-boundary-trim-tokens",), "N", "kv_trim", "int0",
          "Trim this many tail tokens before cold boundary saves. Default: 32"),
    C.Opt(("--kv-cache-boundary-align-tokens",), "N", "kv_align", "int0",
          "Align cold boundary saves down to this token multiple. 0 disables alignment. Default: 2048"),
    C.Opt(("--kv-cache-reject-different-quant",), None, "kv_reject_quant", "flag",
          "Refuse checkpoints written by the same model with a different routed-expert quantization."),
    C.Opt(("--disable-exact-dsml-tool-replay",), None, "no_replay", "flag",
          "Disable the tool-id -> exact sampled DSML map. Tool history falls back to canonical JSON rendering."),
    C.Opt(("--tool-memory-max-ids",), "N", "tool_ids", "int",
          "Maximum exact tool-call IDs kept in RAM for replay. Default: 100000"),
    "",
    "Normal server command:",
    "  ./ds4-server --ctx 100000 --kv-disk-dir /tmp/ds4-kv --kv-disk-space-mb 8192",
    "",
    # fork additions (listed by fork builds only)
    C.Opt(("--version",), None, "version", "version", "Print the version and exit.", fork=True),
    C.Opt(("--no-update-check",), None, "no_update_check", "flag", "Never check for a newer release.", fork=True),
    C.Opt(("--dspark",), "FILE", "dspark", "str", "DSpark drafter GGUF.", fork=True),
    C.Opt(("--no-spec",), None, "no_spec", "flag", "Plain decoding, no speculative drafter.", fork=True),
    C.Opt(("--no-mtp",), None, "no_mtp", "flag", "Do not attach an MTP head.", fork=True),
    C.Opt(("--no-dspark",), None, "no_dspark", "flag", "Do not attach a DSpark drafter.", fork=True),
    C.Opt(("--preset",), "NAME", "preset", "str", "spark: require the full speculative stack.", PRESET, fork=True),
    C.Opt(("--power",), "N", "power", "int", "GPU duty cycle percent, 1 to 100. Default: 100", POWER, fork=True),
    C.Opt(("--reasoning-effort",), "LEVEL", "effort", "str", "low, high, max or off. Default: low", EFFORT,
          fork=True),
    C.Opt(("--mem-floor-gb",), "N", "mem_floor", "int0", "GiB of memory admissions leave free. Default: 4",
          fork=True),
    C.Opt(("-h", "--help"), None, "help", "help", "Show this help."),
]

DEFAULTS = {"model": None, "mtp": None, "mtp_draft": 1, "mtp_margin": 3.0, "ctx": 32768,
            "tokens": 393216, "threads": None, "chdir": None, "quality": False, "warm": False,
            "backend": None, "host": "127.0.0.1", "port": 8000, "cors": False, "trace": None,
            "kv_dir": None, "kv_mb": 4096, "kv_min": 512, "kv_cold_max": 30000, "kv_interval": 10000,
            "kv_trim": 32, "kv_align": 2048, "kv_reject_quant": False, "no_replay": False,
            "tool_ids": 100000, "steer_file": None, "steer_ffn": None, "steer_attn": 0.0,
            "no_update_check": False, "dspark": None, "no_spec": False, "no_mtp": False,
            "no_dspark": False, "preset": None, "power": 100, "effort": "low", "mem_floor": None}


def flavour():
    return "fork" if C.BUILD.get("flavour") == "fork" else "upstream"


def cli():
    fork = flavour() == "fork"
    table = [o for o in OPTIONS if fork or isinstance(o, str) or not o.fork]
    if D.enabled():  # distributed mode (ds4_distributed.py): its flags on the help page
        table += D.HELP.splitlines()
    return C.Options("ds4-server", table)


def parse_options(argv):
    o = cli().parse(argv, DEFAULTS)
    if o["backend"] not in (None, "metal", "cuda", "cpu"):
        C.log("ds4-server: invalid --backend value: %s" % o["backend"])
        C.die("ds4-server: valid server backends are: metal, cuda, cpu", 2)
    if o["kv_cold_max"] and o["kv_cold_max"] < o["kv_min"]:
        C.die("ds4-server: --kv-cache-cold-max-tokens must be 0 or >= --kv-cache-min-tokens", 2)
    if o["mtp_draft"] > 16:
        o["mtp_draft"] = 16
    if flavour() == "fork":
        if o["no_spec"] and o["mtp"]:
            cli().bad("--no-spec conflicts with --mtp")
        if o["no_spec"] and o["dspark"]:
            cli().bad("--no-spec conflicts with --dspark")
        if o["no_mtp"] and o["mtp"]:
            cli().bad("--no-mtp conflicts with --mtp")
        if o["no_dspark"] and o["dspark"]:
            cli().bad("--no-dspark conflicts with --dspark")
    return o


# --------------------------------------------------------------------------- state

class State:
    def __init__(self, opts):
        self.o = opts
        self.route, self.vocab = None, 0  # a distributed coordinator's route (ds4_distributed.py)
        self.stop = threading.Event()
        self.stop_requested = False
        self.gen_lock = S.GenerationSlots(S.batch_size(flavour() == "fork"))  # the fork batches
        self.count_lock = threading.Lock()
        self.active = 0
        self.started = time.time()
        self.requests = {"ok": 0, "error": 0, "cancelled": 0}
        self.admits = 0
        self.last_prompt = []
        self.last_rendered = ""
        self.checkpoint = "legacy"
        self.trace = None
        self.fault = ("none", None)
        self.speed = None  # ds4_speed.Speed, once the options and drafters are known
        self.last_decode_tok_s = 0.0
        self.last_prefill_tok_s = 0.0

    def model_id(self):
        return "deepseek-v4-pro" if self.fault[0] == "wrong-model" else MODEL_ID

    def model_name(self):
        name = "DeepSeek V4 Pro" if self.fault[0] == "wrong-model" else "DeepSeek V4 Flash"
        if flavour() == "fork" and self.checkpoint != "legacy":
            name += " (%s)" % self.checkpoint
        return name

    def model_obj(self):
        ctx = self.o["ctx"]
        return {"id": self.model_id(), "object": "model", "created": CREATED, "owned_by": "ds4.c",
                "name": self.model_name(), "context_length": ctx,
                "top_provider": {"context_length": ctx,
                                 "max_completion_tokens": min(self.o["tokens"], ctx),
                                 "is_moderated": False},
                "supported_parameters": list(SUPPORTED_PARAMETERS)}


STATE = None


def _with_timings(obj, timings):
    """obj, with the fork's per-request "timings" added in fork builds."""
    if flavour() == "fork":
        obj["timings"] = timings
    return obj


def _on_signal(signum, _frame):
    st = STATE
    if st is None or st.stop_requested:
        os._exit(130)
    st.stop_requested = True
    st.stop.set()


# --------------------------------------------------------------------------- HTTP

class Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = True
    request_queue_size = 64

    def server_bind(self):  # no reverse DNS lookup; SO_REUSEADDR like the real server
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(self.server_address)
        self.server_address = self.socket.getsockname()
        self.server_name = self.server_address[0]
        self.server_port = self.server_address[1]


class Disconnect(Exception):
    pass


def _err(message, typ="invalid_request_error", **extra):
    e = {"message": message, "type": typ}
    e.update(extra)
    return {"error": e}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 10

    def log_message(self, fmt, *args):  # no access log
        pass

    # ---- plumbing
    def setup(self):
        super().setup()
        with STATE.count_lock:
            STATE.active += 1

    def finish(self):
        try:
            super().finish()
        finally:
            with STATE.count_lock:
                STATE.active -= 1

    def send_error(self, code, message=None, explain=None):
        if code == 501:
            code, message = 404, "unknown endpoint"
        elif code in (400, 414, 431):
            message = "malformed request"
        self.close_connection = True
        try:
            self._json(code, _err(message or "error"))
        except OSError:
            pass

    def _head(self, code, ctype, length=None, extra=None):
        self.send_response_only(code)
        self.send_header("Date", self.date_time_string())
        if ctype:
            self.send_header("Content-Type", ctype)
        if length is not None:
            self.send_header("Content-Length", str(length))
        if STATE.o["cors"]:
            self.send_header("Access-Control-Allow-Origin", "*")
            self.send_header("Access-Control-Allow-Headers", "*")
            self.send_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _json(self, code, obj):
        body = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        self._head(code, "application/json", len(body))
        if self.command != "HEAD":
            self.wfile.write(body)

    def _text(self, code, text, ctype="text/plain; charset=utf-8"):
        body = text.encode("utf-8")
        self._head(code, ctype, len(body))
        self.wfile.write(body)

    def _path(self):
        return self.path.split("?", 1)[0].split("#", 1)[0]

    def _sse_start(self):
        self._head(200, "text/event-stream", extra={"Cache-Control": "no-cache"})

    def _sse(self, obj, event=None):
        data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        chunk = ("event: %s\n" % event if event else "") + "data: %s\n\n" % data
        try:
            self.wfile.write(chunk.encode("utf-8"))
            self.wfile.flush()
        except OSError:
            raise Disconnect()

    def _sse_done(self, last, usage, timings):
        """Ends an OpenAI stream: when the client asked for usage, last (a chunk of
        the stream) with no choices, the usage and the fork's timings; then [DONE]."""
        if last is not None:
            last["choices"] = []
            last["usage"] = usage
            self._sse(_with_timings(last, timings))
        self._sse("[DONE]")

    # ---- verbs
    def do_OPTIONS(self):
        self._head(204, None, 0)

    def do_GET(self):
        p = self._path()
        if p == "/v1/models":
            return self._json(200, {"object": "list", "data": [STATE.model_obj()]})
        if p.startswith("/v1/models/"):
            want = p[len("/v1/models/"):]
            ok = {STATE.model_id()}
            if flavour() == "fork" and STATE.fault[0] != "wrong-model":
                ok |= {"deepseek-chat", "deepseek-reasoner", "deepseek-v4-flash-0731"}
            if want in ok:
                return self._json(200, STATE.model_obj())
            return self._json(404, _err("model not found: %s" % want))
        if flavour() == "fork" and p == "/metrics":
            return self._text(200, metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
        if flavour() == "fork" and p == "/v1/stats":
            return self._stats()
        return self._json(404, _err("unknown endpoint"))

    def do_HEAD(self):
        self._json(404, _err("unknown endpoint"))

    def do_PUT(self):
        self._json(404, _err("unknown endpoint"))

    do_DELETE = do_PATCH = do_PUT

    def do_POST(self):
        p = self._path()
        routes = {"/v1/chat/completions": self._chat, "/v1/completions": self._completions,
                  "/v1/messages": self._messages, "/v1/responses": self._responses}
        fn = routes.get(p)
        if fn is None:
            return self._json(404, _err("unknown endpoint"))
        if STATE.fault[0] == "poisoned" and time.time() - STATE.started >= STATE.fault[1]:
            # alive but answering only errors (ds4#759): every generation fails, /v1/models still answers
            C.log("ds4: error: worker failed: session state corrupted")
            return self._json(500, _err("session state corrupted", "server_error"))
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            return self._json(400, _err("chunked request bodies are not supported"))
        try:
            n = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            return self._json(400, _err("malformed request"))
        if n < 0 or n > MAX_BODY:
            return self._json(413, _err("request body too large"))
        raw = self.rfile.read(n) if n else b""
        try:
            req = json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return self._json(400, _err("invalid JSON in request body"))
        if not isinstance(req, dict):
            return self._json(400, _err("request body must be a JSON object"))
        try:
            fn(req)
        except Disconnect:
            self.close_connection = True

    def _stats(self):
        up = time.time() - STATE.started
        st = {"uptime_s": round(up, 1), "requests": sum(STATE.requests.values()),
              "decode_tok_s_60s": round(STATE.last_decode_tok_s, 2),
              "prefill_tok_s_60s": round(STATE.last_prefill_tok_s, 2),
              "spec_accept_rate": STATE.speed.timings().get("spec_accept_rate"), "banks": 1, "kv_pages": 0,
              "artifact_source": "local",
              "ctx": STATE.o["ctx"], "model": STATE.model_name()}
        if "application/json" in (self.headers.get("Accept") or ""):
            return self._json(200, st)
        text = "".join("%s: %s\n" % (k, "n/a" if v is None else v) for k, v in st.items())
        return self._text(200, text)

    # ---- generation core
    def _run(self, messages, system, tools, tool_choice, thinking, max_tokens, stream_cb=None,
             kind="chat"):
        """Renders, 'prefills' and 'decodes'. stream_cb(kind, piece) is called per token
        (kind is "reasoning" or "content"). Returns (gen, usage, timings, error_obj)."""
        o = STATE.o
        rendered = G.render(messages, system, tools, thinking)
        toks = C._TOK.findall(rendered)
        n_prompt = len(toks)
        if n_prompt >= o["ctx"]:
            return None, None, None, (400, _err(
                "prompt is too long: %d tokens, context is %d" % (n_prompt, o["ctx"]),
                code="context_length_exceeded", n_prompt_tokens=n_prompt, n_ctx=o["ctx"]))
        last_user, last_role = "", "user"
        for m in messages:
            if m.get("role") in ("user", "tool"):
                last_user, last_role = G.text_of(m.get("content")), m.get("role")
            elif m.get("role") == "assistant":
                last_role = "assistant"
        if max_tokens is None:
            max_tokens = o["tokens"]
        max_tokens = max(0, min(int(max_tokens), o["ctx"] - n_prompt))
        with STATE.gen_lock:
            if STATE.stop_requested:
                return None, None, None, (503, _err("shutdown requested", "server_error"))
            if STATE.route is not None:  # a distributed coordinator: its workers take the prompt first
                problem = STATE.route.problem([zlib.crc32(t.encode()) % max(STATE.vocab, 1) for t in toks])
                if problem:
                    C.log("ds4: distributed coordinator: %s" % problem)
                    return None, None, None, (500, _err(problem))
            t0 = time.time()
            old = STATE.last_prompt
            common = 0
            for a, b in zip(old, toks):
                if a != b:
                    break
                common += 1
            cached = common if old and common * 2 > len(old) else 0
            STATE.last_prompt = toks
            STATE.last_rendered = rendered
            prefill = n_prompt - cached
            kind_lbl = "completion" if kind == "completion" else "chat"  # the real server's two request kinds
            span = "%d..%d:%d" % (cached, n_prompt, n_prompt - cached)
            with STATE.speed.prefilling():  # prefill has no stop check in the real one
                _compute(STATE.speed.prefill_seconds(prefill))
            t_prompt = time.time()
            C.log("ds4-server: %s ctx=%s prompt done %.3fs" % (kind_lbl, span, t_prompt - t0))
            gen = G.generate(last_user, thinking, max_tokens, tools, tool_choice, last_role)
            ttft = None
            emitted = 0
            stream_items = [("reasoning", p, 1) for p in gen.reasoning] + [("content", p, 1) for p in gen.content]
            if gen.tool_calls is not None:
                stream_items.append(("tool_calls", gen.tool_calls, C.count_tokens(gen.raw_dsml)))
            t_first = None
            for kind2, piece, weight in stream_items:
                if STATE.stop_requested:
                    # the real server ends the turn at its next token and stops sending: a cut connection
                    C.log('ds4-server: %s ctx=%s gen=%d finish=error error="shutdown requested" %.3fs'
                          % (kind_lbl, span, emitted, time.time() - t0))
                    STATE.requests["cancelled"] += 1
                    raise Disconnect()
                _sleep(STATE.speed.token_seconds() * weight)
                if t_first is None:
                    t_first = time.time()
                    ttft = (t_first - t0) * 1000.0
                emitted += 1
                if stream_cb is not None:
                    stream_cb(kind2, piece)
            t_end = time.time()
            if ttft is None:
                ttft = (t_end - t0) * 1000.0
            dec_n = max(gen.completion_tokens - 1, 0)
            dec_s = (t_end - t_first) if t_first else 0.0
            decode_rate = dec_n / dec_s if dec_s > 0 and dec_n else STATE.speed.decode_tok_s()
            prefill_rate = prefill / (t_prompt - t0) if prefill and t_prompt > t0 else STATE.speed.prefill
            STATE.last_decode_tok_s, STATE.last_prefill_tok_s = decode_rate, prefill_rate
            C.log("ds4-server: %s ctx=%s gen=%d finish=%s %.3fs" % (
                kind_lbl, span, gen.completion_tokens, gen.finish, t_end - t0))
            STATE.requests["ok"] += 1
            STATE.admits += 1
            if STATE.trace is not None:
                try:
                    STATE.trace.write("=== %s %s prompt=%d cached=%d gen=%d finish=%s\n%s\n--- reply\n%s%s\n"
                                      % (time.strftime("%Y-%m-%d %H:%M:%S"), kind_lbl, n_prompt, cached,
                                         gen.completion_tokens, gen.finish, rendered,
                                         "".join(gen.reasoning + gen.content), gen.raw_dsml))
                    STATE.trace.flush()
                except OSError:
                    pass
        usage = {"prompt_tokens": n_prompt, "completion_tokens": gen.completion_tokens,
                 "total_tokens": n_prompt + gen.completion_tokens,
                 "prompt_tokens_details": {"cached_tokens": cached, "cache_write_tokens": prefill}}
        timings = {"ttft_ms": round(ttft, 3), "prefill_tokens": prefill, "prefill_cached_tokens": cached,
                   "prefill_tok_s": round(prefill_rate, 2), "decode_tok_s": round(decode_rate, 2),
                   **STATE.speed.timings()}
        return gen, usage, timings, None

    # ---- request normalisation
    def _thinking(self, req, default=True):
        if flavour() == "fork" and STATE.o["effort"] == "off":
            default = False
        th = req.get("thinking")
        if isinstance(th, dict) and th.get("type") in ("disabled", "off"):
            return False
        if isinstance(th, dict) and th.get("type") in ("enabled", "on"):
            return True
        if req.get("think") is False or th is False:
            return False
        if req.get("think") is True or th is True:
            return True
        eff = req.get("reasoning_effort")
        if isinstance(req.get("reasoning"), dict):
            eff = req["reasoning"].get("effort", eff)
        if eff == "none":
            return False
        if req.get("model") == "deepseek-chat":
            return False
        if req.get("model") == "deepseek-reasoner":
            return True
        return default

    def _max_tokens(self, req, *names):
        for n in names:
            v = req.get(n)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                return "bad"
            return v
        return None

    # ---- OpenAI chat
    def _chat(self, req):
        msgs = req.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            return self._json(400, _err("messages must be a non-empty array"))
        mt = self._max_tokens(req, "max_completion_tokens", "max_tokens")
        if mt == "bad":
            return self._json(400, _err("max_tokens must be a non-negative integer"))
        tools = G.normalize_tools(req.get("tools"))
        thinking = self._thinking(req)
        model = req.get("model") if isinstance(req.get("model"), str) else MODEL_ID
        cid = "chatcmpl-" + uuid.uuid4().hex
        created = int(time.time())
        stream = bool(req.get("stream"))
        include_usage = bool((req.get("stream_options") or {}).get("include_usage")) if isinstance(
            req.get("stream_options"), dict) else False

        def chunk(delta, finish=None):
            return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        started = [False]

        def cb(kind, piece):
            if not started[0]:
                started[0] = True
                self._sse_start()
                self._sse(chunk({"role": "assistant", "content": ""}))
            if STATE.fault[0] == "empty-stream" and kind != "reasoning":
                return  # the answer is generated, and never sent
            if kind == "reasoning":
                self._sse(chunk({"reasoning_content": piece}))
            elif kind == "content":
                self._sse(chunk({"content": piece}))
            else:
                for i, tc in enumerate(piece):
                    self._sse(chunk({"tool_calls": [{"index": i, "id": tc["id"], "type": "function",
                                                     "function": {"name": tc["function"]["name"],
                                                                  "arguments": ""}}]}))
                    self._sse(chunk({"tool_calls": [{"index": i, "function": {
                        "arguments": tc["function"]["arguments"]}}]}))

        gen, usage, timings, error = self._run(msgs, None, tools, req.get("tool_choice"), thinking, mt,
                                               cb if stream else None)
        if error is not None:
            return self._json(*error)
        if stream:
            if not started[0]:
                self._sse_start()
                self._sse(chunk({"role": "assistant", "content": ""}))
            self._sse(chunk({}, gen.finish))
            return self._sse_done(chunk({}) if include_usage else None, usage, timings)
        msg = {"role": "assistant", "content": "".join(gen.content).strip()}
        if thinking:
            msg["reasoning_content"] = "".join(gen.reasoning).strip()
        if gen.tool_calls is not None:
            msg["content"] = msg["content"] or None
            msg["tool_calls"] = gen.tool_calls
        out = {"id": cid, "object": "chat.completion", "created": created, "model": model,
               "choices": [{"index": 0, "message": msg, "logprobs": None, "finish_reason": gen.finish}],
               "usage": usage}
        self._json(200, _with_timings(out, timings))

    # ---- OpenAI completions
    def _completions(self, req):
        prompt = req.get("prompt")
        if isinstance(prompt, list):
            prompt = "".join(p for p in prompt if isinstance(p, str))
        if not isinstance(prompt, str):
            return self._json(400, _err("prompt must be a string"))
        mt = self._max_tokens(req, "max_tokens")
        if mt == "bad":
            return self._json(400, _err("max_tokens must be a non-negative integer"))
        thinking = self._thinking(req)
        model = req.get("model") if isinstance(req.get("model"), str) else MODEL_ID
        cid = "cmpl-" + uuid.uuid4().hex
        created = int(time.time())
        stream = bool(req.get("stream"))
        include_usage = isinstance(req.get("stream_options"), dict) and bool(
            req["stream_options"].get("include_usage"))

        def chunk(text=None, reasoning=None, finish=None):
            c = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
            if reasoning is not None:
                c["reasoning_content"] = reasoning
            return {"id": cid, "object": "text_completion", "created": created, "model": model,
                    "choices": [c]}

        started = [False]

        def cb(kind, piece):
            if not started[0]:
                started[0] = True
                self._sse_start()
            if kind == "reasoning":
                self._sse(chunk(reasoning=piece))
            elif kind == "content":
                self._sse(chunk(text=piece))

        gen, usage, timings, error = self._run([{"role": "user", "content": prompt}], None, [], None,
                                               thinking, mt, cb if stream else None, kind="completion")
        if error is not None:
            return self._json(*error)
        if stream:
            if not started[0]:
                self._sse_start()
            self._sse(chunk(finish=gen.finish))
            return self._sse_done(chunk() if include_usage else None, usage, timings)
        c = {"index": 0, "text": "".join(gen.content).strip(), "logprobs": None, "finish_reason": gen.finish}
        if thinking:
            c["reasoning_content"] = "".join(gen.reasoning).strip()
        out = {"id": cid, "object": "text_completion", "created": created, "model": model,
               "choices": [c], "usage": usage}
        self._json(200, _with_timings(out, timings))

    # ---- Anthropic messages
    def _messages(self, req):
        msgs = req.get("messages")
        if not isinstance(msgs, list) or not msgs or not all(isinstance(m, dict) for m in msgs):
            return self._json(400, {"type": "error", "error": {"type": "invalid_request_error",
                                                               "message": "messages must be a non-empty array"}})
        norm = []
        for m in msgs:
            content = m.get("content")
            if isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result"
                                                 for b in content):
                norm.append({"role": "tool", "content": G.text_of(
                    [b.get("content") if isinstance(b.get("content"), str) else G.text_of(b.get("content"))
                     for b in content if isinstance(b, dict)])})
            else:
                norm.append({"role": m.get("role"), "content": content})
        system = req.get("system")
        system = G.text_of(system) if system is not None else None
        tools = G.normalize_tools(req.get("tools"))
        thinking = self._thinking(req)
        mt = self._max_tokens(req, "max_tokens")
        if mt == "bad":
            mt = None
        model = req.get("model") if isinstance(req.get("model"), str) else MODEL_ID
        mid = "msg_" + uuid.uuid4().hex[:24]
        stream = bool(req.get("stream"))
        blocks = []   # streaming state: [type, index]

        def open_block(btype):
            if blocks and blocks[-1][0] == btype:
                return blocks[-1][1]
            if blocks:
                self._sse({"type": "content_block_stop", "index": blocks[-1][1]}, "content_block_stop")
            idx = len(blocks)
            start = {"thinking": {"type": "thinking", "thinking": "", "signature": ""},
                     "text": {"type": "text", "text": ""}}.get(btype)
            if start is not None:
                self._sse({"type": "content_block_start", "index": idx, "content_block": start},
                          "content_block_start")
            blocks.append((btype, idx))
            return idx

        started = [False]

        def begin():
            if not started[0]:
                started[0] = True
                self._sse_start()
                self._sse({"type": "message_start", "message": {
                    "id": mid, "type": "message", "role": "assistant", "model": model, "content": [],
                    "stop_reason": None, "stop_sequence": None,
                    "usage": {"input_tokens": 0, "output_tokens": 0}}}, "message_start")

        def cb(kind, piece):
            begin()
            if kind == "reasoning":
                i = open_block("thinking")
                self._sse({"type": "content_block_delta", "index": i,
                           "delta": {"type": "thinking_delta", "thinking": piece}}, "content_block_delta")
            elif kind == "content":
                i = open_block("text")
                self._sse({"type": "content_block_delta", "index": i,
                           "delta": {"type": "text_delta", "text": piece}}, "content_block_delta")
            else:
                for tc in piece:
                    if blocks:
                        self._sse({"type": "content_block_stop", "index": blocks[-1][1]}, "content_block_stop")
                    idx = len(blocks)
                    blocks.append(("tool_use", idx))
                    self._sse({"type": "content_block_start", "index": idx, "content_block": {
                        "type": "tool_use", "id": "toolu_" + tc["id"][5:], "name": tc["function"]["name"],
                        "input": {}}}, "content_block_start")
                    self._sse({"type": "content_block_delta", "index": idx, "delta": {
                        "type": "input_json_delta", "partial_json": tc["function"]["arguments"]}},
                        "content_block_delta")

        gen, usage, timings, error = self._run(norm, system, tools, req.get("tool_choice"), thinking,
                                               mt if mt is not None else 4096, cb if stream else None,
                                               kind="messages")
        if error is not None:
            code, body = error
            return self._json(code, {"type": "error", "error": {"type": "invalid_request_error"
                                                                if code == 400 else "api_error",
                                                                "message": body["error"]["message"]}})
        stop = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}.get(gen.finish, "end_turn")
        au = {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
              "cache_read_input_tokens": usage["prompt_tokens_details"]["cached_tokens"],
              "cache_creation_input_tokens": usage["prompt_tokens_details"]["cache_write_tokens"]}
        if stream:
            begin()
            if blocks:
                self._sse({"type": "content_block_stop", "index": blocks[-1][1]}, "content_block_stop")
            self._sse({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                       "usage": au}, "message_delta")
            self._sse({"type": "message_stop"}, "message_stop")
            return
        content = []
        if thinking:
            content.append({"type": "thinking", "thinking": "".join(gen.reasoning).strip(), "signature": ""})
        text = "".join(gen.content).strip()
        if text or gen.tool_calls is None:
            content.append({"type": "text", "text": text})
        for tc in gen.tool_calls or []:
            content.append({"type": "tool_use", "id": "toolu_" + tc["id"][5:], "name": tc["function"]["name"],
                            "input": json.loads(tc["function"]["arguments"])})
        self._json(200, {"id": mid, "type": "message", "role": "assistant", "model": model,
                         "content": content, "stop_reason": stop, "stop_sequence": None, "usage": au})

    # ---- OpenAI responses
    def _responses(self, req):
        inp = req.get("input")
        msgs = []
        if isinstance(inp, str):
            msgs.append({"role": "user", "content": inp})
        elif isinstance(inp, list):
            for item in inp:
                if not isinstance(item, dict):
                    continue
                if item.get("type") == "function_call_output":
                    msgs.append({"role": "tool", "content": G.text_of(item.get("output"))})
                elif item.get("type") == "function_call":
                    msgs.append({"role": "assistant", "content": "", "tool_calls": [
                        {"function": {"name": item.get("name"), "arguments": item.get("arguments")}}]})
                elif item.get("role"):
                    msgs.append({"role": item.get("role"), "content": item.get("content")})
        if not msgs:
            return self._json(400, _err("input must be a string or a non-empty array"))
        system = req.get("instructions") if isinstance(req.get("instructions"), str) else None
        tools = G.normalize_tools(req.get("tools"))
        thinking = self._thinking(req)
        mt = self._max_tokens(req, "max_output_tokens")
        if mt == "bad":
            return self._json(400, _err("max_output_tokens must be a non-negative integer"))
        model = req.get("model") if isinstance(req.get("model"), str) else MODEL_ID
        rid = "resp_" + uuid.uuid4().hex
        created = int(time.time())
        stream = bool(req.get("stream"))
        seq = [0]

        def ev(obj, name):
            obj["type"] = name
            if flavour() == "fork":
                obj["sequence_number"] = seq[0]
                seq[0] += 1
            self._sse(obj, name)

        def resp_obj(status, output, usage=None):
            r = {"id": rid, "object": "response", "created_at": created, "status": status,
                 "model": model, "output": output}
            if usage is not None:
                r["usage"] = usage
            return r

        started = [False]

        def cb(kind, piece):
            if not started[0]:
                started[0] = True
                self._sse_start()
                ev({"response": resp_obj("in_progress", [])}, "response.created")
            if kind == "content":
                ev({"item_id": "msg_" + rid[5:], "output_index": 0, "content_index": 0, "delta": piece},
                   "response.output_text.delta")

        gen, usage, timings, error = self._run(msgs, system, tools, req.get("tool_choice"), thinking, mt,
                                               cb if stream else None, kind="responses")
        if error is not None:
            return self._json(*error)
        output = []
        if thinking:
            output.append({"type": "reasoning", "id": "rs_" + rid[5:], "summary": [
                {"type": "summary_text", "text": "".join(gen.reasoning).strip()}]})
        text = "".join(gen.content).strip()
        if text or gen.tool_calls is None:
            output.append({"type": "message", "id": "msg_" + rid[5:], "status": "completed", "role": "assistant",
                           "content": [{"type": "output_text", "text": text, "annotations": []}]})
        for tc in gen.tool_calls or []:
            output.append({"type": "function_call", "id": "fc_" + tc["id"][5:], "call_id": tc["id"],
                           "name": tc["function"]["name"], "arguments": tc["function"]["arguments"],
                           "status": "completed"})
        ru = {"input_tokens": usage["prompt_tokens"], "output_tokens": usage["completion_tokens"],
              "total_tokens": usage["total_tokens"],
              "input_tokens_details": {"cached_tokens": usage["prompt_tokens_details"]["cached_tokens"]},
              "output_tokens_details": {"reasoning_tokens": len(gen.reasoning)}}
        status = "incomplete" if gen.finish == "length" else "completed"
        if stream:
            if not started[0]:
                self._sse_start()
                ev({"response": resp_obj("in_progress", [])}, "response.created")
            if text:
                ev({"item_id": "msg_" + rid[5:], "output_index": 0, "content_index": 0, "text": text},
                   "response.output_text.done")
            ev({"response": resp_obj(status, output, ru)}, "response.%s" % status)
            return
        self._json(200, resp_obj(status, output, ru))


SLICE_S = 0.05


def _compute(sec, stoppable=False):
    """Simulated work of `sec` seconds, C.COMPUTE_SHARE of it on the CPU."""
    end = time.time() + sec
    while True:
        left = end - time.time()
        if left <= 0 or (stoppable and STATE.stop_requested):
            return
        C.spin(min(left, SLICE_S) * C.COMPUTE_SHARE)
        left = end - time.time()
        if left > 0:
            time.sleep(min(left, SLICE_S * (1 - C.COMPUTE_SHARE)))


def _sleep(sec):
    _compute(sec, stoppable=True)


def metrics_text():
    st = STATE
    lines = [
        "# HELP ds4_uptime_seconds Seconds since the server started.",
        "# TYPE ds4_uptime_seconds gauge",
        "ds4_uptime_seconds %.3f" % (time.time() - st.started),
        "# HELP ds4_requests_total Generation requests by outcome.",
        "# TYPE ds4_requests_total counter",
    ]
    for k in ("ok", "error", "cancelled"):
        lines.append('ds4_requests_total{outcome="%s"} %d' % (k, st.requests[k]))
    busy = st.gen_lock.running()
    lines += [
        "# HELP ds4_requests_inflight Requests being generated.",
        "# TYPE ds4_requests_inflight gauge",
        "ds4_requests_inflight %d" % busy,
        "# HELP ds4_queue_depth Requests waiting for admission.",
        "# TYPE ds4_queue_depth gauge",
        "ds4_queue_depth %d" % st.gen_lock.waiting(),
        "# HELP ds4_clients_connected Open client connections.",
        "# TYPE ds4_clients_connected gauge",
        "ds4_clients_connected %d" % max(st.active, 0),
        "# HELP ds4_admits_total Admitted requests by kind.",
        "# TYPE ds4_admits_total counter",
        'ds4_admits_total{kind="new"} %d' % st.admits,
        "# HELP ds4_requests_shed_total Requests refused by admission control.",
        "# TYPE ds4_requests_shed_total counter",
        'ds4_requests_shed_total{reason="queue_full"} 0',
        'ds4_requests_shed_total{reason="memory"} 0',
    ]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- KV disk

def persist_kv(kv_dir):
    st = STATE
    text = (st.last_rendered or G.BOS).encode("utf-8")
    name = hashlib.sha1(text).hexdigest() + ".kv"
    ntok = len(st.last_prompt)
    payload = b"DSV4" + struct.pack("<I", ntok)
    now = int(time.time())
    # 48-byte KVC header: magic, version, quant bits, reason, tokens, hits, ctx, times, payload size
    hdr = struct.pack("<4sHBBIIIQQQI", b"KVC\0", 1, 2, 4, ntok, 0, st.o["ctx"], now, now, len(payload), len(text))
    hdr = hdr.ljust(48, b"\0")[:48]
    path = os.path.join(kv_dir, name)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(hdr + text + payload)
    os.replace(tmp, path)
    return path


# --------------------------------------------------------------------------- main

def main(argv=None):
    global STATE
    C.PROG = "ds4-server"
    C.TIMESTAMPS = True
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    except (AttributeError, ValueError):
        pass
    argv, distributed = D.split(sys.argv[1:] if argv is None else argv)
    o = parse_options(argv)
    STATE = State(o)
    st = STATE
    st.fault = C.fault()
    fork = flavour() == "fork"

    # main() then ds4_engine_open() of the real server, in their order
    if o["chdir"]:
        try:
            os.chdir(o["chdir"])
        except OSError as e:
            C.die("ds4-server: failed to chdir to %s: %s" % (o["chdir"], e.strerror), 1)
    if (o["steer_attn"] or o["steer_ffn"]) and not o["steer_file"]:
        C.die("ds4: directional steering needs --dir-steering-file", 1)
    C.acquire_instance_lock()
    C.log(C.build_line())  # the simulator's own line: which simulated build this is
    if o["threads"] is None:
        try:
            o["threads"] = max(int(os.environ.get("DS4_THREADS", "")), 1)
        except ValueError:
            o["threads"] = min(os.cpu_count() or 1, 12)

    model = o["model"]
    if model is None:
        if fork:
            gdir = os.environ.get("DS4_GGUF_DIR") or os.path.join(os.path.expanduser("~"), "gguf")
            gfile = os.environ.get("GGUF_FILE") or \
                "DeepSeek-V4-Flash-IQ2XXS-w2Q2K-AProjQ8-SExpQ8-OutQ8-chat-v2-imatrix-0731.gguf"
            model = os.path.join(gdir, gfile)
            C.log("ds4-server: launch defaults: model=%s" % model)
        else:
            model = "ds4flash.gguf"
    g = C.read_gguf(model)
    C.validate_main(g)
    st.checkpoint = C.variant(g)
    # the simulator's own line (the real engine binds tensors here, which a tiny model has not)
    C.log("ds4: model %s (%.2f GiB, %d tensors, checkpoint=%s)"
          % (model, g.size / float(1 << 30), len(g.tensors), st.checkpoint))
    if o["mtp"]:
        C.open_mtp(o["mtp"])
        if fork and st.checkpoint == "0731":
            C.log("ds4: warning: the 0731 base has no MTP head; MTP disabled for %s" % o["mtp"])
            o["mtp"] = None
        else:
            C.log("ds4: MTP support model loaded: %s (draft=%d)" % (o["mtp"], o["mtp_draft"]))
    if fork:
        dspark = o["dspark"]
        if dspark is None and not (o["no_dspark"] or o["no_spec"]):
            dspark = os.environ.get("DS4_DSPARK_MODEL") or None
        if dspark:
            dg = C.open_dspark(dspark)
            dv = C.variant(dg)
            if dv != st.checkpoint:
                C.die("ds4: DSpark drafter %s is checkpoint_variant=%s but the base model is %s; refusing "
                      "to start" % (dspark, dv, st.checkpoint), 1)
            C.log("ds4: DSpark drafter loaded: %s (variant=%s)" % (dspark, dv))
        if o["preset"] == "spark" and not dspark:
            C.die("ds4-server: preset spark requires a DSpark drafter", 2)
        o["dspark"] = dspark
    backend = C.choose_backend(o["backend"])

    if st.fault[0] == "crash-at-start":
        if backend == "cuda":
            C.log("ds4: CUDA error: out of memory at ds4_cuda.cu:412 (cudaMalloc of 1792 MiB weight arena)")
            C.die("ds4: cuda backend unavailable; aborting startup", 1)
        C.die("ds4: cpu failed to map model views; aborting startup. This is commonly caused by insufficient "
              "memory or accelerator VM budget.", 1)

    # Like the real engine, a first SIGTERM does not interrupt the load (nothing in it looks at the flag):
    # the server finishes loading, binds, and only then shuts down. A second signal exits 130 at once.
    C.simulate_load(g, backend, o["warm"], lambda: False, hang=st.fault[0] == "hang")
    C.hold_memory()

    vocab = len(g.kv.get("tokenizer.ggml.tokens") or ())  # the real engine's ds4_engine_vocab_size()
    if distributed and distributed["--role"] == "worker":
        D.run_worker(distributed, vocab)  # no HTTP; ends by a second signal, as the real worker does
    if distributed:
        st.route = D.run_coordinator(distributed)  # binds HTTP at once; completions wait for a complete route
        st.vocab = vocab

    ctx = o["ctx"]
    C.log("ds4-server: context buffers %.2f MiB (ctx=%d, backend=%s, prefill_chunk=2048, raw_kv_rows=128, "
          "compressed_kv_rows=%d)" % (C.context_bytes(ctx) / 1048576.0, ctx, backend, (ctx + 3) // 4))
    if backend == "cuda" and ctx * C.KV_BYTES_PER_TOKEN >= C.MANAGED_THRESHOLD:
        C.log("ds4: CUDA using managed KV cache for ctx=%d (%.1f GiB)"
              % (ctx, ctx * C.KV_BYTES_PER_TOKEN / float(1 << 30)))
    kv_dir = None
    if o["kv_dir"]:
        try:
            os.makedirs(o["kv_dir"], exist_ok=True)
            kv_dir = o["kv_dir"]
            C.log("ds4-server: KV disk cache %s (budget=%d MiB, cross-quant=%s, min=%d, cold_max=%d, continued=%d, "
                  "trim=%d, align=%d, hit_half_life=21600s)"
                  % (kv_dir, o["kv_mb"], "reject" if o["kv_reject_quant"] else "accept", o["kv_min"],
                     o["kv_cold_max"], o["kv_interval"], o["kv_trim"], o["kv_align"]))
        except OSError as e:
            C.log("ds4-server: failed to create KV cache directory %s: %s" % (o["kv_dir"], e.strerror))
    if o["trace"]:
        try:
            st.trace = open(o["trace"], "w", encoding="utf-8")
        except OSError as e:
            C.die("ds4-server: failed to open trace file %s: %s" % (o["trace"], e.strerror), 1)
        C.log("ds4-server: tracing session to %s" % o["trace"])
    if fork:
        if o["power"] != 100:
            C.log("ds4: GPU power duty cycle %d%%" % o["power"])
        mem_floor = o["mem_floor"]
        if mem_floor is None:
            try:
                mem_floor = int(os.environ.get("DS4_MEM_FLOOR_GB", "4"))
            except ValueError:
                mem_floor = 4
        C.log("ds4-server: admission bounds: max_clients=256 max_queue=256 max_queue_bytes=256MiB "
              "max_queue_age=600s mem_floor=%dGiB" % mem_floor)
        C.log("ds4-server: reasoning effort default=%s" % o["effort"])
    st.speed = S.Speed(o, fork, st.gen_lock)

    host, port = o["host"], o["port"]
    addr = "127.0.0.1" if host == "localhost" else host
    try:
        socket.inet_pton(socket.AF_INET, addr)
    except OSError:
        C.die("ds4-server: failed to listen on %s:%d: Invalid argument" % (host, port), 1)
    try:
        httpd = Server((addr, port & 0xFFFF), Handler, bind_and_activate=False)  # htons((uint16_t)port)
        httpd.server_bind()
        httpd.server_activate()
    except OSError as e:
        C.die("ds4-server: failed to listen on %s:%d: %s" % (host, port, e.strerror or e), 1)
    t = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    t.start()
    st.started = time.time()
    C.log("ds4-server: listening on http://%s:%d" % (host, port))

    if st.fault[0] == "crash-after":
        def crash():
            if backend == "cuda":
                C.log("ds4: CUDA error: an illegal memory access was encountered at ds4_cuda.cu:2817 "
                      "(cudaStreamSynchronize)")
            else:
                C.log("ds4: error: worker thread failed: session state corrupted; aborting")
            os._exit(1)
        tm = threading.Timer(st.fault[1], crash)
        tm.daemon = True
        tm.start()

    while not st.stop.is_set():
        st.stop.wait(0.2)
    C.log("ds4-server: shutdown requested, draining requests")
    httpd.shutdown()
    httpd.server_close()
    # wait for the running generations (all of a fork batch) and open client connections
    while True:
        if st.gen_lock.acquire_all(timeout=0.1):
            break
    deadline = time.time() + 10
    while st.active > 0 and time.time() < deadline:
        time.sleep(0.05)
    if kv_dir and len(st.last_prompt) >= o["kv_min"]:
        C.log("ds4-server: persisting current KV cache before shutdown tokens=%d" % len(st.last_prompt))
        try:
            persist_kv(kv_dir)
        except OSError as e:
            C.log("ds4-server: failed to persist KV cache: %s" % e.strerror)
    if st.trace is not None:
        st.trace.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
