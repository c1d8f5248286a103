"""ds4-bench: in-process prefill/decode speed sweep over growing context frontiers."""

import math
import sys
import time

import ds4_common as C
import ds4_gen as G

OPTIONS = [
    C.Opt(("--prompt-file",), "FILE", "prompt_file", "str", "raw text prompt"),
    C.Opt(("--chat-prompt-file",), "FILE", "chat_file", "str", "one non-thinking user turn"),
    C.Opt(("-sys", "--system"), "TEXT", "system", "str", "system prompt for the chat prompt"),
    C.Opt(("--ctx-start",), "N", "ctx_start", "int", "first frontier (default 2048)"),
    C.Opt(("--ctx-max",), "N", "ctx_max", "int", "last frontier (default 32768)"),
    C.Opt(("--step-incr",), "N", "step_incr", "int", "frontier increment (default 2048)"),
    C.Opt(("--step-mul",), "F", "step_mul", "float", "geometric frontier growth",
          C.check(lambda f: f > 1.0)),
    C.Opt(("-n", "--gen-tokens"), "N", "gen", "int", "greedy tokens decoded per frontier (default 128)"),
    C.Opt(("--ctx-alloc",), "N", "ctx_alloc", "int", "context allocated (default ctx max plus gen plus 1)"),
    C.Opt(("-m", "--model"), "FILE", "model", "str", "main GGUF (default ds4flash.gguf)"),
    C.Opt(("-t", "--threads"), "N", "threads", "int", "CPU helper threads"),
    *C.RUN_OPTIONS,
    C.Opt(("--csv",), "FILE", "csv", "str", "write CSV here instead of stdout"),
    C.Opt(("-h", "--help"), None, "help", "help", "Show this help."),
]

DEFAULTS = {"prompt_file": None, "chat_file": None, "system": None, "ctx_start": 2048, "ctx_max": 32768,
            "step_incr": 2048, "step_mul": None, "gen": 128, "ctx_alloc": None, "model": "ds4flash.gguf",
            "threads": None, "quality": False, "warm": False, "backend": None, "csv": None}
CLI = C.Options("ds4-bench", OPTIONS)


def parse(argv):
    o = CLI.parse(argv, DEFAULTS)
    if (o["prompt_file"] is None) == (o["chat_file"] is None):
        CLI.bad("exactly one of --prompt-file or --chat-prompt-file is required")
    if o["ctx_start"] > o["ctx_max"]:
        CLI.bad("--ctx-start must be <= --ctx-max")
    return o


def frontiers(o):
    out = []
    c = o["ctx_start"]
    while c <= o["ctx_max"]:
        out.append(c)
        if o["step_mul"]:
            c = max(c + 1, int(math.ceil(c * o["step_mul"])))
        else:
            c += o["step_incr"]
    if out[-1] != o["ctx_max"]:
        out.append(o["ctx_max"])
    return out


def main(argv=None):
    o = parse(sys.argv[1:] if argv is None else argv)
    C.acquire_instance_lock()
    g = C.read_gguf(o["model"])
    C.validate_main(g)
    path = o["prompt_file"] or o["chat_file"]
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        C.die("ds4-bench: cannot read %s: %s" % (path, e.strerror), 1)
    if o["chat_file"]:
        text = G.render([{"role": "user", "content": text}], o["system"], None, False)
    n_tok = C.count_tokens(text)
    if n_tok < o["ctx_max"]:
        C.die("ds4-bench: prompt has %d tokens, fewer than --ctx-max %d" % (n_tok, o["ctx_max"]), 1)
    backend = C.choose_backend(o["backend"])
    fault = C.fault()[0]
    if fault == "crash-at-start":
        C.die("ds4: cuda backend unavailable; aborting startup", 1)
    stopped = C.load_on_signals(g, backend, o["warm"], hang=fault == "hang")
    fork = C.BUILD.get("flavour") == "fork"
    cols = ["ctx_tokens", "prefill_tokens", "prefill_tps", "gen_tokens", "gen_tps", "kvcache_bytes"]
    if fork:
        cols += ["gen_tps_ss", "ttft_ms"]
    rows = [",".join(cols)]
    pf0, dc0 = C.prefill_tok_s(), C.decode_tok_s()
    prev = 0
    for ctx in frontiers(o):
        if stopped():
            sys.exit(130)
        slice_n = ctx - prev
        pf = pf0 / (1.0 + ctx / 65536.0)
        dc = dc0 / (1.0 + ctx / 131072.0)
        time.sleep(min(slice_n / pf, 0.05) + min(o["gen"] / dc, 0.05))
        row = [ctx, slice_n, "%.2f" % pf, o["gen"], "%.2f" % dc, ctx * C.KV_BYTES_PER_TOKEN]
        if fork:
            row += ["%.2f" % (dc * 1.01), "%.1f" % (1000.0 * (slice_n / pf + 1.0 / dc))]
        rows.append(",".join(str(x) for x in row))
        C.log("ds4-bench: ctx=%d prefill %.2f t/s, generation %.2f t/s" % (ctx, pf, dc))
        prev = ctx
    data = "\n".join(rows) + "\n"
    if o["csv"]:
        try:
            with open(o["csv"], "w") as f:
                f.write(data)
        except OSError as e:
            C.die("ds4-bench: cannot write %s: %s" % (o["csv"], e.strerror), 1)
    else:
        sys.stdout.write(data)
    return 0


if __name__ == "__main__":
    main()
