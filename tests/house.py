"""The shape of the house, measured from the source (issue 37's table): which floor imports which, circles, the
role packages' two-way pairs, the Context's fields, the longest functions. `python -m tests.house` prints it;
tests/unit/test_house_shape.py holds the line.

Every import counts, a type-only one (under `if TYPE_CHECKING:`) and one inside a function too: a name is a
dependency of the reader, whenever it is loaded.
"""
from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ds4_converge"
ROLE_PACKAGES = ("preflight", "toolchain", "models", "engine", "service", "health")


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The ds4_converge modules `name` imports, anywhere in it."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    # a few hundred modules deep at most; the limit is put back (a test that parses deep JSON relies on it)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10000))
    try:
        for v in sorted(edges):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    return found


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def core_reaches_up(edges: dict[str, set[str]]) -> list[str]:
    """Imports from core into a role package, orchestrate or cli."""
    above = set(ROLE_PACKAGES) | {"orchestrate", "cli"}
    return sorted(f"{a} -> {b}" for a, targets in edges.items() if package_of(a) == "core"
                  for b in targets if package_of(b) in above)


def two_way_pairs(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    uses = {(package_of(a), package_of(b)) for a, targets in edges.items() for b in targets
            if package_of(a) in ROLE_PACKAGES and package_of(b) in ROLE_PACKAGES and package_of(a) != package_of(b)}
    return sorted({tuple(sorted(pair)) for pair in uses if pair[::-1] in uses})


@dataclass(frozen=True)
class Function:
    where: str
    lines: int


def functions() -> list[Function]:
    found = []
    for name, path in modules().items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append(Function(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}",
                                      node.end_lineno - node.lineno + 1))
    return sorted(found, key=lambda f: -f.lines)


def context_fields() -> tuple[list[str], list[str]]:
    """The Context's fields, and those typed Any."""
    tree = ast.parse((PACKAGE / "core" / "context.py").read_text())
    context = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Context")
    fields = [n for n in context.body if isinstance(n, ast.AnnAssign)]
    return ([f.target.id for f in fields],
            [f.target.id for f in fields if "Any" in ast.unparse(f.annotation)])


def main() -> int:
    edges = graph()
    fields, untyped = context_fields()
    longest = functions()
    print(f"core reaches up: {len(core_reaches_up(edges))}")
    for line in core_reaches_up(edges):
        print(f"  {line}")
    print(f"circles: {len(circles(edges))}")
    for group in circles(edges):
        print(f"  {' <-> '.join(group)}")
    print(f"two-way pairs among role packages: {two_way_pairs(edges)}")
    print(f"Context fields: {len(fields)}, typed Any: {untyped}")
    print("functions over 60 lines:" if longest[0].lines > 60 else "no function over 60 lines")
    for f in longest:
        if f.lines <= 60:
            break
        print(f"  {f.lines:3d} {f.where}")
    print(f"longest: {longest[0].lines} {longest[0].where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
