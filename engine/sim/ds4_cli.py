"""ds4: command line front end (one prompt, or model inspection)."""

import os
import sys
import time

import ds4_common as C
import ds4_gen as G

OPTIONS = [
    (("-m", "--model"), "FILE", "model", "str", "main GGUF (default ds4flash.gguf)"),
    (("--mtp",), "FILE", "mtp", "str", "optional MTP speculative decoding GGUF"),
    (("--mtp-draft",), "N", "mtp_draft", "int", "MTP draft tokens per step (default 1)"),
    (("-c", "--ctx"), "N", "ctx", "int", "context tokens (default 32768)"),
    (("-n", "--tokens"), "N", "tokens", "int", "max output tokens (default 50000)"),
    (("-t", "--threads"), "N", "threads", "int", "CPU helper threads"),
    (("-p", "--prompt"), "TEXT", "prompt", "str", "prompt text"),
    (("--prompt-file",), "FILE", "prompt_file", "str", "read the prompt from a file"),
    (("--temp",), "F", "temp", "float", "sampling temperature (default 1)"),
    (("--nothink",), None, "think", "const:off", "disable thinking"),
    (("--think",), None, "think", "const:high", "enable thinking (default)"),
    (("--think-max",), None, "think", "const:max", "maximum thinking effort"),
    (("--inspect",), None, "inspect", "flag", "print model metadata and exit"),
    (("--dump-tokens",), None, "dump", "flag", "tokenize the prompt and exit"),
    (("--quality",), None, "quality", "flag", "exact kernels"),
    (("--warm-weights",), None, "warm", "flag", "touch all mapped weight pages first"),
    (("--metal",), None, "backend", "const:metal", "use the Metal backend"),
    (("--cuda",), None, "backend", "const:cuda", "use the CUDA backend"),
    (("--cpu",), None, "backend", "const:cpu", "use the CPU reference backend"),
    (("--backend",), "NAME", "backend", "str", "backend: metal, cuda or cpu"),
    (("-h", "--help"), None, "help", "help", "show this help and exit"),
]


def usage():
    lines = ["usage: ds4 [options]", "", "options:"]
    for names, meta, _k, _kind, text in OPTIONS:
        lines.append("  %-26s %s" % (", ".join(names) + (" " + meta if meta else ""), text))
    return "\n".join(lines) + "\n"


def bad(msg, with_usage=False):
    sys.stderr.write("ds4: %s\n" % msg)
    if with_usage:
        sys.stderr.write(usage())
    sys.exit(2)


def parse(argv):
    o = {"model": "ds4flash.gguf", "mtp": None, "mtp_draft": 1, "ctx": 32768, "tokens": 50000,
         "threads": None, "prompt": None, "prompt_file": None, "temp": 1.0, "think": "high",
         "inspect": False, "dump": False, "quality": False, "warm": False, "backend": None}
    table = {n: opt for opt in OPTIONS for n in opt[0]}
    i = 0
    while i < len(argv):
        a = argv[i]
        opt = table.get(a)
        if opt is None:
            bad("unknown option: %s" % a, True)
        names, meta, key, kind, _t = opt
        if kind == "help":
            sys.stdout.write(usage())
            sys.exit(0)
        if meta is None:
            o[key] = kind[6:] if kind.startswith("const:") else True
            i += 1
            continue
        if i + 1 >= len(argv):
            bad("missing value for %s" % a)
        v = argv[i + 1]
        i += 2
        if kind == "int":
            try:
                n = int(v, 10)
            except ValueError:
                bad("invalid integer for %s: %s" % (a, v))
            if n <= 0:
                bad("%s must be > 0" % a)
            o[key] = n
        elif kind == "float":
            try:
                o[key] = float(v)
            except ValueError:
                bad("invalid number for %s: %s" % (a, v))
        else:
            o[key] = v
    if o["backend"] not in (None, "metal", "cuda", "cpu"):
        bad("unknown backend: %s" % o["backend"])
    return o


def main(argv=None):
    o = parse(sys.argv[1:] if argv is None else argv)
    C.PROG = "ds4"
    C.acquire_instance_lock()
    g = C.read_gguf(o["model"], "model")
    if o["inspect"]:
        sys.stdout.write("file: %s\nsize: %d bytes\ngguf version: %d\ntensors: %d\n"
                         % (o["model"], g.size, g.version, len(g.tensors)))
        for k in sorted(g.kv):
            v = g.kv[k]
            if isinstance(v, list) and len(v) > 16:
                v = "[%d items]" % len(v)
            sys.stdout.write("%s = %s\n" % (k, C._fmt(v)))
        sys.exit(0)
    C.validate_main(g)
    prompt = o["prompt"]
    if o["prompt_file"]:
        try:
            with open(o["prompt_file"], encoding="utf-8", errors="replace") as f:
                prompt = f.read()
        except OSError as e:
            C.die("ds4: cannot read prompt file %s: %s" % (o["prompt_file"], e.strerror), 1)
    if prompt is None:
        bad("a prompt is required (-p or --prompt-file)")
    thinking = o["think"] != "off"
    rendered = G.render([{"role": "user", "content": prompt}], None, None, thinking)
    if o["dump"]:
        toks = C._TOK.findall(rendered)
        sys.stdout.write("%d tokens\n" % len(toks))
        for i, t in enumerate(toks):
            sys.stdout.write("%6d %r\n" % (i, t))
        sys.exit(0)
    if o["mtp"]:
        C.open_mtp(o["mtp"])
        C.log("ds4: MTP support model loaded: %s (draft=%d)" % (o["mtp"], o["mtp_draft"]))
    backend = o["backend"] or ("cuda" if C.is_cuda_build() else "cpu")
    if backend == "metal" or (backend == "cuda" and not C.is_cuda_build()):
        C.die("ds4: %s backend unavailable; aborting startup" % backend, 1)
    fault = C.fault()[0]
    if fault == "crash-at-start":
        C.log("ds4: CUDA error: out of memory at ds4_cuda.cu:412 (cudaMalloc of 1792 MiB weight arena)")
        C.die("ds4: cuda backend unavailable; aborting startup", 1)
    stop = {"v": False}
    try:
        import signal

        def on_sig(_s, _f):
            if stop["v"]:
                os._exit(130)
            stop["v"] = True
        signal.signal(signal.SIGTERM, on_sig)
        signal.signal(signal.SIGINT, on_sig)
        C.simulate_load(g, backend, o["warm"], lambda: stop["v"], hang=fault == "hang")
    except C.Stop:
        sys.exit(130)
    n_prompt = len(C._TOK.findall(rendered))
    t0 = time.time()
    time.sleep(min(n_prompt / C.prefill_tok_s(), 10.0))
    t1 = time.time()
    gen = G.generate(prompt, thinking, min(o["tokens"], max(o["ctx"] - n_prompt, 0)))
    per = 1.0 / C.decode_tok_s()
    out = sys.stdout
    if thinking:
        out.write("<think>\n")
    for p in gen.reasoning:
        time.sleep(per)
        out.write(p)
        out.flush()
    if thinking:
        out.write("\n</think>\n\n")
    for p in gen.content:
        time.sleep(per)
        out.write(p.lstrip() if p is gen.content[0] else p)
        out.flush()
    out.write("\n")
    out.flush()
    t2 = time.time()
    pf = n_prompt / (t1 - t0) if t1 > t0 else C.prefill_tok_s()
    gn = gen.completion_tokens / (t2 - t1) if t2 > t1 else C.decode_tok_s()
    C.log("ds4: prefill: %.2f t/s, generation: %.2f t/s" % (pf, gn))
    return 0


if __name__ == "__main__":
    main()
