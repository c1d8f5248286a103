"""Creates or refreshes a git repository of the simulated ds4 engine at DEST.

usage: python3 engine/make_sim_repo.py DEST

History (all commits deterministic: fixed author, committer, dates, messages):

  main:  v0.1.0 (upstream flavour) -> v0.2.0 (fork, VERSION 0.2.0) -> v0.3.0 (fork, VERSION 0.3.0)
  fault/<name> branches, one commit each on top of v0.2.0 that changes only sim.conf:
         v0.3.1-crash-at-start, v0.3.1-crash-after (crash-after:3), v0.3.1-hang,
         v0.3.1-wrong-model, v0.3.1-wrong-answer, v0.3.1-build-fails, v0.3.1-dsml-as-text,
         v0.3.1-poisoned (poisoned:30: passes a converge's probe, then answers every generation with HTTP 500)
         v0.3.1-empty-stream

Tags are lightweight, so a tag's sha is its commit's sha. Running it again with
the same engine/sim sources gives the same shas; when DEST already has every
branch and tag at the expected commit, DEST is left untouched.

DEST must be this script's own repository (it prunes branches and resets the
checkout): a path that does not exist, an empty directory, or a repository it
made before (marked in its git config, or holding only its branches and tags
with a clean checkout). Anything else is refused, with exit status 2.

Import: make_sim_repo.build(Path(dest)) -> {tag: sha}. Needs only python3 and git.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SIM = Path(__file__).resolve().parent / "sim"

IDENT = ("ds4 maintainers", "maintainers@ds4.invalid")
BASE_TIME = 1783684800  # 2026-07-10 12:00:00 UTC
DAY = 86400

EXCLUDE_NAMES = {"ds4", "ds4-server", "ds4-bench", "ds4-eval", "ds4-agent", "__pycache__", ".build",
                 ".git", ".pytest_cache"}
EXCLUDE_SUFFIXES = (".o", ".o.ver", ".pyc", ".tmp", ".swp")
EXECUTABLE = ("install.sh",)

CHANGELOG = [
    ("0.1.0", ["Initial release: CUDA (DGX Spark / GB10, Hopper) and CPU builds.",
               "OpenAI and Anthropic compatible server with DSML tool calls, disk KV cache."]),
    ("0.2.0", ["Fork release: `--version`, `--no-update-check`, DSpark drafter (`--dspark`),",
               "`--no-spec`/`--no-mtp`/`--no-dspark`, `--power`, `--reasoning-effort`, `--mem-floor-gb`,",
               "`timings` in responses and `GET /metrics`."]),
    ("0.3.0", ["Documentation fixes."]),
]

FAULTS = [
    ("crash-at-start", "crash-at-start"),
    ("crash-after", "crash-after:3"),
    ("hang", "hang"),
    ("wrong-model", "wrong-model"),
    ("wrong-answer", "wrong-answer"),
    ("build-fails", "build-fails"),
    ("dsml-as-text", "dsml-as-text"),
    ("poisoned", "poisoned:30"),
    ("empty-stream", "empty-stream"),
]


def _git_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C",
                "GIT_TERMINAL_PROMPT": "0"})
    if extra:
        env.update(extra)
    return env


def _git(args, cwd=None, env=None, input=None, check=True):
    p = subprocess.run(["git"] + list(args), cwd=cwd, env=env or _git_env(), input=input,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if check and p.returncode != 0:
        raise RuntimeError("git %s failed: %s" % (" ".join(args), p.stderr.decode(errors="replace").strip()))
    return p.stdout.decode().strip()


def source_files():
    """engine/sim files as {relative path: bytes}, build outputs excluded."""
    files = {}
    for root, dirs, names in os.walk(SIM):
        dirs[:] = sorted(d for d in dirs if d not in EXCLUDE_NAMES)
        rel_root = Path(root).relative_to(SIM)
        for n in sorted(names):
            if n in EXCLUDE_NAMES or n.endswith(EXCLUDE_SUFFIXES):
                continue
            rel = (rel_root / n).as_posix()
            files[rel] = (Path(root) / n).read_bytes()
    return files


def _changelog(upto):
    out = ["# Changelog", ""]
    for ver, lines in reversed(CHANGELOG):
        if tuple(int(x) for x in ver.split(".")) > tuple(int(x) for x in upto.split(".")):
            continue
        out.append("## v%s" % ver)
        out += ["- " + lines[0]] + ["  " + ln for ln in lines[1:]]
        out.append("")
    return "\n".join(out).encode()


def _with_fault(files, fault):
    conf = files["sim.conf"].decode()
    if re.search(r"(?m)^fault\s*=.*$", conf):
        conf = re.sub(r"(?m)^fault\s*=.*$", "fault = %s" % fault, conf)
    else:
        conf += "fault = %s\n" % fault
    out = dict(files)
    out["sim.conf"] = conf.encode()
    return out


def plan():
    """-> list of (name, parent name or None, files, message, refs)."""
    base = source_files()
    base.pop("VERSION", None)
    v1 = dict(base, FLAVOUR=b"upstream\n")
    v1["CHANGELOG.md"] = _changelog("0.1.0")
    v2 = dict(base, FLAVOUR=b"fork\n", VERSION=b"0.2.0\n")
    v2["CHANGELOG.md"] = _changelog("0.2.0")
    v3 = dict(v2, VERSION=b"0.3.0\n")
    v3["CHANGELOG.md"] = _changelog("0.3.0")
    commits = [
        ("v0.1.0", None, v1, "ds4 0.1.0", ["refs/tags/v0.1.0"]),
        ("v0.2.0", "v0.1.0", v2, "ds4 0.2.0 (fork release)", ["refs/tags/v0.2.0"]),
        ("v0.3.0", "v0.2.0", v3, "ds4 0.3.0", ["refs/tags/v0.3.0", "refs/heads/main"]),
    ]
    for name, fault in FAULTS:
        tag = "v0.3.1-" + name
        commits.append((tag, "v0.2.0", _with_fault(v2, fault), "sim.conf: fault = %s" % fault,
                        ["refs/tags/" + tag, "refs/heads/fault/" + name]))
    return commits


def _materialize(gitdir):
    """Writes the planned commits into the bare repo at gitdir. -> ({name: sha}, {ref: sha})."""
    blob_cache = {}
    shas, refs = {}, {}
    index = os.path.join(gitdir, "plan.index")
    for i, (name, parent, files, message, names) in enumerate(plan()):
        when = "%d +0000" % (BASE_TIME + i * DAY)
        env = _git_env({"GIT_DIR": gitdir, "GIT_INDEX_FILE": index,
                        "GIT_AUTHOR_NAME": IDENT[0], "GIT_AUTHOR_EMAIL": IDENT[1], "GIT_AUTHOR_DATE": when,
                        "GIT_COMMITTER_NAME": IDENT[0], "GIT_COMMITTER_EMAIL": IDENT[1],
                        "GIT_COMMITTER_DATE": when})
        lines = []
        for path in sorted(files):
            data = files[path]
            sha = blob_cache.get(data)
            if sha is None:
                sha = _git(["hash-object", "-w", "--no-filters", "--stdin"], env=env, input=data)
                blob_cache[data] = sha
            mode = "100755" if path in EXECUTABLE else "100644"
            lines.append("%s %s\t%s" % (mode, sha, path))
        if os.path.exists(index):
            os.unlink(index)
        _git(["update-index", "--add", "--index-info"], env=env, input=("\n".join(lines) + "\n").encode())
        tree = _git(["write-tree"], env=env)
        args = ["commit-tree", "--no-gpg-sign", tree, "-m", message]
        if parent:
            args += ["-p", shas[parent]]
        sha = _git(args, env=env)
        shas[name] = sha
        for ref in names:
            refs[ref] = sha
    if os.path.exists(index):
        os.unlink(index)
    return shas, refs


MARK_KEY = "ds4sim.madeby"
MARK = "make_sim_repo.py"


class NotOwnRepository(ValueError):
    """DEST holds something this script did not make: rewriting it would lose work."""


def _check_own(dest, planned_refs):
    """Refuse a DEST that is not ours: it would be pruned and hard-reset."""
    if not dest.exists():
        return
    if not dest.is_dir():
        raise NotOwnRepository("%s exists and is not a directory" % dest)
    entries = [p.name for p in dest.iterdir()]
    if not entries:
        return
    if not (dest / ".git").exists():
        raise NotOwnRepository("%s is neither empty nor a git repository made by %s" % (dest, MARK))
    if _git(["-C", str(dest), "config", "--get", MARK_KEY], check=False) == MARK:
        return
    refs = _current_refs(dest) or {}
    dirty = _git(["-C", str(dest), "status", "--porcelain"], check=False)
    if refs and set(refs) <= set(planned_refs) and not dirty:
        return  # made by an earlier version of this script, before the mark
    foreign = sorted(set(refs) - set(planned_refs))[:3]
    why = ("it has other branches or tags (%s)" % ", ".join(foreign) if foreign else
           "its checkout has changes" if dirty else "it holds no commit of the simulated engine")
    raise NotOwnRepository("%s is a git repository this script did not make: %s. Refusing to prune and reset "
                           "it; give a new directory" % (dest, why))


def _current_refs(dest):
    if not (dest / ".git").exists() and not (dest / "HEAD").exists():
        return None
    out = _git(["-C", str(dest), "for-each-ref", "--format=%(refname) %(objectname)",
                "refs/heads", "refs/tags"], check=False)
    refs = {}
    for line in out.splitlines():
        ref, _, sha = line.partition(" ")
        refs[ref] = sha
    return refs


def build(dest):
    """Creates/refreshes the repository at dest. -> {tag: commit sha}."""
    dest = Path(dest).resolve()
    tmp = tempfile.mkdtemp(prefix="ds4-sim-repo-")
    try:
        gitdir = os.path.join(tmp, "plan.git")
        _git(["init", "-q", "--bare", gitdir])
        shas, refs = _materialize(gitdir)
        tags = {r[len("refs/tags/"):]: s for r, s in refs.items() if r.startswith("refs/tags/")}
        _check_own(dest, refs)
        current = _current_refs(dest)
        if current is not None and current == refs:
            return tags
        if current is None:
            dest.mkdir(parents=True, exist_ok=True)
            _git(["init", "-q", "-b", "main", str(dest)])
        _git(["-C", str(dest), "config", MARK_KEY, MARK])
        for ref, sha in refs.items():
            _git(["--git-dir", gitdir, "update-ref", ref, sha])
        _git(["-C", str(dest), "fetch", "-q", "--force", "--prune", "--update-head-ok", "--no-tags", gitdir,
              "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"])
        _git(["-C", str(dest), "symbolic-ref", "HEAD", "refs/heads/main"])
        _git(["-C", str(dest), "reset", "-q", "--hard", "refs/heads/main"])
        return tags
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv):
    parser = argparse.ArgumentParser(prog="make_sim_repo.py", description=__doc__.split("\n\n")[0],
                                     epilog="See the top of this file for the history it writes.")
    parser.add_argument("dest", metavar="DEST", help="where the repository is created or refreshed (a new "
                                                     "directory, or one this script made)")
    try:
        args = parser.parse_args(argv[1:])
    except SystemExit as exc:
        return exc.code
    try:
        tags = build(Path(args.dest))
    except NotOwnRepository as exc:
        sys.stderr.write("make_sim_repo.py: %s\n" % exc)
        return 2
    for tag, sha in sorted(tags.items()):
        print("%s %s" % (sha, tag))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
