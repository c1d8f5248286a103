"""docs/ cannot drift from the code: the spec reference is the schema's, the CLI page names every command and exit
code the CLI has."""
import importlib.util
import re

from boxes import REPO

from ds4_converge.cli.exit_codes import MEANINGS
from ds4_converge.cli.main import build_parser, registry

DOCS = REPO / "docs"


def _generator():
    spec = importlib.util.spec_from_file_location("make_spec_reference", DOCS / "make_spec_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_spec_reference_is_the_one_the_schema_gives():
    generator = _generator()
    expected = generator.render(generator.current_schema())
    assert (DOCS / "spec.md").read_text() == expected, "docs/spec.md is stale: run `make docs`"


def test_the_spec_reference_has_a_row_for_every_field():
    text = (DOCS / "spec.md").read_text()
    generator = _generator()
    schema = generator.current_schema()
    for section, node in schema["properties"].items():
        fields = generator._resolve(schema, node)["properties"]
        for name in fields:
            assert f"| `{section}.{name}` |" in text, f"{section}.{name}"


def test_the_cli_page_names_every_command_and_exit_code():
    text = (DOCS / "cli.md").read_text()
    for name in registry():
        assert f"`ds4-converge {name}" in text or (name == "converge" and "`ds4-converge SPEC" in text), name
    for code in MEANINGS:
        assert f"| {code} |" in text or f"{code}, " in text or f", {code} |" in text, code


GENERAL = {"-h", "--help", "--set", "--json", "--debug"}  # the sentence above docs/cli.md's table says who takes them


def _command_table() -> dict[str, str]:
    """docs/cli.md's command table: each row's text, by the command it names (`ds4-converge SPEC` is converge)."""
    text = (DOCS / "cli.md").read_text()
    table = text[text.index("| command | what it does |"):]
    rows = {}
    for line in table.splitlines()[2:]:
        if not line.startswith("| `ds4-converge "):
            break
        words = line.split("`")[1].split()
        rows["converge" if words[1] == "SPEC" else words[1]] = line
    return rows


def _options(parser) -> list[list[str]]:
    return [action.option_strings for action in parser._actions if action.option_strings]


def test_the_cli_pages_command_table_lists_every_command_and_exactly_its_options():
    """Each command's row names every option its parser has (but the general ones), and none it lacks."""
    parsers = build_parser(registry()).subparsers.choices
    rows = _command_table()
    assert sorted(rows) == sorted(registry()), "a row for each command, and no row for a command that is not one"
    for name, row in rows.items():
        have = [strings for strings in _options(parsers[name]) if not GENERAL & set(strings)]
        # the first cell's synopsis and the options in the row's words; another command line quoted there is not
        # this command's
        spans = row.split("`")
        words = spans[1] + " ".join(span for span in spans[2:] if not span.startswith("ds4-converge "))
        named = set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", words)) - GENERAL
        missing = [strings for strings in have if not named & set(strings)]
        assert not missing, f"docs/cli.md's row for {name} does not name {missing}"
        unknown = named - {s for strings in have for s in strings}
        assert not unknown, f"docs/cli.md's row for {name} names {sorted(unknown)}, which `{name}` does not take"


def test_who_takes_set_json_and_debug_is_what_the_cli_page_says():
    """'Every command that takes one SPEC also takes --set (facts with its SPEC; deployment-check reads several
    specs as they are); every command but schema and help takes --json; all take --debug.'"""
    parsers = build_parser(registry()).subparsers.choices
    flags = {name: {s for strings in _options(parser) for s in strings} for name, parser in parsers.items()}
    one_spec = {name for name, parser in parsers.items()
                if any(a.metavar == "SPEC" and a.nargs in (None, "?") for a in parser._actions)}
    assert {name for name in flags if "--set" in flags[name]} == one_spec
    assert "deployment-check" not in one_spec and "facts" in one_spec
    assert {name for name in flags if "--json" not in flags[name]} == {"schema", "help"}
    assert all("--debug" in f for f in flags.values())


def test_every_commands_help_lists_its_exit_codes():
    for name, parser in build_parser(registry()).subparsers.choices.items():
        assert "exit codes:" in parser.format_help(), name
