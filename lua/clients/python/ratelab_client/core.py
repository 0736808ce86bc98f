"""The half of a limiter that does no I/O, shared by :class:`~ratelab_client.Limiter`
(redis-py) and :class:`~ratelab_client.AsyncLimiter` (``redis.asyncio``): the
arguments of a call, the conversation with Redis as a generator of commands
(``TIME`` when the clock sample is stale, ``EVALSHA``, ``SCRIPT LOAD`` after
``NOSCRIPT``, the quota registry), the reply validated, the receipts issued
and taken back, and what a failure answers. Each limiter only runs the
commands, with its own I/O."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generator, Optional, Sequence, Tuple, Union

import redis

from .clock import RedisClock, monotonic_us, samples_from
from .errors import (
    CircuitOpen,
    CostTooHigh,
    DataError,
    ForeignReceipt,
    QuotaMismatch,
    RatelabError,
    ReceiptSpent,
    Timeout,
    Unavailable,
    classify,
)
from .protocol import (
    DEFAULT_PREFIX,
    MAX_END,
    MAX_EXACT,
    MAX_TTL_SLACK_MS,
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
from .receipt import Receipt, parse_receipt
from .resilience import (
    DEFAULT_BREAKER_COOL_DOWN,
    DEFAULT_BREAKER_THRESHOLD,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_TIMEOUT,
    Alert,
    AlertHook,
    Alerts,
    Breaker,
    Counters,
    FailurePolicy,
    RefusalCache,
    Stats,
    logger,
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
    answered for an unavailable Redis (fail open or fail closed).

    ``receipt`` is, for a check that Redis admitted with a cost above 0, the
    :class:`~ratelab_client.Receipt` of the admission, to settle or refund
    once (``limiter.settle(decision.receipt, actual)``); ``None`` for
    everything else: a refusal, a peek, a settlement's or reset's answer, a
    cost of 0, and a decision the failure policy made (nothing was charged
    on Redis: there is nothing to settle). Two decisions compare equal
    whatever their receipts."""

    allowed: bool
    limit: int
    remaining: int
    retry_after_micros: int
    reset_after_micros: int
    delay_micros: int
    degraded: bool = False
    receipt: Optional[Receipt] = field(default=None, compare=False)

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
    #: The request's cost; a settlement's: the cost the admission was
    #: charged; a reset's: 0.
    cost: int
    #: The caller's ``now``, µs, or None for Redis ``TIME``.
    now: Optional[int]
    #: The local monotonic µs at which the caller gives up (None: never):
    #: the timeout counted from the call's start, and from the moment its
    #: connection was ready when it had to wait for one (:meth:`Core.arm`).
    give_up: Optional[int]
    #: The refusal cache's clock, read before the call.
    local_now: int
    probe: bool = False
    #: Record the fingerprint in the quota registry after the call.
    registry: bool = False
    #: A settlement's: what the admission finally counts for, and its stamp.
    actual: Optional[int] = None
    stamp: Optional[Tuple[int, int]] = None


def validate_timeout(timeout: Optional[float], name: str = "timeout") -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ValueError(f"{name} must be a positive number of seconds or None, not {timeout!r}")
    if timeout > 3600:
        raise ValueError(f"a {name} of {timeout} s is longer than an hour: pass None for none")
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
        connect_timeout: Optional[float] = DEFAULT_CONNECT_TIMEOUT,
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
        if ttl_slack_ms > MAX_TTL_SLACK_MS:
            # The scripts answer "invalid arguments" to it: refused here, before any call.
            raise ValueError(
                f"ttl_slack_ms must be at most {MAX_TTL_SLACK_MS} (2^52 µs, the whole range of instants), "
                f"which the scripts refuse past, not {ttl_slack_ms}"
            )
        self.ttl_slack_ms = ttl_slack_ms
        self.timeout = validate_timeout(timeout)
        self.connect_timeout = validate_timeout(connect_timeout, "connect_timeout")
        self.failure = FailurePolicy(on_failure)
        self.policy_on_data_errors = bool(policy_on_data_errors)
        threshold, cool_down = breaker
        # A probe may take as long as a call on a new connection: then
        # another caller may probe.
        self.breaker = Breaker(threshold, cool_down, (self.timeout or 1.0) + (self.connect_timeout or 1.0))
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
        self, cost: int, now: Optional[int] = None, op: str = "check", deadline: Union[int, str] = "",
        *, actual: Optional[int] = None, stamp: Optional[Tuple[int, int]] = None,
    ) -> list:
        """``ARGV`` of one call: version, now or "", cost, slack, deadline or
        "", the operation (a settlement's with its ``actual`` and ``stamp``),
        the algorithm's parameters."""
        return [
            PROTOCOL_VERSION,
            "" if now is None else now,
            cost,
            self.ttl_slack_ms,
            deadline,
            encode_op(op, actual, stamp),
            *self.algorithm.params,
        ]

    def start(self, op: str, key: Key, cost: int) -> Call:
        """Validates a check or a peek and reads the clocks it needs."""
        if isinstance(cost, bool) or not isinstance(cost, int) or not 0 <= cost <= 0xFFFFFFFF:
            raise ValueError(f"cost must be an integer from 0 to 2^32 - 1, not {cost!r}")
        if cost > self.algorithm.capacity:
            raise CostTooHigh(f"a cost of {cost} can never fit: the capacity is {self.algorithm.capacity}")
        registry = False
        if op == "check" and self.quota_check_every is not None:
            registry = next(self._checks) % self.quota_check_every == 0
        return self._call(op, _key(key), cost, registry=registry)

    def start_reset(self, key: Key) -> Call:
        """Validates a reset and reads the clocks it needs."""
        return self._call("reset", _key(key), 0)

    def start_settle(self, receipt: Any, actual: int) -> Call:
        """Takes ``receipt`` back (refusing one of another limiter, or one
        spent already), validates ``actual``, and reads the clocks. The
        receipt is spent from here on, whatever the call does, as in Rust:
        the admission then counts as charged unless the settlement is
        answered."""
        if not isinstance(receipt, Receipt):
            if receipt is None:
                raise TypeError(
                    "settle and refund take the Receipt of an admission (decision.receipt), not None: "
                    "only a check that Redis admitted with a cost above 0 has one; a refusal, a peek, "
                    "a cost of 0 and a decision the failure policy made (degraded: nothing was charged "
                    "on Redis) have none, and there is nothing to settle"
                )
            raise TypeError(f"settle and refund take a ratelab_client.Receipt, not {type(receipt).__name__}")
        if receipt._issuer is not self:
            raise ForeignReceipt(
                f"a receipt of another limiter ({receipt._issuer.prefix!r}, "
                f"{receipt._issuer.algorithm.fingerprint_input}): only the limiter whose check issued it "
                "settles it (another process: send receipt.to_json() and load it there with "
                "receipt_from_json)"
            )
        if isinstance(actual, bool) or not isinstance(actual, int) or not 0 <= actual <= 0xFFFFFFFF:
            raise ValueError(f"actual must be an integer from 0 to 2^32 - 1, not {actual!r}")
        if not receipt._spend():
            raise ReceiptSpent(
                f"this receipt (key {receipt.key[:64]!r}, cost {receipt.cost}) was settled or refunded "
                "already: an admission is settled once"
            )
        if actual > self.algorithm.capacity:
            raise CostTooHigh(
                f"a settlement to {actual} units can never fit: the capacity is {self.algorithm.capacity} "
                "(the receipt is spent; the admission counts as charged)"
            )
        call = self._call("settle", receipt.key, receipt.cost)
        call.actual, call.stamp = actual, receipt.stamp
        return call

    def receipt_from_json(self, data: Union[str, bytes, Dict[str, Any]]) -> Receipt:
        """A receipt serialized by :meth:`Receipt.to_json` (in this process
        or another), as a receipt of this limiter: it must name this
        limiter's prefix, algorithm and quota (else :class:`ForeignReceipt`).
        Each load is a new receipt, usable once: a replay is bounded by the
        scripts, not here (see :mod:`ratelab_client.receipt`)."""
        fields = parse_receipt(data)
        ours = (self.prefix, self.algorithm.fingerprint_input)
        theirs = (fields["prefix"], fields["fingerprint"])
        if theirs != ours:
            raise ForeignReceipt(
                f"a receipt of another limiter (prefix {theirs[0]!r}, {theirs[1]}); this one is "
                f"prefix {ours[0]!r}, {ours[1]}"
            )
        if fields["cost"] > self.algorithm.capacity:
            raise ValueError(f"not a receipt of this limiter: a cost of {fields['cost']} is above its capacity")
        return Receipt(self, fields["key"], fields["cost"], fields["stamp_at"], fields["stamp_mark"])

    def _call(self, op: str, key_b: bytes, cost: int, registry: bool = False) -> Call:
        now = None
        if self.clock is not None:
            now = self.clock()
            if isinstance(now, bool) or not isinstance(now, int) or now < 0:
                raise ValueError(f"the clock must answer a non-negative int of µs, not {now!r}")
            now = min(now, 2**52)
        started = self.monotonic()
        give_up = None if self.timeout is None else started + round(self.timeout * 1_000_000)
        return Call(op, key_b, self.redis_key(key_b), cost, now, give_up,
                    now if now is not None else started, registry=registry)

    def arm(self, call: Call) -> None:
        """Starts the call's timeout now: its connection is ready. Setting
        up a connection (bounded by ``connect_timeout``) is not counted
        against it, so that a cold start on a busy Redis is not an outage;
        the deadline sent is still the instant this caller gives up."""
        if self.timeout is not None:
            call.give_up = self.monotonic() + round(self.timeout * 1_000_000)

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
                self.record_sample((yield ("TIME",)))
            deadline = self.redis_clock.deadline(call.give_up)
        args = self.arguments(call.cost, call.now, call.op, deadline, actual=call.actual, stamp=call.stamp)
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

    def record_sample(self, times: Any) -> None:
        """``[(before_us, TIME reply, after_us)]`` (one per master) as the
        offset to Redis's clock."""
        self.counters.count("clock_samples")
        try:
            self.redis_clock.record(samples_from(times))
        except ValueError as e:
            raise DataError(f"invalid reply to TIME: {e}") from e

    # -- replies that come after their caller gave up ---------------------------

    @staticmethod
    def may_charge(call: Call) -> bool:
        """The call is one whose late reply may be an admission to give back."""
        return call.op == "check" and call.cost > 0

    def late_refund(self, call: Call, reply: Any) -> Optional[Call]:
        """For a check whose caller gave up before its reply came: the
        refund (a settlement to 0 by the reply's stamp, with no deadline)
        that gives its admission back, or None when the reply admitted
        nothing. Raises :class:`DataError` for a reply no script sends."""
        if not self.may_charge(call):
            return None
        decision, stamp = self.validate(reply, call.op, call.cost, call.now)
        if not decision.allowed:
            return None
        refund = self._call("settle", call.key, call.cost)
        refund.give_up = None
        refund.actual, refund.stamp = 0, stamp
        return refund

    def late_refund_failed(self, refund: Call, error: BaseException) -> None:
        """A late admission could not be given back: it stays charged."""
        self.counters.count("late_refunds_failed")
        logger.warning("ratelab %s: a check that timed out was admitted after all, and could not be given "
                       "back (%r): it stays charged", self.algorithm.name, error)

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
        if self.refusals is not None and call.op in ("settle", "reset"):
            self.refusals.forget(call.key)
        permit = self.breaker.permit()
        if permit == "call":
            return None
        if permit == "probe":
            call.probe = True
            return None
        return CircuitOpen(float(permit))

    def answered(self, call: Call, reply: Any) -> Decision:
        """Redis's reply, validated and counted (raises :class:`DataError`),
        with the receipt of an admission."""
        decision, stamp = self.validate(reply, call.op, call.cost, call.now)
        self.breaker.success()
        self.counters.count("answered")
        if self.refusals is not None and call.op == "check" and not decision.allowed:
            self.refusals.remember(call.key, call.cost, call.local_now, decision.limit,
                                   decision.remaining, decision.retry_after_micros,
                                   decision.reset_after_micros)
        if call.op == "check" and call.cost > 0 and decision.allowed:
            receipt = Receipt(self, call.key, call.cost, *stamp)
            decision = Decision(decision.allowed, decision.limit, decision.remaining,
                                decision.retry_after_micros, decision.reset_after_micros,
                                decision.delay_micros, receipt=receipt)
        return decision

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
        alert), or ``error`` raised. Settlements and resets raise: there is
        nothing to give back on a store that is not there (the settled
        admission counts as charged)."""
        if call.op in ("settle", "reset"):
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

    def decision(self, reply: Any, op: str = "peek", cost: int = 0, now: Optional[int] = None) -> Decision:
        """A script's reply to ``op`` of ``cost`` (at the caller's ``now``, if
        one was sent) as a :class:`Decision`, trusting nothing in it."""
        return self.validate(reply, op, cost, now)[0]

    def validate(self, reply: Any, op: str, cost: int, now: Optional[int]) -> Tuple[Decision, Tuple[int, int]]:
        """The decision and the stamp of a script's reply to ``op`` of
        ``cost``: eight integers, ``allowed`` 0 or 1, ``limit`` the capacity,
        ``remaining`` at most the limit, no wait to retry an admitted request
        and no delay for a refused one; waits within the longest this quota
        produces (plus 1 s and the slack), but for a debt's refusals, peeks,
        settlements and resets (up to :data:`MAX_END`: settlements charge
        whatever the room); a stamp exactly for a check admitted with a cost
        above 0 (a debt's after ``now`` and within the longest wait of it,
        when ``now`` was sent; a window's with a mark from 1), ``0, 0`` otherwise.
        Anything else raises :class:`DataError`."""

        def invalid(why: str) -> DataError:
            return DataError(f"ratelab {self.algorithm.name}: invalid reply {reply!r}: {why}")

        if not isinstance(reply, (list, tuple)) or len(reply) != REPLY_LEN:
            raise invalid("not eight integers")
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in reply):
            raise invalid("not eight integers")
        n: Sequence[int] = reply
        if any(x < 0 for x in n):
            raise invalid("a negative integer")
        allowed, limit, remaining, retry, reset, delay, at, mark = n
        if limit != self.algorithm.capacity:
            raise invalid("limit is not this limiter's capacity")
        if remaining > limit:
            raise invalid("remaining above the limit")
        admission = op == "check" and cost > 0 and allowed == 1
        # A settlement's debt lengthens a debt's waits, never an admission's:
        # it needed the room.
        max_wait = max(self.max_wait, MAX_END) if self.algorithm.debt and not admission else self.max_wait
        if max(retry, reset, delay) > max_wait:
            raise invalid("a wait longer than this quota can produce")
        if allowed not in (0, 1):
            raise invalid("allowed is neither 0 nor 1")
        if (allowed == 1 and retry != 0) or (allowed == 0 and delay != 0):
            raise invalid("a retry wait when admitted, or a delay when refused")
        if admission:
            if self.algorithm.debt:
                # The key is full again after the admission, and at most the
                # longest wait after the instant sent.
                ok = at > now and at - now <= self.max_wait if now is not None else 1 <= at <= MAX_END
            else:
                # A window's mark counts at least the admission's own units.
                ok = mark >= 1 and at <= MAX_END
            if not ok or mark > MAX_EXACT:
                raise invalid("a stamp out of bounds")
        elif (at, mark) != (0, 0):
            raise invalid("a stamp for no admission")
        return Decision(allowed == 1, limit, remaining, retry, reset, delay), (at, mark)


def connect_timed_out(connect_timeout: Optional[float]) -> Timeout:
    """The error of a connection not set up in time."""
    bound = "its connect timeout" if connect_timeout is None else f"{connect_timeout * 1000:g} ms"
    return Timeout(f"could not connect to the rate limiter backend within {bound}")


def _key(key: Key) -> bytes:
    if not isinstance(key, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"a key is str or bytes, not {type(key).__name__}")
    return key_bytes(key)


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

