"""Property-based tests (hypothesis) over spec files, --set values and check mode: every input is valid, or
exit 2 with a located message (FILE:LINE:COL, FILE, or --set ITEM), never a traceback. Values that reach a
rendered file are read back with supervisor's own config parser and equal the spec's.

About 1,100 examples in all under `make test`; `make test-fast` loads the hypothesis profile "fast" (tests/conftest.py),
which runs a few of each, so the properties are still exercised while people work.
"""
from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from supervisor.options import ServerOptions

from boxes import MODEL, Box, free_port
from user_cache_guard import TEST_CACHES
from ds4_converge.cli import main as cli
from ds4_converge.orchestrate.context import make_context
from ds4_converge.engine.release import Release, Toolkit
from ds4_converge.engine.server_args import ModelPaths
from ds4_converge.service import render
from ds4_converge.service import role as service
from ds4_converge.service import secrets
from ds4_converge.core.plan import RoleFailed
from ds4_converge.spec.loader import LoadedSpec, SpecInvalid, load_spec
from ds4_converge.spec.model import Spec
from ds4_converge.spec.values import SECRET_NAME, secret_value_problem
from ds4_converge.spec.values import MANAGED_ENV

# hypothesis's examples cannot take tmp_path: the module's folder is in the run's own temporary one, which the run
# removes at its end (user_cache_guard.py)
WORK = Path(tempfile.mkdtemp(prefix="properties-", dir=TEST_CACHES))
BASE = {"engine": {"repo": "https://example.invalid/ds4.git", "ref": "v0.2.0", "target": "cpu"},
        "model": {"main": "/srv/gguf/model.gguf"}}
FIELDS = {name: list(field.annotation.model_fields) if hasattr(field.annotation, "model_fields") else []
          for name, field in Spec.model_fields.items()}
FAST = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def examples(full: int) -> int:
    """`full` examples, or the profile's few under the "fast" profile (its max_examples is below the default)."""
    return min(full, settings.default.max_examples) if settings.default.max_examples < 100 else full

# values a hostile or careless spec may hold: numbers of every size, YAML-looking strings, nested things
# any character a value may hold, with the ones that mean something to a shell, an INI file or supervisor often
SAFE_TEXT = st.text(st.one_of(st.sampled_from(list("%$'\"` ;#\\(){}=:,~*?![]<>|&")),
                              st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp"))), max_size=30)
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10**60), max_value=10**60),
                    st.floats(), st.text(max_size=40),
                    st.sampled_from(["yes", "off", "1:30", "017500", "0x1F", ".inf", "-.nan", "~", "", "null",
                                     "2026-07-10", "--host", "ext::sh", "/srv/x y", "%(ENV_HOME)s", "a\nb"]))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=10), inner, max_size=4), max_leaves=12)


def _path(name: str) -> Path:
    return WORK / name


def _assert_located(problems: list[str], path: Path) -> None:
    assert problems
    located = re.compile(rf"^({re.escape(str(path))}(:\d+:\d+)?|--set .*?): ", re.S)
    for problem in problems:
        assert located.match(problem), problem


def _load_or_located(path: Path, overrides=()) -> LoadedSpec | None:
    try:
        return load_spec(path, list(overrides))
    except SpecInvalid as exc:
        _assert_located(exc.problems, path)
        return None


@st.composite
def spec_documents(draw):
    """The spec's own sections and keys (so validation goes deep), with values of any type and size."""
    data = {section: dict(values) for section, values in BASE.items()}
    for section in draw(st.lists(st.sampled_from(sorted(FIELDS)), max_size=4, unique=True)):
        keys = FIELDS[section] + ["nonsense"]
        entries = draw(st.dictionaries(st.sampled_from(keys), VALUES, max_size=4))
        if draw(st.booleans()):
            data.setdefault(section, {}).update(entries)
        else:
            data[section] = entries if draw(st.booleans()) else draw(VALUES)
    return data


def _mutate(text: str, how: int, where: int, junk: str) -> str:
    lines = text.splitlines(keepends=True) or [""]
    at = where % len(lines)
    if how == 1:  # a line twice: duplicate keys
        lines.insert(at, lines[at])
    elif how == 2:  # junk spliced in
        lines[at] = lines[at][: where % (len(lines[at]) + 1)] + junk + lines[at][where % (len(lines[at]) + 1):]
    elif how == 3:  # a line dropped
        del lines[at]
    return "".join(lines)


def test_a_spec_file_is_valid_or_a_located_error():
    outcomes = set()

    @settings(FAST, max_examples=examples(300))
    @given(spec_documents(), st.integers(0, 3), st.integers(0, 10_000), st.text(max_size=12))
    def load(data, how, where, junk):
        path = _path("doc.yaml")
        path.write_text(_mutate(yaml.safe_dump(data, allow_unicode=True), how, where, junk))
        outcomes.add(_load_or_located(path) is not None)

    load()
    assert outcomes == {True, False}, "the examples reach both valid specs and located errors"


@settings(FAST, max_examples=examples(250))
@given(st.one_of(st.text(max_size=300).map(str.encode), st.binary(max_size=400)))
def test_any_text_or_bytes_is_valid_or_a_located_error(data):
    path = _path("any.yaml")
    path.write_bytes(data)
    _load_or_located(path)


SET_KEYS = st.one_of(
    st.sampled_from([f"{section}.{key}" for section, keys in FIELDS.items() for key in keys]),
    st.sampled_from(["server.speculative.mode", "server.env.X", "health.smoke.expect", "model.main.size"]),
    st.text(max_size=20))
SET_VALUES = st.one_of(st.text(max_size=30), st.integers().map(str), st.just("9" * 5000),
                       st.sampled_from(["[1, [2, [3]]]", "{a: 1}", "&a [*a]", "yes", ".inf", "--host", ""]))


@settings(FAST, max_examples=examples(250))
@given(st.lists(st.tuples(SET_KEYS, SET_VALUES), min_size=1, max_size=3))
def test_set_values_are_valid_or_a_located_error(items):
    path = _path("base.yaml")
    path.write_text(yaml.safe_dump(BASE))
    _load_or_located(path, [f"{key}={value}" for key, value in items])


# ------------------------------------------------------------------------------- what reaches the config files

FLAGS = frozenset({"-m", "--model", "--host", "--port", "-c", "--ctx", "-n", "-t", "--no-spec", "--cors",
                   "--trace", "--quality", "--tool-memory-max-ids", "--kv-disk-dir", "--kv-disk-space-mb"})
# a file name as a path field holds it ($ would be expanded on the host: a variable, not a name)
NAME = SAFE_TEXT.filter(lambda s: s and s.strip() == s and not set(s) & set("/*?$") and s not in (".", "..")
                        and len(s.encode()) < 200)
ENV_KEYS = st.one_of(st.from_regex(r"[A-Z_][A-Z0-9_]{0,12}", fullmatch=True).filter(lambda k: k not in MANAGED_ENV),
                     st.sampled_from(["HF_TOKEN", "OPENAI_API_KEY", "DB_PASSWORD"]))  # secrets: environment=
EXTRA = st.one_of(st.sampled_from(["--cors", "--quality", "--trace", "--tool-memory-max-ids"]),
                  SAFE_TEXT.filter(lambda s: not s.startswith("-")))
IPV4 = st.tuples(*[st.integers(0, 255)] * 4).map(lambda t: ".".join(map(str, t)))


def _read_back(root: Path, conf: str):
    """supervisord's own parser, on the supervisord.conf we render and the program file: (options, program)."""
    layout = make_context(LoadedSpec(Spec.model_validate({**BASE, "paths": {"root": str(root)}}),
                                     WORK / "spec.yaml")).layout
    layout.ensure()
    layout.supervisord_conf.write_text(render.supervisord_conf(layout))
    for old in layout.program_dir.glob("*.conf"):
        old.unlink()
    layout.program_conf("ds4").write_text(conf)
    options = ServerOptions()
    options.realize(args=["-c", str(layout.supervisord_conf)])
    programs = {g.name: g.process_configs[0] for g in options.process_group_configs}
    return options, programs["ds4"]


@settings(FAST, max_examples=examples(150))
@given(env=st.dictionaries(ENV_KEYS, SAFE_TEXT, max_size=4), extra=st.lists(EXTRA, max_size=4),
       host=st.one_of(st.just("localhost"), IPV4), port=st.integers(1, 65535), ctx=st.integers(1, 2**24),
       model=NAME, kv=st.one_of(st.none(), NAME))
def test_values_reach_supervisor_exactly_as_the_spec_says(env, extra, host, port, ctx, model, kv):
    server = {"host": host, "port": port, "ctx": ctx, "env": env, "extra_args": extra, "expose": True}
    if kv is not None:
        server["kv_disk_dir"] = f"/srv/kv/{kv}"
    data = {**BASE, "model": {"main": f"/srv/gguf/{model}"}, "server": server,
            "paths": {"root": str(WORK / "root")}}
    try:
        loaded = LoadedSpec(Spec.model_validate(data), WORK / "spec.yaml")
    except ValueError as exc:  # a secret supervisord's environment= cannot carry: refused at validation, by name
        assert "a secret in server.env cannot hold" in str(exc), exc
        assert any(SECRET_NAME.search(k) and secret_value_problem(v) for k, v in env.items()), exc
        return
    context = make_context(loaded, say=lambda *_: None)
    context.release = Release(id="r1", path=WORK / "releases" / "r1", commit="0" * 40, ref="v1", target="cpu",
                              cuda_arch=None, toolkit=Toolkit(), flags=FLAGS)
    context.models = ModelPaths(main=Path(f"/srv/gguf/{model}"))
    try:
        desired = service.desired_deployment(context)
    except RoleFailed as exc:  # a secret supervisord's environment= cannot carry: refused, by name
        assert "a secret in server.env" in str(exc) and any(secrets.is_secret(k) for k in env), exc
        return
    assert not any(f"{k}={v}" in desired.program_conf or f"{k}={secrets._rendered(v)}" in desired.program_conf
                   for k, v in env.items() if secrets.is_secret(k) and v), "the record holds a placeholder, not the secret"
    _, program = _read_back(WORK / "root", secrets.unseal(desired.program_conf, context.layout))
    argv = shlex.split(program.command)  # how supervisor splits command= before it execs it
    assert argv == desired.command
    wrapper, rest = argv[0], argv[1:]
    assert wrapper.endswith("env")
    passed = dict(a.split("=", 1) for a in rest[:rest.index(str(context.release.server))])
    passed.update(program.environment or {})  # the secrets, through supervisord's environment=
    assert {k: passed[k] for k in env} == env and passed["DS4_LOCK_FILE"].endswith("/locks/ds4.ds4.lock")
    engine_argv = rest[rest.index(str(context.release.server)) + 1:]
    assert engine_argv[:8] == ["-m", f"/srv/gguf/{model}", "--host", host, "--port", str(port), "-c", str(ctx)]
    assert engine_argv[len(engine_argv) - len(extra):] == extra if extra else True
    if kv is not None:
        assert engine_argv[engine_argv.index("--kv-disk-dir") + 1] == f"/srv/kv/{kv}"


ROOT_CHARS = st.text(st.characters(whitelist_categories=("Lu", "Ll", "Nd"), whitelist_characters="._+@,:=~-"),
                     min_size=1, max_size=12)


@settings(FAST, max_examples=examples(100))
@given(st.lists(ROOT_CHARS.filter(lambda s: s not in (".", "..")), min_size=1, max_size=3))
def test_every_root_the_spec_accepts_reads_back_from_supervisord_conf(parts):
    root = WORK / "roots" / "/".join(parts)
    raw = str(root)
    try:
        Spec.model_validate({**BASE, "paths": {"root": raw}})
    except ValueError:
        assume(False)  # too long for the socket path: refused, located (tested elsewhere)
    try:
        make_context(LoadedSpec(Spec.model_validate({**BASE, "paths": {"root": raw}}), WORK / "spec.yaml"))
    except SpecInvalid:
        assume(False)
    options, program = _read_back(root, render.program_conf(name="ds4", release="r1", argv=["/bin/true"],
                                                            directory=str(root), log=str(root / "logs/ds4.log"),
                                                            user=None, stop_wait_s=60))
    assert options.pidfile == str(root / "run" / "supervisord.pid")
    assert options.logfile == str(root / "logs" / "supervisord.log")
    assert options.server_configs[0]["file"] == str(root / "run" / "supervisor.sock")
    assert program.directory == str(root) and program.stdout_logfile == str(root / "logs" / "ds4.log")


# ---------------------------------------------------------------------------------------------- check mode

@st.composite
def overrides(draw):
    """--set items that keep the spec mostly valid, with a few that break it."""
    items = []
    for key, values in draw(st.lists(st.sampled_from([
            ("server.ctx", st.integers(-5, 2**25).map(str)),
            ("server.port", st.integers(0, 70000).map(str)),
            ("server.host", st.sampled_from(["localhost", "127.0.0.1", "0.0.0.0", "myhost", "1.2.3.999"])),
            ("server.extra_args", st.sampled_from(["[--cors]", "[--host, 0.0.0.0]", "[--trace, /tmp/t]", "[]"])),
            ("server.env.DS4T", SAFE_TEXT.map(json.dumps)),
            ("server.speculative.mode", st.sampled_from(["off", "mtp", "dspark", "yes"])),
            ("server.stop_wait_s", st.integers(0, 10**6).map(str)),
            ("health.soak_s", st.sampled_from(["0", "5", ".inf", "1e10", "-1"])),
            ("engine.ref", st.sampled_from(["v0.2.0", "v0.3.0", "nope", "--output=x", "a..b"])),
            ("engine.target", st.sampled_from(["cpu", "cuda", "gpu"])),
            ("model.main", st.sampled_from([str(MODEL), "/srv/none.gguf", "/srv/*.gguf", ""])),
            ("paths.root", st.sampled_from(["{root}", "{root} x", "{root}%", "{root}/sub"])),
    ]), max_size=3, unique_by=lambda kv: kv[0])):
        items.append((key, draw(values)))
    return items


def test_check_mode_is_a_plan_or_a_located_error(sim_repo):
    """In-process `--check --json` with hypothesis-made overrides: exit 0 or 1 with one JSON document, or exit 2
    with located problems; never a traceback, and nothing is written under the root."""
    root = WORK / "check-root"
    path = WORK / "check.yaml"
    path.write_text(yaml.safe_dump({"engine": {"repo": str(sim_repo), "ref": "v0.2.0", "target": "cpu"},
                                    "model": {"main": str(MODEL)}, "server": {"port": 1},
                                    "paths": {"root": str(root)}}))

    @settings(FAST, max_examples=examples(60))
    @given(overrides())
    def check(items):
        argv = [str(path), "--check", "--json"]
        for key, value in items:
            argv += ["--set", f"{key}={value.replace('{root}', str(root))}"]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(argv)
        assert "Traceback" not in out.getvalue() + err.getvalue()
        document = json.loads(out.getvalue())  # --json: one document on every exit path
        if rc == 2:
            _assert_located([p["text"] for p in document["problems"]], path)
        else:
            assert rc in (0, 1), (rc, err.getvalue())
            assert document["ok"] == (rc == 0)
        assert not root.exists(), "check mode writes nothing"
        codes.add(rc)

    codes = set()
    check()
    assert {0, 2} <= codes, codes


# ------------------------------------------------------------------------- what the engine really received

@pytest.fixture(scope="module")
def engine_box(tmp_path_factory, sim_repo):
    box = Box(tmp_path_factory.mktemp("received") / "root", sim_repo, free_port())
    box.spec["health"].update(soak_s=0.3)
    box.write()
    rc, document = box.converge()
    assert rc == 0, document
    yield box
    box.stop()


SIM_EXTRA = st.one_of(st.just(["--cors"]), st.just(["--quality"]),
                      st.integers(1, 10**6).map(lambda n: ["--tool-memory-max-ids", str(n)]),
                      st.sampled_from(["low", "high", "max", "off"]).map(lambda e: ["--reasoning-effort", e]),
                      NAME.map(lambda n: ["--trace", str(WORK / "traces" / n)]))


def test_the_engine_receives_exactly_the_argv_and_environment_of_the_spec(engine_box):
    box = engine_box
    (WORK / "traces").mkdir(exist_ok=True)

    @settings(FAST, max_examples=examples(5))
    @given(env=st.dictionaries(ENV_KEYS.filter(lambda k: not k.startswith("DS4_SIM")), SAFE_TEXT, min_size=1,
                               max_size=3).filter(lambda env: not any(  # refused at validation (test_spec_limits)
                                   SECRET_NAME.search(k) and secret_value_problem(v) for k, v in env.items())),
           extra=st.lists(SIM_EXTRA, max_size=2).map(lambda groups: [a for g in groups for a in g]),
           ctx=st.integers(1024, 131072))  # the memory budget of this machine refuses far more
    def received(env, extra, ctx):
        with box.edited({"server.env": {**box.spec["server"]["env"], **env}, "server.extra_args": extra,
                         "server.ctx": ctx}):
            rc, document = box.converge()
            assert rc == 0, document
            pid = box.status()["pid"]
            cmdline = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[:-1]]
            environ = dict(e.decode().split("=", 1) for e in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                           if e)
        argv = cmdline[next(i for i, a in enumerate(cmdline) if a.endswith("/ds4-server")) + 1:]
        assert argv[argv.index("-c") + 1] == str(ctx) and argv[argv.index("--port") + 1] == str(box.port)
        assert argv[len(argv) - len(extra):] == extra if extra else "--cors" not in argv
        assert {k: environ.get(k) for k in env} == env

    received()


@settings(FAST, max_examples=examples(200))
@given(st.one_of(st.binary(max_size=400), st.text(max_size=300).map(str.encode),
                 st.recursive(st.one_of(st.none(), st.integers(), st.text(max_size=8)),
                              lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                      st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                              max_leaves=20).map(lambda v: json.dumps(v).encode()),
                 st.integers(1, 50_000).map(lambda depth: b"[" * depth)))
def test_any_state_file_is_read_or_reported_damaged(data):
    """Whatever bytes state.json holds, reading it gives a state or StateUnreadable (set aside and rebuilt by the
    caller): never another exception, never a hang."""
    from ds4_converge.core.state import State, StateUnreadable

    path = WORK / "state.json"
    path.write_bytes(data)
    with contextlib.suppress(StateUnreadable):
        State.load(path)
