"""Spec loading: valid examples, FILE:LINE:COL errors, nearest-key hints, --set overrides, schema freshness."""
from pathlib import Path

import pytest

from boxes import MINIMAL_SPEC as BASE
from ds4_converge.spec.loader import SpecInvalid, load_spec, schema_json

REPO = Path(__file__).resolve().parents[2]


def write(tmp_path, text):
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


def problems(path, overrides=()):
    with pytest.raises(SpecInvalid) as info:
        load_spec(path, list(overrides))
    return info.value.problems


@pytest.mark.parametrize("name", ["sim.yaml", "spark.yaml", "sim-front.yaml"])
def test_examples_are_valid(name):
    loaded = load_spec(REPO / "spec" / "examples" / name)
    assert loaded.spec.server.speculative.mode == "off"


def test_spark_example_matches_the_issue():
    spec = load_spec(REPO / "spec/examples/spark.yaml").spec
    assert (spec.server.ctx, spec.server.power, spec.server.warm_weights) == (524288, 100, True)
    assert spec.engine.installer.endswith("ds4-on-spark/main/install.sh")
    assert spec.model.main.source.endswith("abliterated-ds4-Q2.gguf")


def test_the_spark_example_has_a_front_door_on_the_public_port():
    spec = load_spec(REPO / "spec/examples/spark.yaml").spec
    assert (spec.front.host, spec.front.port, spec.server.host) == ("0.0.0.0", 8000, "127.0.0.1")


@pytest.mark.parametrize("extra, field, words", [
    ("front: {keys: /k}\n", "front.port", "port 8000 is also server.port (the engine's first slot)"),
    ("server: {port: 7999}\nfront: {keys: /k}\n", "front.port",
     "port 8000 is also server.port + 1 (the engine's second slot)"),
    ("server: {port: 9000}\nfront: {keys: /k, metrics: {port: 8000}}\n", "front.metrics.port",
     "port 8000 is also front.port"),
    ("server: {port: 9000, host: 0.0.0.0, expose: true}\nfront: {keys: /k}\n", "server.host", "loopback only"),
    ("server: {port: 65535}\nfront: {keys: /k}\n", "server.port", "no room for the second"),
])
def test_front_ports_that_collide_are_refused_at_validation(tmp_path, extra, field, words):
    [line] = problems(write(tmp_path, BASE + extra))
    assert f": {field}: " in line and words in line, line


def test_a_front_door_needs_a_key_file(tmp_path):
    [line] = problems(write(tmp_path, BASE + "server: {port: 9000}\nfront: {port: 8000}\n"))
    assert "front.keys" in line


def test_unknown_key_names_line_column_and_nearest_key(tmp_path):
    path = write(tmp_path, BASE + "server:\n  port: 8000\n  powr: 100\n")
    assert problems(path) == [f"{path}:9:3: server.powr: unknown key; did you mean 'power'?"]


def test_bad_value_names_its_line(tmp_path):
    path = write(tmp_path, BASE + "server:\n  ctx: many\n")
    [line] = problems(path)
    assert line.startswith(f"{path}:8:3: server.ctx: ")
    assert "integer" in line and '"many"' in line


def test_cross_field_error_points_at_the_field(tmp_path):
    path = write(tmp_path, BASE + "server:\n  speculative: {mode: mtp}\n")
    [line] = problems(path)
    assert line.startswith(f"{path}:8:17: server.speculative.mode: speculative mode mtp needs model.mtp")


def test_distributed_with_speculation_is_refused_citing_the_engine(tmp_path):
    distributed = ("distributed:\n  role: coordinator\n  layers: '0:21'\n  listen: {host: 0.0.0.0, port: 9100}\n")
    spec = BASE.replace("model:\n", "model:\n  mtp: /models/mtp.gguf\n", 1)
    path = write(tmp_path, spec + "server:\n  speculative: {mode: mtp}\n" + distributed)
    [line] = problems(path)
    assert f"{path}:9:17: server.speculative.mode: speculative mode mtp does nothing in a distributed" in line
    assert "antirez/ds4#877" in line
    assert load_spec(write(tmp_path, spec + distributed)).spec.distributed.role == "coordinator"


def test_ref_and_installer_are_exclusive(tmp_path):
    path = write(tmp_path, BASE.replace("  ref: v0.2.0\n", "  ref: v0.2.0\n  installer: ./install.sh\n"))
    [line] = problems(path)
    assert ": engine.ref: give exactly one of engine.ref or engine.installer" in line


def test_glob_in_model_name_is_refused(tmp_path):
    path = write(tmp_path, BASE.replace("/srv/gguf/model.gguf", "/srv/gguf/*.gguf"))
    [line] = problems(path)
    assert line.startswith(f"{path}:6:9: model.main.source: ") and "exact" in line


def test_yaml_off_means_off(tmp_path):
    path = write(tmp_path, BASE + "server:\n  speculative: {mode: off}\n")
    assert load_spec(path).spec.server.speculative.mode == "off"


def test_newline_in_a_value_is_refused(tmp_path):
    path = write(tmp_path, BASE + 'server:\n  extra_args: ["--quality\\n--cors"]\n')
    [line] = problems(path)
    assert "server.extra_args.0" in line


def test_yaml_syntax_error_has_position(tmp_path):
    path = write(tmp_path, BASE + "server: [unclosed\n")
    [line] = problems(path)
    assert line.startswith(f"{path}:") and "invalid YAML" in line


def test_set_overrides_and_reports_set_errors(tmp_path):
    path = write(tmp_path, BASE)
    loaded = load_spec(path, ["server.ctx=65536", "server.host=localhost"])
    assert (loaded.spec.server.ctx, loaded.spec.server.host) == (65536, "localhost")
    assert problems(path, ["server.port=0"])[0].startswith("--set server.port=0: server.port:")


def test_set_of_ref_or_installer_replaces_the_other(tmp_path):
    path = write(tmp_path, BASE.replace("  ref: v0.2.0\n", "  installer: ./install.sh\n"))
    spec = load_spec(path, ["engine.ref=v0.3.0"]).spec.engine
    assert (spec.ref, spec.installer) == ("v0.3.0", None)
    spec = load_spec(write(tmp_path, BASE), ["engine.installer=./install.sh"]).spec.engine
    assert (spec.ref, spec.installer) == (None, "./install.sh")
    both = write(tmp_path, BASE.replace("  ref: v0.2.0\n", "  ref: v0.2.0\n  installer: ./install.sh\n"))
    assert "give exactly one" in problems(both)[0], "in the file itself both stay an error"


def test_env_numbers_are_strings_in_the_file_and_through_set(tmp_path):
    path = write(tmp_path, BASE + "server:\n  env: {DS4_THREADS: 8, DS4_SIM_LOAD_SECONDS: 0.3}\n")
    assert load_spec(path).spec.server.env == {"DS4_THREADS": "8", "DS4_SIM_LOAD_SECONDS": "0.3"}
    assert load_spec(path, ["server.env.X=2"]).spec.server.env["X"] == "2"
    [line] = problems(path, ["server.env.X=true"])
    assert line.startswith("--set server.env.X=true: server.env.X:"), "a bare true/false must be quoted"


def test_problems_carry_file_line_column_and_field(tmp_path):
    path = write(tmp_path, BASE + "server:\n  ctx: many\n")
    with pytest.raises(SpecInvalid) as info:
        load_spec(path)
    [problem] = info.value.located
    assert (problem.file, problem.line, problem.column, problem.field) == (str(path), 8, 3, "server.ctx")
    assert str(problem) == info.value.problems[0]


def test_host_must_be_ipv4_or_localhost(tmp_path):
    path = write(tmp_path, BASE + "server:\n  host: myspark.lan\n")
    assert "IPv4 literal or 'localhost'" in problems(path)[0]


@pytest.mark.parametrize("address", ["000.000.000.000", "0.0.0.00", "127.000.000.001", "010.0.0.1", "0127.0.0.1",
                                     "127.1", "0x7f.0.0.1"])
def test_a_host_written_as_a_disguised_number_is_refused(tmp_path, address):
    """inet_aton reads 010.0.0.1 as 8.0.0.1 (octal) while the engine's inet_pton refuses it: only the one way
    ipaddress writes an address is accepted."""
    path = write(tmp_path, BASE + f"server:\n  host: '{address}'\n")
    [problem] = problems(path)
    assert problem.startswith(f"{path}:8:3: server.host: ") and "canonically" in problem, problem


@pytest.mark.parametrize("field, address", [(f, a) for f in ("host", "metrics.host")
                                             for a in ("010.0.0.1", "127.000.000.001", "0.0.0.00", "0x7f.0.0.1")])
def test_a_front_address_written_as_a_disguised_number_is_refused(tmp_path, field, address):
    """HAProxy reads front.host 010.0.0.1 as 8.0.0.1: the front door's addresses follow server.host's rule."""
    front = {"host": f"host: '{address}'", "metrics.host": f"metrics: {{host: '{address}', port: 8405}}"}[field]
    path = write(tmp_path, BASE + f"server: {{port: 9000}}\nfront: {{keys: /k, {front}}}\n")
    [problem] = problems(path)
    assert f": front.{field}: " in problem and "canonically" in problem, problem


@pytest.mark.parametrize("setting, words", [
    ("health.watchdog.interval_s=0.001", "greater than or equal to 0.25"),
    ("health.watchdog.completion_every_s=0.01", "0 (never) or at least 1 s"),
    ("health.watchdog.backoff_max_s=0.001", "greater than or equal to 1"),
    ("health.interval_s=0.001", "greater than or equal to 0.1"),
])
def test_every_interval_has_a_floor(tmp_path, setting, words):
    """A watchdog asking every millisecond took 0.4 of a core (and the engine 0.2 more answering it)."""
    [problem] = problems(write(tmp_path, BASE), [setting])
    assert problem.startswith(f"--set {setting}: {setting.split('=')[0]}: ") and words in problem, problem
    load_spec(write(tmp_path, BASE), ["health.watchdog.completion_every_s=0", "health.watchdog.interval_s=0.25"])


@pytest.mark.parametrize("peer", ["010.0.0.1", "10.000.0.1"])
def test_a_distributed_peer_written_as_a_disguised_number_is_refused(tmp_path, peer):
    from ds4_converge.spec.values import check_peer_host

    with pytest.raises(ValueError, match="canonically"):
        check_peer_host(peer)
    assert check_peer_host("spark-2.lan") == "spark-2.lan" and check_peer_host("10.0.0.1") == "10.0.0.1"


def test_schema_file_is_fresh():
    assert (REPO / "spec" / "schema.json").read_text() == schema_json(), "run: ds4-converge schema > spec/schema.json"
