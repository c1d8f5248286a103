"""YAML as a spec reads it: the YAML 1.2 core schema, duplicate keys refused, and bounded in size and depth.

PyYAML implements YAML 1.1, where `port: yes` is 1, `1:30` is 90, `017500` is 8000 and dates become date
objects. Here a scalar is a number only when it looks like one (YAML 1.2 core: `true`/`false`, decimal, `0o`
octal, `0x` hex, floats, `.inf`, `null`), everything else is a string. Aliases are allowed, but the document
they expand to is bounded (a "billion laughs" alias bomb is refused at once) and may not refer to itself.

Events come from libyaml when it is there (fast); nodes are composed here, so depth is counted as they are.
"""
from __future__ import annotations

import codecs
import re

import yaml
from yaml.composer import Composer
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, ScalarNode, SequenceNode
from yaml.resolver import BaseResolver

try:
    from yaml._yaml import CParser as _Parser
except ImportError:  # pragma: no cover - PyYAML without libyaml
    from yaml.parser import Parser as _Parser
    from yaml.reader import Reader as _Reader
    from yaml.scanner import Scanner as _Scanner
else:
    _Reader = _Scanner = None

MAX_DEPTH = 32  # nesting levels, aliases expanded; a spec needs 4
MAX_NODES = 5000  # scalars, lists and mappings, aliases expanded; a spec has about 100
MAX_NUMBER_CHARS = 40  # longer digit strings are not numbers a spec means (and Python refuses > 4300 digits)

# byte order marks, UTF-32 first: its little-endian mark begins with UTF-16's
BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
        (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))

INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
FLOAT = re.compile(r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)"
                   r"|\.(?:nan|NaN|NAN))$")


class LimitExceeded(yaml.MarkedYAMLError):
    """The document is larger or deeper than any spec, or an alias refers to itself."""


class Core12Resolver(BaseResolver):
    """Implicit tags of the YAML 1.2 core schema (and nothing else: no timestamps, no merge keys)."""


Core12Resolver.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"),
                                     ["~", "n", "N", ""])
Core12Resolver.add_implicit_resolver("tag:yaml.org,2002:bool",
                                     re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
Core12Resolver.add_implicit_resolver("tag:yaml.org,2002:int", INT, list("-+0123456789"))
Core12Resolver.add_implicit_resolver("tag:yaml.org,2002:float", FLOAT, list("-+.0123456789"))


class SpecConstructor(SafeConstructor):
    def construct_yaml_int(self, node):
        text = self.construct_scalar(node)
        _bounded_number(text, node)
        try:
            if text.startswith(("0o", "0x")):
                return int(text[2:], 8 if text[1] == "o" else 16)
            return int(text, 10)  # a leading zero is still decimal: 017500 is 17500, never octal
        except ValueError:
            raise ConstructorError(None, None, f"{text!r} is not an integer", node.start_mark) from None

    def construct_yaml_float(self, node):
        text = self.construct_scalar(node)
        _bounded_number(text, node)
        try:
            return float(text.replace(".inf", "inf").replace(".Inf", "inf").replace(".INF", "inf")
                         .replace(".nan", "nan").replace(".NaN", "nan").replace(".NAN", "nan"))
        except ValueError:
            raise ConstructorError(None, None, f"{text!r} is not a number", node.start_mark) from None

    def construct_yaml_bool(self, node):
        return self.construct_scalar(node).lower() == "true"

    def construct_mapping(self, node, deep=False):
        seen = {}
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode):
                key = (key_node.tag, key_node.value)
                if key in seen:
                    raise ConstructorError(
                        "while reading a mapping", node.start_mark,
                        f"duplicate key {key_node.value!r} (first at line {seen[key].line + 1})",
                        key_node.start_mark)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


SpecConstructor.add_constructor("tag:yaml.org,2002:int", SpecConstructor.construct_yaml_int)
SpecConstructor.add_constructor("tag:yaml.org,2002:float", SpecConstructor.construct_yaml_float)
SpecConstructor.add_constructor("tag:yaml.org,2002:bool", SpecConstructor.construct_yaml_bool)
# YAML 1.1 leftovers that a spec never needs (explicit !!timestamp, !!binary, !!set, !!omap)
for _tag in ("timestamp", "binary", "set", "omap", "pairs"):
    SpecConstructor.add_constructor(f"tag:yaml.org,2002:{_tag}", SafeConstructor.construct_undefined)


def _bounded_number(text: str, node) -> None:
    if len(text) > MAX_NUMBER_CHARS:
        raise LimitExceeded(None, None, f"a number of {len(text)} characters is too large for any spec field",
                            node.start_mark)


class BoundedComposer(Composer):
    """Counts depth while composing, so a 500-deep flow list stops at level 33, not in a RecursionError."""

    def __init__(self):
        super().__init__()
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise LimitExceeded(None, None, f"nested deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


if _Reader is None:
    class SpecLoader(BoundedComposer, _Parser, SpecConstructor, Core12Resolver):
        def __init__(self, stream: str):
            _Parser.__init__(self, stream)
            BoundedComposer.__init__(self)
            SpecConstructor.__init__(self)
            Core12Resolver.__init__(self)
else:  # pragma: no cover
    class SpecLoader(_Reader, _Scanner, _Parser, BoundedComposer, SpecConstructor, Core12Resolver):
        def __init__(self, stream: str):
            _Reader.__init__(self, stream)
            _Scanner.__init__(self)
            _Parser.__init__(self)
            BoundedComposer.__init__(self)
            SpecConstructor.__init__(self)
            Core12Resolver.__init__(self)


def compose(text: str):
    """The single document's node graph (None for an empty document), checked against the limits."""
    loader = SpecLoader(text)
    try:
        node = loader.get_single_node()
    finally:
        loader.dispose()
    if node is not None:
        check_expansion(node)
    return node


def construct(node):
    if node is None:
        return None
    constructor = SpecConstructor()
    return constructor.construct_document(node)


def check_expansion(root) -> None:
    """Size and depth of the document with every alias expanded, computed once per node (linear time)."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded nodes, expanded depth)
    on_path: set[int] = set()

    def measure(node, depth: int) -> tuple[int, int]:
        key = id(node)
        if key in on_path:
            raise LimitExceeded(None, None, "an alias refers to the node that contains it", node.start_mark)
        if key in sizes:
            size, height = sizes[key]
        else:
            if depth > MAX_DEPTH:
                raise LimitExceeded(None, None, f"nested deeper than {MAX_DEPTH} levels once aliases are expanded",
                                    node.start_mark)
            if isinstance(node, SequenceNode):
                children = node.value
            elif isinstance(node, MappingNode):
                children = [part for pair in node.value for part in pair]
            else:
                children = []
            on_path.add(key)
            size, height = 1, 0
            for child in children:
                child_size, child_height = measure(child, depth + 1)
                size += child_size
                height = max(height, child_height + 1)
                if size > MAX_NODES:
                    raise LimitExceeded(None, None, f"more than {MAX_NODES} values once aliases are expanded "
                                                    f"(an alias bomb?)", node.start_mark)
            on_path.discard(key)
            sizes[key] = (size, height)
        if depth + height > MAX_DEPTH:
            raise LimitExceeded(None, None, f"nested deeper than {MAX_DEPTH} levels once aliases are expanded",
                                node.start_mark)
        return size, height

    measure(root, 1)
