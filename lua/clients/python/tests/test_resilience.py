"""When Redis fails or is slow, both Python limiters do what the Rust
client does: a timeout that bounds connecting too, failure policies on
outages only, the circuit breaker, alerts, stats, the refusal cache; and a
quota mismatch on a shared key is loud. Every case runs against the
synchronous and the asyncio limiter (the ``flavor`` fixture), on real
redis-servers (paused with SIGSTOP, or killed)."""

import time

import pytest

from ratelab_client import (
    Alert,
    BackendError,
    CircuitOpen,
    DataError,
    Expired,
    FailurePolicy,
    MAX_TTL_SLACK_MS,
    ReceiptSpent,
    Quota,
    QuotaMismatch,
    RedisClock,
    Timeout,
    Unavailable,
)
from ratelab_client.resilience import Breaker

from conftest import manual_breaker_clock

QUOTA = Quota.per_second(5, burst=10)
T0 = 1_700_000_000_000_000


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def down_port(own_server):
    """A port where a redis-server was, and nothing listens any more."""
    port = own_server.port
    own_server.stop()
    return port


class DownServer:
    """What ``Flavors.limiter`` needs of a server, for one that is gone."""

    def __init__(self, port: int) -> None:
        self.port = port

    def client(self):
        import redis

        return redis.Redis(port=self.port, socket_timeout=5)

    def aclient(self):
        import redis.asyncio

        return redis.asyncio.Redis(port=self.port, socket_timeout=5)


def alerts_into(sink):
    return lambda alert: sink.append(alert)


def test_a_paused_redis_times_out_at_the_timeout(flavor, own_server):
    # The connection is made first: the pause then holds the script call.
    # The breaker would open after five outages: these five must all wait.
    # Ten an hour: nothing comes back while the test runs. Each call is
    # answered while the server is still paused (it is resumed afterwards):
    # the limiter's timeout ended it, never before the timeout.
    limiter = flavor.limiter(own_server, "gcra", Quota.per_hour(10), prefix="paused",
                             breaker=(10, 0.5), timeout=0.1)
    # Its connection set up, the script loaded and the clock sampled (tried
    # again on a loaded machine); the charge before the pause is a patient
    # limiter's.
    for _ in range(20):
        try:
            limiter.peek("k", 0)
            break
        except (Timeout, Expired):
            continue
    patient = flavor.limiter(own_server, "gcra", Quota.per_hour(10), prefix="paused")
    assert patient.check("k").remaining == 9
    before = limiter.stats()
    own_server.pause()
    took = []
    try:
        for _ in range(5):
            started = time.monotonic()
            with pytest.raises(Timeout, match="did not answer within 100 ms"):
                limiter.check("k")
            took.append(time.monotonic() - started)
    finally:
        own_server.resume()
    print(f"\npaused calls answered after, s: {took}")
    assert min(took) >= 0.1 - 0.005, took
    stats = limiter.stats()
    assert (stats.answered - before.answered, stats.timeouts - before.timeouts, stats.errors) == (0, 5, 0)
    # It was not charged: the script found its deadline passed.
    assert patient.peek("k", 0).remaining == 9


def test_connecting_to_a_paused_redis_times_out_too(flavor, own_server):
    # The kernel accepts the connection; the server never answers its
    # handshake: the connect timeout bounds setting it up (the server is
    # resumed only once the call has failed).
    own_server.pause()
    try:
        limiter = flavor.limiter(own_server, "gcra", QUOTA, prefix="paused", connect_timeout=0.2)
        with pytest.raises(Timeout, match="could not connect to the rate limiter backend within 200 ms"):
            limiter.check("k")
    finally:
        own_server.resume()
    assert limiter.check("k").allowed


def test_redis_down_fails_and_the_policies_answer(flavor, down_port):
    # Connections are refused: with a connect timeout a loaded machine cannot
    # reach first, that is the outage every call sees.
    server = DownServer(down_port)
    seen = []
    error = flavor.limiter(server, "gcra", QUOTA, on_alert=alerts_into(seen), connect_timeout=30)
    with pytest.raises(BackendError):
        error.check("k")

    allow = flavor.limiter(server, "gcra", QUOTA, on_failure="allow", on_alert=alerts_into(seen), connect_timeout=30)
    d = allow.check("k", 3)
    assert (d.allowed, d.limit, d.remaining, d.retry_after_micros, d.degraded) == (True, 10, 7, 0, True)
    assert d.reset_after_micros == allow.algorithm.max_wait_us
    assert allow.peek("k", 0).reset_after_micros == 0
    assert allow.peek("k", 4).remaining == 6

    deny = flavor.limiter(server, "gcra", QUOTA, on_failure=FailurePolicy.DENY, on_alert=alerts_into(seen),
                          timeout=0.1, connect_timeout=30)
    d = deny.check("k")
    # Retry after the timeout: the next check may find Redis back by then.
    assert (d.allowed, d.remaining, d.retry_after_micros, d.reset_after_micros, d.degraded) == (
        False, 0, 100_000, 100_000, True)

    assert [(a.algorithm, a.policy) for a in seen] == [
        ("gcra", FailurePolicy.ERROR), ("gcra", FailurePolicy.ALLOW), ("gcra", FailurePolicy.ALLOW),
        ("gcra", FailurePolicy.ALLOW), ("gcra", FailurePolicy.DENY)]
    assert all(isinstance(a.error, BackendError) and a.key == b"k" for a in seen)
    # A decision the failure policy made has no receipt: nothing was charged
    # on Redis, so there is nothing to settle. Resets have no policy.
    assert d.receipt is None
    with pytest.raises(TypeError, match="the failure policy made"):
        allow.refund(d.receipt)
    with pytest.raises(BackendError):
        allow.reset("k")


def test_a_settlement_during_an_outage_raises_and_the_admission_stays_charged(flavor, own_server):
    limiter = flavor.limiter(own_server, "gcra", QUOTA, prefix="outage", on_failure="allow", breaker=(0, 0),
                             clock=Clock(), timeout=0.5)
    receipt = limiter.check("k", 4).receipt
    own_server.pause()
    try:
        # Settlements have no failure policy: the error, whatever on_failure says.
        with pytest.raises(Timeout):
            limiter.refund(receipt)
    finally:
        own_server.resume()
    assert receipt.spent
    with pytest.raises(ReceiptSpent):
        limiter.refund(receipt)
    # The timed-out refund was never run (its deadline passed): still charged.
    assert limiter.peek("k", 0).remaining == 6


def test_the_breaker_opens_after_five_outages_then_one_probe_closes_it(flavor, own_server):
    # Redis is killed (every call an outage at once) and started again; the
    # breaker's cool-down ends when the test moves its clock.
    seen = []
    limiter = flavor.limiter(own_server, "token-bucket", QUOTA, prefix="breaker",
                             on_failure="deny", breaker=(5, 0.3), on_alert=alerts_into(seen), connect_timeout=30)
    clock = manual_breaker_clock(limiter)
    assert limiter.check("k").allowed
    own_server.stop()
    for _ in range(5):
        assert limiter.check("k").degraded
    stats = limiter.stats()
    assert (stats.errors, stats.breaker_open, stats.breaker_opened) == (5, True, 1)
    # Open: answered without Redis, retry when the probe may go.
    for _ in range(200):
        d = limiter.check("k")
    assert d.degraded and not d.allowed and d.retry_after_micros == 300_000
    assert isinstance(seen[-1].error, CircuitOpen)
    assert limiter.stats().short_circuited == 200
    own_server.restart()
    clock.now += 0.29
    assert limiter.check("k").degraded
    clock.now += 0.01
    # The probe finds Redis back: closed again.
    d = limiter.check("k")
    assert not d.degraded and d.allowed
    stats = limiter.stats()
    assert (stats.breaker_open, stats.cool_down_left, stats.answered) == (False, 0.0, 2)


def test_a_failed_probe_opens_it_again():
    now = [0.0]
    breaker = Breaker(3, 0.5, 0.1, clock=lambda: now[0])
    for _ in range(3):
        assert breaker.permit() == "call"
        breaker.failure(False)
    assert breaker.permit() == pytest.approx(0.5)
    now[0] = 0.6
    assert breaker.permit() == "probe"
    # One probe at a time, until it times out.
    assert breaker.permit() == pytest.approx(0.1)
    breaker.failure(True)
    assert breaker.state() == (True, pytest.approx(0.5))
    now[0] = 1.2
    assert breaker.permit() == "probe"
    now[0] = 1.35  # the probe was lost (its caller gave up): another may go
    assert breaker.permit() == "probe"
    breaker.success()
    assert breaker.permit() == "call" and breaker.opened == 2
    never = Breaker(0, 1.0, 1.0)
    for _ in range(10):
        never.failure(False)
    assert never.permit() == "call"


def test_data_errors_are_raised_whatever_the_policy(flavor, server, client, prefix):
    seen = []
    limiter = flavor.limiter(server, "gcra", QUOTA, prefix=prefix, on_failure="allow",
                             on_alert=alerts_into(seen), breaker=(1, 10.0))
    client.lpush(limiter.redis_key("list"), "x")
    for _ in range(3):
        with pytest.raises(DataError, match="WRONGTYPE|a list, not a string"):
            limiter.check("list")
    stats = limiter.stats()
    # Redis answered: the breaker (threshold 1) stays closed.
    assert (stats.data_errors, stats.breaker_open, stats.errors) == (3, False, 0)
    assert [a.policy for a in seen] == [FailurePolicy.ERROR] * 3
    assert limiter.check("fine").allowed
    # Unless asked to apply the policy to them too.
    lenient = flavor.limiter(server, "gcra", QUOTA, prefix=prefix, on_failure="allow",
                             policy_on_data_errors=True)
    assert lenient.check("list").degraded


def test_a_call_that_reaches_redis_after_its_deadline_is_an_outage(flavor, server, prefix):
    # A clock sample that puts Redis's clock an hour behind: the deadline
    # sent is an hour early (the timeout, a minute, leaves a loaded machine
    # all the time it needs for everything else).
    skewed = RedisClock(max_age_us=3_600_000_000)
    limiter = flavor.limiter(server, "gcra", QUOTA, prefix=prefix, redis_clock=skewed,
                             on_failure="allow", timeout=60)
    limiter.check("warm", 0)
    skewed._state = (skewed.offset_us - 3_600_000_000, 0, skewed.monotonic())
    d = limiter.check("k")
    assert d.degraded and d.allowed
    assert limiter.stats().errors == 1
    assert issubclass(Expired, Unavailable)


def test_stats_count_calls_reloads_and_clock_samples(flavor, server, client, prefix):
    limiter = flavor.limiter(server, "token-bucket", QUOTA, prefix=prefix)
    client.script_flush()
    for _ in range(3):
        limiter.check("k")
    client.script_flush()
    limiter.peek("k")
    stats = limiter.stats()
    # A call resent after NOSCRIPT is one script call (as in Rust).
    assert (stats.answered, stats.script_calls, stats.reloads) == (4, 4, 2)
    # One TIME sample serves every call while it is fresh.
    assert stats.clock_samples == 1
    assert stats.timeouts == stats.errors == stats.data_errors == 0


def test_refusals_are_cached_until_their_retry_after(flavor, server, prefix):
    clock = Clock()
    limiter = flavor.limiter(server, "gcra", QUOTA, prefix=prefix, clock=clock, cache_refusals=100)
    for _ in range(10):
        last = limiter.check("k")
        assert last.allowed
    refused = limiter.check("k")
    assert not refused.allowed and refused.retry_after_micros == 200_000
    clock.now += 50_000
    cached = limiter.check("k")
    assert (cached.allowed, cached.retry_after_micros, cached.remaining) == (False, 150_000, 0)
    assert limiter.stats().cached_refusals == 1
    assert limiter.stats().script_calls == 11
    # Another cost goes to Redis; a refund forgets the key's refusal.
    assert not limiter.check("k", 2).allowed
    assert limiter.refund(last.receipt).remaining == 1
    assert limiter.check("k").allowed
    clock.now += 150_000
    assert limiter.check("k").allowed


def test_a_quota_mismatch_on_a_shared_key_is_loud(flavor, server, client, prefix):
    seen = []
    ours = flavor.limiter(server, "gcra", QUOTA, prefix=prefix, quota_check_every=1,
                          on_alert=alerts_into(seen))
    same = flavor.limiter(server, "gcra", QUOTA, prefix=prefix, quota_check_every=1,
                          on_alert=alerts_into(seen))
    other = flavor.limiter(server, "gcra", Quota.per_second(50), prefix=prefix, quota_check_every=1,
                           on_alert=alerts_into(seen))
    ours.check("alice")
    same.check("alice")
    assert seen == []
    other.check("alice")
    [alert] = seen
    assert isinstance(alert, Alert) and alert.policy is None and alert.key == b"alice"
    assert isinstance(alert.error, QuotaMismatch)
    assert (alert.error.ours, alert.error.theirs) == ("v3:gcra:20000,1000000,50", "v3:gcra:200000,2000000,10")
    assert "different Redis keys" in str(alert.error)
    ours.check("alice")
    assert [a.error.theirs for a in seen[1:]] == ["v3:gcra:20000,1000000,50"]
    assert (ours.stats().quota_mismatches, other.stats().quota_mismatches) == (1, 1)
    # The registry key sits in the user key's slot, and expires.
    registry = ours._core.registry_key("alice") if hasattr(ours, "_core") else ours._limiter._core.registry_key("alice")
    assert registry == f"{prefix}:{{alice}}:gcra:quota".encode()
    assert 0 < client.pttl(registry) <= 60_000


def test_the_quota_is_recorded_on_a_sample_of_checks(flavor, server, client, prefix):
    limiter = flavor.limiter(server, "gcra", QUOTA, prefix=prefix, quota_check_every=3)
    core = limiter._core if hasattr(limiter, "_core") else limiter._limiter._core
    recorded = []
    for _ in range(7):
        client.delete(core.registry_key("k"))
        limiter.check("k")
        recorded.append(client.exists(core.registry_key("k")))
    assert recorded == [1, 0, 0, 1, 0, 0, 1]
    # Peeks never record; None never does.
    never = flavor.limiter(server, "gcra", QUOTA, prefix=prefix + "n", quota_check_every=None)
    never.check("k")
    limiter.peek("z")
    assert client.exists(never._core.registry_key("k") if hasattr(never, "_core")
                         else never._limiter._core.registry_key("k")) == 0
    assert client.exists(core.registry_key("z")) == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"timeout": -1}, "timeout must be a positive number"),
        ({"timeout": "1"}, "timeout must be a positive number"),
        ({"on_failure": "maybe"}, "'maybe' is not a valid FailurePolicy"),
        ({"breaker": (-1, 1.0)}, "breaker threshold"),
        ({"cache_refusals": 0}, "cache_refusals"),
        ({"quota_check_every": 0}, "quota_check_every"),
        ({"ttl_slack_ms": -5}, "ttl_slack_ms"),
        # Past 2^52 µs the scripts answer "invalid arguments": refused here.
        ({"ttl_slack_ms": MAX_TTL_SLACK_MS + 1}, r"ttl_slack_ms must be at most 4503599627371 \(2\^52"),
    ],
)
def test_bad_options_are_clear_errors(flavor, server, kwargs, message):
    with pytest.raises(ValueError, match=message):
        flavor.limiter(server, "gcra", QUOTA, **kwargs)


def test_bad_calls_are_clear_errors(flavor, server):
    limiter = flavor.limiter(server, "gcra", QUOTA, prefix="badcalls")
    with pytest.raises(TypeError, match="a key is str or bytes"):
        limiter.check(42)
    with pytest.raises(ValueError, match="cost must be an integer"):
        limiter.check("k", -1)
    with pytest.raises(ValueError, match="cost must be an integer"):
        limiter.check("k", 1.5)
    receipt = limiter.check("k").receipt
    with pytest.raises(ValueError, match="actual must be an integer"):
        limiter.settle(receipt, -3)
    with pytest.raises(ValueError, match="actual must be an integer"):
        limiter.settle(receipt, "1")
    with pytest.raises(TypeError, match="take a ratelab_client.Receipt, not dict"):
        limiter.settle({"cost": 1}, 0)
    with pytest.raises(ValueError, match="unknown algorithm"):
        flavor.limiter(server, "leaky", QUOTA)
