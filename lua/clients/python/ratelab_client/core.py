"""The half of a limiter that does no I/O, shared by :class:`~ratelab_client.Limiter`
(redis-py) and :class:`~ratelab_client.AsyncLimiter` (``redis.asyncio``): the
arguments of a call, the conversation with Redis as a generator of commands
(``TIME`` when the clock sample is stale, ``EVALSHA``, ``SCRIPT LOAD`` after
``NOSCRIPT``, the quota registry), the reply validated, and what a failure
answers. Each limiter only runs the commands, with its own I/O."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Generator, Optional, Sequence, Tuple, Union

import redis

from .clock import RedisClock, monotonic_us, samples_from
from .errors import (
    CircuitOpen,
    CostTooHigh,
    DataError,
    QuotaMismatch,
    RatelabError,
    Timeout,
    Unavailable,
    classify,
)
from .protocol import (
    DEFAULT_PREFIX,
    PROTOCOL_VERSION,
    REPLY_LEN,
    Key,
    Quota,
    algorithm as make_algorithm,
    encode_op,
    key_bytes,
    redis_key,
    script_sha,
    script_source,
)
from .resilience import (
    DEFAULT_BREAKER_COOL_DOWN,
    DEFAULT_BREAKER_THRESHOLD,
    DEFAULT_TIMEOUT,
    Alert,
    AlertHook,
    Alerts,
    Breaker,
    Counters,
    FailurePolicy,
    RefusalCache,
    Stats,
)

#: By default every 100th check (and the first) also records the quota it
#: used for its key, to notice another service using another one.
DEFAULT_QUOTA_CHECK_EVERY = 100

#: A command the limiter asks its I/O to run: ``("TIME",)`` means "sample
#: ``TIME`` on every master, and answer ``[(before_us, reply, after_us)]``".
Command = Tuple[Any, ...]
Flow = Generator[Command, Any, Any]


@dataclass(frozen=True)
class Decision:
    """One call's answer: the fields of the Rust ``Decision``, in µs.

    ``degraded`` is true when no script decided it: the failure policy
    answered for an unavailable Redis (fail open or fail closed)."""

    allowed: bool
    limit: int
    remaining: int
    retry_after_micros: int
    reset_after_micros: int
    delay_micros: int
    degraded: bool = False

    @property
    def retry_after_secs(self) -> int:
        """``retry_after`` in whole seconds, rounded up (``Retry-After``)."""
        return -(-self.retry_after_micros // 1_000_000)

    @property
    def reset_after_secs(self) -> int:
        """``reset_after`` in whole seconds, rounded up."""
        return -(-self.reset_after_micros // 1_000_000)


@dataclass
class Call:
    """One call in progress."""

    op: str
    key: bytes
    redis_key: bytes
    cost: int
    owed: int
    #: The caller's ``now``, µs, or None for Redis ``TIME``.
    now: Optional[int]
    #: The local monotonic µs at which the caller gives up (None: never).
    give_up: Optional[int]
    #: The refusal cache's clock, read before the call.
    local_now: int
    probe: bool = False
    #: Record the fingerprint in the quota registry after the call.
    registry: bool = False


def validate_timeout(timeout: Optional[float]) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds or None, not {timeout!r}")
    if timeout > 3600:
        raise ValueError(f"a timeout of {timeout} s is longer than an hour: pass None for none")
    return float(timeout)


class Core:
    """Everything a limiter decides without I/O. Not part of the public API:
    the limiters' constructors document its parameters."""

    def __init__(
        self,
        algorithm: str,
        quota: Quota,
        *,
        prefix: str,
        clock: Optional[Callable[[], int]],
        ttl_slack_ms: Optional[int],
        timeout: Optional[float],
        on_failure: Union[FailurePolicy, str],
        policy_on_data_errors: bool,
        breaker: Tuple[int, float],
        on_alert: Optional[AlertHook],
        cache_refusals: Optional[int],
        redis_clock: Optional[RedisClock],
        quota_check_every: Optional[int],
        monotonic: Callable[[], int] = monotonic_us,
    ) -> None:
        if not isinstance(quota, Quota):
            raise TypeError(f"quota must be a ratelab_client.Quota, not {type(quota).__name__}")
        if not isinstance(prefix, str):
            raise TypeError(f"prefix must be a str, not {type(prefix).__name__}")
        self.algorithm = make_algorithm(algorithm, quota)
        self.quota = quota
        self.prefix = prefix
        self.clock = clock
        if ttl_slack_ms is None:
            # Redis expires keys on its own clock: a caller's clock may differ.
            ttl_slack_ms = 0 if clock is None else 60_000
        if isinstance(ttl_slack_ms, bool) or not isinstance(ttl_slack_ms, int) or ttl_slack_ms < 0:
            raise ValueError(f"ttl_slack_ms must be a non-negative integer, not {ttl_slack_ms!r}")
        self.ttl_slack_ms = ttl_slack_ms
        self.timeout = validate_timeout(timeout)
        self.failure = FailurePolicy(on_failure)
        self.policy_on_data_errors = bool(policy_on_data_errors)
        threshold, cool_down = breaker
        # A probe may take as long as a call: then another caller may probe.
        self.breaker = Breaker(threshold, cool_down, self.timeout or 1.0)
        self.alerts = Alerts(on_alert)
        self.counters = Counters()
        self.refusals = RefusalCache(cache_refusals) if cache_refusals is not None else None
        self.redis_clock = redis_clock if redis_clock is not None else RedisClock(monotonic=monotonic)
        if quota_check_every is not None and (
            isinstance(quota_check_every, bool) or not isinstance(quota_check_every, int) or quota_check_every < 1
        ):
            raise ValueError(f"quota_check_every must be a positive integer or None, not {quota_check_every!r}")
        self.quota_check_every = quota_check_every
        # next() on a count is atomic: threads share one limiter.
        self._checks = itertools.count()
        self.monotonic = monotonic
        self.source = script_source(algorithm)
        self.sha = script_sha(self.source)
        self.key_suffix = self.algorithm.key_suffix
        # Replies may wait up to 1 s plus the slack longer than from fresh
        # state: the scripts accept stored instants that far ahead of now.
        self.max_wait = self.algorithm.max_wait_us + 1_000_000 + ttl_slack_ms * 1000

    # -- keys and arguments ---------------------------------------------------

    def redis_key(self, key: Key) -> bytes:
        return redis_key(self.prefix, key, self.key_suffix)

    def registry_key(self, key: Key) -> bytes:
        """The quota registry's key for ``key`` and this algorithm: the
        state key's hash tag (same cluster slot), then ``<code>:quota``."""
        state = self.redis_key(key)
        return state[: len(state) - len(self.key_suffix)] + self.algorithm.code.encode() + b":quota"

    def arguments(
        self, cost: int, now: Optional[int] = None, op: str = "check", owed: int = 0,
        deadline: Union[int, str] = "",
    ) -> list:
        """``ARGV`` of one call: version, now or "", cost, slack, deadline or
        "", the operation, the algorithm's parameters."""
        return [
            PROTOCOL_VERSION,
            "" if now is None else now,
            cost,
            self.ttl_slack_ms,
            deadline,
            encode_op(op, owed),
            *self.algorithm.params,
        ]

    def start(self, op: str, key: Key, cost: int, owed: int = 0) -> Call:
        """Validates a call and reads the clocks it needs."""
        if isinstance(cost, bool) or not isinstance(cost, int) or not 0 <= cost <= 0xFFFFFFFF:
            raise ValueError(f"cost must be an integer from 0 to 2^32 - 1, not {cost!r}")
        if cost > self.algorithm.capacity:
            raise CostTooHigh(f"a cost of {cost} can never fit: the capacity is {self.algorithm.capacity}")
        if not isinstance(key, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"a key is str or bytes, not {type(key).__name__}")
        if op == "refund":
            if isinstance(owed, bool) or not isinstance(owed, int) or owed < 0:
                raise ValueError(f"owed_us must be a non-negative integer, not {owed!r}")
            if self.clock is None:
                # On Redis TIME the refund is decided when the script runs,
                # which may be as late as the caller's give-up instant.
                owed = 0 if self.timeout is None else max(0, owed - round(self.timeout * 1_000_000))
            owed = min(owed, 2**53 - 1)
        key_b = key_bytes(key)
        now = None
        if self.clock is not None:
            now = self.clock()
            if isinstance(now, bool) or not isinstance(now, int) or now < 0:
                raise ValueError(f"the clock must answer a non-negative int of µs, not {now!r}")
            now = min(now, 2**52)
        started = self.monotonic()
        give_up = None if self.timeout is None else started + round(self.timeout * 1_000_000)
        registry = False
        if op == "check" and self.quota_check_every is not None:
            registry = next(self._checks) % self.quota_check_every == 0
        return Call(op, key_b, self.redis_key(key_b), cost, owed, now, give_up,
                    now if now is not None else started, registry=registry)

    def remaining_s(self, call: Call) -> Optional[float]:
        """Seconds left before the caller gives up (None: no timeout)."""
        if call.give_up is None:
            return None
        return (call.give_up - self.monotonic()) / 1_000_000

    # -- the conversation -----------------------------------------------------

    def flow(self, call: Call) -> Flow:
        """The commands of one call, in order, as a generator: it yields a
        command and is sent its reply (or thrown its error); it returns the
        script's reply."""
        deadline: Union[int, str] = ""
        if call.give_up is not None:
            if not self.redis_clock.fresh():
                times = yield ("TIME",)
                self.counters.count("clock_samples")
                try:
                    self.redis_clock.record(samples_from(times))
                except ValueError as e:
                    raise DataError(f"invalid reply to TIME: {e}") from e
            deadline = self.redis_clock.deadline(call.give_up)
        args = self.arguments(call.cost, call.now, call.op, call.owed, deadline)
        evalsha = ("EVALSHA", self.sha, 1, call.redis_key, *args)
        self.counters.count("script_calls")
        try:
            reply = yield evalsha
        except redis.exceptions.NoScriptError:
            self.counters.count("reloads")
            yield ("SCRIPT", "LOAD", self.source)
            reply = yield evalsha
        if call.registry:
            yield from self._record_quota(call)
        return reply

    def _record_quota(self, call: Call) -> Flow:
        ours = self.algorithm.fingerprint_input
        ttl_ms = max(60_000, -(-self.algorithm.max_wait_us // 1000))
        try:
            theirs = yield ("SET", self.registry_key(call.key), ours, "PX", ttl_ms, "GET")
        except Exception:
            # The registry is a warning system: it never fails a decision.
            return
        if isinstance(theirs, bytes):
            theirs = theirs.decode("utf-8", "replace")
        if theirs is not None and theirs != ours:
            self.counters.count("quota_mismatches")
            error = QuotaMismatch(call.key, ours, str(theirs))
            self.alerts.raise_(Alert(self.algorithm.name, error, None, call.key), self.stats())

    def reset_call(self, key: Key) -> Call:
        key_b = key_bytes(key)
        started = self.monotonic()
        give_up = None if self.timeout is None else started + round(self.timeout * 1_000_000)
        return Call("reset", key_b, self.redis_key(key_b), 0, 0, None, give_up, started)

    def reset_flow(self, call: Call) -> Flow:
        yield ("DEL", call.redis_key)

    # -- answers ---------------------------------------------------------------

    def cached(self, call: Call) -> Optional[Decision]:
        """A refusal from the local cache, for a check."""
        if self.refusals is None or call.op != "check":
            return None
        hit = self.refusals.refusal(call.key, call.cost, call.local_now)
        if hit is None:
            return None
        self.counters.count("cached_refusals")
        limit, remaining, retry, reset = hit
        return Decision(False, limit, remaining, retry, reset, 0)

    def permit(self, call: Call) -> Optional[RatelabError]:
        """The breaker's word: None to call Redis, else the error to answer."""
        if self.refusals is not None and call.op in ("refund", "reset"):
            self.refusals.forget(call.key)
        permit = self.breaker.permit()
        if permit == "call":
            return None
        if permit == "probe":
            call.probe = True
            return None
        return CircuitOpen(float(permit))

    def answered(self, call: Call, reply: Any) -> Decision:
        """Redis's reply, validated and counted (raises :class:`DataError`)."""
        decision = self.decision(reply)
        self.breaker.success()
        self.counters.count("answered")
        if self.refusals is not None and call.op == "check" and not decision.allowed:
            self.refusals.remember(call.key, call.cost, call.local_now, decision.limit,
                                   decision.remaining, decision.retry_after_micros,
                                   decision.reset_after_micros)
        return decision

    def reset_done(self) -> None:
        self.breaker.success()
        self.counters.count("answered")

    def failed(self, call: Call, error: BaseException) -> RatelabError:
        """A call's error, classified and counted."""
        ratelab = classify(error, self.timeout)
        if isinstance(ratelab, Timeout):
            self.counters.count("timeouts")
        elif isinstance(ratelab, DataError):
            self.counters.count("data_errors")
        else:
            self.counters.count("errors")
        if isinstance(ratelab, Unavailable):
            self.breaker.failure(call.probe)
        else:
            # Redis answered: it is up, whatever it said.
            self.breaker.success()
        return ratelab

    def on_failure(self, call: Call, error: RatelabError) -> Decision:
        """The failure policy's answer for a check or a peek (after an
        alert), or ``error`` raised. Refunds and resets raise: there is
        nothing to give back on a store that is not there."""
        if call.op in ("refund", "reset"):
            raise error
        if isinstance(error, Unavailable) or self.policy_on_data_errors:
            policy = self.failure
        else:
            policy = FailurePolicy.ERROR
        self.alerts.raise_(Alert(self.algorithm.name, error, policy, call.key), self.stats())
        capacity = self.algorithm.capacity
        if policy is FailurePolicy.ERROR:
            raise error
        if policy is FailurePolicy.ALLOW:
            # As a fresh key would answer: what is left after `cost`, and the
            # longest this algorithm takes to be full again when something is
            # missing (full iff nothing is).
            reset = max(1, self.algorithm.max_wait_us) if call.cost else 0
            return Decision(True, capacity, capacity - call.cost, 0, reset, 0, degraded=True)
        # Deny: an open breaker says when Redis is tried again; else the next
        # check may find it back after a timeout at most.
        if isinstance(error, CircuitOpen) and error.retry_after is not None:
            wait = error.retry_after
        else:
            wait = self.timeout if self.timeout is not None else 1.0
        retry = max(1, round(wait * 1_000_000))
        return Decision(False, capacity, 0, retry, retry, 0, degraded=True)

    def stats(self) -> Stats:
        return self.counters.snapshot(self.breaker)

    def decision(self, reply: Any) -> Decision:
        """A script's reply as a :class:`Decision`, trusting nothing in it."""

        def invalid(why: str) -> DataError:
            return DataError(f"ratelab {self.algorithm.name}: invalid reply {reply!r}: {why}")

        if not isinstance(reply, (list, tuple)) or len(reply) != REPLY_LEN:
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
        if max(retry, reset, delay) > self.max_wait:
            raise invalid("a wait longer than this quota can produce")
        if allowed not in (0, 1):
            raise invalid("allowed is neither 0 nor 1")
        if (allowed == 1 and retry != 0) or (allowed == 0 and delay != 0):
            raise invalid("a retry wait when admitted, or a delay when refused")
        return Decision(allowed == 1, limit, remaining, retry, reset, delay)


def drive(flow: Flow, execute: Callable[[Command], Any]) -> Any:
    """Runs ``flow`` with a synchronous ``execute``."""
    try:
        command = next(flow)
        while True:
            try:
                result = execute(command)
            except Exception as e:
                command = flow.throw(e)
            else:
                command = flow.send(result)
    except StopIteration as done:
        return done.value


def is_cluster(client: Any) -> bool:
    """``client`` is a redis-py cluster client (sync or asyncio)."""
    return hasattr(client, "get_primaries") and hasattr(client, "nodes_manager")

