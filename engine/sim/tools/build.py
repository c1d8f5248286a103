"""Build helper called by the Makefile (stdlib only).

  build.py cuda-object --arch A --version-file F --out ds4_cuda.o
  build.py link --target T --python /abs/python [--cuda-object ds4_cuda.o]

`link` produces the executable ds4-server in the tree root (the tool runs no other engine program):
zip applications whose first line is "#!<python>", with the build settings
(target, CUDA arch, nvcc version line, flavour, version, sim.conf) baked in.
"""

import argparse
import json
import os
import shutil
import sys
import zipapp

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULES = ["ds4_common.py", "ds4_gen.py", "ds4_speed.py", "ds4_server.py", "ds4_distributed.py"]
PROGRAMS = {"ds4-server": "ds4_server"}
C_UNITS = ["ds4.c", "ds4_kvstore.c", "ds4_server.c"]


def read(name, default=""):
    try:
        with open(os.path.join(ROOT, name), encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return default


def read_conf():
    conf = {"load_seconds": "3", "fault": "none", "decode_tok_s": "200", "prefill_tok_s": "4000"}
    for line in read("sim.conf").splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            k, v = line.split("=", 1)
            conf[k.strip()] = v.strip()
    return conf


def build_fails(conf):
    return conf.get("fault") == "build-fails" or os.environ.get("DS4_SIM_FAULT", "").strip() == "build-fails"


def cuda_object(args):
    conf = read_conf()
    if build_fails(conf):
        sys.stderr.write(
            'ds4_cuda.cu(2817): error: identifier "ds4_kv_rows_per_page" is undefined\n'
            '          const int rows = ds4_kv_rows_per_page(ctx);\n'
            '                           ^\n\n'
            '1 error detected in the compilation of "ds4_cuda.cu".\n')
        sys.exit(2)
    try:
        with open(args.version_file, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        text = ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    nvcc = next((ln for ln in lines if "release" in ln), lines[-1] if lines else "unknown")
    obj = {"cuda_arch": args.arch, "nvcc": nvcc}
    with open(args.out, "w") as f:
        json.dump(obj, f)
        f.write("\n")
    try:
        os.unlink(args.version_file)
    except OSError:
        pass


def link(args):
    conf = read_conf()
    cpu = args.target == "cpu"
    cflags = "-O3 -ffast-math -march=native" + (" -DDS4_NO_GPU" if cpu else "")
    for unit in C_UNITS:
        print("cc %s -c %s -o %s" % (cflags, unit, unit[:-2] + ".o"))
        sys.stdout.flush()
        if unit == "ds4.c" and build_fails(conf):
            sys.stderr.write(
                "ds4.c: In function 'ds4_session_prefill':\n"
                "ds4.c:4127:17: error: 'DS4_KV_ROWS' undeclared (first use in this function)\n"
                " 4127 |     int rows = DS4_KV_ROWS(ctx);\n"
                "      |                ^~~~~~~~~~~\n")
            sys.exit(1)
    cuda_arch, nvcc = "", "none"
    if args.cuda_object:
        with open(args.cuda_object) as f:
            obj = json.load(f)
        cuda_arch, nvcc = obj.get("cuda_arch", ""), obj.get("nvcc", "unknown")
    flavour = read("FLAVOUR", "upstream")
    if flavour not in ("upstream", "fork"):
        flavour = "upstream"
    build = {"target": args.target, "cuda_arch": cuda_arch, "nvcc": nvcc, "flavour": flavour,
             "version": read("VERSION") if flavour == "fork" else "", "conf": conf}
    # the interpreter $(PYTHON) resolves to (a pyenv-style shim resolves to the real binary, so the
    # kernel runs it directly and the process keeps its own name, e.g. ds4-server)
    interpreter = sys.executable if sys.executable and os.path.isabs(sys.executable) else args.python
    stage_root = os.path.join(ROOT, ".build")
    libs = "" if cpu else " ds4_cuda.o -L$(CUDA_HOME)/lib64 -lcudart -lcublas"
    for prog, module in PROGRAMS.items():
        print("cc -o %s %s.o ds4.o ds4_kvstore.o%s -lm -lpthread" % (prog, module, libs))
        sys.stdout.flush()
        stage = os.path.join(stage_root, prog)
        shutil.rmtree(stage, ignore_errors=True)
        os.makedirs(stage)
        for m in MODULES:
            shutil.copyfile(os.path.join(ROOT, m), os.path.join(stage, m))
        with open(os.path.join(stage, "_build_info.py"), "w") as f:
            f.write("BUILD = %r\n" % (build,))
        with open(os.path.join(stage, "__main__.py"), "w") as f:
            f.write("import sys\nimport %s\nsys.exit(%s.main())\n" % (module, module))
        out = os.path.join(ROOT, prog)
        tmp = out + ".tmp"
        zipapp.create_archive(stage, tmp, interpreter=interpreter, compressed=True)
        os.chmod(tmp, 0o755)
        os.replace(tmp, out)
    shutil.rmtree(stage_root, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd")
    a = sub.add_parser("cuda-object")
    a.add_argument("--arch", default="")
    a.add_argument("--version-file", required=True)
    a.add_argument("--out", required=True)
    b = sub.add_parser("link")
    b.add_argument("--target", required=True)
    b.add_argument("--python", required=True)
    b.add_argument("--cuda-object")
    args = ap.parse_args()
    if args.cmd == "cuda-object":
        cuda_object(args)
    elif args.cmd == "link":
        link(args)
    else:
        ap.error("missing command")


if __name__ == "__main__":
    main()
