"""Shared runtime of the ds4 programs: command line options, logging, instance lock,
GGUF reading and model validation, build settings and the weight-load phase.

Only the Python standard library is used: the built programs run on a bare
interpreter.
"""

import collections
import errno
import fcntl
import os
import re
import signal
import struct
import sys
import time

try:  # baked in by `make` (tools/build.py); absent when run from the source tree
    from _build_info import BUILD  # type: ignore
except ImportError:  # pragma: no cover - source-tree runs only
    BUILD = {
        "target": "source",
        "cuda_arch": "",
        "nvcc": "none",
        "flavour": "upstream",
        "version": "",
        "conf": {"load_seconds": "1", "fault": "none"},
    }

PROG = "ds4"
# ds4-server prefixes its own lines ("ds4-server: …") with "MMDD HH:MM:SS "; engine lines ("ds4: …") have none
TIMESTAMPS = False

KNOWN_FAULTS = ("none", "crash-at-start", "crash-after", "hang", "wrong-model",
                "wrong-answer", "build-fails", "dsml-as-text", "poisoned",
                "empty-stream")


# --------------------------------------------------------------------------- command line

# One row of a program's option table.
#   kind:  str | int (> 0) | int0 (>= 0) | float | flag | const:<value> | help | version
#   check: None or check(...): a further test of the converted value
#   fork:  listed only by fork builds (the program filters its table)
#   text:  the description, printed on the line after the option; None: parsed but not listed on its own
#          (a plain string row of the table prints a heading or a grouped line as it is)
Opt = collections.namedtuple("Opt", "names meta key kind text check fork", defaults=(None, False))


def check(ok, msg="invalid value for %(opt)s: %(val)s"):
    """A validator for an Opt row: the message msg (with %(opt)s, the option as
    given, and %(val)s, the value as given) when ok(converted value) is false."""
    return lambda opt, val, raw: None if ok(val) else msg % {"opt": opt, "val": raw}


def _int10(v):
    return int(v, 10)


# kind: (conversion, check every value of the kind passes), as parse_int_arg() and friends of the real programs
_VALUE_KINDS = {
    "str": (str, None),
    "int": (_int10, check(lambda n: 0 < n <= 0x7FFFFFFF)),
    "int0": (_int10, check(lambda n: 0 <= n <= 0x7FFFFFFF)),
    "float": (float, None),
}


class Options:
    """The table-driven command line of one program: usage text in the real programs' layout
    (`Usage:`, headings, each option on its own line with the description on the next), errors
    (exit 2: "PROG: unknown option: X" plus usage, "missing value for", "invalid value for") and
    parsing into a dict of the table's keys."""

    def __init__(self, prog, table, synopsis="[options]"):
        self.prog = prog
        self.table = table
        self.synopsis = synopsis

    def opts(self):
        return [o for o in self.table if isinstance(o, Opt)]

    def usage(self):
        lines = ["Usage: %s %s" % (self.prog, self.synopsis), ""]
        for row in self.table:
            if isinstance(row, str):
                lines.append(row)
            elif row.text is not None:
                lines.append("  " + ", ".join(row.names) + (" " + row.meta if row.meta else ""))
                lines.append("      " + row.text)
        return "\n".join(lines) + "\n"

    def bad(self, msg, with_usage=False):
        log("%s: %s" % (self.prog, msg))
        if with_usage:
            sys.stderr.write(self.usage())
        sys.stderr.flush()
        sys.exit(2)

    def _print_and_exit(self, text):
        sys.stdout.write(text)
        sys.stdout.flush()
        sys.exit(0)

    def parse(self, argv, defaults):
        o = dict(defaults)
        by_name = {n: opt for opt in self.opts() for n in opt.names}
        i = 0
        while i < len(argv):
            arg = argv[i]
            opt = by_name.get(arg)
            if opt is None:
                self.bad("unknown option: %s" % arg, with_usage=True)
            if opt.kind == "help":
                self._print_and_exit(self.usage())
            if opt.kind == "version":
                self._print_and_exit("%s %s\n" % (self.prog, BUILD.get("version") or "unknown"))
            if opt.meta is None:
                o[opt.key] = opt.kind[len("const:"):] if opt.kind.startswith("const:") else True
                i += 1
                continue
            if i + 1 >= len(argv):
                self.bad("missing value for %s" % arg)
            raw = argv[i + 1]
            i += 2
            convert, kind_check = _VALUE_KINDS[opt.kind]
            try:
                val = convert(raw)
            except ValueError:
                self.bad("invalid value for %s: %s" % (arg, raw))
            for test in (kind_check, opt.check):
                err = test and test(arg, val, raw)
                if err:
                    self.bad(err)
            o[opt.key] = val
        return o


# --------------------------------------------------------------------------- logging

def log(msg):
    if TIMESTAMPS and msg.startswith("ds4-server:"):
        msg = time.strftime("%m%d %H:%M:%S ") + msg
    try:
        sys.stderr.write(msg + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def die(msg, code=1):
    log(msg)
    sys.exit(code)


# --------------------------------------------------------------------------- settings

def _conf(name, default):
    return str(BUILD.get("conf", {}).get(name, default))


def setting_float(env, name, default):
    raw = os.environ.get(env)
    if raw is None or raw.strip() == "":
        raw = _conf(name, default)
    try:
        val = float(raw)
    except ValueError:
        val = float(default)
    return max(val, 0.0)


def load_seconds():
    return setting_float("DS4_SIM_LOAD_SECONDS", "load_seconds", "3")


def decode_tok_s():
    return max(setting_float("DS4_SIM_DECODE_TOK_S", "decode_tok_s", "200"), 1.0)


def prefill_tok_s():
    return max(setting_float("DS4_SIM_PREFILL_TOK_S", "prefill_tok_s", "4000"), 1.0)


def fault():
    """Returns (name, arg): e.g. ("crash-after", 3.0) or ("none", None)."""
    raw = os.environ.get("DS4_SIM_FAULT")
    if raw is None or raw.strip() == "":
        raw = _conf("fault", "none")
    raw = raw.strip()
    name, _, arg = raw.partition(":")
    if name not in KNOWN_FAULTS:
        return "none", None
    if name == "crash-after":
        try:
            return name, max(float(arg), 0.0)
        except ValueError:
            return name, 3.0
    if name == "poisoned":  # poisoned:N: after N seconds of serving (none: from the start)
        try:
            return name, max(float(arg), 0.0)
        except ValueError:
            return name, 0.0
    return name, None


def is_cuda_build():
    return str(BUILD.get("target", "")).startswith("cuda")


def build_line():
    nvcc = BUILD.get("nvcc") or "none"
    if nvcc != "none":
        m = re.search(r"V(\d+\.\d+\.\d+)", nvcc) or re.search(r"release (\d+\.\d+)", nvcc)
        nvcc = m.group(1) if m else nvcc.replace(" ", "_")
    return "ds4: build target=%s arch=%s nvcc=%s flavour=%s" % (
        BUILD.get("target", ""), BUILD.get("cuda_arch", ""), nvcc, BUILD.get("flavour", ""))


# --------------------------------------------------------------------------- instance lock

_lock_fd = None


def acquire_instance_lock():
    """As ds4_acquire_instance_lock(): flock DS4_LOCK_FILE (default /tmp/ds4.lock, created 0600), truncate it
    and write our pid. Every failure exits 2. The descriptor stays open for the life of the process; the pid
    stays in the file after exit (it is not a pid file: only the flock says who runs)."""
    global _lock_fd
    path = os.environ.get("DS4_LOCK_FILE") or "/tmp/ds4.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as e:
        die("ds4: failed to open lock file %s: %s" % (path, e.strerror), 2)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            try:
                m = re.match(rb"\s*([+-]?\d+)", os.pread(fd, 63, 0))
                owner = int(m.group(1)) if m else -1
            except OSError:
                owner = -1
            if owner > 0:
                die("ds4: another ds4 process is already running (pid %d); refusing to start" % owner, 2)
            die("ds4: another ds4 process is already running; refusing to start", 2)
        die("ds4: failed to lock %s: %s" % (path, e.strerror), 2)
    os.ftruncate(fd, 0)
    os.pwrite(fd, ("%d\n" % os.getpid()).encode(), 0)
    _lock_fd = fd
    return path


# --------------------------------------------------------------------------- GGUF

GGUF_MAGIC = b"GGUF"

# ggml type id -> (block elements, block bytes)
GGML_TYPES = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
    14: (256, 210), 15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98),
    19: (256, 50), 20: (32, 18), 21: (256, 110), 22: (256, 82), 23: (256, 136),
    24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8), 29: (256, 56),
    30: (1, 2), 39: (32, 17),
}

_SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
           10: "<Q", 11: "<q", 12: "<d"}


class GGUFError(Exception):
    pass


class GGUFFile:
    def __init__(self, path, size, version, kv, types, tensors, data_offset):
        self.path = path
        self.size = size
        self.version = version
        self.kv = kv                # key -> python value (arrays: lists)
        self.types = types          # key -> (GGUF value type, element type of an array or None)
        self.tensors = tensors      # list of (name, dims, type, offset)
        self.data_offset = data_offset

    def tensor_names(self):
        return [t[0] for t in self.tensors]

    def expected_size(self):
        end = self.data_offset
        for _name, dims, typ, off in self.tensors:
            if typ not in GGML_TYPES:
                continue
            n = 1
            for d in dims:
                n *= d
            blk, nbytes = GGML_TYPES[typ]
            end = max(end, self.data_offset + off + (n + blk - 1) // blk * nbytes)
        return end


class _Reader:
    def __init__(self, f, size):
        self.f = f
        self.size = size
        self.item_type = None  # element type of the array read last

    def read(self, n):
        b = self.f.read(n)
        if len(b) != n:
            raise GGUFError("unexpected end of file")
        return b

    def scalar(self, t):
        fmt = _SCALAR[t]
        return struct.unpack(fmt, self.read(struct.calcsize(fmt)))[0]

    def string(self):
        n = self.scalar(10)
        if n > self.size:
            raise GGUFError("string length out of range")
        return self.read(n).decode("utf-8", "replace")

    def value(self, t, depth=0):
        if t in _SCALAR:
            return self.scalar(t)
        if t == 8:
            return self.string()
        if t == 9 and depth == 0:
            et = self.scalar(4)
            n = self.scalar(10)
            if n > self.size:
                raise GGUFError("array length out of range")
            self.item_type = et
            return [self.value(et, depth + 1) for _ in range(n)]
        raise GGUFError("unknown metadata value type %d" % t)


def read_gguf(path):
    """Opens and parses a GGUF header, metadata and tensor table (model_open() of the engine).
    Exits like the engine on the classic failures."""
    try:
        f = open(path, "rb")
    except OSError as e:
        die("ds4: cannot open model '%s': %s" % (path, e.strerror or e), 1)
    with f:
        try:
            size = os.fstat(f.fileno()).st_size
            head = f.read(24)
        except OSError as e:
            die("ds4: cannot stat model '%s': %s" % (path, e.strerror or e), 1)
        if size < 32:
            die("ds4: model file is too small to be GGUF", 1)
        if head[:4] != GGUF_MAGIC:
            die("ds4: model is not a GGUF file", 1)
        version, n_tensors, n_kv = struct.unpack("<IQQ", head[4:24])
        if version != 3:
            die("ds4: only GGUF v3 is supported", 1)
        r = _Reader(f, size)
        try:
            if n_kv > size or n_tensors > size:
                raise GGUFError("counts out of range")
            kv, types = {}, {}
            for _ in range(n_kv):
                key = r.string()
                t = r.scalar(4)
                r.item_type = None
                kv[key] = r.value(t)
                types[key] = (t, r.item_type)
            tensors = []
            for _ in range(n_tensors):
                name = r.string()
                nd = r.scalar(4)
                if nd == 0 or nd > 8:
                    raise GGUFError("tensor has an unsupported number of dimensions")
                dims = [r.scalar(10) for _ in range(nd)]
                typ = r.scalar(4)
                off = r.scalar(10)
                tensors.append((name, dims, typ, off))
            pos = f.tell()
        except (GGUFError, struct.error) as e:
            die("ds4: %s" % e, 1)
    align = kv.get("general.alignment", 32)
    if types.get("general.alignment", (None,))[0] != 4 or not align:
        align = 32
    data_offset = (pos + align - 1) // align * align
    g = GGUFFile(path, size, version, kv, types, tensors, data_offset)
    want = g.expected_size()
    if g.tensors and want > size:
        die("ds4: tensor points outside GGUF file", 1)
    return g


# --------------------------------------------------------------------------- model checks
# As vocab_load() and config_validate_model() of the real ds4.c: the same order, the same value types,
# the same messages. The simulated "model" is tiny, so tensors are not bound.

U32, I32, F32, BOOL, STRING, ARRAY, U64, F64 = 4, 5, 6, 7, 8, 9, 10, 12
N_LAYER = 43

SPECIAL_TOKENS = ["<\uff5cbegin\u2581of\u2581sentence\uff5c>", "<\uff5cend\u2581of\u2581sentence\uff5c>",
                  "<\uff5cUser\uff5c>", "<\uff5cAssistant\uff5c>", "<think>", "</think>", "\uff5cDSML\uff5c"]

# (key, expected) read with required_u32, in the engine's order; the values are checked after all are read
MAIN_U32_FIRST = [
    ("block_count", 43), ("embedding_length", 4096), ("vocab_size", 129280),
    ("attention.head_count", 64), ("attention.head_count_kv", 1), ("attention.key_length", 512),
    ("attention.value_length", 512), ("rope.dimension_count", 64), ("attention.q_lora_rank", 1024),
    ("attention.output_lora_rank", 1024), ("attention.output_group_count", 8), ("expert_count", 256),
    ("expert_used_count", 6), ("expert_feed_forward_length", 2048), ("expert_shared_count", 1),
    ("hash_layer_count", 3),
]
# the order config_expect_u32 checks them in (block_count is checked later)
MAIN_U32_CHECK_ORDER = [
    "embedding_length", "vocab_size", "attention.head_count", "attention.key_length", "attention.head_count_kv",
    "attention.value_length", "rope.dimension_count", "attention.output_group_count", "attention.q_lora_rank",
    "attention.output_lora_rank", "expert_count", "expert_used_count", "expert_feed_forward_length",
    "expert_shared_count", "hash_layer_count",
]
MAIN_F32 = [("rope.freq_base", 10000.0), ("rope.scaling.factor", 16.0), ("rope.scaling.yarn_beta_fast", 32.0),
            ("rope.scaling.yarn_beta_slow", 1.0), ("attention.compress_rope_freq_base", 160000.0),
            ("expert_weights_scale", 1.5), ("attention.layer_norm_rms_epsilon", 1e-6),
            ("hyper_connection.epsilon", 1e-6)]

DSPARK_ARCH = "deepseek4-dspark"
DSPARK_REQUIRED = [
    ("deepseek4.dspark.layer_count", 3),
    ("deepseek4.dspark.block_size", 5),
    ("deepseek4.dspark.markov_rank", 256),
    ("deepseek4.dspark.noise_token_id", 128799),
    ("deepseek4.dspark.expert_count", 256),
]

VARIANT_KEY = "deepseek4.checkpoint_variant"


def _fmt(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v == int(v):
        return "%g" % v
    if isinstance(v, list):
        return "[%s]" % ",".join(_fmt(x) for x in v[:8])
    return str(v)


def _matches(got, want):
    if isinstance(want, bool) or isinstance(got, bool):
        return got is want
    return isinstance(got, (int, float)) and abs(float(got) - float(want)) < 1e-6


def _f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def _g9(x):
    """printf %.9g"""
    return "%.9g" % x


class _Meta:
    def __init__(self, g):
        self.g = g

    def typed(self, key):
        t = self.g.types.get(key)
        return (None, None, None) if t is None else (t[0], t[1], self.g.kv[key])

    def required(self, key, types=None):
        """The key's type and value; missing (or, with `types`, of another type) is the engine's 'missing'."""
        t, _, v = self.typed(key)
        if t is None or (types is not None and t not in types):
            die("ds4: required metadata key is missing: %s" % key, 1)
        return t, v

    def u32(self, key):
        return self.required(key, (U32,))[1]

    def u64(self, key):
        t, v = self.required(key)
        if t not in (U64, U32):
            die("ds4: metadata key has a non-integer type: %s" % key, 1)
        return v

    def f32(self, key):
        t, v = self.required(key)
        if t not in (F32, F64, U32, I32):
            die("ds4: metadata key has a non-float type %d: %s" % (t, key), 1)
        return _f32(float(v))

    def bool(self, key):
        return bool(self.required(key, (BOOL,))[1])


def _expect_u32(name, got, want):
    if got != want:
        die("ds4: expected %s=%d for DeepSeek4 Flash, got %d" % (name, want, got), 1)


def _expect_f32(name, got, want):
    want = _f32(want)
    scale = abs(want) if abs(want) > 1.0 else 1.0
    if abs(_f32(got - want)) <= _f32(scale * _f32(1.0e-6)):
        return
    die("ds4: expected %s=%s for DeepSeek4 Flash, got %s" % (name, _g9(want), _g9(got)), 1)


def vocab_load(g):
    tt, tit, tokens = (g.types.get("tokenizer.ggml.tokens", (None, None)) + (g.kv.get("tokenizer.ggml.tokens"),))
    if tt != ARRAY or tit != STRING or len(tokens) > 0x7FFFFFFF:
        die("ds4: GGUF tokenizer token table is missing or invalid", 1)
    mt, mit = g.types.get("tokenizer.ggml.merges", (None, None))
    if mt != ARRAY or mit != STRING:
        die("ds4: GGUF tokenizer merge table is missing or invalid", 1)
    have = set(tokens)
    for token in SPECIAL_TOKENS:
        if token not in have:
            die("ds4: required tokenizer token is missing: %s" % token, 1)


def validate_main(g):
    vocab_load(g)
    m = _Meta(g)
    got = {name: m.u32("deepseek4." + name) for name, _want in MAIN_U32_FIRST}
    want = dict(MAIN_U32_FIRST)
    groups = {}
    for name in ("expert_group_count", "expert_group_used_count"):
        t, _, v = m.typed("deepseek4." + name)
        groups[name] = v if t == U32 else 0
    for name in MAIN_U32_CHECK_ORDER:
        _expect_u32(name, got[name], want[name])
    for name, v in groups.items():
        _expect_u32(name, v, 0)
    _expect_u32("attention.sliding_window", m.u32("deepseek4.attention.sliding_window"), 128)
    indexer = [(n, m.u32("deepseek4.attention.indexer." + n), w)
               for n, w in (("head_count", 64), ("key_length", 128), ("top_k", 512))]
    for n, v, w in indexer:
        _expect_u32("attention.indexer." + n, v, w)
    _expect_u32("hyper_connection.count", m.u32("deepseek4.hyper_connection.count"), 4)
    _expect_u32("hyper_connection.sinkhorn_iterations", m.u32("deepseek4.hyper_connection.sinkhorn_iterations"), 20)
    _expect_u32("block_count", got["block_count"], N_LAYER)
    _compress_ratios(m)
    _swiglu_clamp(m)
    orig = m.u64("deepseek4.rope.scaling.original_context_length")
    if orig != 65536:
        die("ds4: expected rope.scaling.original_context_length=65536 for DeepSeek4 Flash, got %d" % orig, 1)
    for name, w in MAIN_F32:
        _expect_f32(name, m.f32("deepseek4." + name), w)
    norm = m.bool("deepseek4.expert_weights_norm")
    if norm is not True:
        die("ds4: expected expert_weights_norm=true for DeepSeek4 Flash, got false", 1)


def _layer_array(m, key, item_types, kind):
    """A per-layer metadata array as the engine requires it: of `kind`, at least one value per layer."""
    t, it, v = m.typed(key)
    if t != ARRAY or it not in item_types:
        die("ds4: required %s array metadata key is missing: %s" % (kind, key), 1)
    if len(v) < N_LAYER:
        die("ds4: %s is shorter than the layer count" % key, 1)
    return v


def _compress_ratios(m):
    v = _layer_array(m, "deepseek4.attention.compress_ratios", (U32, I32), "int32/uint32")
    for il in range(N_LAYER):
        if v[il] < 0:
            die("ds4: metadata array contains a negative value", 1)
        want = 0 if il < 2 else (4 if il % 2 == 0 else 128)
        if v[il] != want:
            die("ds4: unexpected DeepSeek4 compression ratio at layer %d: got %d, expected %d" % (il, v[il], want), 1)


def _swiglu_clamp(m):
    v = _layer_array(m, "deepseek4.swiglu_clamp_exp", (F32, F64), "float")
    for il in range(N_LAYER):
        _expect_f32("swiglu_clamp_exp", _f32(float(v[il])), 10.0)


def variant(g):
    v = g.kv.get(VARIANT_KEY)
    return str(v) if v not in (None, "") else "legacy"


def open_mtp(path):
    g = read_gguf(path)
    if not any(n.startswith("mtp.0.") for n in g.tensor_names()):
        die("ds4: required tensor is missing: mtp.0.hc_head_base.weight", 1)
    return g


def open_dspark(path):
    g = read_gguf(path)
    arch = g.kv.get("general.architecture")
    if arch != DSPARK_ARCH:
        die("ds4: DSpark drafter '%s' has general.architecture=%s, expected %s"
            % (path, _fmt(arch), DSPARK_ARCH), 1)
    for key, want in DSPARK_REQUIRED:
        if key not in g.kv:
            die("ds4: DSpark drafter: required metadata key is missing: %s" % key, 1)
        if not _matches(g.kv[key], want):
            die("ds4: DSpark drafter: expected %s=%s, got %s" % (key, _fmt(want), _fmt(g.kv[key])), 1)
    return g


# --------------------------------------------------------------------------- load phase

class Stop(Exception):
    """Raised by simulate_load when a shutdown was requested."""


def sim_model_gib(g):
    gib = g.size / float(1 << 30)
    return gib if gib >= 1.0 else 80.76


def gpu_name():
    arch = BUILD.get("cuda_arch") or ""
    if BUILD.get("target") == "cuda-spark" or arch in ("sm_121", "sm_121a", "native", ""):
        return "NVIDIA GB10 (sm_121)"
    return "NVIDIA H200 (%s)" % arch


# An engine at work uses CPU time (the real one computes, reads its weights, or spins on the GPU's stream): the
# simulator spends this share of its simulated load, prefill and decode on the CPU, so that a watchdog sees it
# progress, and a hung (SIGSTOPped) one not.
COMPUTE_SHARE = 0.05


def spin(seconds):
    end = time.time() + seconds
    while time.time() < end:
        pass


def simulate_load(g, backend, warm, stop_requested, hang=False):
    """Sleeps load_seconds in small steps, printing progress like the engine.
    stop_requested() is polled; when it turns true, Stop is raised."""
    total = load_seconds()
    gib = sim_model_gib(g)
    t0 = time.time()
    if backend == "cuda":
        log("ds4: CUDA backend initialized on %s" % gpu_name())
        log("ds4: CUDA registered %.2f GiB model mapping for device access" % gib)
    else:
        log("ds4: CPU backend: mapping %.2f GiB of model weights (%d threads)"
            % (gib, os.cpu_count() or 1))
    # a progress line every 16 GiB, or every 10 s (as when stderr is not a TTY)
    step = 16.0
    next_gib = step
    last_line = t0
    cap = 0.6 if hang else 1.0
    while True:
        if stop_requested():
            raise Stop()
        now = time.time()
        frac = 1.0 if total <= 0 else min((now - t0) / total, 1.0)
        frac = min(frac, cap)
        cached = gib * frac
        if (cached >= next_gib and frac < 1.0) or now - last_line >= 10.0:
            if backend == "cuda":
                log("ds4: CUDA loading model tensors %.2f GiB cached" % cached)
            else:
                log("ds4: CPU reading model weights %.2f GiB" % cached)
            while next_gib <= cached:
                next_gib += step
            last_line = now
        if frac >= 1.0:
            break
        if frac < cap:  # a load that hangs does no work
            spin(0.02 * COMPUTE_SHARE)
        time.sleep(0.02)
    if warm:
        log("ds4: warming %.2f GiB of mmapped weights" % gib)
    el = time.time() - t0
    if backend == "cuda":
        log("ds4: CUDA startup model cache prepared %.2f GiB of tensor spans in %.1fs" % (gib, el))
    else:
        log("ds4: CPU model weights ready %.2f GiB in %.1fs" % (gib, el))


def hold_seconds_back():
    """(bytes, seconds): what the engine holds while it runs beyond its mapping (a GB10's device cache of the
    tensors), and how long after it exits that memory is back (the driver frees it late). Both 0 by default."""
    return (int(setting_float("DS4_SIM_HOLD_GIB", "hold_gib", "0") * (1 << 30)),
            setting_float("DS4_SIM_RETURN_SECONDS", "return_seconds", "0"))


def _touched(nbytes):
    """nbytes of anonymous memory, every page of it really taken: MAP_POPULATE has the kernel fault them all in
    (twice as fast as writing them from here), else a write to each."""
    import mmap
    populate = getattr(mmap, "MAP_POPULATE", 0)
    if populate:
        return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | populate)
    held = mmap.mmap(-1, nbytes)
    chunk = b"\1" * (1 << 24)
    for offset in range(0, nbytes, len(chunk)):
        held.write(chunk[:nbytes - offset])
    return held


def hold_memory():
    """With DS4_SIM_HOLD_GIB set: a child of the engine's process group takes and touches that much anonymous
    memory, and gives it back DS4_SIM_RETURN_SECONDS after the engine is gone (it leaves the group then, as the
    driver's late free outlives the process). Returns once the memory is held."""
    nbytes, back_s = hold_seconds_back()
    if nbytes <= 0:
        return
    ready_r, ready_w = os.pipe()
    alive_r, alive_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.close(alive_w)
            if _lock_fd is not None:  # the driver's late free is memory only: the engine's instance lock goes with it
                os.close(_lock_fd)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's stop signal is the engine's, not ours
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            held = _touched(nbytes)
            os.write(ready_w, b"1")
            os.read(alive_r, 1)  # EOF: the engine is gone
            os.setsid()
            log("ds4-sim: the engine is gone; its %.2f GiB come back in %.1fs" % (nbytes / float(1 << 30), back_s))
            time.sleep(back_s)
            held.close()
            log("ds4-sim: %.2f GiB given back" % (nbytes / float(1 << 30)))
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(alive_r)
    os.read(ready_r, 1)
    os.close(ready_r)
    log("ds4-sim: holding %.2f GiB besides the mapping" % (nbytes / float(1 << 30)))
    # alive_w stays open (not inheritable) for the life of the engine: its close at exit is the child's signal


def choose_backend(requested):
    """The backend asked for, else cuda in CUDA builds and cpu otherwise; exits 1 (after the model
    checks, as ds4_engine_open() does) when this build cannot run it."""
    backend = requested or ("cuda" if is_cuda_build() else "cpu")
    if backend != "cpu" and not is_cuda_build():
        die("ds4: %s backend requested but this build has no graph backend support; aborting startup" % backend, 1)
    if backend == "metal":
        die("ds4: Metal backend requested but this build is linked with CUDA, not Metal", 1)
    return backend


# --------------------------------------------------------------------------- memory

KV_BYTES_PER_TOKEN = 13760
SCRATCH_BYTES_PER_TOKEN = 4096
RAW_FIXED_BYTES = 203423744
MANAGED_THRESHOLD = 8 << 30


def context_bytes(ctx):
    return RAW_FIXED_BYTES + ctx * KV_BYTES_PER_TOKEN + ctx * SCRATCH_BYTES_PER_TOKEN


# --------------------------------------------------------------------------- text

_TOK = re.compile(r"\w+|[^\w\s]", re.UNICODE)


def count_tokens(text):
    return len(_TOK.findall(text or ""))


def split_pieces(text):
    """Splits text into decode 'tokens' (each keeps its leading whitespace)."""
    return re.findall(r"\s*\S+", text or "")
