"""What a limiter does when Redis fails or is slow, as the Rust
``ratelab-redis`` crate does it: the failure policy, the circuit breaker,
the alerts, the stats, and the local cache of refusals. No I/O here: the
synchronous and the asyncio limiters share all of it."""

from __future__ import annotations

import enum
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple, Union

#: The default per-call timeout, in seconds (Rust: ``DEFAULT_TIMEOUT``).
DEFAULT_TIMEOUT = 0.1
#: The default bound on setting up a connection (TCP, the handshake, the
#: first clock sample), in seconds: apart from the call's own timeout, so
#: that connecting to a healthy but busy Redis is not an outage.
DEFAULT_CONNECT_TIMEOUT = 1.0
#: How long, after its caller gave up, a check's reply is still awaited in
#: the background, in seconds (the Rust client's ``LATE_REPLY_WAIT``): an
#: admission that arrives within it is given back at once (a refund by its
#: stamp); one later than that, or on a connection that is lost, stays
#: charged.
LATE_REPLY_WAIT = 30.0
#: Consecutive outage failures that open the circuit breaker.
DEFAULT_BREAKER_THRESHOLD = 5
#: How long an open breaker keeps Redis uncalled before one probe, seconds.
DEFAULT_BREAKER_COOL_DOWN = 0.5

logger = logging.getLogger("ratelab_client")


class FailurePolicy(str, enum.Enum):
    """What a check answers when Redis is unavailable (an outage: a timeout,
    a failed connection, a cluster slot moving or down, an open breaker).
    Data errors are not outages: they are raised whatever the policy.

    - ``ERROR`` (the default): raise the :class:`~ratelab_client.Unavailable`
      error, and let the caller decide.
    - ``ALLOW``: fail open: admit, as a fresh key would (``remaining`` =
      capacity − cost), the decision marked ``degraded``, with an alert.
    - ``DENY``: fail closed: refuse, ``retry_after`` the breaker's remaining
      cool-down when it is open, else the timeout; ``degraded``, with an alert.
    """

    ERROR = "error"
    ALLOW = "allow"
    DENY = "deny"


@dataclass(frozen=True)
class Stats:
    """What a limiter did, counted (Rust: ``ratelab_redis::Stats``)."""

    #: Calls answered by Redis.
    answered: int = 0
    #: Calls that failed because Redis did not answer within the timeout.
    timeouts: int = 0
    #: Calls that failed on an outage other than a timeout (a connection
    #: refused or lost, a cluster slot moving, a call that reached Redis
    #: after its deadline).
    errors: int = 0
    #: Calls that failed on a data error.
    data_errors: int = 0
    #: Calls sent as a script (``EVALSHA``), answered or not.
    script_calls: int = 0
    #: Scripts loaded again after ``NOSCRIPT``.
    reloads: int = 0
    #: Refusals answered from the local cache, without a round trip.
    cached_refusals: int = 0
    #: Calls answered without calling Redis, the breaker being open.
    short_circuited: int = 0
    #: Times the breaker opened.
    breaker_opened: int = 0
    #: The breaker is open now.
    breaker_open: bool = False
    #: Seconds before an open breaker lets a probe through (0 when closed).
    cool_down_left: float = 0.0
    #: Redis ``TIME`` samples taken to place deadlines on Redis's clock.
    clock_samples: int = 0
    #: Times another quota was found on a key this limiter uses.
    quota_mismatches: int = 0
    #: Admissions whose reply came after their caller gave up, given back
    #: at once by their stamp (a check that timed out is not charged).
    late_refunds: int = 0
    #: Such admissions whose refund failed: they stay charged (a warning is
    #: logged).
    late_refunds_failed: int = 0


@dataclass(frozen=True)
class Alert:
    """One failure (or a quota mismatch), as the alert hook sees it."""

    #: The algorithm of the limiter (``gcra``, ...).
    algorithm: str
    #: What went wrong: an :class:`~ratelab_client.Unavailable`, a
    #: :class:`~ratelab_client.DataError` or a
    #: :class:`~ratelab_client.QuotaMismatch`.
    error: Exception
    #: What the limiter did about it (``None`` for a quota mismatch, which
    #: changes no decision).
    policy: Optional[FailurePolicy]
    #: The user key of the call.
    key: bytes = b""


AlertHook = Callable[[Alert], None]


class Breaker:
    """After ``threshold`` consecutive outage failures, Redis is not called
    for ``cool_down`` seconds; then one call at a time probes it (a probe
    that takes longer than ``probe_timeout`` lets another through), and the
    first answer closes it. A threshold of 0 never opens."""

    def __init__(
        self,
        threshold: int,
        cool_down: float,
        probe_timeout: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not isinstance(threshold, int) or threshold < 0:
            raise ValueError(f"the breaker threshold must be a non-negative integer, not {threshold!r}")
        if cool_down < 0:
            raise ValueError(f"the breaker cool-down must not be negative, not {cool_down!r}")
        self.threshold = threshold
        self.cool_down = cool_down
        self.probe_timeout = probe_timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._consecutive = 0
        self._open_until: Optional[float] = None
        self._probing_until: Optional[float] = None
        self.opened = 0
        self.short_circuited = 0

    def permit(self) -> Union[str, float]:
        """``"call"``, ``"probe"`` (this call is the one probe), or the
        seconds to wait (open: do not call)."""
        with self._lock:
            if self._open_until is None:
                return "call"
            now = self._clock()
            if now < self._open_until:
                self.short_circuited += 1
                return self._open_until - now
            if self._probing_until is not None and now < self._probing_until:
                self.short_circuited += 1
                return self._probing_until - now
            self._probing_until = now + self.probe_timeout
            return "probe"

    def success(self) -> None:
        """Redis answered (a decision or a data error: it is up either way)."""
        with self._lock:
            self._consecutive = 0
            self._open_until = None
            self._probing_until = None

    def failure(self, probe: bool) -> None:
        """An outage failure."""
        if self.threshold == 0:
            return
        with self._lock:
            self._consecutive += 1
            if probe or (self._open_until is None and self._consecutive >= self.threshold):
                self._open_until = self._clock() + self.cool_down
                self._probing_until = None
                self.opened += 1

    def state(self) -> Tuple[bool, float]:
        """(open, seconds of cool-down left)."""
        with self._lock:
            if self._open_until is None:
                return False, 0.0
            return True, max(0.0, self._open_until - self._clock())


@dataclass
class Counters:
    """The mutable counts behind :class:`Stats`."""

    answered: int = 0
    timeouts: int = 0
    errors: int = 0
    data_errors: int = 0
    script_calls: int = 0
    reloads: int = 0
    cached_refusals: int = 0
    clock_samples: int = 0
    quota_mismatches: int = 0
    late_refunds: int = 0
    late_refunds_failed: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, name: str, n: int = 1) -> None:
        with self.lock:
            setattr(self, name, getattr(self, name) + n)

    def snapshot(self, breaker: Breaker) -> Stats:
        open_, left = breaker.state()
        with self.lock:
            return Stats(
                answered=self.answered,
                timeouts=self.timeouts,
                errors=self.errors,
                data_errors=self.data_errors,
                script_calls=self.script_calls,
                reloads=self.reloads,
                cached_refusals=self.cached_refusals,
                short_circuited=breaker.short_circuited,
                breaker_opened=breaker.opened,
                breaker_open=open_,
                cool_down_left=left,
                clock_samples=self.clock_samples,
                quota_mismatches=self.quota_mismatches,
                late_refunds=self.late_refunds,
                late_refunds_failed=self.late_refunds_failed,
            )


class Alerts:
    """Every alert reaches the hook; a ``logging`` warning (logger
    ``ratelab_client``) goes out at most once a second, with the count of
    those suppressed since, so that an outage does not flood the logs."""

    def __init__(self, hook: Optional[AlertHook], clock: Callable[[], float] = time.monotonic) -> None:
        self.hook = hook
        self._clock = clock
        self._lock = threading.Lock()
        self._last: Optional[float] = None
        self._suppressed = 0

    def raise_(self, alert: Alert, stats: Stats) -> None:
        if self.hook is not None:
            try:
                self.hook(alert)
            except Exception:  # A broken hook must not break the check.
                logger.exception("ratelab_client: the alert hook raised")
        with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last < 1.0:
                self._suppressed += 1
                return
            self._last, suppressed, self._suppressed = now, self._suppressed, 0
        logger.warning(
            "ratelab %s: %s (policy %s; timeouts %d, errors %d, %d alerts suppressed)",
            alert.algorithm,
            alert.error,
            alert.policy.value if alert.policy else "none",
            stats.timeouts,
            stats.errors,
            suppressed,
        )


@dataclass
class _Refusal:
    cost: int
    until: int
    full_at: int
    limit: int
    remaining: int


class RefusalCache:
    """Refusals remembered locally: a key refused with ``retry_after = d``
    is refused again without a round trip until ``d`` has passed, for a
    request of the same cost. At most ``max_keys`` keys. It only ever refuses
    what Redis would refuse: nothing but time makes a refused request pass."""

    def __init__(self, max_keys: int) -> None:
        if not isinstance(max_keys, int) or max_keys < 1:
            raise ValueError(f"cache_refusals must be a positive number of keys, not {max_keys!r}")
        self.max_keys = max_keys
        self._entries: Dict[bytes, _Refusal] = {}
        self._lock = threading.Lock()

    def refusal(self, key: bytes, cost: int, now: int) -> Optional[Tuple[int, int, int, int]]:
        """(limit, remaining, retry_after_us, reset_after_us) of a cached
        refusal of ``cost`` for ``key`` at ``now`` (µs), if any."""
        if cost == 0:
            return None
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if now >= entry.until:
                del self._entries[key]
                return None
            if entry.cost != cost:
                return None
            return entry.limit, entry.remaining, entry.until - now, max(0, entry.full_at - now)

    def forget(self, key: bytes) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def remember(self, key: bytes, cost: int, now: int, limit: int, remaining: int,
                 retry_after: int, reset_after: int) -> None:
        # `now` was read before the request was sent: Redis decided no
        # earlier, so `now + retry_after` is never later than what it said.
        with self._lock:
            if len(self._entries) >= self.max_keys:
                for k in [k for k, r in self._entries.items() if r.until <= now]:
                    del self._entries[k]
                if len(self._entries) >= self.max_keys:
                    return
            self._entries[key] = _Refusal(cost, now + retry_after, now + reset_after, limit, remaining)
