"""Fact machinery: the ``Fact`` base class and the one executor that touches the host.

A fact is three things (pyinfra style):

* ``command()`` -- the argv to run (a list, no shell unless a probe needs globbing),
* ``parse(stdout)`` -- a *pure* function from the command's output to a typed value;
  it raises :class:`FactParseError` for output it does not recognise,
* ``default()`` -- the value when the tool is missing, fails, times out or prints
  something unparseable. A missing tool is a value, never an exception.

Only :class:`FactRunner` runs processes. :func:`observe` runs one fact and returns its
value together with a :class:`Probe` saying how the value was obtained (``ok``,
``missing``, ``failed``, ``timeout``, ``unparsed``); :func:`gather` returns the value only.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Literal, Mapping, NamedTuple, Sequence, TypeVar

from pydantic import BaseModel, ConfigDict

T = TypeVar("T")

ProbeStatus = Literal["ok", "missing", "failed", "timeout", "unparsed"]

#: Exit status a shell gives for "command not found".
COMMAND_NOT_FOUND = 127


class FactParseError(ValueError):
    """A parser met output it does not recognise."""


class Version(NamedTuple):
    """A ``major.minor`` version; compares like a tuple, prints as ``13.2``."""

    major: int
    minor: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}"

    @classmethod
    def parse(cls, text: str) -> "Version":
        """``"12.1"`` -> ``Version(12, 1)``; raises :class:`FactParseError` otherwise."""
        parts = text.strip().split(".")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise FactParseError(f"not a major.minor version: {text!r}")
        return cls(int(parts[0]), int(parts[1]))


class FrozenModel(BaseModel):
    """Base for fact values: immutable, JSON-dumpable with ``model_dump()``."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Fact(Generic[T]):
    """Base class of all facts. Subclasses are frozen dataclasses whose fields are the
    fact's arguments (e.g. ``NvccVersion(path=...)``).

    + ``command()``: argv to run on the host.
    + ``parse(stdout)``: pure parser, raises :class:`FactParseError` on unknown output.
    + ``default()``: value when the command is missing/fails/is unparseable.
    + ``ok_returncodes``: exit codes whose output is parsed (``None``: any).
    """

    ok_returncodes: ClassVar[frozenset[int] | None] = frozenset({0})

    def command(self) -> list[str]:
        raise NotImplementedError

    def parse(self, stdout: str) -> T:
        raise NotImplementedError

    def default(self) -> T:
        return None  # type: ignore[return-value]

    @classmethod
    def fact_name(cls) -> str:
        """``module.Class``, e.g. ``gpu.NvidiaGpus``."""
        return f"{cls.__module__.rsplit('.', 1)[-1]}.{cls.__name__}"

    @property
    def key(self) -> str:
        """Name plus non-default arguments, e.g. ``cuda.NvccVersion(path='/usr/bin/nvcc')``."""
        args = []
        if dataclasses.is_dataclass(self):
            for f in dataclasses.fields(self):
                value = getattr(self, f.name)
                if f.default is dataclasses.MISSING or value != f.default:
                    args.append(f"{f.name}={value!r}")
        return f"{self.fact_name()}({', '.join(args)})" if args else self.fact_name()


# --------------------------------------------------------------------------------------
# the executor


@dataclass(frozen=True)
class CommandResult:
    """What running one argv gave. ``missing``: the executable was not found."""

    argv: tuple[str, ...]
    returncode: int | None
    stdout: str = ""
    stderr: str = ""
    missing: bool = False
    timed_out: bool = False


class FactRunner:
    """The only code in ``ds4_converge.facts`` that runs processes.

    + ``env``: variables set on top of the inherited environment (``None`` value removes one).
    + ``path``: replaces ``PATH`` (list of dirs or a ``:``-joined string); tests put fake
      ``nvidia-smi``/``nvcc`` first with it.
    + ``inherit_env``: start from ``os.environ`` (default) or from an empty environment.
    + ``timeout``: seconds per command.

    ``LC_ALL=C`` is always set so tool output is not localised.
    """

    def __init__(
        self,
        *,
        env: Mapping[str, str | None] | None = None,
        path: Sequence[str | os.PathLike[str]] | str | None = None,
        inherit_env: bool = True,
        timeout: float = 10.0,
    ) -> None:
        base: dict[str, str] = dict(os.environ) if inherit_env else {}
        for name, value in (env or {}).items():
            if value is None:
                base.pop(name, None)
            else:
                base[name] = value
        if path is not None:
            base["PATH"] = path if isinstance(path, str) else os.pathsep.join(os.fspath(p) for p in path)
        base["LC_ALL"] = "C"
        self.environ: dict[str, str] = base
        self.timeout = timeout

    def which(self, name: str) -> str | None:
        """Resolve an executable the way the commands will see it (on this runner's PATH)."""
        if os.sep in name:
            return name if os.path.isfile(name) and os.access(name, os.X_OK) else None
        return shutil.which(name, path=self.environ.get("PATH", ""))

    def run(self, argv: Sequence[str]) -> CommandResult:
        argv = tuple(argv)
        exe = self.which(argv[0])
        if exe is None:
            return CommandResult(argv, None, missing=True)
        try:
            proc = subprocess.run(
                [exe, *argv[1:]],
                env=self.environ,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=self.timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            return CommandResult(argv, None, _text(exc.stdout), _text(exc.stderr), timed_out=True)
        except OSError as exc:  # e.g. exec format error, permission denied
            return CommandResult(argv, None, "", str(exc), missing=True)
        return CommandResult(
            argv,
            proc.returncode,
            _text(proc.stdout),
            _text(proc.stderr),
            missing=proc.returncode == COMMAND_NOT_FOUND,
        )


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    if isinstance(data, str):
        return data
    return data.decode("utf-8", errors="replace")


# --------------------------------------------------------------------------------------
# running facts


class Probe(FrozenModel):
    """How one fact value was obtained."""

    fact: str
    argv: list[str]
    status: ProbeStatus
    returncode: int | None = None
    detail: str = ""


@dataclass(frozen=True)
class Observation(Generic[T]):
    value: T
    probe: Probe


def display_argv(argv: Sequence[str]) -> list[str]:
    """argv for reports: inline ``sh -c`` scripts shortened to ``<script: N lines>``."""
    return [f"<script: {len(a.strip().splitlines())} lines>" if "\n" in a else a for a in argv]


def _tail(text: str, limit: int = 400) -> str:
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def evaluate(fact: Fact[T], result: CommandResult) -> Observation[T]:
    """Turn a command result into a fact value (pure: no host access)."""

    def probe(status: ProbeStatus, detail: str = "") -> Probe:
        return Probe(fact=fact.key, argv=display_argv(result.argv), status=status,
                     returncode=result.returncode, detail=detail)

    if result.timed_out:
        return Observation(fact.default(), probe("timeout", _tail(result.stderr)))
    if result.missing:
        return Observation(fact.default(), probe("missing", _tail(result.stderr) or f"{result.argv[0]}: not found"))
    ok = fact.ok_returncodes
    if ok is not None and result.returncode not in ok:
        return Observation(fact.default(), probe("failed", _tail(result.stderr or result.stdout)))
    try:
        value = fact.parse(result.stdout)
    except ValueError as exc:  # FactParseError, or int()/Version parsing of garbage
        return Observation(fact.default(), probe("unparsed", str(exc)))
    return Observation(value, probe("ok"))


def _instance(fact: Fact[T] | type[Fact[T]], args: Mapping[str, Any]) -> Fact[T]:
    if isinstance(fact, type):
        return fact(**args)
    if args:
        raise TypeError("pass arguments either to the fact class or to gather(), not both")
    return fact


def observe(fact: Fact[T] | type[Fact[T]], runner: FactRunner | None = None, **args: Any) -> Observation[T]:
    """Run one fact through the executor; returns its value and :class:`Probe`."""
    inst = _instance(fact, args)
    return evaluate(inst, (runner or FactRunner()).run(inst.command()))


def gather(fact: Fact[T] | type[Fact[T]], runner: FactRunner | None = None, **args: Any) -> T:
    """Run one fact through the executor and return its value (the default on any failure)."""
    return observe(fact, runner, **args).value
