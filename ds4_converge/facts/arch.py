"""CPU architecture: ``uname -m`` (``aarch64`` on DGX Spark)."""

from __future__ import annotations

from dataclasses import dataclass

from ds4_converge.facts.base import Fact, FactParseError


def parse_uname_machine(stdout: str) -> str:
    """``"aarch64\\n"`` -> ``"aarch64"``; anything but one token raises."""
    tokens = stdout.split()
    if len(tokens) != 1:
        raise FactParseError(f"expected one machine name from uname -m, got {stdout!r}")
    return tokens[0]


@dataclass(frozen=True)
class Architecture(Fact[str | None]):
    """Machine hardware name, ``None`` if ``uname`` is unavailable."""

    def command(self) -> list[str]:
        return ["uname", "-m"]

    def parse(self, stdout: str) -> str:
        return parse_uname_machine(stdout)
