"""Host facts captured on another host (`ds4-converge facts SPEC --json` there), for `--check --facts FILE` here.

A spec for a DGX Spark cannot be planned on a laptop from the laptop's own facts: preflight stops at "nvidia-smi is
not installed". Planned against the target's facts instead, the roles see its GPU, driver, toolkits, memory, disk,
port holders and service user; everything else a plan reads (paths.root, the model files, the engine's
repository) is read on this host, and the plan says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from ds4_converge.core import bounded_file
from ds4_converge.errors import Ds4Error
from ds4_converge.facts import HostFacts

MAX_BYTES = 16 << 20  # a facts document is a few kilobytes; anything near this is not one


class NotFacts(Ds4Error):
    pass


@dataclass(frozen=True)
class Captured:
    facts: HostFacts
    path: Path
    hostname: str | None = None
    captured_at: str | None = None
    spec: str | None = None  # the spec they were captured for (None: the defaults of `ds4-converge facts`)

    @property
    def origin(self) -> str:
        where = f" on {self.hostname}" if self.hostname else ""
        when = f" at {self.captured_at}" if self.captured_at else ""
        return f"{self.path} (captured{where}{when})" if where or when else str(self.path)


def load(path: Path) -> Captured:
    """The `ds4-converge facts --json` document in `path` (or its `facts` object alone)."""
    try:
        data = bounded_file.read(path, MAX_BYTES, "a facts document")
    except bounded_file.FileRefused as exc:
        raise NotFacts(f"--facts {path}: {exc}: not a facts document") from None
    except OSError as exc:
        raise NotFacts(f"--facts {path}: {exc.strerror or exc}") from None
    try:
        document = bounded_file.load_json(data)
    except ValueError as exc:
        raise NotFacts(f"--facts {path}: not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise NotFacts(f"--facts {path}: not a facts document (write one with `ds4-converge facts SPEC --json`)")
    facts = document.get("facts") if document.get("command") == "facts" else document
    said = {key: document.get(key) for key in ("hostname", "captured_at", "spec")}
    if any(value is not None and not isinstance(value, str) for value in said.values()):
        raise NotFacts(f"--facts {path}: not a facts document: hostname, captured_at and spec are strings")
    try:
        host = HostFacts.model_validate(facts)
    except ValidationError as exc:
        raise NotFacts(f"--facts {path}: not host facts of this version of ds4-converge (write them with "
                       f"`ds4-converge facts SPEC --json` on the target): {_problems(exc)}") from None
    return Captured(host, Path(path), **said)


def _problems(exc: ValidationError, shown: int = 3) -> str:
    """`port: Input should be a valid integer; arch: Field required`: each field by its path, the first few."""
    errors = exc.errors(include_url=False)
    said = [f"{'.'.join(map(str, e['loc'])) or 'the document'}: {e['msg']}" for e in errors[:shown]]
    more = f" (and {len(errors) - shown} more)" if len(errors) > shown else ""
    return "; ".join(said) + more


def account(captured: Captured, wanted_user: str | None) -> tuple[str, str] | None:
    """The service user's (name, HOME) on the target, when the facts are about the user this spec runs as."""
    facts = captured.facts
    if facts.service_passwd is None or not facts.service_user:
        return None
    if wanted_user is not None and wanted_user != facts.service_user:
        return None
    return facts.service_user, facts.service_passwd.home


def notes(captured: Captured, request: dict, wanted_user: str | None) -> tuple[list[str], list[str]]:
    """(notes, warnings): which facts the plan used, and where they were captured for something else."""
    facts = captured.facts
    gpus = ", ".join(f"{g.name} ({g.compute_cap})" if g.compute_cap else g.name for g in facts.gpus) or "no GPU"
    toolkits = ", ".join(f"{t.path} ({t.version})" if t.version else t.path for t in facts.cuda.toolkits) or "none"
    said = [f"planned against the host facts in {captured.origin}: arch {facts.arch or 'unknown'}, {gpus}, "
            f"driver {facts.driver.driver_version or 'none'}, CUDA toolkits {toolkits}, memory, free disk, who holds "
            f"port {facts.port}, service user {facts.service_user or 'unknown'}"
            + (f" (home {facts.service_home})" if facts.service_home else ""),
            "read on this host, not the target: paths.root (state, releases), the model files, the engine's "
            "repository"]
    warnings = []
    if request["port"] != facts.port:
        warnings.append(f"--facts: captured for port {facts.port}, the spec serves {request['port']}: who holds "
                        f"that port on the target is not known")
    missing = [d for d in request["model_dirs"] if d not in facts.disk_models]
    if request["root"] != facts.root or missing:
        where = ", ".join([request["root"]] * (request["root"] != facts.root) + missing)
        warnings.append(f"--facts: free disk not captured for {where}: those disk checks used what was captured "
                        f"(capture with `ds4-converge facts SPEC --json` on the target)")
    if wanted_user is not None and wanted_user != facts.service_user:
        warnings.append(f"--facts: captured for service user {facts.service_user}, the spec runs as {wanted_user}")
    if facts.supervised_pids is None and facts.listeners:
        warnings.append("--facts: captured without a spec, so a holder of the port cannot be told from this root's "
                        "own engine")
    return said, warnings


def returned_by(facts: HostFacts, pids) -> int:
    """What this root's serving engine (pids) gives back when stopped, captured with the facts for a spec."""
    from ds4_converge.models.role import engine_bytes

    return engine_bytes(facts, set(pids))
