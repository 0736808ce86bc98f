"""The offset to Redis's clock and the deadline computed from it, on
numbers (the pause tests in test_deadline.py run it against a real server)."""

import pytest

from ratelab_client.clock import RedisClock, Sample, parse_time


def test_the_lower_bound_of_the_offset_is_kept():
    now = [0]
    clock = RedisClock(monotonic=lambda: now[0])
    assert not clock.fresh()
    # Sent at 1000, answered at 1400: Redis read 5000 somewhere in between,
    # so redis - local is in [3600, 4000]; 3600 is kept.
    clock.record([Sample(1_000, 5_000, 1_400)])
    assert clock.offset_us == 3_600
    now[0] = 1_400
    # Give up at 101 400 local: on Redis's clock no later than 105 000,
    # less half the round trip (200).
    assert clock.deadline(101_400) == 101_400 + 3_600 - 200


def test_the_bound_widens_with_age_and_the_sample_expires():
    now = [0]
    clock = RedisClock(drift_ppm=500, max_age_us=5_000_000, monotonic=lambda: now[0])
    clock.record([Sample(0, 10_000, 0)])
    now[0] = 4_000_000
    assert clock.fresh()
    # 4 s at 500 ppm: 2 ms earlier.
    assert clock.deadline(4_100_000) == 4_100_000 + 10_000 - 2_000
    now[0] = 5_000_001
    assert not clock.fresh()
    clock.invalidate()
    with pytest.raises(RuntimeError):
        clock.deadline(1)


def test_a_cluster_keeps_the_lowest_offset_and_the_longest_round_trip():
    clock = RedisClock(monotonic=lambda: 1_000)
    clock.record([Sample(0, 9_000, 100), Sample(100, 7_000, 400), Sample(400, 20_000, 1_000)])
    assert clock.offset_us == 6_600
    assert clock.deadline(2_000) == 2_000 + 6_600 - 300


@pytest.mark.parametrize("reply", [[b"1", b"2", b"3"], None, [b"-1", b"0"], [b"1", b"1000000"], [b"x", b"1"]])
def test_a_time_reply_is_never_trusted(reply):
    with pytest.raises(ValueError):
        parse_time(reply)
    assert parse_time([b"1700000000", b"250"]) == 1_700_000_000_000_250
