"""docs/ cannot drift from the code: the spec reference is the schema's, the CLI page names every command and exit
code the CLI has."""
import importlib.util

from boxes import REPO

from ds4_converge.cli.exit_codes import MEANINGS
from ds4_converge.cli.main import registry

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
