"""A check that timed out is never charged: checks (each on its own key,
timeout 100 ms) are started all through a pause of a real redis-server
(SIGSTOP for 150, 300 and 450 ms), from threads (the synchronous limiter)
and from tasks (the asyncio limiter); after SIGCONT each key is peeked:
every check that raised Timeout left its key full, every check that was
answered took its unit. (A check whose script starts in the last moments
before its caller gives up, less than the reply's flight back, is refused
by the script as expired: answered in time, not charged.)

Before the deadline was placed on a measured clock, the scripts ran until
`now + timeout + 500 ms`: every check of these pauses was charged, its
caller gone."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ratelab_client import AsyncLimiter, Expired, Limiter, Quota, Timeout

QUOTA = Quota.per_minute(10)
#: Checks start every 10 ms through the pause, 5 ms off the grid so that
#: none gives up (100 ms later) just as the server resumes.
STEP = 0.010
OFFSET = 0.005


def schedule(pause: float) -> list:
    """When each check starts, in seconds after SIGSTOP."""
    n = int((pause - OFFSET) / STEP)
    return [OFFSET + i * STEP for i in range(n)]


def verdict(pause, outcomes, peeks):
    """``outcomes``: "answered" or "timeout" per key; ``peeks``: what is
    left on each key."""
    timed_out = [k for k, o in outcomes.items() if o == "timeout"]
    answered = [k for k, o in outcomes.items() if o == "answered"]
    assert set(outcomes.values()) <= {"answered", "timeout", "expired"}, outcomes
    charged = [k for k, o in outcomes.items() if o != "answered" and peeks[k] != 10]
    assert charged == [], f"{pause * 1000:.0f} ms pause: checks charged after their caller gave up: {charged}"
    assert [k for k in answered if peeks[k] != 9] == []
    # Each pause outlasts the timeout: the checks of its first 50 ms gave up.
    assert len(timed_out) >= 5, outcomes
    return len(timed_out), len(answered)


@pytest.mark.parametrize("pause", [0.150, 0.300, 0.450])
def test_threads_through_a_pause(own_server, pause):
    client = own_server.client()
    prefix = f"pause{pause}"
    limiter = Limiter(client, "gcra", QUOTA, prefix=prefix, breaker=(0, 0), quota_check_every=None)
    starts = schedule(pause)
    # Warm: a connection per thread, the script loaded, the clock sampled.
    def warm_one(key: str) -> None:
        for _ in range(20):  # a loaded machine may time a first check out
            try:
                limiter.check(key, 0)
                return
            except (Timeout, Expired):
                continue

    warm = [threading.Thread(target=warm_one, args=(f"warm{i}",)) for i in range(len(starts))]
    for t in warm:
        t.start()
    for t in warm:
        t.join()
    outcomes = {}

    def run(key: str, at: float) -> None:
        time.sleep(max(0.0, at - time.monotonic()))
        try:
            limiter.check(key)
            outcomes[key] = "answered"
        except Timeout:
            outcomes[key] = "timeout"
        except Expired:
            outcomes[key] = "expired"
        except Exception as e:  # noqa: BLE001 - recorded, and the test fails on it
            outcomes[key] = repr(e)

    stopped = time.monotonic() + 0.05
    threads = [threading.Thread(target=run, args=(f"k{i}", stopped + at)) for i, at in enumerate(starts)]
    for t in threads:
        t.start()
    time.sleep(max(0.0, stopped - time.monotonic()))
    own_server.pause()
    time.sleep(pause)
    own_server.resume()
    for t in threads:
        t.join()
    peek = Limiter(client, "gcra", QUOTA, prefix=prefix, timeout=None)
    peeks = {k: peek.peek(k, 0).remaining for k in outcomes}
    print(f"\nsync, {pause * 1000:.0f} ms pause: {verdict(pause, outcomes, peeks)} (timed out, answered)")
    limiter.close()
    peek.close()
    client.close()


async def warm_up(limiter, n: int) -> None:
    """Opens ``n`` connections, loads the script and samples the clock. On a
    loaded machine a first check may outlast the 100 ms timeout: the warm
    keys are never asserted on, so such a check is simply tried again."""
    for _ in range(20):
        results = await asyncio.gather(*(limiter.check(f"warm{i}", 0) for i in range(n)), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if not failed:
            return
        assert all(isinstance(r, (Timeout, Expired)) for r in failed), failed
    raise AssertionError(f"the warm-up checks kept timing out: {failed}")


@pytest.mark.parametrize("pause", [0.150, 0.300, 0.450])
def test_tasks_through_a_pause(own_server, pause):
    async def scenario():
        client = own_server.aclient()
        prefix = f"apause{pause}"
        limiter = AsyncLimiter(client, "gcra", QUOTA, prefix=prefix, breaker=(0, 0), quota_check_every=None)
        starts = schedule(pause)
        await warm_up(limiter, len(starts))
        outcomes = {}

        async def run(key: str, at: float) -> None:
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            try:
                await limiter.check(key)
                outcomes[key] = "answered"
            except Timeout:
                outcomes[key] = "timeout"
            except Expired:
                outcomes[key] = "expired"
            except Exception as e:  # noqa: BLE001
                outcomes[key] = repr(e)

        stopped = time.monotonic() + 0.05
        # The pause is driven from a thread: the event loop keeps running.
        def pause_server() -> None:
            time.sleep(max(0.0, stopped - time.monotonic()))
            own_server.pause()
            time.sleep(pause)
            own_server.resume()

        pauser = threading.Thread(target=pause_server)
        pauser.start()
        await asyncio.gather(*(run(f"k{i}", stopped + at) for i, at in enumerate(starts)))
        pauser.join()
        peek = AsyncLimiter(client, "gcra", QUOTA, prefix=prefix, timeout=None)
        peeks = {k: (await peek.peek(k, 0)).remaining for k in outcomes}
        await limiter.aclose()
        await peek.aclose()
        await client.aclose()
        return outcomes, peeks

    outcomes, peeks = asyncio.run(scenario())
    print(f"\nasyncio, {pause * 1000:.0f} ms pause: {verdict(pause, outcomes, peeks)} (timed out, answered)")
