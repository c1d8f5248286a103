"""Build-relevant environment variables as the executor's commands see them.

The ds4 Makefile honours exported ``CUDA_HOME``/``NVCC``/``CUDA_ARCH`` over its defaults,
so a stray export silently picks another toolkit.
"""

from __future__ import annotations

from dataclasses import dataclass

from ds4_converge.facts.base import Fact, FactParseError

BUILD_ENV_KEYS: tuple[str, ...] = (
    "PATH", "HOME", "CUDA_HOME", "CUDA_PATH", "NVCC", "CUDA_ARCH",
    "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES",
)


def parse_env0(stdout: str, keys: tuple[str, ...] = BUILD_ENV_KEYS) -> dict[str, str]:
    """``env -0`` output -> the variables in ``keys`` that are set."""
    out: dict[str, str] = {}
    for item in stdout.split("\0"):
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise FactParseError(f"not NAME=VALUE: {item[:80]!r}")
        if name in keys:
            out[name] = value
    return out


@dataclass(frozen=True)
class BuildEnvironment(Fact[dict[str, str]]):
    keys: tuple[str, ...] = BUILD_ENV_KEYS

    def command(self) -> list[str]:
        return ["env", "-0"]

    def parse(self, stdout: str) -> dict[str, str]:
        return parse_env0(stdout, self.keys)

    def default(self) -> dict[str, str]:
        return {}
