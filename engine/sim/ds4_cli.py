"""ds4: command line front end (one prompt, or model inspection)."""

import sys
import time

import ds4_common as C
import ds4_gen as G

OPTIONS = [
    C.Opt(("-m", "--model"), "FILE", "model", "str", "main GGUF (default ds4flash.gguf)"),
    C.Opt(("--mtp",), "FILE", "mtp", "str", "optional MTP speculative decoding GGUF"),
    C.Opt(("--mtp-draft",), "N", "mtp_draft", "int", "MTP draft tokens per step (default 1)"),
    C.Opt(("-c", "--ctx"), "N", "ctx", "int", "context tokens (default 32768)"),
    C.Opt(("-n", "--tokens"), "N", "tokens", "int", "max output tokens (default 50000)"),
    C.Opt(("-t", "--threads"), "N", "threads", "int", "CPU helper threads"),
    C.Opt(("-p", "--prompt"), "TEXT", "prompt", "str", "prompt text"),
    C.Opt(("--prompt-file",), "FILE", "prompt_file", "str", "read the prompt from a file"),
    C.Opt(("--temp",), "F", "temp", "float", "sampling temperature (default 1)"),
    C.Opt(("--nothink",), None, "think", "const:off", "disable thinking"),
    C.Opt(("--think",), None, "think", "const:high", "enable thinking (default)"),
    C.Opt(("--think-max",), None, "think", "const:max", "maximum thinking effort"),
    C.Opt(("--inspect",), None, "inspect", "flag", "print model metadata and exit"),
    C.Opt(("--dump-tokens",), None, "dump", "flag", "tokenize the prompt and exit"),
    *C.RUN_OPTIONS,
    C.Opt(("-h", "--help"), None, "help", "help", "Show this help."),
]

DEFAULTS = {"model": "ds4flash.gguf", "mtp": None, "mtp_draft": 1, "ctx": 32768, "tokens": 50000,
            "threads": None, "prompt": None, "prompt_file": None, "temp": 1.0, "think": "high",
            "inspect": False, "dump": False, "quality": False, "warm": False, "backend": None}
CLI = C.Options("ds4", OPTIONS, synopsis="[(-p PROMPT | --prompt-file FILE)] [options]")


def parse(argv):
    o = CLI.parse(argv, DEFAULTS)
    if o["backend"] not in (None, "metal", "cuda", "cpu"):
        CLI.bad("unknown backend: %s" % o["backend"])
    return o


def main(argv=None):
    o = parse(sys.argv[1:] if argv is None else argv)
    C.PROG = "ds4"
    C.acquire_instance_lock()
    g = C.read_gguf(o["model"])
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
        CLI.bad("a prompt is required (-p or --prompt-file)")
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
    backend = C.choose_backend(o["backend"])
    fault = C.fault()[0]
    if fault == "crash-at-start":
        C.log("ds4: CUDA error: out of memory at ds4_cuda.cu:412 (cudaMalloc of 1792 MiB weight arena)")
        C.die("ds4: cuda backend unavailable; aborting startup", 1)
    C.load_on_signals(g, backend, o["warm"], hang=fault == "hang")
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
