"""Flags, per version: what a release records is what the real ds4-server takes; what the service role renders
gets past the real option parser; what the build lacks is refused.

The real parser exits 2 ("ds4-server: unknown option: X", or a bad value) before it opens anything; a command
line it accepts goes on to the model and, with our tiny model, stops at the first missing tensor (exit 1).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from real_engine import REPO

from ds4_converge.core.layout import Layout
from ds4_converge.engine import release as releases
from ds4_converge.engine.release import Release, Toolkit, read_help, server_options
from ds4_converge.engine.server_args import ModelPaths, UnsupportedSettings, not_rendered, server_argv
from ds4_converge.engine_knowledge import BASE, FORK, for_version, known_versions
from ds4_converge.spec.model import Server

MODELS = REPO / "engine" / "models"
MAIN, MTP = MODELS / "tiny-ds4flash.gguf", MODELS / "tiny-mtp.gguf"
AT_THE_MODEL = "ds4: required tensor is missing: output_hc_base.weight"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def release(each_engine) -> Release:
    """The built tree as ds4-converge sees a release: its options read from every page of the real --help."""
    values, version = server_options(read_help(each_engine.server), commit=each_engine.version + "0" * 33,
                                     ref=each_engine.version)
    return Release(id=each_engine.version, path=each_engine.tree, commit="0" * 40, ref=each_engine.version,
                   target="cpu", cuda_arch=None, toolkit=Toolkit(), flags=frozenset(values), values=values,
                   engine=version.name, engine_why=version.why)


def test_the_help_reader_finds_every_flag_of_the_version(each_engine, release, lock):
    k = for_version(each_engine.version)
    main = each_engine.run_server("--help", lock=lock)
    assert main.returncode == 0 and main.stderr == ""
    assert bool(releases.help_topics(main.stdout)) == k["flags"]["help_topics"]
    assert release.engine == each_engine.version
    assert release.flags == set(k["flags"]["listed"])
    assert {f for f, n in release.values.items() if n == 0} == set(k["flags"]["switches"])
    assert {f for f, n in release.values.items() if n == 2} == set(k["flags"].get("two_values", []))


def test_b030961_lists_its_speculative_flags_only_on_a_topic_page(engine_b030961, lock):
    main = engine_b030961.run_server("--help", lock=lock).stdout
    runtime = engine_b030961.run_server("--help", "runtime", lock=lock).stdout
    speculative = {"--mtp", "--mtp-draft", "--mtp-margin", "--dspark", "--dspark-confidence", "--dspark-strict",
                   "--quality"}
    assert not speculative & releases.parse_help_flags(main)
    assert speculative <= releases.parse_help_flags(runtime)


def test_every_flag_a_release_records_is_taken_by_the_real_parser(each_engine, release, lock):
    for flag in for_version(each_engine.version)["flags"].get("unlisted", {}):
        assert flag not in read_help(each_engine.server).options()  # on no page, yet taken (below)
    for flag, count in sorted(release.values.items()):
        if flag in ("-h", "--help"):
            continue
        proc = each_engine.run_server(flag, *["1"] * count, "-m", "/nonexistent.gguf", lock=lock)
        assert "unknown option" not in proc.stderr, (flag, proc.stderr)
    for flag in for_version(each_engine.version)["flags"].get("not_server_options", []):
        proc = each_engine.run_server(flag, "-m", "/nonexistent.gguf", lock=lock)
        assert proc.returncode == 2 and f"unknown option: {flag}" in proc.stderr, flag


def test_a_release_recorded_before_topics_were_read_is_read_again(each_engine, tmp_path):
    """A record written by an older ds4-converge (the main page only: no --mtp on b030961) is not trusted."""
    layout = Layout(tmp_path)
    tree = layout.releases / "old"
    tree.mkdir(parents=True)
    (tree / "ds4-server").symlink_to(each_engine.server)
    main_page_only = releases.parse_help_flags(each_engine.run_server("--help", lock=tmp_path / "l").stdout)
    (tree / releases.RECORD).write_text(json.dumps({
        "commit": each_engine.version + "0" * 33, "ref": each_engine.version, "target": "cpu", "cuda_arch": None,
        "toolkit": {"nvcc": None, "cuda_home": None, "version": None}, "flags": sorted(main_page_only)}))
    loaded = releases.load(layout, "old")
    assert loaded.flags == set(for_version(each_engine.version)["flags"]["listed"]) and "--mtp" in loaded.flags
    assert loaded.engine == each_engine.version


SETTINGS = {
    "defaults": {},
    "ctx, tokens, threads": {"ctx": 65536, "tokens": 4096, "threads": 3},
    "host localhost, port": {"host": "localhost", "port": 18123},
    "warm_weights": {"warm_weights": True},
    "kv disk": {"kv_disk_dir": "KV", "kv_disk_space_mb": 8192},
    "speculative mtp": {"speculative": {"mode": "mtp", "draft": 2, "margin": 2.5}},
    "speculative off": {"speculative": {"mode": "off"}},
    "extra_args": {"extra_args": ["--quality", "--kv-cache-min-tokens", "1024", "--cors", "--backend", "cpu"]},
    "power 100 (the engine's own)": {"power": 100},
    "everything": {"ctx": 100000, "tokens": 2048, "threads": 2, "warm_weights": True, "kv_disk_dir": "KV",
                   "kv_disk_space_mb": 512, "speculative": {"mode": "mtp", "draft": 4}, "power": 100,
                   "extra_args": ["--trace", "TRACE"]},
}
# what only b030961 takes among the known upstream versions
B030961_SETTINGS = {
    "power 75": {"power": 75},
    "speculative dspark (--mtp FILE --dspark)": {"speculative": {"mode": "dspark"}},
    "power and mtp": {"power": 1, "speculative": {"mode": "mtp"}},
}


def _argv(release, tmp_path, settings):
    settings = {k: (str(tmp_path / v) if k == "kv_disk_dir" else v) for k, v in settings.items()}
    settings["extra_args"] = [str(tmp_path / a) if a == "TRACE" else a for a in settings.get("extra_args", [])]
    server = Server(**settings)
    kv_dir = Path(settings["kv_disk_dir"]) if "kv_disk_dir" in settings else None
    models = ModelPaths(MAIN, MTP if server.speculative.mode == "mtp" else None,
                        MTP if server.speculative.mode == "dspark" else None)
    return server_argv(release, server, models, kv_dir)


@pytest.mark.parametrize("name", SETTINGS)
def test_rendered_command_lines_pass_the_real_parser(each_engine, release, lock, tmp_path, name):
    argv = _argv(release, tmp_path, SETTINGS[name])
    assert argv[0] == str(each_engine.server)
    proc = each_engine.run_server(*argv[1:], lock=lock)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == AT_THE_MODEL, (argv, proc.stderr)


@pytest.mark.parametrize("name", B030961_SETTINGS)
def test_b030961_settings_render_and_pass_its_parser_and_are_refused_on_8d57664(engine, engine_b030961, lock,
                                                                                tmp_path, name):
    newer, older = _release_of(engine_b030961), _release_of(engine)
    argv = _argv(newer, tmp_path, B030961_SETTINGS[name])
    proc = engine_b030961.run_server(*argv[1:], lock=lock)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == AT_THE_MODEL, (argv, proc.stderr)
    if "dspark" in name:
        assert argv[-3:] == ["--mtp", str(MTP), "--dspark"]
    with pytest.raises(UnsupportedSettings, match="upstream b030961"):
        _argv(older, tmp_path, B030961_SETTINGS[name])


def test_power_out_of_range_is_exit_2_on_b030961(engine_b030961, lock):
    low, high = for_version("b030961")["flags"]["power_range"]
    for value, says in ((low - 1, f"invalid value for --power: {low - 1}"),
                        (high + 1, f"--power must be between {low} and {high}")):
        proc = engine_b030961.run_server("--power", value, "-m", MAIN, lock=lock)
        assert proc.returncode == 2 and says in proc.stderr, proc.stderr
    assert for_version("b030961")["flags"]["power_range"] == [1, 100]


def _release_of(real) -> Release:
    values, version = server_options(read_help(real.server), commit=real.version, ref=real.version)
    return Release(id=real.version, path=real.tree, commit="0" * 40, ref=real.version, target="cpu",
                   cuda_arch=None, toolkit=Toolkit(), flags=frozenset(values), values=values, engine=version.name)


@pytest.mark.parametrize("version, settings, needs", [
    (BASE, {"power": 75}, "server.power needs --power (a flag of upstream b030961 and the Entrpi fork)"),
    (BASE, {"speculative": {"mode": "dspark"}}, "server.speculative.mode=dspark needs --dspark"),
    *[(v, {"extra_args": ["--no-update-check"]}, "'--no-update-check' is not an option of this ds4-server")
      for v in (BASE, "b030961")],
    *[(v, {"extra_args": ["--reasoning-effort=low"]}, "'--reasoning-effort=low' is not an option")
      for v in (BASE, "b030961")],
])
def test_settings_the_real_binary_lacks_are_refused(engine, engine_b030961, version, settings, needs):
    release = _release_of(engine if version == BASE else engine_b030961)
    with pytest.raises(UnsupportedSettings, match="does not support: .*" + needs.replace("(", r"\(").replace(
            ")", r"\)")):
        server_argv(release, Server(**settings), ModelPaths(MAIN, None, MODELS / "tiny-dspark-legacy.gguf"), None)


def _fork_flags_missing_from(version: str) -> list[str]:
    return sorted(set(for_version(FORK)["flags"]["listed"]) - set(for_version(version)["flags"]["listed"])
                  - {"--version"})


@pytest.mark.parametrize("version, flag", [(v, f) for v in known_versions() if v != FORK
                                           for f in _fork_flags_missing_from(v)])
def test_the_real_binary_would_stop_at_each_flag_it_lacks(engine, engine_b030961, lock, version, flag):
    """The premise of refusing early: the real parser exits 2 on a flag its version lacks, before the lock and
    the model."""
    real = engine if version == BASE else engine_b030961
    proc = real.run_server(flag, "1", "-m", MAIN, lock=lock)
    assert proc.returncode == 2
    assert f"ds4-server: unknown option: {flag}" in proc.stderr.splitlines()[0]
    assert not lock.exists()


def test_power_100_is_not_rendered_on_8d57664_and_says_so(engine):
    older, server = _release_of(engine), Server(power=100)
    assert "--power" not in server_argv(older, server, ModelPaths(MAIN), None)
    assert "always runs at full duty cycle" in not_rendered(older, server)[0]
