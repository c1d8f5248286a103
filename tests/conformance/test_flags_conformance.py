"""Flags: what the service role renders gets past the real ds4-server option parser; what it lacks is refused.

The real parser exits 2 ("ds4-server: unknown option: X", or a bad value) before it opens anything; a command
line it accepts goes on to the model and, with our tiny model, stops at the first missing tensor (exit 1).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from real_engine import REPO

from ds4_converge.engine.release import Release, Toolkit, parse_help_flags
from ds4_converge.engine.server_args import ModelPaths, UnsupportedSettings, not_rendered, server_argv
from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.spec.model import Server

K = load_knowledge()
MODELS = REPO / "engine" / "models"
MAIN, MTP = MODELS / "tiny-ds4flash.gguf", MODELS / "tiny-mtp.gguf"
AT_THE_MODEL = "ds4: required tensor is missing: output_hc_base.weight"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def real_help(engine, tmp_path_factory) -> str:
    proc = engine.run_server("--help", lock=tmp_path_factory.mktemp("help") / "ds4.lock")
    assert proc.returncode == 0 and proc.stderr == ""
    return proc.stdout


@pytest.fixture(scope="module")
def release(engine, real_help) -> Release:
    """The built tree as ds4-converge sees a release: its flags read from the real --help."""
    return Release(id="upstream", path=engine.tree, commit="0" * 40, ref="8d57664", target="cpu", cuda_arch=None,
                   toolkit=Toolkit(), flags=parse_help_flags(real_help))


def test_the_help_parser_reads_every_upstream_flag(real_help):
    assert real_help.startswith("Usage: ds4-server [options]\n")
    assert parse_help_flags(real_help) == set(K["flags"]["upstream"])
    assert not parse_help_flags(real_help) & set(K["flags"]["fork_only"])
    assert not parse_help_flags(real_help) & set(K["flags"]["defaults_without_flag"])


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


@pytest.mark.parametrize("name", SETTINGS)
def test_rendered_command_lines_pass_the_real_parser(engine, release, lock, tmp_path, name):
    settings = {k: (str(tmp_path / v) if k == "kv_disk_dir" else v) for k, v in SETTINGS[name].items()}
    settings["extra_args"] = [str(tmp_path / a) if a == "TRACE" else a for a in settings.get("extra_args", [])]
    server = Server(**settings)
    kv_dir = Path(settings["kv_disk_dir"]) if "kv_disk_dir" in settings else None
    mtp = MTP if server.speculative.mode == "mtp" else None
    argv = server_argv(release, server, ModelPaths(MAIN, mtp), kv_dir)
    assert argv[0] == str(engine.server)
    proc = engine.run_server(*argv[1:], lock=lock)
    assert proc.returncode == 1 and proc.stderr.strip().splitlines()[-1] == AT_THE_MODEL, (argv, proc.stderr)


@pytest.mark.parametrize("settings, needs", [
    ({"power": 75}, "server.power needs --power (a flag of the Entrpi fork only)"),
    ({"power": 1}, "server.power needs --power"),
    ({"speculative": {"mode": "dspark"}}, "server.speculative.mode=dspark needs --dspark"),
    ({"extra_args": ["--no-update-check"]}, "'--no-update-check' is not an option of this ds4-server"),
    ({"extra_args": ["--reasoning-effort=low"]}, "'--reasoning-effort=low' is not an option"),
])
def test_settings_the_real_binary_lacks_are_refused(engine, release, lock, settings, needs):
    with pytest.raises(UnsupportedSettings, match="does not support: .*" + needs.replace("(", r"\(").replace(
            ")", r"\)")):
        server_argv(release, Server(**settings), ModelPaths(MAIN, None, MODELS / "tiny-dspark-legacy.gguf"), None)


@pytest.mark.parametrize("flag", sorted(set(load_knowledge()["flags"]["fork_only"]) - {"--version"}))
def test_the_real_binary_would_stop_at_each_fork_flag(engine, lock, flag):
    """The premise of refusing early: the real parser exits 2 on any fork flag, before the lock and the model."""
    proc = engine.run_server(flag, "1", "-m", MAIN, lock=lock)
    assert proc.returncode == 2
    assert f"ds4-server: unknown option: {flag}" in proc.stderr.splitlines()[0]
    assert not lock.exists()


def test_power_100_is_not_rendered_on_upstream_and_says_so(release):
    server = Server(power=100)
    assert "--power" not in server_argv(release, server, ModelPaths(MAIN), None)
    assert "always runs at full duty cycle" in not_rendered(release, server)[0]
