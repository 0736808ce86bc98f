"""A new limiter's first calls, all at once, on a Redis slow to accept
connections: setting up a connection is bounded by ``connect_timeout``
(1 s by default), and each call's own timeout starts once its connection
is ready, so a healthy but busy Redis decides them, instead of every one
timing out (or, behind the middleware, passing unchecked).

The proxy holds every new connection until each call has waited longer
than its timeout (counted from the first connection the proxy accepted,
which no call started after): what is asserted is what was decided, never
how long it took."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ratelab_client import Quota

QUOTA = Quota.per_hour(10)
T0 = 1_700_000_000_000_000
#: Generous: a loaded machine must still answer in time once connected.
TIMEOUT = 2.0


def release_after_timeout(proxy) -> None:
    """Once a connection is accepted, waits out the timeout of the call
    that opened it (which started before), then lets every connection
    through."""
    proxy.wait_accepted(1)
    time.sleep(max(0.0, proxy.accepted[0] + TIMEOUT + 0.05 - time.monotonic()))
    proxy.release_connections()


def burst(flavor, limiter, n: int) -> list:
    """``n`` checks of one key at once, each answered or raised."""
    if flavor.loop is not None:
        inner = limiter._limiter

        async def together() -> list:
            return await asyncio.gather(*(inner.check("k") for _ in range(n)), return_exceptions=True)

        return flavor.loop.run_until_complete(together())
    results: list = [None] * n

    def run(i: int) -> None:
        try:
            results[i] = limiter.check("k")
        except Exception as e:  # noqa: BLE001 - recorded, the test asserts on it
            results[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_the_first_calls_are_decided_on_a_redis_slow_to_accept(flavor, proxy):
    limiter = flavor.limiter(proxy, "gcra", QUOTA, prefix="cold", clock=lambda: T0, timeout=TIMEOUT,
                             connect_timeout=30.0)
    proxy.hold_connections()
    releaser = threading.Thread(target=release_after_timeout, args=(proxy,))
    releaser.start()
    results = burst(flavor, limiter, 20)
    releaser.join()
    errors = [r for r in results if isinstance(r, BaseException)]
    assert errors == [], errors
    # Redis decided every one: the burst of 10, then refusals.
    assert sorted(d.allowed for d in results) == [False] * 10 + [True] * 10
    assert not any(d.degraded for d in results)
    stats = limiter.stats()
    assert (stats.answered, stats.timeouts, stats.errors) == (20, 0, 0), stats


def test_setting_up_a_connection_is_bounded_by_the_connect_timeout(flavor, proxy):
    # Held for good: the set-up fails at the connect timeout, as an outage,
    # with the error that says so; the failure policy answers.
    proxy.hold_connections()
    seen = []
    limiter = flavor.limiter(proxy, "gcra", QUOTA, prefix="cold", on_failure="deny", connect_timeout=0.2,
                             on_alert=seen.append)
    d = limiter.check("k")
    assert (d.allowed, d.degraded) == (False, True)
    assert [str(a.error) for a in seen] == ["could not connect to the rate limiter backend within 200 ms"]
    assert limiter.stats().timeouts == 1


@pytest.mark.parametrize("value", [0, -1, "1", 3601])
def test_a_bad_connect_timeout_is_a_clear_error(flavor, server, value):
    with pytest.raises(ValueError, match="connect_timeout"):
        flavor.limiter(server, "gcra", QUOTA, connect_timeout=value)


def test_warming_tries_nothing_while_the_breaker_is_open(proxy):
    # The middleware warms its limiters before every request: an open
    # breaker must still answer at once, with no connection attempted.
    from ratelab_client import AsyncLimiter, CircuitOpen

    async def scenario() -> None:
        limiter = AsyncLimiter(proxy.aclient(), "gcra", QUOTA, connect_timeout=0.2, breaker=(1, 3600))
        proxy.hold_connections()
        assert await limiter.warm() is False  # held: not set up within 200 ms
        assert len(proxy.accepted) == 1
        with pytest.raises(Exception, match="could not connect"):
            await limiter.check("k")  # the breaker opens
        accepted = len(proxy.accepted)
        assert await limiter.warm() is False
        with pytest.raises(CircuitOpen):
            await limiter.check("k")
        assert len(proxy.accepted) == accepted
        proxy.release_connections()
        await limiter.aclose()

    asyncio.run(scenario())
