"""A rate limiter on Redis that calls ratelab's scripts (lua/README.md):
the same keys, arguments and decisions as the Rust ``RedisLimiter``, so
Python, Rust and Node services share one limit."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import redis

from .protocol import (
    DEFAULT_PREFIX,
    OPS,
    PROTOCOL_VERSION,
    Key,
    Quota,
    algorithm as make_algorithm,
    key_bytes,
    redis_key,
    script_sha,
    script_source,
)


class RatelabError(Exception):
    """Every error of this client."""


class CostTooHigh(RatelabError, ValueError):
    """A cost above the capacity: it could never pass, even on a fresh key."""


class DataError(RatelabError):
    """Redis answered, and the answer is about the key or the call, not
    Redis's reachability: corrupt state, a key of another type, invalid
    arguments, another protocol version, a reply no script could send, out of
    memory. Retrying does not help; someone has to look."""


class Expired(RatelabError):
    """The call reached Redis after its deadline: nothing was charged (the
    caller had given up on it). An outage, like a timeout."""


@dataclass(frozen=True)
class Decision:
    """One check's answer: the fields of the Rust ``Decision``, in µs."""

    allowed: bool
    limit: int
    remaining: int
    retry_after_micros: int
    reset_after_micros: int
    delay_micros: int

    @property
    def retry_after_secs(self) -> int:
        """``retry_after`` in whole seconds, rounded up (``Retry-After``)."""
        return -(-self.retry_after_micros // 1_000_000)

    @property
    def reset_after_secs(self) -> int:
        """``reset_after`` in whole seconds, rounded up."""
        return -(-self.reset_after_micros // 1_000_000)


def wall_clock_micros() -> int:
    """µs since the Unix epoch, on this host's clock."""
    return time.time_ns() // 1000


class Limiter:
    """One algorithm on one quota, any number of keys, state on Redis.

    ``client`` is a ``redis.Redis`` (or ``redis.cluster.RedisCluster``).
    ``clock``, when given, is the caller's clock (µs, an ``int``), passed to
    the script as ``now``; by default the script reads Redis ``TIME``.
    ``timeout`` (seconds, or None) and ``clock_skew`` make the deadline: a call
    that reaches Redis more than ``timeout + clock_skew`` after it was made is
    refused with :class:`Expired` and charges nothing. Set the connection's
    own ``socket_timeout`` to ``timeout`` so that the call gives up then too.
    """

    def __init__(
        self,
        client: Any,
        algorithm: str,
        quota: Quota,
        *,
        prefix: str = DEFAULT_PREFIX,
        clock: Optional[Callable[[], int]] = None,
        ttl_slack_ms: Optional[int] = None,
        timeout: Optional[float] = 0.1,
        clock_skew: float = 0.5,
    ) -> None:
        self.client = client
        self.algorithm = make_algorithm(algorithm, quota)
        self.quota = quota
        self.prefix = prefix
        self.clock = clock
        if ttl_slack_ms is None:
            # Redis expires keys on its own clock: a caller's clock may differ.
            ttl_slack_ms = 0 if clock is None else 60_000
        self.ttl_slack_ms = ttl_slack_ms
        self.timeout = timeout
        self.clock_skew = clock_skew
        self.source = script_source(algorithm)
        self.sha = script_sha(self.source)
        self._suffix = self.algorithm.key_suffix
        # Replies may wait up to 1 s plus the slack longer than from fresh
        # state: the scripts accept stored instants that far ahead of now.
        self._max_wait = self.algorithm.max_wait_us + 1_000_000 + ttl_slack_ms * 1000

    def redis_key(self, key: Key) -> bytes:
        """The Redis key holding ``key``'s state."""
        return redis_key(self.prefix, key, self._suffix)

    def arguments(
        self, cost: int, now: Optional[int] = None, op: str = "check", owed: int = 0
    ) -> list:
        """``ARGV`` of one call: version, now or "", cost, slack, deadline or
        "", the operation (a refund as ``refund:<owed>``), the algorithm's
        parameters."""
        if op not in OPS:
            raise ValueError(f"op must be one of {', '.join(OPS)}, not {op!r}")
        if not isinstance(owed, int) or isinstance(owed, bool) or not 0 <= owed < 2**53:
            raise ValueError(f"owed must be an integer from 0 to 2^53 - 1 µs, not {owed!r}")
        if self.timeout is None:
            deadline: Any = ""
        else:
            deadline = wall_clock_micros() + round((self.timeout + self.clock_skew) * 1_000_000)
        return [
            PROTOCOL_VERSION,
            "" if now is None else now,
            cost,
            self.ttl_slack_ms,
            deadline,
            f"refund:{owed}" if op == "refund" else op,
            *self.algorithm.params,
        ]

    def check(self, key: Key, cost: int = 1) -> Decision:
        """Decides a request of weight ``cost`` for ``key``: all or nothing;
        cost 0 reports without consuming. One ``EVALSHA`` (after
        ``NOSCRIPT``, the script is loaded and the call sent again).

        Raises :class:`CostTooHigh`, :class:`DataError`, :class:`Expired`, and
        redis-py's ``ConnectionError`` / ``TimeoutError`` when Redis is away.
        """
        return self._call(key, cost, "check")

    def peek(self, key: Key, cost: int = 1) -> Decision:
        """The decision a check of ``cost`` would get now, writing nothing: a
        check at the same instant, with nothing consumed in between, decides
        the same. Raises as :meth:`check`."""
        return self._call(key, cost, "peek")

    def refund(self, key: Key, cost: int, owed_us: int) -> Decision:
        """Gives back up to ``cost`` units of one admission of ``key`` that
        still weighs on it for ``owed_us`` µs: its decision's
        ``reset_after_micros``, less the time since it was asked (measure from
        before the call, so that it errs low). Only what the admission still
        holds comes back: units whose debt was repaid, or counted in a window
        that has ended, would otherwise let later requests count for less
        (lua/README.md, "Refunds"). Never above the capacity (a key full
        again is deleted); answers what a peek of cost 0 would after it.

        On Redis ``TIME`` the script decides when it runs, as late as the
        deadline allows: ``owed_us`` is first taken down by the timeout and
        twice the clock skew (with no timeout, nothing is owed). Raises as
        :meth:`check`."""
        if not isinstance(owed_us, int) or isinstance(owed_us, bool) or owed_us < 0:
            raise ValueError(f"owed_us must be a non-negative integer, not {owed_us!r}")
        if self.clock is None:
            if self.timeout is None:
                owed_us = 0
            else:
                in_flight = round((self.timeout + 2 * self.clock_skew) * 1_000_000)
                owed_us = max(0, owed_us - in_flight)
        return self._call(key, cost, "refund", min(owed_us, 2**53 - 1))

    def reset(self, key: Key) -> None:
        """Puts ``key`` back to full capacity: ``DEL`` of its Redis key."""
        self.client.delete(self.redis_key(key))

    def _call(self, key: Key, cost: int, op: str, owed: int = 0) -> Decision:
        if not isinstance(cost, int) or isinstance(cost, bool) or cost < 0 or cost > 0xFFFFFFFF:
            raise ValueError(f"cost must be an integer from 0 to 2^32 - 1, not {cost!r}")
        if cost > self.algorithm.capacity:
            raise CostTooHigh(
                f"a cost of {cost} can never fit: the capacity is {self.algorithm.capacity}"
            )
        now = None if self.clock is None else int(self.clock())
        key_b = self.redis_key(key_bytes(key))
        args = self.arguments(cost, now, op, owed)
        try:
            try:
                reply = self.client.evalsha(self.sha, 1, key_b, *args)
            except redis.exceptions.NoScriptError:
                self.client.script_load(self.source)
                reply = self.client.evalsha(self.sha, 1, key_b, *args)
        except redis.exceptions.ResponseError as e:
            message = str(e)
            if message.startswith("ratelab expired"):
                raise Expired(message) from e
            raise DataError(message) from e
        return self.decision(reply)

    def decision(self, reply: Any) -> Decision:
        """A script's reply as a :class:`Decision`, trusting nothing in it."""

        def invalid(why: str) -> DataError:
            return DataError(f"ratelab {self.algorithm.name}: invalid reply {reply!r}: {why}")

        if not isinstance(reply, (list, tuple)) or len(reply) != 6:
            raise invalid("not six integers")
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in reply):
            raise invalid("not six integers")
        n: Sequence[int] = reply
        if any(x < 0 for x in n):
            raise invalid("a negative integer")
        allowed, limit, remaining, retry, reset, delay = n
        if limit != self.algorithm.capacity:
            raise invalid("limit is not this limiter's capacity")
        if remaining > limit:
            raise invalid("remaining above the limit")
        if max(retry, reset, delay) > self._max_wait:
            raise invalid("a wait longer than this quota can produce")
        if allowed not in (0, 1):
            raise invalid("allowed is neither 0 nor 1")
        if (allowed == 1 and retry != 0) or (allowed == 0 and delay != 0):
            raise invalid("a retry wait when admitted, or a delay when refused")
        return Decision(allowed == 1, limit, remaining, retry, reset, delay)

