"""Hostile or broken spec input ends in exit 2 with a located message (FILE:LINE:COL or FILE), never a
traceback or a hang: size, file type, encoding, YAML 1.1 surprises, duplicate keys, alias bombs, depth,
number and string bounds, and values that cannot be written safely into the files they reach."""
import json
import os
import re

import pytest

from boxes import MINIMAL_SPEC as BASE
from ds4_converge.cli import main as cli
from ds4_converge.spec.loader import SpecInvalid, load_spec

LOCATED = re.compile(r"^(\S+?)(:\d+:\d+)?: ")


def run_cli(capsys, *argv):
    rc = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def write(tmp_path, text, name="spec.yaml"):
    path = tmp_path / name
    path.write_text(text)
    return path


def only_problem(path, overrides=()):
    with pytest.raises(SpecInvalid) as info:
        load_spec(path, list(overrides))
    [problem] = info.value.problems
    return problem


@pytest.mark.parametrize("mode", [["validate"], ["--check"], []])
def test_a_hostile_repo_is_refused_before_anything_runs(tmp_path, capsys, mode):
    marker = tmp_path / "PWNED"
    path = write(tmp_path, BASE.replace("https://example.invalid/ds4.git", f"'--upload-pack=touch {marker} #://x'"))
    args = [*mode[:1], str(path), *mode[1:]] if mode == ["validate"] else [str(path), *mode]
    rc, _, err = run_cli(capsys, *args)
    assert rc == 2 and f"{path}:2:3: engine.repo: " in err and "option" in err
    assert not marker.exists()


@pytest.mark.parametrize("repo, why", [
    ("ext::sh -c touch% /tmp/x", "transport helpers"),
    ("fd::3", "transport helpers"),
    ("http://example.invalid/ds4.git", "use https://"),
    ("git://example.invalid/ds4.git", "not an allowed git transport"),
    ("ssh://-oProxyCommand=x/ds4", "not a host name"),
    ("-oProxyCommand=x:ds4", "option"),
    ("bad host:x", "neither a valid user@host:path"),
    ("", "empty"),
])
def test_only_the_transports_we_mean_are_allowed(tmp_path, repo, why):
    problem = only_problem(write(tmp_path, BASE.replace("https://example.invalid/ds4.git", repr(repo))))
    assert problem.startswith(f"{tmp_path}/spec.yaml:2:3: engine.repo: ") and why in problem


@pytest.mark.parametrize("repo", ["https://github.com/Entrpi/ds4.git", "ssh://git@host/ds4.git", "git@host:org/ds4",
                                  "file:///srv/ds4.git", "/srv/ds4.git", "../build/ds4 sim.git", "./a:b/ds4"])
def test_the_transports_we_mean_are_accepted(tmp_path, repo):
    assert load_spec(write(tmp_path, BASE.replace("https://example.invalid/ds4.git", repr(repo)))).spec.engine.repo == repo


@pytest.mark.parametrize("ref", ["--output=/tmp/x", "v1 2", "a..b", "x^{}", "main.lock", ""])
def test_a_ref_git_would_misread_is_refused(tmp_path, ref):
    problem = only_problem(write(tmp_path, BASE.replace("v0.2.0", repr(ref))))
    assert problem.startswith(f"{tmp_path}/spec.yaml:3:3: engine.ref: ")


@pytest.mark.parametrize("root, shown", [
    ("/srv/x y", "' '"), ("/srv/x%(ENV_HOME)s", "'%'"), ("/srv/it's", '"\'"'), ("/srv/a;b", "';'"),
    ("/srv/a#b", "'#'"), ("/srv/*", "'*'"), ('/srv/"q"', "'\"'"), ("/srv/a\tb", "'\\t'"),
])
def test_a_root_that_config_files_would_misread_is_refused_naming_the_field(tmp_path, capsys, root, shown):
    path = write(tmp_path, BASE + f"paths:\n  root: {json.dumps(root)}\n")
    rc, _, err = run_cli(capsys, str(path), "--check")
    assert rc == 2 and f"{path}:8:3: paths.root: " in err, err
    assert shown in err or "control character" in err


def test_a_root_that_expands_to_whitespace_on_this_host_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DS4_TEST_ROOT", str(tmp_path / "x y"))
    path = write(tmp_path, BASE + "paths:\n  root: ${DS4_TEST_ROOT}/root\n")
    rc, _, err = run_cli(capsys, str(path), "--check")
    assert rc == 2 and f"{path}:8:3: paths.root: " in err and "' '" in err
    assert not (tmp_path / "x y").exists()


def test_a_root_too_long_for_supervisords_socket_is_refused(tmp_path, capsys):
    path = write(tmp_path, BASE + f"paths:\n  root: /tmp/{'r' * 100}\n")
    rc, _, err = run_cli(capsys, str(path), "--check")
    assert rc == 2 and "paths.root: is too long: supervisord's socket" in err


@pytest.mark.parametrize("args, flag, field", [
    ('["--host", "0.0.0.0"]', "--host", "server.host"), ('["--cors", "--port=9"]', "--port", "server.port"),
    ('["-c", "9"]', "-c", "server.ctx"), ('["--model", "/x"]', "--model", "model.main"),
    ('["--no-spec"]', "--no-spec", "server.speculative"), ('["--power", "50"]', "--power", "server.power"),
])
def test_extra_args_cannot_override_a_managed_flag(tmp_path, args, flag, field):
    path = write(tmp_path, BASE + f"server:\n  extra_args: {args}\n")
    problem = only_problem(path)
    index = 1 if "--cors" in args else 0
    assert problem.startswith(f"{path}:8:") and f"server.extra_args.{index}: {flag} is set by ds4-converge from "
    assert f"{flag} is set by ds4-converge from {field}" in problem


@pytest.mark.parametrize("value, said", [
    ("'\"'", "edge quotes"), ("' tok'", "edge whitespace"), ("'a ;b'", "' ;'"), ("'a\"b''c'", "both kinds of quotes"),
])
def test_a_secret_supervisord_cannot_pass_is_refused_at_validation(tmp_path, value, said):
    path = write(tmp_path, BASE + f"server:\n  env: {{HF_TOKEN: {value}}}\n")
    problem = only_problem(path)
    assert problem.startswith(f"{path}:8:") and "server.env.HF_TOKEN: a secret in server.env cannot hold" in problem
    assert said in problem


def test_the_lock_file_variable_is_managed(tmp_path):
    problem = only_problem(write(tmp_path, BASE + "server:\n  env: {DS4_LOCK_FILE: /tmp/ds4.lock}\n"))
    assert "server.env.DS4_LOCK_FILE: DS4_LOCK_FILE is set by ds4-converge" in problem


@pytest.mark.parametrize("snippet, field, expected", [
    ("server:\n  port: yes\n", "server.port", '(got "yes")'),  # YAML 1.1: 1
    ("server:\n  port: 1:30\n", "server.port", '(got "1:30")'),  # YAML 1.1: 90
    ("server:\n  port: true\n", "server.port", "not true/false"),
    ("server:\n  warm_weights: 2026-07-10\n", "server.warm_weights", "2026-07-10"),  # a string, not a date
])
def test_numbers_mean_what_they_look_like(tmp_path, snippet, field, expected):
    path = write(tmp_path, BASE + snippet)
    problem = only_problem(path)
    assert problem.startswith(f"{path}:8:3: {field}: ") and expected in problem


def test_a_leading_zero_is_decimal_not_octal(tmp_path):
    assert load_spec(write(tmp_path, BASE + "server:\n  port: 08000\n")).spec.server.port == 8000
    assert load_spec(write(tmp_path, BASE + "server:\n  port: 017500\n")).spec.server.port == 17500


def test_a_duplicate_key_is_an_error_naming_both_lines(tmp_path):
    path = write(tmp_path, BASE + "paths:\n  root: /srv/ds4\n  root: /etc\n")
    assert only_problem(path) == f"{path}:9:3: invalid YAML: duplicate key 'root' (first at line 8)"


@pytest.mark.timeout(20)
@pytest.mark.parametrize("where", ["top", "unknown key", "extra_args"])
def test_an_alias_bomb_is_refused(tmp_path, where):
    levels = "".join(f"  - &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]\n" for i in range(1, 10))
    bomb = "bomb:\n  - &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + levels
    if where == "unknown key":
        text = BASE + "server:\n  nonsense:\n" + bomb.replace("\n  ", "\n      ").replace("bomb:", "    bomb:")
    elif where == "extra_args":
        text = BASE + bomb + "server:\n  extra_args: *a9\n"
    else:
        text = BASE + bomb
    problem = only_problem(write(tmp_path, text))
    assert "invalid YAML: more than 5000 values once aliases are expanded" in problem
    assert re.match(rf"^{tmp_path}/spec.yaml:\d+:\d+: ", problem)


@pytest.mark.parametrize("text, expected", [
    ("x: &a [*a]\n", "an alias refers to the node that contains it"),
    ("server: {extra_args: " + "[" * 500 + "]" * 500 + "}\n", "nested deeper than 32 levels"),
])
def test_self_reference_and_deep_nesting_are_refused(tmp_path, text, expected):
    problem = only_problem(write(tmp_path, BASE + text))
    assert problem.startswith(f"{tmp_path}/spec.yaml:7:") and expected in problem


@pytest.mark.parametrize("snippet, field", [
    ("server:\n  ctx: " + "9" * 5000 + "\n", None),
    ("server:\n  ctx: 1000000000000000\n", "server.ctx"),
    ("server:\n  stop_wait_s: 9223372036854775808\n", "server.stop_wait_s"),
    ("health:\n  soak_s: .inf\n", "health.soak_s"),
    ("health:\n  deadline_s: 1e10\n", "health.deadline_s"),
    ("health:\n  interval_s: 1e10\n", "health.interval_s"),
    ("health:\n  interval_s: .nan\n", "health.interval_s"),
    ("model:\n  main: /srv/gguf/model.gguf\n  mtp: {source: /srv/x.gguf, size: 1e300}\n", "model.mtp.size"),
])
def test_numbers_are_bounded(tmp_path, snippet, field):
    text = BASE.replace("model:\n  main: /srv/gguf/model.gguf\n", "") if snippet.startswith("model") else BASE
    path = write(tmp_path, text + snippet)
    problem = only_problem(path)
    assert re.match(rf"^{path}:\d+:\d+: ", problem)
    assert (f": {field}: " in problem) if field else "too large" in problem


def test_a_huge_number_in_set_is_refused(tmp_path, capsys):
    path = write(tmp_path, BASE)
    for value in ["9" * 5000, "9" * 54]:
        rc, _, err = run_cli(capsys, "validate", str(path), "--set", f"server.ctx={value}")
        assert rc == 2 and err.startswith("--set server.ctx=99"), err


@pytest.mark.parametrize("field", ["paths.root", "model.main.source", "engine.ref"])
def test_strings_are_bounded_where_they_reach_paths_and_argv(tmp_path, field):
    def spec_with(value):
        if field == "engine.ref":
            return BASE.replace("v0.2.0", value)
        if field == "model.main.source":
            return BASE.replace("/srv/gguf/model.gguf", "/srv/" + value)
        return BASE + f"paths:\n  root: /{value}\n"

    path = write(tmp_path, spec_with("a" * 1_000_000))
    with pytest.raises(SpecInvalid) as info:
        load_spec(path)
    assert info.value.problems == [f"{path}: larger than 64 KiB: not a spec (a spec is a few KiB of YAML)"]
    problem = only_problem(write(tmp_path, spec_with("a" * 5000)))
    assert f"spec.yaml:{3 if field == 'engine.ref' else 6 if field.startswith('model') else 8}:" in problem
    assert f": {field}: " in problem and "characters)" in problem


def test_a_long_extra_arg_or_env_value_is_bounded(tmp_path):
    problem = only_problem(write(tmp_path, BASE + f"server:\n  extra_args: [--trace, /x/{'a' * 5000}]\n"))
    assert ": server.extra_args.1: " in problem


def test_an_empty_installer_is_refused(tmp_path):
    text = BASE.replace("  ref: v0.2.0\n", "  installer: ''\n")
    assert only_problem(write(tmp_path, text)) == f"{tmp_path}/spec.yaml:3:3: engine.installer: empty (got \"\")"


@pytest.mark.parametrize("special, kind", [("/dev/zero", "a device"), ("/dev/urandom", "a device"),
                                           ("/", "a directory")])
def test_a_file_that_is_not_regular_is_refused(capsys, special, kind):
    rc, _, err = run_cli(capsys, "validate", special)
    assert rc == 2 and err.startswith(f"{special}: is {kind}")


@pytest.mark.timeout(20)
def test_a_fifo_is_refused_without_blocking(tmp_path, capsys):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    rc, _, err = run_cli(capsys, "validate", str(fifo))
    assert rc == 2 and "not a regular file" in err


def test_a_spec_over_the_size_cap_is_refused(tmp_path, capsys):
    path = write(tmp_path, BASE + "".join(f"k{i}: {i}\n" for i in range(100_000)))
    rc, _, err = run_cli(capsys, "validate", str(path))
    assert rc == 2 and err.startswith(f"{path}: larger than 64 KiB")


@pytest.mark.parametrize("codec", ["utf-16", "utf-16-be", "utf-32", "utf-32-be", "utf-8-sig"])
def test_utf16_and_utf32_with_a_byte_order_mark_are_read(tmp_path, codec):
    path = tmp_path / "spec.yaml"
    bom = {"utf-16-be": b"\xfe\xff", "utf-32-be": b"\x00\x00\xfe\xff"}.get(codec, b"")
    path.write_bytes(bom + (BASE + "server: {host: localhost}\n").encode(codec))
    assert load_spec(path).spec.server.host == "localhost"


def test_text_that_is_not_utf8_names_its_position(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_bytes(BASE.encode() + "server: {host: caf\xe9}\n".encode("latin-1"))
    assert only_problem(path).startswith(f"{path}:7:19: not UTF-8 (byte 0xe9)")


def test_a_nul_byte_is_a_located_yaml_error(tmp_path):
    path = write(tmp_path, BASE + "server: {host: a\x00}\n")
    assert only_problem(path).startswith(f"{path}:7:")


@pytest.mark.parametrize("value", ["a\x0bb", "a\u2028b", "a\x85b", "a\x1bb"])
def test_control_characters_are_refused_in_values_that_reach_files(tmp_path, value):
    path = write(tmp_path, BASE + f'server:\n  env: {{X: "{value.encode("unicode_escape").decode()}"}}\n')
    assert "server.env.X: contains the control character" in only_problem(path)


def test_unknown_server_user_is_exit_2_naming_the_field(tmp_path, capsys):
    path = write(tmp_path, BASE + "server:\n  user: nosuchuser-ds4c\n")
    # not stop: stopping works after the user was deleted (tests/e2e/test_cli_report.py)
    for argv in ([str(path), "--check"], [str(path)], ["status", str(path)]):
        rc, _, err = run_cli(capsys, *argv)
        assert rc == 2 and err.strip() == f"{path}:8:3: server.user: no user 'nosuchuser-ds4c' on this host"


def test_many_unknown_keys_give_a_bounded_report(tmp_path, capsys):
    path = write(tmp_path, BASE + "".join(f"k{i}: {i}\n" for i in range(2000)))
    rc, _, err = run_cli(capsys, "validate", str(path))
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 21 and lines[-1] == f"{path}: … and 1980 more problems"


@pytest.mark.parametrize("override, field", [
    ("server.kv_disk_dir=''", "server.kv_disk_dir"),
    ("model.main={source: /srv/gguf/model.gguf, dest: ''}", "model.main"),
    ("toolchain.cuda_home=''", "toolchain.cuda_home"),
    ("toolchain.cuda_link=''", "toolchain.cuda_link"),
    ("server.port=!!float 18000", "server.port"),
    ("server.port=18000.0", "server.port"),
    ("engine.repo=ssh://-oProxyCommand=x@host/x", "engine.repo"),
    ("engine.repo=ssh://-host/x", "engine.repo"),
])
def test_smaller_gaps_are_refused_naming_the_field(tmp_path, override, field):
    problem = only_problem(write(tmp_path, BASE), [override])
    assert problem.startswith(f"--set {override}: {field}"), problem
