"""After Redis restarts (killed, then started again, empty, on the same
port), both limiters decide with Redis at their next call, whatever their
connections held: the synchronous limiter's idle connections and the
asyncio limiter's shared one are found closed before any command is sent
on them, and a breaker's probe always sets up a new connection. The
cool-downs run on a clock the test advances; nothing waits for time to
pass. (The ASGI middleware under ``failure="closed"``: test_asgi.py.)"""

from __future__ import annotations

import asyncio
import threading

import pytest

from ratelab_client import BackendError, CircuitOpen, Quota

# The timeout is generous: what is tested is the connections a limiter
# holds after a restart, not how fast a loaded machine answers.

from conftest import core_of, manual_breaker_clock

QUOTA = Quota.per_hour(100)
T0 = 1_700_000_000_000_000


def serve_concurrently(flavor, limiter, n: int) -> list:
    """``n`` checks at once, on ``n`` keys: as many connections as the
    limiter opens for them (threads; or tasks on the asyncio one)."""
    keys = [f"busy{i}" for i in range(n)]
    if flavor.loop is not None:
        inner = limiter._limiter

        async def together() -> list:
            return await asyncio.gather(*(inner.check(k) for k in keys))

        return flavor.loop.run_until_complete(together())
    barrier = threading.Barrier(n)
    results: dict = {}

    def run(key: str) -> None:
        barrier.wait()
        results[key] = limiter.check(key)

    threads = [threading.Thread(target=run, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[k] for k in keys]


def test_the_first_call_after_a_restart_decides_with_redis(flavor, own_server):
    limiter = flavor.limiter(own_server, "gcra", QUOTA, prefix="restart", clock=lambda: T0, timeout=2.0)
    assert all(d.allowed for d in serve_concurrently(flavor, limiter, 20))
    own_server.stop()
    own_server.restart()
    # Sparse calls, none of them during the outage: each is decided by the
    # new, empty server.
    for n in range(3):
        d = limiter.check(f"after{n}")
        assert (d.allowed, d.remaining, d.degraded) == (True, 99, False)
    stats = limiter.stats()
    assert (stats.answered, stats.errors, stats.timeouts) == (23, 0, 0), stats


def test_a_probe_after_an_outage_is_not_spent_on_a_stale_connection(flavor, own_server):
    # Connections refused during the outage: a connect timeout a loaded
    # machine cannot reach first.
    limiter = flavor.limiter(own_server, "gcra", QUOTA, prefix="probe", clock=lambda: T0, breaker=(5, 0.5),
                             timeout=2.0, connect_timeout=30)
    breaker_clock = manual_breaker_clock(limiter)
    assert all(d.allowed for d in serve_concurrently(flavor, limiter, 20))
    own_server.stop()
    # Five outages open the breaker; the next calls are not sent.
    for _ in range(5):
        with pytest.raises(BackendError):
            limiter.check("down")
    with pytest.raises(CircuitOpen):
        limiter.check("down")
    own_server.restart()
    # The cool-down ends: the next call is the probe, and Redis decides it.
    breaker_clock.now += 0.5
    d = limiter.check("after")
    assert (d.allowed, d.remaining, d.degraded) == (True, 99, False)
    stats = limiter.stats()
    assert (stats.breaker_open, stats.breaker_opened, stats.errors) == (False, 1, 5), stats
    assert limiter.check("after").remaining == 98


def test_an_idle_connection_closed_by_the_server_is_not_used(flavor, server, prefix):
    # The server closes its clients (as its `timeout` setting would idle
    # ones): the next call is decided on a new connection.
    limiter = flavor.limiter(server, "gcra", QUOTA, prefix=prefix, clock=lambda: T0, timeout=2.0)
    serve_concurrently(flavor, limiter, 5)
    admin = server.client()
    admin.client_kill_filter(_type="normal", skipme=True)
    admin.close()
    assert limiter.check("k").remaining == 99
    assert limiter.stats().errors == 0
    assert core_of(limiter).breaker.state() == (False, 0.0)
