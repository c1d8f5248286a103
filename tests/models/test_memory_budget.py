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
    from ds4_converge.models.budget import SSD_STREAMING, short_but_warned, streaming_hint

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
