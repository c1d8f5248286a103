"""`ds4-converge tune SPEC`: try the speculative settings this build and these model files allow, bench each,
rank them.

Each candidate (speculation off, MTP with draft 1 to 3, DSpark; power values only when asked) is the spec with
`--set` overrides, converged through the normal path (plan, switch, probe, gate, revert on failure) and then
benched. A candidate whose files are not in the spec or not downloaded, or that does not fit the memory budget
or this engine build, is skipped with the reason, found by a check-mode run before anything stops. At the end
the box converges again to the spec as it was, or, with `write`, to the winner written into the spec file
(comments kept). The last-good history is put back as it was before the tune, plus that final deployment, so
`rollback` still means what it meant.
"""
from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

from ds4_converge.orchestrate.context import make_context
from ds4_converge.core.layout import write_atomic
from ds4_converge.orchestrate.reconciler import Outcome, converge
from ds4_converge.core.state import State
from ds4_converge.health.bench import BenchError, BenchOptions, bench, headline
from ds4_converge.health.probe import NotReady, Unhealthy
from ds4_converge.service.watch import endpoint
from ds4_converge.spec.loader import LoadedSpec, SpecInvalid, load_spec, read_spec_text
from ds4_converge.spec.model import Spec

TUNE_BENCH = BenchOptions(prompt_tokens=(512,), concurrency=1, reps=3, gen_tokens=128)
MTP_DRAFTS = (1, 2, 3)  # depth >= 2 is known to corrupt output upstream (#750); the smoke answer still guards it


@dataclass(frozen=True)
class Candidate:
    mode: str  # off | mtp | dspark
    draft: int | None = None
    power: int | None = None  # None: as the spec says

    @property
    def label(self) -> str:
        text = {"off": "speculative off", "mtp": f"mtp draft {self.draft}", "dspark": "dspark"}[self.mode]
        return text + (f", power {self.power}" if self.power is not None else "")

    def overrides(self) -> list[str]:
        sets = [f'server.speculative.mode="{self.mode}"']
        if self.draft is not None:
            sets.append(f"server.speculative.draft={self.draft}")
        if self.power is not None:
            sets.append(f"server.power={self.power}")
        return sets

    def matches(self, spec: Spec) -> bool:
        """The spec already asks for this setting."""
        wanted = spec.server.speculative
        return (wanted.mode == self.mode and (self.mode != "mtp" or wanted.draft == self.draft)
                and (self.power is None or (spec.server.power or 100) == self.power))


@dataclass
class Trial:
    candidate: Candidate
    status: str  # ok | skipped | failed
    reason: str = ""
    decode_tps: float | None = None
    record: dict | None = None

    def to_json(self) -> dict:
        case = (self.record or {}).get("cases", [{}])[0] if self.record else {}
        return {"setting": self.candidate.label, "mode": self.candidate.mode, "draft": self.candidate.draft,
                "power": self.candidate.power, "status": self.status, "reason": self.reason or None,
                "decode_tps": self.decode_tps, "ttft_s": case.get("ttft_s"),
                "spec_accept_rate": ((case.get("engine") or {}).get("spec_accept_rate") or {}).get("median")}


@dataclass
class TuneReport:
    trials: list[Trial] = field(default_factory=list)
    winner: Trial | None = None
    written: str = ""  # what --write changed in the spec file
    final: Outcome | None = None  # the converge the box ended on
    ended_on: str = ""

    @property
    def ok(self) -> bool:
        return self.winner is not None and self.final is not None and self.final.ok

    def ranked(self) -> list[Trial]:
        done = sorted((t for t in self.trials if t.status == "ok"), key=lambda t: -(t.decode_tps or 0))
        return done + [t for t in self.trials if t.status != "ok"]

    def to_json(self) -> dict:
        return {"ok": self.ok, "winner": self.winner.candidate.label if self.winner else None,
                "written": self.written or None, "ended_on": self.ended_on,
                "error": self.final.error if self.final and not self.final.ok else None,
                "ranked": [t.to_json() for t in self.ranked()]}


def candidates(spec: Spec, powers: tuple[int, ...] = ()) -> list[Candidate]:
    modes = [Candidate("off"), *(Candidate("mtp", d) for d in MTP_DRAFTS), Candidate("dspark")]
    if not powers:
        return modes
    return [Candidate(c.mode, c.draft, p) for p in powers for c in modes]


def _missing_file(spec: Spec, candidate: Candidate) -> str:
    if candidate.mode in ("mtp", "dspark") and getattr(spec.model, candidate.mode) is None:
        return f"no model.{candidate.mode} in the spec"
    return ""


def try_candidate(loaded: LoadedSpec, overrides: list[str], candidate: Candidate, options: BenchOptions,
                  say) -> Trial:
    why = _missing_file(loaded.spec, candidate)
    if why:
        return Trial(candidate, "skipped", why)
    try:
        trial_spec = load_spec(loaded.path, [*overrides, *candidate.overrides()])
    except SpecInvalid as exc:
        return Trial(candidate, "skipped", "; ".join(exc.problems))
    # check mode first: files, memory budget and engine flags are refused before anything is stopped
    check = make_context(trial_spec, say=lambda _m: None)
    check.check = True
    planned = converge(check)
    if not planned.ok:
        return Trial(candidate, "skipped", planned.error)
    downloads = [c for r in planned.results if r.name == "models" for c in r.changes if c.startswith("download")]
    if downloads:
        return Trial(candidate, "skipped", f"not downloaded ({downloads[0]}): tune tries only the files here")
    say(f"tune: {candidate.label}: converging")
    ctx = make_context(trial_spec, say=say)
    outcome = converge(ctx)
    if not outcome.ok:
        if "interrupted" in outcome.error:
            raise KeyboardInterrupt
        return Trial(candidate, "failed" if outcome.switch.begun else "skipped", outcome.error)
    say(f"tune: {candidate.label}: benching")
    try:
        record = bench(ctx, options, ctx.state.current, endpoint(ctx), kind="tune")
    except (BenchError, NotReady, Unhealthy) as exc:
        return Trial(candidate, "failed", f"bench: {exc}")
    return Trial(candidate, "ok", decode_tps=headline(record), record=record)


def tune(loaded: LoadedSpec, overrides: list[str], *, powers: tuple[int, ...] = (), write: bool = False,
         options: BenchOptions = TUNE_BENCH, say=lambda _m: None) -> TuneReport:
    """Run with the run lock held (as a converge): every candidate, then back to the start or on to the winner."""
    report = TuneReport()
    good_before = list(make_context(loaded).state.good)
    finished = False
    try:
        for candidate in candidates(loaded.spec, powers):
            report.trials.append(try_candidate(loaded, overrides, candidate, options, say))
        finished = True
    finally:
        # interrupted: back to the start, and no "winner" of half the candidates goes into the spec
        ranked = [t for t in report.ranked() if t.status == "ok"]
        report.winner = ranked[0] if ranked and finished else None
        final = loaded
        if write and report.winner is not None and not report.winner.candidate.matches(loaded.spec):
            report.written = write_setting(loaded.path, report.winner.candidate)
            final = load_spec(loaded.path, overrides)
        report.ended_on = ("the winner, " if report.written else "the spec's own setting, ") + _label(final.spec)
        say(f"tune: converging to {report.ended_on}")
        ctx = make_context(final, say=say)
        report.final = converge(ctx)
        if report.final.ok:
            _restore_history(ctx, good_before)
    return report


def _label(spec: Spec) -> str:
    wanted = spec.server.speculative
    mode = Candidate(wanted.mode, wanted.draft if wanted.mode == "mtp" else None)
    return mode.label + (f", power {spec.server.power}" if spec.server.power is not None else "")


def _restore_history(ctx, good_before: list) -> None:
    """Trials are not the box's history: last good is what it ends on, preceded by what was good before."""
    state = State.load(ctx.layout.state_file)
    if state.current is None:
        return
    state.good = good_before
    state.bless(state.current)
    state.save(ctx.layout.state_file)


def write_setting(path: Path, candidate: Candidate) -> str:
    """Write the candidate's setting into the spec file, keeping its comments, order and style."""
    from ruamel.yaml import YAML
    from ruamel.yaml.comments import CommentedMap
    from ruamel.yaml.scalarstring import DoubleQuotedScalarString

    yaml = YAML()  # round-trip mode
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap a long line
    data = yaml.load(read_spec_text(path))  # bounded, and never a FIFO
    server = data.get("server")
    if server is None:
        server = data["server"] = CommentedMap()
    speculative = server.get("speculative")
    if speculative is None:
        speculative = server["speculative"] = CommentedMap()
    speculative["mode"] = DoubleQuotedScalarString(candidate.mode)  # a bare `off` would read as false
    changed = [f"server.speculative.mode: {candidate.mode}"]
    if candidate.draft is not None:
        speculative["draft"] = candidate.draft
        changed.append(f"server.speculative.draft: {candidate.draft}")
    if candidate.power is not None:
        server["power"] = candidate.power
        changed.append(f"server.power: {candidate.power}")
    out = io.StringIO()
    yaml.dump(data, out)
    write_atomic(path, out.getvalue(), mode=path.stat().st_mode & 0o777)
    return f"{path}: " + ", ".join(changed)
