"""A check that timed out is never charged, however Redis stalls:

- **Before its script runs** (SIGSTOP, or a ``DEBUG SLEEP`` from another
  connection, for 150, 300 and 450 ms, with checks starting every 10 ms
  all through it): the script finds its deadline passed and writes nothing.
- **After its script ran, before its reply comes** (a proxy holds Redis's
  replies back): the limiter reads the reply when it comes, after its
  caller gave up, and gives the admission back at once by its stamp.

Each case counts, with peeks on the caller's clock (frozen: nothing comes
back with time), what stays charged once the limiter is closed (closing
waits for the late replies it is reading): every check that timed out left
its key full, every check that was answered took its unit.

Before the deadline was placed on a measured clock, the scripts ran until
`now + timeout + 500 ms`; before late replies were read, a check whose
reply was late stayed charged."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from ratelab_client import AsyncLimiter, Expired, Limiter, Quota, Timeout

from conftest import wait_until

QUOTA = Quota.per_minute(10)
T0 = 1_700_000_000_000_000
#: Checks start every 10 ms through the stall, 5 ms off the grid.
STEP = 0.010
OFFSET = 0.005


def frozen() -> int:
    return T0


def schedule(pause: float) -> list:
    """When each check starts, in seconds after the stall began."""
    n = int((pause - OFFSET) / STEP)
    return [OFFSET + i * STEP for i in range(n)]


class Stall:
    """Redis stalled for at least ``pause`` seconds, and until a check has
    timed out (so that the case always holds one, however late a loaded
    machine starts the checks): SIGSTOP then SIGCONT, or ``DEBUG SLEEP``
    sent from another connection."""

    def __init__(self, server, how: str, pause: float) -> None:
        self.server = server
        self.how = how
        self.pause = pause
        self.began = threading.Event()
        self.timed_out = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def start(self) -> None:
        self._thread.start()
        self.began.wait()

    def join(self) -> None:
        self._thread.join()
        if self.error is not None:
            raise self.error

    def _run(self) -> None:
        self.error = None
        try:
            self._stall()
        except BaseException as e:  # noqa: BLE001 - raised again by join()
            self.error = e
        finally:
            self.began.set()

    def _stall(self) -> None:
        until = time.monotonic() + self.pause
        if self.how == "sigstop":
            self.server.pause()
            self.began.set()
            time.sleep(self.pause)
            self.timed_out.wait(60)
            self.server.resume()
            return
        admin = self.server.client()
        admin.connection_pool.connection_kwargs["socket_timeout"] = None
        first = True
        while first or not self.timed_out.is_set():
            if first:
                # DEBUG SLEEP is sent: checks sent after it wait behind it.
                threading.Timer(0.01, self.began.set).start()
            admin.execute_command("DEBUG", "SLEEP", max(0.05, until - time.monotonic()) if first else 0.2)
            first = False
        admin.close()


def verdict(outcomes: dict, peeks: dict) -> tuple:
    """``outcomes``: "answered", "timeout" or "expired" per key; ``peeks``:
    what is left on each key."""
    assert set(outcomes.values()) <= {"answered", "timeout", "expired"}, outcomes
    charged = [k for k, o in outcomes.items() if o != "answered" and peeks[k] != 10]
    assert charged == [], f"checks charged after their caller gave up: {charged}"
    assert [k for k in outcomes if outcomes[k] == "answered" and peeks[k] != 9] == []
    timed_out = sum(o == "timeout" for o in outcomes.values())
    assert timed_out >= 1, outcomes
    return timed_out, sum(o == "answered" for o in outcomes.values())


def peek_all(server, prefix: str, keys) -> dict:
    with Limiter(server.client(), "gcra", QUOTA, prefix=prefix, clock=frozen, timeout=None) as peek:
        return {k: peek.peek(k, 0).remaining for k in keys}


@pytest.mark.parametrize("how", ["sigstop", "debug-sleep"])
@pytest.mark.parametrize("pause", [0.150, 0.300, 0.450])
def test_threads_through_a_stall(own_server, how, pause):
    prefix = f"stall-{how}-{pause}"
    limiter = Limiter(own_server.client(), "gcra", QUOTA, prefix=prefix, clock=frozen, breaker=(0, 0),
                      quota_check_every=None, connect_timeout=30)
    starts = schedule(pause)

    def warm_one(key: str) -> None:
        for _ in range(20):  # a loaded machine may time a first check out
            try:
                limiter.check(key, 0)
                return
            except (Timeout, Expired):
                continue

    # Warm: a connection per thread, the script loaded, the clock sampled.
    warm = [threading.Thread(target=warm_one, args=(f"warm{i}",)) for i in range(len(starts))]
    for t in warm:
        t.start()
    for t in warm:
        t.join()
    stall = Stall(own_server, how, pause)
    outcomes = {}

    def run(key: str, at: float) -> None:
        time.sleep(max(0.0, at - time.monotonic()))
        try:
            limiter.check(key)
            outcomes[key] = "answered"
        except Timeout:
            outcomes[key] = "timeout"
            stall.timed_out.set()
        except Expired:
            outcomes[key] = "expired"
        except Exception as e:  # noqa: BLE001 - recorded, and the test fails on it
            outcomes[key] = repr(e)

    stall.start()
    began = time.monotonic()
    threads = [threading.Thread(target=run, args=(f"k{i}", began + at)) for i, at in enumerate(starts)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stall.timed_out.set()
    stall.join()
    limiter.close()  # waits for the late replies
    counts = verdict(outcomes, peek_all(own_server, prefix, outcomes))
    print(f"\nsync, {how} {pause * 1000:.0f} ms: {counts} (timed out, answered), "
          f"{limiter.stats().late_refunds} late admissions given back")


@pytest.mark.parametrize("how", ["sigstop", "debug-sleep"])
@pytest.mark.parametrize("pause", [0.150, 0.300, 0.450])
def test_tasks_through_a_stall(own_server, how, pause):
    prefix = f"astall-{how}-{pause}"

    async def scenario():
        limiter = AsyncLimiter(own_server.aclient(), "gcra", QUOTA, prefix=prefix, clock=frozen, breaker=(0, 0),
                               quota_check_every=None, connect_timeout=30)
        for _ in range(20):  # a loaded machine may time a first check out
            try:
                await limiter.check("warm", 0)
                break
            except (Timeout, Expired):
                continue
        stall = Stall(own_server, how, pause)
        outcomes = {}

        async def run(key: str, at: float) -> None:
            await asyncio.sleep(max(0.0, at - time.monotonic()))
            try:
                await limiter.check(key)
                outcomes[key] = "answered"
            except Timeout:
                outcomes[key] = "timeout"
                stall.timed_out.set()
            except Expired:
                outcomes[key] = "expired"
            except Exception as e:  # noqa: BLE001
                outcomes[key] = repr(e)

        # The stall is driven from a thread: the event loop keeps running.
        await asyncio.get_running_loop().run_in_executor(None, stall.start)
        began = time.monotonic()
        await asyncio.gather(*(run(f"k{i}", began + at) for i, at in enumerate(starts)))
        stall.timed_out.set()
        await asyncio.get_running_loop().run_in_executor(None, stall.join)
        await limiter.aclose()  # waits for the late replies
        await limiter.client.aclose()
        return outcomes, limiter.stats().late_refunds

    starts = schedule(pause)
    outcomes, late = asyncio.run(scenario())
    counts = verdict(outcomes, peek_all(own_server, prefix, outcomes))
    print(f"\nasyncio, {how} {pause * 1000:.0f} ms: {counts} (timed out, answered), {late} late admissions given back")


def test_an_admission_whose_reply_comes_late_is_given_back(flavor, own_server, proxy):
    # Through the proxy: the script runs, its reply is held until the
    # caller has given up, then let through.
    limiter = flavor.limiter(proxy, "gcra", QUOTA, prefix="late", clock=frozen, breaker=(0, 0),
                             quota_check_every=None, timeout=1.0)
    assert limiter.check("warm", 0).allowed  # connected, script loaded
    direct = Limiter(own_server.client(), "gcra", QUOTA, prefix="late", clock=frozen, timeout=None)
    proxy.hold_replies()
    outcome = {}

    def check() -> None:
        try:
            outcome["k"] = limiter.check("k")
        except Exception as e:  # noqa: BLE001 - the test asserts on it
            outcome["k"] = e

    caller = threading.Thread(target=check)
    if flavor.loop is None:
        caller.start()
    else:
        # The asyncio limiter's loop runs the check, then reads the late reply.
        inner = limiter._limiter

        async def check_then_wait() -> None:
            try:
                outcome["k"] = await inner.check("k")
            except Exception as e:  # noqa: BLE001
                outcome["k"] = e
            while inner.stats().late_refunds == 0 and not outcome.get("stop"):
                await asyncio.sleep(0.005)

        caller = threading.Thread(target=flavor.loop.run_until_complete, args=(check_then_wait(),))
        caller.start()
    # The script ran (Redis charged the check), and its caller gave up.
    wait_until(lambda: direct.peek("k", 0).remaining == 9, "the script never ran through the proxy")
    wait_until(lambda: "k" in outcome, "the caller never gave up")
    assert isinstance(outcome["k"], Timeout), outcome
    assert direct.peek("k", 0).remaining == 9
    proxy.release_replies()
    try:
        wait_until(lambda: limiter.stats().late_refunds == 1, "the late admission was not given back")
    finally:
        outcome["stop"] = True
        caller.join()
    assert direct.peek("k", 0).remaining == 10
    # The connection is as good as before: the next check is answered.
    assert limiter.check("k").remaining == 9
    stats = limiter.stats()
    assert (stats.timeouts, stats.late_refunds, stats.errors) == (1, 1, 0), stats
    direct.close()


def test_a_late_refusal_gives_nothing_back(flavor, own_server, proxy):
    # Only an admission is given back: a refusal took nothing, and the
    # admission before it stays.
    limiter = flavor.limiter(proxy, "gcra", Quota.per_minute(1), prefix="late-refused", clock=frozen,
                             breaker=(0, 0), quota_check_every=None, timeout=1.0)
    assert limiter.check("k").allowed
    direct = Limiter(own_server.client(), "gcra", Quota.per_minute(1), prefix="late-refused", clock=frozen,
                     timeout=None)
    proxy.hold_replies()
    with pytest.raises(Timeout):
        limiter.check("k")  # refused by the script; the reply held
    proxy.release_replies()
    limiter.close() if flavor.loop is None else limiter.aclose()  # waits for the late reply
    assert limiter.stats().late_refunds == 0
    assert direct.peek("k", 0).remaining == 0
    direct.close()
