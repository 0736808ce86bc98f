"""The Python clients against a real Redis, as one table of cases that the
synchronous :class:`Limiter` and the asyncio :class:`AsyncLimiter` both run
(the ``flavor`` fixture): the reference table on the caller's clock, every
algorithm's first answers and TTLs, EVALSHA after a script flush, every
error reply, peeks, refunds and resets."""

import pytest
import redis

from ratelab_client import ALGORITHMS, CostTooHigh, DataError, Expired, Quota, RedisClock

QUOTA = Quota.per_second(5, burst=10)
T0 = 1_700_000_000_000_000  # µs: an arbitrary instant on the caller's clock


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def make(flavor, server):
    """A limiter of the case's flavor on the session's server."""
    return lambda *args, **kwargs: flavor.limiter(server, *args, **kwargs)


@pytest.mark.parametrize("name", ["token-bucket", "gcra", "leaky-meter", "leaky-queue"])
def test_the_reference_table(make, client, prefix, name):
    # Capacity 10, 5 per second: a burst of 20 admits 10; one second later,
    # 10 requests admit 5; every refusal says retry in 1 s.
    clock = Clock()
    limiter = make(name, QUOTA, prefix=prefix, clock=clock)
    first = [limiter.check("client") for _ in range(20)]
    clock.now += 1_000_000
    second = [limiter.check("client") for _ in range(10)]
    assert sum(d.allowed for d in first) == 10
    assert sum(d.allowed for d in second) == 5
    assert {d.retry_after_secs for d in first + second if not d.allowed} == {1}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_fresh_key_on_the_redis_clock(make, client, prefix, name):
    limiter = make(name, QUOTA, prefix=prefix)
    peek = limiter.check("fresh", 0)
    assert peek.allowed and peek.remaining == 10
    assert client.exists(limiter.redis_key("fresh")) == 0, "a peek writes nothing"
    d = limiter.check("fresh", 3)
    assert (d.allowed, d.limit, d.remaining, d.retry_after_micros) == (True, 10, 7, 0)
    assert 0 < d.reset_after_micros <= limiter.algorithm.max_wait_us
    # The key expires when it is full again (rounded up to the ms, no slack).
    ttl = client.pttl(limiter.redis_key("fresh"))
    assert 0 < ttl <= -(-d.reset_after_micros // 1000)


def test_a_caller_clock_keeps_keys_a_slack_longer(make, client, prefix):
    limiter = make("gcra", QUOTA, prefix=prefix, clock=Clock())
    d = limiter.check("k", 1)
    assert d.reset_after_micros == 200_000
    ttl = client.pttl(limiter.redis_key("k"))
    assert 60_000 < ttl <= 60_200


def test_a_flushed_script_is_loaded_again(make, client, prefix):
    limiter = make("token-bucket", QUOTA, prefix=prefix, clock=Clock())
    assert limiter.check("k").remaining == 9
    client.script_flush()
    assert client.script_exists(limiter.sha) == [False]
    assert limiter.check("k").remaining == 8
    assert client.script_exists(limiter.sha) == [True]


def test_a_cost_over_the_capacity_is_an_error_not_a_refusal(make, client, prefix):
    limiter = make("gcra", QUOTA, prefix=prefix)
    with pytest.raises(CostTooHigh):
        limiter.check("k", 11)
    assert limiter.check("k", 10).allowed


def test_corrupt_state_and_wrong_types_are_data_errors(make, client, prefix):
    limiter = make("gcra", QUOTA, prefix=prefix, clock=Clock())
    client.set(limiter.redis_key("text"), "not a timestamp")
    with pytest.raises(DataError, match=r"^ratelab gcra: corrupt state at .*not a timestamp"):
        limiter.check("text")
    client.lpush(limiter.redis_key("list"), "x")
    with pytest.raises(DataError, match="a list, not a string"):
        limiter.check("list")


def test_another_protocol_version_gets_a_clear_error(make, client, prefix):
    limiter = make("token-bucket", QUOTA, prefix=prefix, clock=Clock())
    client.script_load(limiter.source)
    args = limiter.arguments(1, T0)
    args[0] = 999
    with pytest.raises(redis.exceptions.ResponseError, match=r"^ratelab: protocol version .*\b1\b.* expected, got 999$"):
        client.evalsha(limiter.sha, 1, limiter.redis_key("k"), *args)
    # A caller of the layout before the version (now first) is refused too.
    with pytest.raises(redis.exceptions.ResponseError, match=f"^ratelab: protocol version .* expected, got {T0}$"):
        client.evalsha(limiter.sha, 1, limiter.redis_key("k"), *args[1:])
    assert client.exists(limiter.redis_key("k")) == 0


def test_a_call_past_its_deadline_charges_nothing(make, client, prefix):
    # A clock sample that puts Redis's clock an hour behind: the deadline
    # sent is an hour early, and the script starts after it.
    skewed = RedisClock(max_age_us=3_600_000_000)
    limiter = make("token-bucket", QUOTA, prefix=prefix, redis_clock=skewed, breaker=(0, 0))
    limiter.check("warm", 0)  # connects, and samples the clock
    offset = skewed.offset_us
    skewed._state = (offset - 3_600_000_000, 0, skewed.monotonic())
    with pytest.raises(Expired, match="^ratelab expired: .*nothing was charged"):
        limiter.check("k", 5)
    assert client.exists(limiter.redis_key("k")) == 0
    skewed.invalidate()
    assert limiter.check("k", 5).remaining == 5


@pytest.mark.parametrize(
    "reply",
    [
        [1, 10, 9, 0, 200_000],
        [1, 11, 9, 0, 0, 0],
        [1, 10, 11, 0, 0, 0],
        [2, 10, 9, 0, 0, 0],
        [1, 10, 9, 5, 0, 0],
        [0, 10, 9, 5, 0, 5],
        [0, 10, 9, 10**12, 0, 0],
        [1, 10, -1, 0, 0, 0],
        [b"1", 10, 9, 0, 0, 0],
        None,
    ],
)
def test_replies_are_never_trusted(make, client, reply):
    limiter = make("gcra", QUOTA)
    with pytest.raises(DataError, match="^ratelab gcra: invalid reply"):
        limiter.decision(reply)


def test_arguments_are_the_protocol_layout(make):
    limiter = make("gcra", QUOTA, clock=Clock(), timeout=None)
    assert limiter.arguments(1, T0) == [3, T0, 1, 60_000, "", "check", 200_000, 2_000_000, 10]
    assert limiter.arguments(3, T0, "refund", 1_500)[5] == "refund:1500"
    with pytest.raises(ValueError):
        limiter.arguments(3, T0, "refund", -1)
    with pytest.raises(ValueError):
        limiter.arguments(1, T0, "take")
    limiter = make("gcra", QUOTA)
    version, now, cost, slack, deadline, op, *params = limiter.arguments(2, deadline=1_234)
    assert (version, now, cost, slack, deadline, op, params) == (
        3, "", 2, 0, 1_234, "check", [200_000, 2_000_000, 10])


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_peek_decides_as_a_check_and_writes_nothing(make, client, prefix, name):
    clock = Clock()
    limiter = make(name, QUOTA, prefix=prefix, clock=clock)
    for step, cost in enumerate([4, 3, 2, 3, 1, 5, 2]):
        clock.now = T0 + step * 150_000
        before = client.dump(limiter.redis_key("k"))
        peeked = limiter.peek("k", cost)
        assert client.dump(limiter.redis_key("k")) == before, "a peek wrote"
        assert limiter.check("k", cost) == peeked


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_refund_gives_back_what_was_taken(make, client, prefix, name):
    clock = Clock()
    limiter = make(name, QUOTA, prefix=prefix, clock=clock)
    taken = limiter.check("k", 7)
    assert taken.remaining == 3
    # At the instant of the check: the admission weighs its whole reset.
    after = limiter.refund("k", 4, taken.reset_after_micros)
    assert (after.allowed, after.remaining) == (True, 7)
    assert limiter.peek("k", 0) == after
    # Never above the capacity: a key full again is gone.
    assert limiter.refund("k", 10, taken.reset_after_micros).remaining == 10
    assert client.exists(limiter.redis_key("k")) == 0
    assert limiter.check("k", 10).allowed
    limiter.reset("k")
    assert client.exists(limiter.redis_key("k")) == 0


def test_a_version_1_call_is_still_answered_as_a_check(make, client, prefix):
    limiter = make("gcra", QUOTA, prefix=prefix)
    client.script_load(limiter.source)
    # Version 1: no operation, the parameters from ARGV[6].
    reply = client.evalsha(limiter.sha, 1, limiter.redis_key("k"), 1, T0, 1, 0, "", 200_000, 2_000_000, 10)
    assert reply == [1, 10, 9, 0, 200_000, 0]
