"""Will the model set and context fit in host memory? Preflight arithmetic, before the engine is started.

On a DGX Spark the GPU shares the host's memory: a model set that does not fit is not a clean error but the OOM
killer or a host that stops answering (NVIDIA/open-gpu-kernel-modules#1358), so we refuse up front. The engine's
figures are in engine knowledge (kv, load):
  KV (startup "context buffers") = fixed raw SWA rows + ctx x (bytes_per_token + scratch_bytes_per_token)
  weights are the GGUF file sizes (the whole file is mapped; b030961's plan calls it "resident model").
  On an integrated GPU (GB10) b030961 keeps a second, aligned copy of some tensors in device memory
  (load.integrated_copies, read from the file's tensor table), and a load needs more than it keeps for a while
  (load.unified_load_margin).

Two rooms are judged: the host's (MemTotal less what the OS keeps), and what is free at the moment it matters:
MemAvailable, plus what the serving engine gives back when the switch stops it, less a reserve. What other
programs hold is in the second only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ds4_converge.core.memory_fit import OS_HEADROOM_BYTES, Budget, Room
from ds4_converge.engine_knowledge import load as load_knowledge
from ds4_converge.units import GIB, MIB, gib

Level = Literal["ok", "warn", "error"]


def integrated_copy_bytes(tensors, rule: dict | None) -> int:
    """What the engine copies a second time into device memory on an integrated GPU (engine knowledge:
    load.integrated_copies; None: this version makes no such copy): the bytes of the tensors the rule picks."""
    if not rule:
        return 0
    return sum(t.bytes for t in tensors
               if t.ggml_type == rule["ggml_type"] and len(t.dims) == rule["ndim"] and t.dims[0]
               and t.dims[0] % rule["row_multiple"] == 0 and t.bytes >= rule["min_bytes"]
               and t.bytes % rule["block_bytes"] == 0 and rule["except_name"] not in t.name)


def estimate(weights_bytes: int, ctx: int, drafter_bytes: int = 0, knowledge: dict | None = None,
             unified: bool = False, device_copies: int = 0) -> Budget:
    """`weights_bytes`: main GGUF (+ MTP file if used); `drafter_bytes`: the DSpark drafter GGUF; `unified`: the
    GPU shares host memory (GB10), where a load takes more than it keeps (knowledge: load.unified_load_margin);
    `device_copies`: what the engine keeps twice there (:func:`integrated_copy_bytes`)."""
    if ctx <= 0 or weights_bytes < 0 or drafter_bytes < 0 or device_copies < 0:
        raise ValueError(f"invalid memory estimate input: ctx={ctx}, weights={weights_bytes}, drafter={drafter_bytes}"
                         f", device copies={device_copies}")
    knowledge = knowledge or load_knowledge()
    kv_facts = knowledge["kv"]
    kv_cache = kv_facts["fixed_bytes"] + ctx * kv_facts["bytes_per_token"]
    kv = kv_cache + ctx * kv_facts["scratch_bytes_per_token"]
    return Budget(
        ctx=ctx,
        weights=weights_bytes,
        kv=kv,
        kv_cache=kv_cache,
        drafter=drafter_bytes,
        total=weights_bytes + kv + drafter_bytes + device_copies,
        kv_managed=kv_cache >= kv_facts["managed_threshold_bytes"],
        managed_threshold=kv_facts["managed_threshold_bytes"],
        load_margin=int(knowledge["load"]["unified_load_margin"] * (weights_bytes + drafter_bytes)) if unified else 0,
        device_copies=device_copies,
    )


def judge(budget: Budget, mem_total_bytes: int | Room, headroom_bytes: int = OS_HEADROOM_BYTES) -> tuple[Level, str]:
    """('error', …) when it cannot fit the host or what is free now, ('warn', …) when KV will fall back to
    managed memory, else ('ok', …); the numbers are in every verdict."""
    room = mem_total_bytes if isinstance(mem_total_bytes, Room) else Room(mem_total_bytes, headroom=headroom_bytes)
    numbers = _numbers(budget, room)
    managed = budget.kv_managed or _managed_by_reserve(budget, room.total)
    if budget.peak > room.usable:
        return "error", (f"does not fit: {numbers}; short by {gib(budget.peak - room.usable)}. "
                         f"Lower ctx, drop the drafter or use a smaller quant"
                         + (" (or DS4_CUDA_Q8_NO_ALIGNED=1 in server.env: the engine then keeps no aligned Q8 copies)"
                            if budget.device_copies else ""))
    if room.free is not None and budget.peak > room.free:
        return "error", (f"does not fit in what is free now: {numbers}; short by {gib(budget.peak - room.free)}. "
                         f"Other programs hold the rest: stop them, or lower ctx")
    if managed:
        return "warn", (f"fits, but the engine will put the KV cache in managed (migratable) memory, "
                        f"which is slower: {numbers}. Lower ctx to avoid it")
    return "ok", f"fits: {numbers}"


def beside(budget: Budget, room: Room, *, shared_weights: bool) -> tuple[bool, str]:
    """Can a new engine load while the serving one still runs (a front door's overlap switch)? What it adds must
    fit in what is free now, the old one still holding its part: all of its peak, less the weights when both map
    the same files (`shared_weights`: a CPU build reads them from the file's page cache, which the serving engine
    holds already; engine knowledge load.shared_mapping_targets). MemAvailable unknown: no. Returns (yes or no,
    why in numbers)."""
    if room.available is None:
        return False, "what is free now is not known (no MemAvailable)"
    adds = budget.peak - (budget.weights + budget.drafter if shared_weights else 0)
    shared = " (the weights are shared: both map the same files)" if shared_weights else ""
    free = room.available - room.reserve
    return adds <= free, f"a second engine adds {gib(adds)}{shared}, {gib(free)} is free while the first runs"


def _managed_by_reserve(budget: Budget, mem_total_bytes: int) -> bool:
    """The engine's second road to managed memory (engine knowledge: kv.managed_reserve)."""
    rule = load_knowledge()["kv"]["managed_reserve"]
    reserve = min(max(rule["fraction"] * mem_total_bytes, rule["min_bytes"]), rule["max_bytes"])
    free_after_weights = mem_total_bytes - budget.weights - budget.drafter - budget.device_copies
    return budget.kv >= budget.managed_threshold and free_after_weights - budget.kv < reserve


def _numbers(budget: Budget, room: Room) -> str:
    parts = [f"weights {gib(budget.weights)}", f"KV {gib(budget.kv)} (ctx {budget.ctx})"]
    if budget.drafter:
        parts.append(f"drafter {gib(budget.drafter)}")
    if budget.device_copies:
        parts.append(f"device copies {gib(budget.device_copies)} (Q8 tensors the engine also keeps aligned)")
    if budget.load_margin:
        parts.append(f"{gib(budget.load_margin)} more while it loads (unified memory)")
    said = (f"{' + '.join(parts)} = {gib(budget.peak)} needed, "
            f"{gib(room.usable)} usable of {gib(room.total)} RAM ({gib(room.headroom)} kept for the OS)")
    if room.free is not None:
        returned = f" + {gib(room.returned)} the serving engine returns" if room.returned else ""
        said += (f", {gib(room.free)} free now (MemAvailable {gib(room.available)}{returned} "
                 f"- {gib(room.reserve)} kept free)")
    return said


def short_but_warned(message: str) -> str:
    """model.memory_budget: warn — the verdict said loudly, and that the run goes on anyway."""
    return (f"memory budget {message}. model.memory_budget is warn, so the run goes on: the engine may be killed "
            f"for memory, or make the host stop answering, once it touches more than fits")


# ------------------------------------------------------------------------- the engine's own plan, at each start

# b030961: "ds4: memory: KV 0.46 GiB (raw 0.36 + compressed 0.11) + buffers 0.06 GiB + resident model 80.76 GiB
# [+ …] = 81.29 GiB planned" (green on a TTY); both versions: "ds4-server: context buffers 752.00 MiB (ctx=32768, …"
_PLANNED = re.compile(r"memory: KV (?P<kv>[\d.]+) GiB .*?\+ buffers (?P<buffers>[\d.]+) GiB \+ resident model "
                      r"(?P<resident>[\d.]+) GiB.*?= (?:\x1b\[[\d;]*m)?(?P<total>[\d.]+) GiB planned")
_CONTEXT_BUFFERS = re.compile(r"context buffers (?P<mib>[\d.]+) MiB \(ctx=(?P<ctx>\d+)")
# the engine's plan above the estimate by more than this fraction and this many bytes is said as a warning: the
# budget underestimates it (a few hundred MiB of raw rows at a small ctx is no news)
PLAN_TOLERANCE = 0.05
PLAN_SLACK_BYTES = GIB // 2


@dataclass(frozen=True)
class Planned:
    """What one start of the engine said it takes (bytes, as rounded in its log)."""

    context_buffers: int | None = None  # KV + scratch, both versions
    total: int | None = None            # b030961's plan: KV + buffers + resident model (+ streaming parts)
    resident: int | None = None


def read_plan(log_text: str) -> Planned | None:
    """The last plan a start log holds (None: the engine said none, e.g. it died before)."""
    plans = list(_PLANNED.finditer(log_text))
    buffers = list(_CONTEXT_BUFFERS.finditer(log_text))
    if not plans and not buffers:
        return None
    plan = plans[-1] if plans else None
    return Planned(
        context_buffers=int(float(buffers[-1]["mib"]) * MIB) if buffers else None,
        total=int(float(plan["total"]) * GIB) if plan else None,
        resident=int(float(plan["resident"]) * GIB) if plan else None)


def against_plan(planned: Planned, budget: Budget) -> tuple[Level, str]:
    """The engine's own figures beside the estimate: ('warn', …) when it plans more than the estimate allows."""
    said, worst = [], 0.0

    def over(engine: int, estimate: int) -> float:
        excess = engine - estimate
        return excess / estimate if excess > max(PLAN_TOLERANCE * estimate, PLAN_SLACK_BYTES) else 0.0

    if planned.total is not None:
        # the plan counts the resident tensor data only where the backend maps it for the device (0 on a CPU)
        estimate = budget.kv + (budget.weights + budget.drafter if planned.resident else 0)
        said.append(f"the engine planned {gib(planned.total)} (resident model {gib(planned.resident or 0)}), "
                    f"the budget {gib(estimate)}")
        worst = max(worst, over(planned.total, estimate))
    if planned.context_buffers is not None:
        said.append(f"context buffers {gib(planned.context_buffers)}, the budget's KV {gib(budget.kv)}")
        worst = max(worst, over(planned.context_buffers, budget.kv))
    verdict = "; ".join(said) + f" (ctx {budget.ctx})"
    if worst:
        return "warn", (f"memory: {verdict}: the engine takes {worst:.0%} more than the budget counted; the "
                        f"budget's engine knowledge is behind this build")
    return "ok", f"memory: {verdict}"
