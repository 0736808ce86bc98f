"""Deadlines on Redis's clock, from a measured offset.

A script refuses to run after ``ARGV[5]``, an instant in µs on Redis's
clock: the instant the caller gives up. This process knows that instant on
its own monotonic clock; :class:`RedisClock` places it on Redis's.

One sample: read the monotonic clock (``before``), send ``TIME``, read it
again when the reply is in (``after``). Redis read its clock somewhere in
between, so ``redis − local`` lies in ``[redis − after, redis − before]``.
The lower bound is kept: a deadline computed from it is never later, on
Redis's clock, than the caller's own give-up instant. The offset drifts (the
two clocks tick at slightly different rates, NTP slews Redis's host by up to
500 ppm): for a sample ``age`` µs old the bound is widened by
``drift_ppm × age``, and a sample older than ``max_age`` is measured again
(and on every new connection, which may be to another server). On a Redis
Cluster each master is sampled and the lowest bound kept.

The deadline sent is then ``give_up + offset − drift − rtt / 2``: the
script must also leave the reply time to fly back (half the sample's round
trip) before the caller stops listening. A stall on the way there (Redis
paused, a full socket buffer) then makes the script expire instead of
charging a check whose caller already gave up.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional, Sequence, Tuple

#: How far the two clocks may drift apart, in parts per million.
DEFAULT_DRIFT_PPM = 500
#: A sample older than this (µs) is measured again before the next call.
DEFAULT_MAX_SAMPLE_AGE_US = 5_000_000


def monotonic_us() -> int:
    """This process's monotonic clock, µs."""
    return time.monotonic_ns() // 1000


def parse_time(reply: object) -> int:
    """Redis ``TIME`` (``[seconds, microseconds]``) in µs since the epoch."""
    if not isinstance(reply, (list, tuple)) or len(reply) != 2:
        raise ValueError(f"TIME answered {reply!r}, not two integers")
    seconds, micros = (int(x) for x in reply)
    if seconds < 0 or not 0 <= micros < 1_000_000:
        raise ValueError(f"TIME answered {reply!r}")
    return seconds * 1_000_000 + micros


@dataclass(frozen=True)
class Sample:
    """One ``TIME`` round trip: local µs before sending, Redis's µs, local
    µs after the reply."""

    before: int
    redis: int
    after: int


class RedisClock:
    """The offset between this process's monotonic clock and Redis's
    ``TIME``, measured (see the module's docs). One per limiter by default;
    limiters on one connection may share one (``redis_clock=``)."""

    def __init__(
        self,
        *,
        drift_ppm: int = DEFAULT_DRIFT_PPM,
        max_age_us: int = DEFAULT_MAX_SAMPLE_AGE_US,
        monotonic: Callable[[], int] = monotonic_us,
    ) -> None:
        if drift_ppm < 0 or max_age_us <= 0:
            raise ValueError("drift_ppm must be >= 0 and max_age_us > 0")
        self.drift_ppm = drift_ppm
        self.max_age_us = max_age_us
        self.monotonic = monotonic
        self._lock = threading.Lock()
        # (lowest offset, round trip, local instant of the sample)
        self._state: Optional[Tuple[int, int, int]] = None

    def fresh(self, now: Optional[int] = None) -> bool:
        """A sample exists and is younger than ``max_age_us``."""
        with self._lock:
            state = self._state
        if state is None:
            return False
        now = self.monotonic() if now is None else now
        return 0 <= now - state[2] <= self.max_age_us

    def invalidate(self) -> None:
        """Forget the sample (a new connection: maybe another server)."""
        with self._lock:
            self._state = None

    def on_connect(self, connection: object = None) -> None:
        """A connect callback (redis-py's ``register_connect_callback``):
        a reconnected connection may reach another server."""
        self.invalidate()

    def record(self, samples: Iterable[Sample]) -> None:
        """Samples taken together (one per master of a cluster): the lowest
        offset and the longest round trip are kept."""
        samples = list(samples)
        if not samples:
            raise ValueError("no TIME sample")
        offset = min(s.redis - s.after for s in samples)
        rtt = max(s.after - s.before for s in samples)
        taken = max(s.after for s in samples)
        with self._lock:
            self._state = (offset, rtt, taken)

    @property
    def offset_us(self) -> Optional[int]:
        """The offset kept (Redis − local, its lower bound), if any."""
        with self._lock:
            return None if self._state is None else self._state[0]

    def deadline(self, give_up: int, now: Optional[int] = None) -> int:
        """``give_up`` (local monotonic µs) on Redis's clock, less the
        uncertainty the sample's age adds and half its round trip. Call
        :meth:`record` first."""
        with self._lock:
            state = self._state
        if state is None:
            raise RuntimeError("no TIME sample yet")
        offset, rtt, taken = state
        now = self.monotonic() if now is None else now
        age = max(0, now - taken)
        drift = -(-age * self.drift_ppm // 1_000_000)
        return max(0, give_up + offset - drift - (rtt + 1) // 2)


def samples_from(times: Sequence[Tuple[int, object, int]]) -> list:
    """``(before, TIME reply, after)`` triples as :class:`Sample` s."""
    return [Sample(before, parse_time(reply), after) for before, reply, after in times]
