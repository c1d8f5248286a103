import pytest

from ds4_converge.models.budget import estimate, judge
from ds4_converge.units import GIB, MIB

Q2_WEIGHTS = 81 * GIB
SPARK_RAM = 128 * 10**9  # 119.2 GiB


@pytest.mark.parametrize("ctx, reference_bytes", [
    (32768, 752 * MIB),
    (100_000, 1.9 * GIB),
    (262144, 4.7 * GIB),
    (524288, 9.1 * GIB),
    (1 << 20, 18 * GIB),
])
def test_kv_estimate_matches_the_reference_table(ctx, reference_bytes):
    """The context buffer sizes the engine logs at startup (rounded); the formula is 3-4 % below them at
    256k-1M."""
    kv = estimate(Q2_WEIGHTS, ctx).kv
    assert kv == pytest.approx(reference_bytes, rel=0.04)


def test_kv_formula_exactly():
    b = estimate(Q2_WEIGHTS, 32768, drafter_bytes=7 * GIB)
    assert b.kv == 203423744 + 32768 * (13760 + 4096)
    assert round(b.kv / MIB) == 752
    assert b.total == Q2_WEIGHTS + b.kv + 7 * GIB


def test_managed_threshold_around_600k_tokens():
    assert not estimate(Q2_WEIGHTS, 600_000).kv_managed
    assert estimate(Q2_WEIGHTS, 620_000).kv_managed


def test_ok_prints_numbers():
    level, message = judge(estimate(Q2_WEIGHTS, 32768), SPARK_RAM)
    assert level == "ok"
    assert message == ("fits: weights 81.0 GiB + KV 0.7 GiB (ctx 32768) = 81.7 GiB needed, "
                       "111.2 GiB usable of 119.2 GiB RAM (8.0 GiB kept for the OS)")


def test_does_not_fit_is_refused_with_numbers():
    level, message = judge(estimate(153 * GIB, 32768), SPARK_RAM)
    assert level == "error"
    assert message.startswith("does not fit: weights 153.0 GiB + KV 0.7 GiB (ctx 32768) = 153.7 GiB needed, "
                              "111.2 GiB usable of 119.2 GiB RAM")
    assert "short by 42.5 GiB" in message


def test_drafter_counts():
    level, message = judge(estimate(Q2_WEIGHTS, 131072, drafter_bytes=int(6.5 * GIB)), SPARK_RAM)
    assert level == "ok" and "+ drafter 6.5 GiB" in message


def test_managed_kv_warns_with_numbers():
    level, message = judge(estimate(Q2_WEIGHTS, 700_000), 512 * GIB)
    assert level == "warn"
    assert "managed" in message and "KV 11.8 GiB (ctx 700000)" in message


def test_managed_by_reserve_on_a_spark():
    """Context buffers >= 8 GiB and free memory after them below 25 % of RAM: the engine goes managed too."""
    budget = estimate(Q2_WEIGHTS, 524288)
    assert not budget.kv_managed
    assert judge(budget, SPARK_RAM)[0] == "warn"
    assert judge(budget, 512 * GIB)[0] == "ok"


def test_error_wins_over_warn():
    assert judge(estimate(Q2_WEIGHTS, 2_000_000), SPARK_RAM)[0] == "error"


def test_invalid_input():
    with pytest.raises(ValueError):
        estimate(Q2_WEIGHTS, 0)


def test_a_warned_budget_says_it_goes_on_and_names_ssd_streaming_only_where_the_build_has_it():
    from ds4_converge.core.memory_fit import SSD_STREAMING, streaming_hint
    from ds4_converge.models.budget import short_but_warned

    level, message = judge(estimate(Q2_WEIGHTS, 32768), 24 * GIB)
    assert level == "error"
    warned = short_but_warned(message)
    assert warned.startswith("memory budget does not fit: weights 81.0 GiB") and "the run goes on" in warned
    assert streaming_hint({"--port", "--ctx"}) is None  # 8d57664: nothing to offer
    hint = streaming_hint({"--port", SSD_STREAMING})
    assert SSD_STREAMING in hint and "server.extra_args" in hint


def test_memory_budget_defaults_to_enforce_and_takes_warn_only():
    from pydantic import ValidationError

    from ds4_converge.spec.model import Model

    assert Model(main="/m.gguf").memory_budget == "enforce"
    assert Model(main="/m.gguf", memory_budget="warn").memory_budget == "warn"
    with pytest.raises(ValidationError):
        Model(main="/m.gguf", memory_budget="ignore")


# ---- what is free now, and what a load on unified memory takes for a while ------------------------------------

from ds4_converge.core.memory_fit import Room  # noqa: E402


def test_a_spark_whose_memavailable_is_short_is_refused_with_the_numbers():
    """The issue's GB10: 45 GB available. MemTotal alone said 'fits: 89.7 GiB needed, 113.6 GiB usable'."""
    room = Room(total=int(121.6 * GIB), available=45 * 10**9)
    level, message = judge(estimate(Q2_WEIGHTS, 32768), room)
    assert level == "error"
    assert message.startswith("does not fit in what is free now: weights 81.0 GiB + KV 0.7 GiB (ctx 32768) = "
                              "81.7 GiB needed, 113.6 GiB usable of 121.6 GiB RAM (8.0 GiB kept for the OS), "
                              "37.9 GiB free now (MemAvailable 41.9 GiB - 4.0 GiB kept free)"), message
    assert "short by 43.8 GiB" in message and "Other programs hold the rest" in message


def test_what_the_serving_engine_returns_counts_as_free():
    room = Room(total=int(121.6 * GIB), available=20 * GIB, returned=75 * GIB)
    level, message = judge(estimate(Q2_WEIGHTS, 32768), room)
    assert level == "ok", message
    assert "91.0 GiB free now (MemAvailable 20.0 GiB + 75.0 GiB the serving engine returns - 4.0 GiB kept free)" \
        in message


def test_without_memavailable_only_the_host_is_judged():
    level, message = judge(estimate(Q2_WEIGHTS, 32768), Room(total=SPARK_RAM))
    assert level == "ok" and "free now" not in message


@pytest.mark.parametrize("weights, ctx, level", [
    (int(80.76 * GIB), 524288, "fits"),   # q2 serves at 512K on a 128 GB Spark (the seeds)
    (int(80.76 * GIB), 32768, "fits"),
    (int(90.9 * GIB), 4096, "error"),     # q2-q4: OOM-killed at every ctx there (antirez/ds4#705)
    (int(90.9 * GIB), 16384, "error"),
])
def test_a_load_on_unified_memory_needs_a_margin_that_tells_q2_from_q2_q4(weights, ctx, level):
    spark = Room(total=int(119.7 * GIB))
    budget = estimate(weights, ctx, unified=True)
    assert budget.load_margin == int(0.25 * weights) and budget.peak == budget.total + budget.load_margin
    verdict, message = judge(budget, spark)
    assert (verdict if verdict == "error" else "fits") == level, message
    assert "more while it loads (unified memory)" in message
    # the same files on a discrete GPU's host: no margin, q2-q4 fits
    assert estimate(weights, ctx).load_margin == 0
    assert judge(estimate(int(90.9 * GIB), 16384), spark)[0] == "ok"


def test_what_a_stopped_process_returns_is_its_anonymous_shared_and_pinned_memory():
    from ds4_converge.core.processes import parse_returned_bytes
    status = ("Name:\tds4-server\nVmRSS:\t86000000 kB\nRssAnon:\t  1000 kB\nRssFile:\t84000000 kB\n"
              "RssShmem:\t  24 kB\nVmPin:\t84000000 kB\nVmLck:\t0 kB\n")
    assert parse_returned_bytes(status) == (1000 + 24 + 84000000) * 1024
    assert parse_returned_bytes("Name:\tkthreadd\n") == 0


def test_what_this_process_returns_is_read_from_proc():
    import os
    from ds4_converge.core.processes import returned_bytes
    assert returned_bytes([os.getpid()]) > 0
    assert returned_bytes([]) == 0


# ---- the engine's own plan at each start -----------------------------------------------------------------------

# b030961 on an H200 at ctx 8192 (reference/real-engines.md), coloured as on a TTY
H200_PLAN = ("\x1b[32mds4: memory: KV 0.46 GiB (raw 0.36 + compressed 0.11) + buffers 0.06 GiB + resident model "
             "80.76 GiB = \x1b[1;32m81.29 GiB planned\x1b[0m\n")


def test_the_plan_line_is_read_colours_and_all():
    from ds4_converge.models.budget import read_plan
    planned = read_plan("noise\n" + H200_PLAN)
    assert planned.total == int(81.29 * GIB) and planned.resident == int(80.76 * GIB)
    assert planned.context_buffers is None
    only_buffers = read_plan("ds4-server: context buffers 14.29 MiB (ctx=256, backend=cpu, prefill_chunk=0)\n")
    assert only_buffers.total is None and only_buffers.context_buffers == int(14.29 * MIB)
    assert read_plan("ds4: cannot open model\n") is None


def test_a_plan_above_the_estimate_is_said_loudly():
    from ds4_converge.models.budget import Planned, against_plan, read_plan
    level, message = against_plan(read_plan(H200_PLAN), estimate(int(80.76 * GIB), 8192))
    assert level == "ok", message
    assert message == "memory: the engine planned 81.3 GiB (resident model 80.8 GiB), the budget 81.1 GiB (ctx 8192)"
    level, message = against_plan(Planned(total=100 * GIB, resident=90 * GIB), estimate(int(80.76 * GIB), 8192))
    assert level == "warn" and "takes 23% more than the budget counted" in message, message


# ---- what b030961 keeps twice on an integrated GPU (engine knowledge: load.integrated_copies) -------------------

from ds4_converge.engine_knowledge import for_version  # noqa: E402
from ds4_converge.models.budget import integrated_copy_bytes  # noqa: E402
from ds4_converge.models.gguf import TensorInfo  # noqa: E402

Q8_0, IQ2_XXS = 8, 16


def _q8(name, k, n):
    return TensorInfo(name, Q8_0, (k, n), k * n // 32 * 34)


def test_only_the_versions_that_build_aligned_artifacts_keep_copies():
    assert for_version("b030961")["load"]["integrated_copies"]["ggml_type"] == Q8_0
    assert for_version("8d57664")["load"]["integrated_copies"] is None
    assert for_version("fork")["load"]["integrated_copies"] is None  # the fork is based on 8d57664


def test_the_copies_are_the_large_two_dimensional_q8_tensors_whose_rows_fit_the_kernel():
    rule = for_version("b030961")["load"]["integrated_copies"]
    picked = [_q8("blk.0.attn_q_b.weight", 1024, 32768), _q8("blk.0.attn_kv.weight", 4096, 512)]
    skipped = [_q8("token_embd.weight", 4096, 129280),         # gathered by rows, never copied
               _q8("blk.0.small.weight", 1024, 1024),          # under 2 MiB
               _q8("blk.0.odd_rows.weight", 1536, 4096),        # row length not a multiple of 1024
               TensorInfo("blk.0.ffn_gate_exps.weight", IQ2_XXS, (4096, 2048, 256), 4096 * 2048 * 256 // 256 * 66),
               TensorInfo("blk.0.three_d.weight", Q8_0, (4096, 2048, 2), 4096 * 2048 * 2 // 32 * 34)]
    assert integrated_copy_bytes(picked + skipped, rule) == sum(t.bytes for t in picked)
    assert integrated_copy_bytes(picked, None) == 0


def test_flash_keeps_6_gib_twice_and_b030961_on_a_spark_cannot_hold_q2_at_512k_with_the_load_margin():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "engine" / "models"))
    import make_phantom_gguf as phantom
    from ds4_converge.models.gguf import _tensor_bytes

    tensors = [TensorInfo(t.name, int(t.type), tuple(t.dims), _tensor_bytes(int(t.type), t.dims))
               for t in phantom.main_tensors()]
    copies = integrated_copy_bytes(tensors, for_version("b030961")["load"]["integrated_copies"])
    assert round(copies / GIB, 2) == 6.15
    spark, q2 = Room(total=int(119.7 * GIB)), sum(t.bytes for t in tensors)
    with_copies = estimate(q2, 524288, unified=True, device_copies=copies)
    assert with_copies.total == estimate(q2, 524288).total + copies
    verdict, message = judge(with_copies, spark)
    assert verdict == "error" and "device copies 6.1 GiB" in message, message
    assert "DS4_CUDA_Q8_NO_ALIGNED=1" in message  # the engine's own switch, named where it helps
    assert judge(estimate(q2, 524288, unified=True), spark)[0] != "error"  # the fork makes none: it fits
    assert judge(estimate(q2, 131072, unified=True, device_copies=copies), spark)[0] != "error"


from ds4_converge.models.budget import beside  # noqa: E402
from ds4_converge.units import gib  # noqa: E402


def test_a_second_engine_beside_the_first_needs_its_whole_peak_free_unless_both_map_the_same_weights():
    """A front door's overlap switch: the new engine loads while the old one still holds its memory."""
    q2 = estimate(Q2_WEIGHTS, 32768)
    big_host = Room(total=256 * GIB, available=150 * GIB, returned=q2.total)
    assert beside(q2, big_host, shared_weights=False)[0]
    # a Spark: the new engine alone fits once the old one is gone, two of them never do
    spark = Room(total=int(119.7 * GIB), available=35 * GIB, returned=q2.total)
    fits, why = beside(q2, spark, shared_weights=False)
    assert judge(q2, spark)[0] != "error" and not fits
    assert f"adds {gib(q2.peak)}" in why and f"{gib(35 * GIB - 4 * GIB)} is free" in why
    # a CPU build reads the weights from the file's page cache, which both share: only KV and buffers add up
    fits, why = beside(q2, spark, shared_weights=True)
    assert fits and f"adds {gib(q2.kv)}" in why and "shared" in why


def test_no_second_engine_when_what_is_free_is_unknown():
    q2 = estimate(Q2_WEIGHTS, 32768)
    fits, why = beside(q2, Room(total=256 * GIB), shared_weights=True)
    assert not fits and "not known" in why


def test_a_model_larger_than_memory_served_anyway_from_its_mapping_takes_a_second_engine_for_its_kv_only():
    """model.memory_budget: warn, a CPU build: the serving engine holds the mapping already; a second one of the
    same file adds its KV and buffers, and is judged by them. Copied weights never share."""
    q2 = estimate(Q2_WEIGHTS, 1024)
    small = Room(total=23 * GIB, available=22 * GIB)
    assert judge(q2, small)[0] == "error"
    assert beside(q2, small, shared_weights=True)[0]
    assert not beside(q2, small, shared_weights=False)[0]
