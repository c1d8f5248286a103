"""Write docs/spec.md, the spec reference, from the spec's JSON Schema (`ds4-converge schema`), so that it cannot
drift from the code: tests/unit/test_docs.py fails when docs/spec.md differs from what this writes.

    .venv/bin/python docs/make_spec_reference.py          # or: make docs
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
OUT = DOCS / "spec.md"
ORDER = ("engine", "toolchain", "model", "server", "health", "paths")  # then any other section, as the schema has it
GENERIC_PATTERN = r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029]*$"  # every string: no control characters
GENERIC_MAX_LENGTH = 4096

INTRO = """\
# Spec reference

Generated from the spec's JSON Schema (`ds4-converge schema`, also `spec/schema.json`) by
`docs/make_spec_reference.py` (`make docs`); a test fails when this file differs from the schema.

A spec is one YAML file. Unknown keys are errors (the message names the nearest valid key). Relative paths are
relative to the spec file; `~`, `$HOME` and `${VAR}` expand on the target host, for the service user. Every string
is free of control characters and at most 4096 bytes unless a row says otherwise; what the spec may hold beyond
the schema is in [guarantees.md](guarantees.md) ("Hostile input"). Examples: `spec/examples/sim.yaml` (the simulated
engine) and `spec/examples/spark.yaml` (a DGX Spark).
"""


def _resolve(schema: dict, node: dict) -> dict:
    """The definition a section names, directly or as the one choice besides null (an optional section)."""
    ref = _ref_name(node)
    return schema["$defs"][ref] if ref else node


def _ref_name(node: dict) -> str | None:
    if "$ref" in node:
        return node["$ref"].rsplit("/", 1)[1]
    for option in node.get("anyOf", []):
        if "$ref" in option:
            return option["$ref"].rsplit("/", 1)[1]
    return None


def _type(node: dict, defs_shown: dict[str, str]) -> str:
    if "anyOf" in node:
        options = [o for o in node["anyOf"] if o.get("type") != "null"]
        nullable = len(options) < len(node["anyOf"])
        text = " or ".join(_type(o, defs_shown) for o in options)
        return f"{text} or null" if nullable else text
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[1]
        return f"{defs_shown.get(name, name)}"
    if "enum" in node:
        return "one of " + ", ".join(f"`{v}`" for v in node["enum"])
    if "const" in node:
        return f"`{node['const']}`"
    kind = node.get("type", "any")
    if kind == "array":
        return f"list of {_type(node.get('items', {}), defs_shown)}"
    if kind == "object" and "patternProperties" in node:
        (key, value), = node["patternProperties"].items()
        return f"map of name → {_type(value, defs_shown)}"
    return {"integer": "integer", "number": "number", "string": "string", "boolean": "boolean"}.get(kind, kind)


def _limits(node: dict) -> str:
    said = []
    for option in [node, *node.get("anyOf", [])]:
        low = option.get("minimum", option.get("ge"))
        high = option.get("maximum", option.get("le"))
        if "exclusiveMinimum" in option or "gt" in option:
            said.append(f"> {option.get('exclusiveMinimum', option.get('gt'))}")
        elif low is not None:
            said.append(f"≥ {low}")
        if "exclusiveMaximum" in option or "lt" in option:
            said.append(f"< {option.get('exclusiveMaximum', option.get('lt'))}")
        elif high is not None:
            said.append(f"≤ {high}")
        if option.get("pattern") and option["pattern"] != GENERIC_PATTERN:
            said.append(f"matches `{option['pattern']}`")
        if option.get("maxLength") not in (None, GENERIC_MAX_LENGTH):
            said.append(f"at most {option['maxLength']} characters")
        for key, what in (("maxItems", "items"), ("maxProperties", "entries")):
            if key in option:
                said.append(f"at most {option[key]} {what}")
    return ", ".join(dict.fromkeys(said)).replace("|", "\\|")


def _default(node: dict, required: bool) -> str:
    if required:
        return "required"
    if "default" not in node:
        return ""
    return f"`{json.dumps(node['default'], ensure_ascii=False)}`"


def _text(value: str) -> str:
    return re.sub(r"\s+", " ", value).strip().replace("|", "\\|")


def _rows(schema: dict, prefix: str, definition: dict, uses: dict[str, int], defs_shown: dict[str, str]) -> list[str]:
    rows = []
    required = set(definition.get("required", []))
    for name, node in definition.get("properties", {}).items():
        key = f"{prefix}.{name}"
        ref = _ref_name(node)
        inline = ref is not None and uses[ref] == 1 and "properties" in schema["$defs"][ref]
        meaning = node.get("description") or (schema["$defs"][ref].get("description", "") if inline else "")
        rows.append(f"| `{key}` | {_type(node, defs_shown) if not inline else 'object (below)'} | "
                    f"{_default(node, name in required)} | {_limits(node)} | {_text(meaning)} |")
        if inline:
            rows += _rows(schema, key, schema["$defs"][ref], uses, defs_shown)
    return rows


def _uses(schema: dict) -> dict[str, int]:
    counted: dict[str, int] = {}

    def walk(node):
        if isinstance(node, dict):
            if "$ref" in node:
                name = node["$ref"].rsplit("/", 1)[1]
                counted[name] = counted.get(name, 0) + 1
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk({"properties": schema["properties"], "$defs": schema["$defs"]})
    return counted


HEAD = ["| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]


def render(schema: dict) -> str:
    uses = _uses(schema)
    shared = {name for name, n in uses.items() if n > 1 and "properties" in schema["$defs"][name]}
    defs_shown = {name: f"[{_title(name)}](#{_anchor(name)})" for name in shared}
    lines = [INTRO]
    sections = [s for s in ORDER if s in schema["properties"]] + [s for s in schema["properties"] if s not in ORDER]
    required = set(schema.get("required", []))
    for section in sections:
        definition = _resolve(schema, schema["properties"][section])
        lines += [f"## `{section}`" + (" (required)" if section in required else ""), ""]
        said = [_text(d) for d in [definition.get("description") or schema["properties"][section].get("description")]
                if d]
        if "null" in json.dumps(schema["properties"][section].get("anyOf", [])):
            said.append("Optional: leave it out (null) for a box that serves alone.")
        if said:
            lines += [" ".join(said), ""]
        lines += HEAD + _rows(schema, section, definition, uses, defs_shown) + [""]
    for name in sorted(shared):
        definition = schema["$defs"][name]
        lines += [f"## {_title(name)}", ""]
        if definition.get("description"):
            lines += [_text(definition["description"]), ""]
        lines += HEAD + _rows(schema, "…", definition, uses, defs_shown) + [""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _title(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", " ", name).lower().capitalize() + " entry"


def _anchor(name: str) -> str:
    return _title(name).lower().replace(" ", "-")


def current_schema() -> dict:
    from ds4_converge.spec.loader import schema_json

    return json.loads(schema_json())


def main() -> None:
    text = render(current_schema())
    if "--check" in sys.argv[1:]:
        sys.exit(0 if OUT.exists() and OUT.read_text() == text else 1)
    OUT.write_text(text)


if __name__ == "__main__":
    main()
