"""The performance gate: a new engine must be fast, not just alive.

After the smoke answer and the soak, a short bench (one client, a ~512-token prompt) measures decode tok/s.
`health.min_decode_tps` is an absolute floor; `health.max_regression` is the fraction it may lose against
the baseline: the old engine benched in the same run on the same box just before the switch (service/switch.py),
else the decode tok/s recorded when last good passed the same gate. A release below either is refused (and so
reverted, like an unhealthy one), with by how much it missed, unless the platform itself was slow while it was
benched (health/platform.py: clocks held down, a throttle reason, another process on the GPU): then the verdict
names the platform, and a release that may well be good is not reverted for it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ds4_converge.core.state import Deployment
from ds4_converge.health.bench import BenchError, BenchOptions, headline
from ds4_converge.spec.model import Health

# short enough to add seconds, not minutes, to a switch; the same procedure every time, so that a
# recorded figure is comparable with the next one
GATE_BENCH = BenchOptions(prompt_tokens=(512,), concurrency=1, reps=3, gen_tokens=64)


class TooSlow(Exception):
    """The release is slower than the gate allows; the message says by how much."""


@dataclass(frozen=True)
class Verdict:
    decode_tps: float
    message: str  # for the run's report
    platform_slow: tuple[str, ...] = ()  # the gate would have refused it, but the platform was slow: why


@dataclass(frozen=True)
class Baseline:
    """The old engine, benched in this run just before the switch."""

    release: str
    decode_tps: float
    contaminated: tuple[str, ...] = ()  # rounds benched while clients' requests were in flight, named


def enabled(health: Health) -> bool:
    return health.min_decode_tps is not None or health.max_regression is not None


def decode_tps(record: dict) -> float:
    value = headline(record)
    if value is None:
        raise BenchError("the gate bench measured no decode speed")
    return value


def judge(decode: float, health: Health, last_good: Deployment | None, *, baseline: Baseline | None = None,
          platform_slow: list[str] = (), contaminated: tuple[str, ...] = ()) -> Verdict:
    """Pure: raise TooSlow, or say what passed (or that the platform, not the release, was slow). `contaminated`:
    the new engine's rounds that met clients' requests; the baseline's are in it. Both are named, in a pass or a
    refusal: a figure measured under traffic is never averaged in silently."""
    under = []
    if contaminated:
        under.append(f"the new engine's {', '.join(contaminated)}")
    if baseline is not None and baseline.contaminated:
        under.append(f"the baseline's {', '.join(baseline.contaminated)}")
    note = (f"; measured with clients' requests in flight (the front door's stats), not the engine alone: "
            f"{'; '.join(under)}") if under else ""
    try:
        verdict = _judge(decode, health, last_good, baseline, platform_slow)
    except TooSlow as exc:
        raise TooSlow(f"{exc}{note}") from None
    return Verdict(verdict.decode_tps, verdict.message + note, verdict.platform_slow)


def _judge(decode: float, health: Health, last_good: Deployment | None, baseline: Baseline | None,
           platform_slow) -> Verdict:
    problems, passed = [], [f"decode {decode:.2f} tok/s"]
    if health.min_decode_tps is not None:
        floor = health.min_decode_tps
        if decode < floor:
            short = floor - decode
            problems.append(f"decode {decode:.2f} tok/s is below health.min_decode_tps {floor:g}: "
                            f"missed by {short:.2f} tok/s ({short / floor:.0%})")
        else:
            passed.append(f"floor {floor:g}")
    if health.max_regression is not None:
        if baseline is not None:
            against, reference = baseline.decode_tps, f"the old engine benched just now ({baseline.release}"
        else:
            against = (last_good.bench or {}).get("decode_tps") if last_good else None
            reference = f"last good as recorded ({last_good.release}" if last_good else ""
        if against:
            loss = 1 - decode / against
            allowed = health.max_regression
            if loss > allowed:
                problems.append(f"decode {decode:.2f} tok/s is {loss:.1%} slower than {reference}: {against:.2f} "
                                f"tok/s), more than health.max_regression {allowed:.0%}: missed by "
                                f"{(loss - allowed) * 100:.1f} points")
            else:
                passed.append(f"{max(loss, 0):.0%} below {reference}: {against:.2f}), allowed {allowed:.0%}")
        else:
            passed.append("no recorded bench for last good, regression not checked")
    if problems and platform_slow:
        return Verdict(decode, "performance gate: " + "; ".join(problems) + "; but the platform itself was slow "
                       f"while it was benched ({'; '.join(platform_slow)}): the release is not blamed and not "
                       "reverted; fix the platform and bench again", tuple(platform_slow))
    if problems:
        raise TooSlow("; ".join(problems))
    return Verdict(decode, "performance gate passed: " + ", ".join(passed))
