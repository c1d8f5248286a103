"""After the old engine stops: the switch waits (bounded) until MemAvailable holds what the new engine needs."""
import pytest

from ds4_converge.core.plan import RoleFailed
from ds4_converge.service.memory_back import available_now, wait_until_back
from ds4_converge.units import GIB


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_memory_that_comes_back_in_time_is_waited_for_and_said():
    clock, said = Clock(), []
    readings = iter([10 * GIB, 20 * GIB, 50 * GIB, 90 * GIB])
    got = wait_until_back(85 * GIB, bound_s=10, available=lambda: next(readings), clock=clock, sleep=clock.sleep,
                          say=said.append)
    assert got == 90 * GIB and clock.now == 1.5
    assert said == ["waiting up to 10s for the old engine's memory to come back: 10.0 GiB available, "
                    "85.0 GiB needed", "the old engine's memory is back after 1.5s: 90.0 GiB available"]


def test_memory_that_does_not_come_back_fails_the_switch_with_the_numbers():
    clock = Clock()
    with pytest.raises(RoleFailed) as failed:
        wait_until_back(85 * GIB, bound_s=3, available=lambda: 40 * GIB, clock=clock, sleep=clock.sleep,
                        say=lambda line: None)
    assert clock.now == pytest.approx(3.0)
    assert str(failed.value).startswith("the old engine's memory did not come back: 40.0 GiB available after 3s, "
                                        "the new engine needs 85.0 GiB")


def test_enough_at_once_or_unknown_means_no_wait():
    never = lambda seconds: pytest.fail("waited")  # noqa: E731
    assert wait_until_back(1 * GIB, available=lambda: 2 * GIB, sleep=never) == 2 * GIB
    assert wait_until_back(1 * GIB, available=lambda: None, sleep=never) is None


def test_this_hosts_meminfo_is_read(tmp_path):
    assert available_now() > 0
    assert available_now(tmp_path / "none") is None
