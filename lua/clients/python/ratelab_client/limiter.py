"""A rate limiter on Redis (redis-py, synchronous) that calls ratelab's
scripts (lua/README.md): the same keys, arguments and decisions as the Rust
``RedisLimiter``, and the same timeout, failure policy, circuit breaker,
alerts, stats and refusal cache, so Python, Rust and Node services share one
limit and fail alike."""

from __future__ import annotations

import socket
import threading
from typing import Any, Callable, List, Optional, Tuple, Union

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .clock import RedisClock, monotonic_us
from .core import Call, Command, Core, Decision, connect_timed_out, drive, is_cluster
from .errors import (
    BackendError,
    CircuitOpen,
    CostTooHigh,
    DataError,
    Expired,
    QuotaMismatch,
    RatelabError,
    Timeout,
    Unavailable,
)
from .protocol import DEFAULT_PREFIX, Key, Quota
from .receipt import Receipt
from .resilience import (
    DEFAULT_BREAKER_COOL_DOWN,
    DEFAULT_BREAKER_THRESHOLD,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_TIMEOUT,
    LATE_REPLY_WAIT,
    AlertHook,
    FailurePolicy,
    Stats,
)
from .core import DEFAULT_QUOTA_CHECK_EVERY

__all__ = [
    "BackendError",
    "CircuitOpen",
    "CostTooHigh",
    "DataError",
    "Decision",
    "Expired",
    "Limiter",
    "QuotaMismatch",
    "RatelabError",
    "Timeout",
    "Unavailable",
]


def _no_retry() -> Retry:
    return Retry(NoBackoff(), 0)


#: Idle connections a limiter keeps open for its next calls.
MAX_IDLE_CONNECTIONS = 32
#: Calls whose caller gave up that a limiter may still be reading, each in a
#: thread of its own (past it, their connections are closed: see
#: :data:`~ratelab_client.resilience.LATE_REPLY_WAIT`).
MAX_LATE_CALLS = 32


def _set_socket_timeout(connection: Any, seconds: Optional[float]) -> None:
    # redis-py applies `socket_timeout` when it connects; an open socket
    # takes a new one directly.
    sock = getattr(connection, "_sock", None)
    if sock is not None:
        sock.settimeout(seconds)


def _still_open(connection: Any) -> bool:
    """An idle connection the server has not closed (a restart, its idle
    timeout): nothing to read on it. One non-blocking poll, as redis-py's
    own pool does before reusing a connection."""
    if getattr(connection, "_sock", None) is None:
        return False
    try:
        return not connection.can_read(0)
    except (redis.exceptions.RedisError, OSError):
        return False


class _LateReply(Exception):
    """A check's reply did not come before its caller gave up: the
    connection is left to read it in the background."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class _SyncIO:
    """Runs a limiter's commands on connections of its own, made with the
    client's settings (address, credentials, TLS, database; its pool's
    connection class), with none of redis-py's own retries: the limiter's
    breaker and policy decide.

    - A connection is set up (TCP, the handshake, a sample of Redis's clock)
      within ``connect_timeout``; the call's own timeout starts once it is
      ready. An idle connection is reused only if the server has not closed
      it (a restart): one closed drops every idle one, and a breaker's probe
      always connects anew, so no call is spent on a stale connection.
    - A check whose reply has not come when its caller gives up keeps its
      connection: a thread reads the reply (for at most
      :data:`LATE_REPLY_WAIT`) and gives an admission back by its stamp.
      Any other failure closes the connection (a half-read reply must never
      be read by the next call).
    - A cluster client routes each command itself."""

    def __init__(self, client: Any, core: Core) -> None:
        self.client = client
        self.core = core
        self.cluster = is_cluster(client)
        self._idle: List[Any] = []
        self._lock = threading.Lock()
        self._late: List[threading.Thread] = []
        self._closed = False
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        self._socket_timeout = kwargs.get("socket_timeout")

    def _new(self) -> Any:
        pool = self.client.connection_pool
        connection = pool.connection_class(**pool.connection_kwargs)
        connection.retry = _no_retry()
        return connection

    def _take(self, fresh: bool) -> Any:
        if fresh:
            self._drop_idle()
            return self._new()
        while True:
            with self._lock:
                if not self._idle:
                    return self._new()
                connection = self._idle.pop()
            if _still_open(connection):
                return connection
            # Closed by the server: so, most likely, is every other one.
            connection.disconnect()
            self._drop_idle()

    def _give(self, connection: Any) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < MAX_IDLE_CONNECTIONS:
                self._idle.append(connection)
                return
        connection.disconnect()

    def _drop_idle(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.disconnect()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            late = list(self._late)
        # Each late reply is awaited for at most LATE_REPLY_WAIT after its
        # caller gave up: no longer than that from now, all together.
        until = monotonic_us() + round(LATE_REPLY_WAIT * 1_000_000)
        for thread in late:
            thread.join(max(0.0, (until - monotonic_us()) / 1_000_000))
        self._drop_idle()

    def run(self, flow: Any, call: Call) -> Any:
        if self.cluster:
            return drive(flow, lambda command: self._cluster(command, call))
        # While Redis owes a reply on another connection (a stall), a new
        # one would wait as long: setting it up counts against the call's
        # timeout then.
        stalled = self._stalled()
        connection = self._take(fresh=call.probe)
        try:
            if getattr(connection, "_sock", None) is None:
                self._set_up(connection, self._left(call) if stalled else None)
            if not stalled:
                self.core.arm(call)
            result = drive(flow, lambda command: self._execute(connection, command, call))
        except _LateReply as late:
            self._read_later(connection, call)
            raise late.error from None
        except BaseException as e:
            connection.disconnect()
            if isinstance(e, (redis.exceptions.ConnectionError, OSError)):
                self._drop_idle()
            raise
        self._give(connection)
        return result

    def _stalled(self) -> bool:
        with self._lock:
            return any(thread.is_alive() for thread in self._late)

    def _set_up(self, connection: Any, within: Optional[float]) -> None:
        """Connects (and handshakes) within ``connect_timeout`` (or
        ``within`` seconds, what is left of the call's timeout), then
        samples Redis's clock on the new connection (maybe another server
        after a failover)."""
        core = self.core
        core.redis_clock.invalidate()
        bound = core.connect_timeout if within is None else within
        connection.socket_connect_timeout = bound
        connection.socket_timeout = bound
        if within is not None:
            # Part of the call: its timeout's error.
            connection.connect()
            if core.timeout is not None:
                self._sample(connection)
            return
        try:
            connection.connect()
            if core.timeout is not None:
                self._sample(connection)
        except (redis.exceptions.TimeoutError, socket.timeout) as e:
            raise connect_timed_out(core.connect_timeout) from e

    def _sample(self, connection: Any) -> None:
        before = monotonic_us()
        connection.send_command("TIME")
        reply = connection.read_response()
        self.core.record_sample([(before, reply, monotonic_us())])

    def _left(self, call: Call) -> Optional[float]:
        left = self.core.remaining_s(call)
        if left is not None and left <= 0:
            raise redis.exceptions.TimeoutError("the timeout passed before the command was sent")
        return left

    def _execute(self, connection: Any, command: Command, call: Call) -> Any:
        left = self._left(call)
        # No timeout: the client's own socket timeout.
        _set_socket_timeout(connection, left if left is not None else self._socket_timeout)
        if command[0] == "TIME":
            before = monotonic_us()
            connection.send_command("TIME")
            reply = connection.read_response()
            return [(before, reply, monotonic_us())]
        connection.send_command(*command)
        if command[0] == "EVALSHA" and self.core.may_charge(call):
            try:
                # Kept open on a timeout: the reply is read later.
                return connection.read_response(disconnect_on_error=False)
            except redis.exceptions.TimeoutError as e:
                raise _LateReply(e) from None
        return connection.read_response()

    def _read_later(self, connection: Any, call: Call) -> None:
        with self._lock:
            self._late = [t for t in self._late if t.is_alive()]
            if self._closed or len(self._late) >= MAX_LATE_CALLS:
                connection.disconnect()
                return
            thread = threading.Thread(target=self._late_reply, args=(connection, call),
                                      name="ratelab-late-reply", daemon=True)
            self._late.append(thread)
        thread.start()

    def _late_reply(self, connection: Any, call: Call) -> None:
        """Reads the reply of a check whose caller gave up; an admission is
        given back at once, by its stamp, on the same connection."""
        until = monotonic_us() + round(LATE_REPLY_WAIT * 1_000_000)

        def left() -> float:
            seconds = (until - monotonic_us()) / 1_000_000
            if seconds <= 0:
                raise redis.exceptions.TimeoutError("no late reply in time")
            return seconds

        def execute(command: Command) -> Any:
            _set_socket_timeout(connection, left())
            connection.send_command(*command)
            return connection.read_response()

        try:
            _set_socket_timeout(connection, left())
            try:
                reply = connection.read_response()
            except redis.exceptions.ResponseError:
                reply = None  # expired, NOSCRIPT...: nothing was charged
            refund = None if reply is None else self.core.late_refund(call, reply)
        except Exception:
            # No reply in time, or none readable: the charge stands.
            connection.disconnect()
            return
        if refund is not None:
            try:
                drive(self.core.flow(refund), execute)
            except Exception as e:
                self.core.late_refund_failed(refund, e)
                connection.disconnect()
                return
            self.core.counters.count("late_refunds")
        self._give(connection)

    def _cluster(self, command: Command, call: Call) -> Any:
        # A cluster routes each command itself: its own socket timeouts
        # bound each (set them to the limiter's timeout), and the limiter
        # checks the time left before each command.
        self._left(call)
        client = self.client
        if command[0] == "TIME":
            times = []
            for node in client.get_primaries():
                before = monotonic_us()
                reply = client.execute_command("TIME", target_nodes=node)
                times.append((before, reply, monotonic_us()))
            return times
        if command[:2] == ("SCRIPT", "LOAD"):
            return client.script_load(command[2])
        return client.execute_command(*command)


class Limiter:
    """One algorithm on one quota, any number of keys, state on Redis.

    ``client`` is a ``redis.Redis`` (or ``redis.cluster.RedisCluster``).
    ``algorithm`` is one of :data:`~ratelab_client.ALGORITHMS`.

    Options (the Rust ``RedisLimiterBuilder``'s, with its defaults):

    - ``timeout`` (seconds, default 0.1; ``None`` for none): the most a call
      waits for Redis once it has a connection (redis-py's own retries are
      not used). The call's deadline on Redis's clock is the instant the
      caller gives up, from a measured offset (see
      :mod:`ratelab_client.clock`): a call that times out is never charged
      (a check whose script ran before the deadline, and whose reply came
      after it, is given back at once when the reply comes, within
      :data:`~ratelab_client.resilience.LATE_REPLY_WAIT`).
    - ``connect_timeout`` (seconds, default 1.0): the most setting up a new
      connection takes (TCP, the handshake, a sample of Redis's clock),
      before the call's own timeout starts.
    - ``on_failure``: a :class:`FailurePolicy` (``"error"``, ``"allow"``,
      ``"deny"``) for outages; data errors raise whatever it is, unless
      ``policy_on_data_errors``.
    - ``breaker``: ``(threshold, cool_down_seconds)``, default ``(5, 0.5)``;
      a threshold of 0 never opens.
    - ``on_alert``: called with an :class:`Alert` on every failure and quota
      mismatch (besides a ``logging`` warning at most once a second).
    - ``cache_refusals``: remember refusals locally for at most this many
      keys (off by default).
    - ``quota_check_every``: every N-th check (and the first) also records
      this limiter's quota for its key in Redis, and alerts when another
      quota was recorded there (default 100; ``None``: never).
    - ``prefix``, ``clock`` (the caller's µs, sent as ``now``; default Redis
      ``TIME``), ``ttl_slack_ms``, ``redis_clock`` (a :class:`RedisClock`
      shared by limiters on one connection).

    Thread-safe: one limiter may serve every thread of a process.
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
        timeout: Optional[float] = DEFAULT_TIMEOUT,
        connect_timeout: Optional[float] = DEFAULT_CONNECT_TIMEOUT,
        on_failure: Union[FailurePolicy, str] = FailurePolicy.ERROR,
        policy_on_data_errors: bool = False,
        breaker: Tuple[int, float] = (DEFAULT_BREAKER_THRESHOLD, DEFAULT_BREAKER_COOL_DOWN),
        on_alert: Optional[AlertHook] = None,
        cache_refusals: Optional[int] = None,
        quota_check_every: Optional[int] = DEFAULT_QUOTA_CHECK_EVERY,
        redis_clock: Optional[RedisClock] = None,
    ) -> None:
        self._core = Core(
            algorithm, quota, prefix=prefix, clock=clock, ttl_slack_ms=ttl_slack_ms,
            timeout=timeout, on_failure=on_failure, policy_on_data_errors=policy_on_data_errors,
            breaker=breaker, on_alert=on_alert, cache_refusals=cache_refusals,
            redis_clock=redis_clock, quota_check_every=quota_check_every,
            connect_timeout=connect_timeout,
        )
        self.client = client
        self._io = _SyncIO(client, self._core)

    # The limiter's configuration, read-only.
    algorithm = property(lambda self: self._core.algorithm, doc="The algorithm and its parameters.")
    quota = property(lambda self: self._core.quota, doc="The quota.")
    prefix = property(lambda self: self._core.prefix, doc="The key prefix.")
    timeout = property(lambda self: self._core.timeout, doc="The per-call timeout, seconds.")
    ttl_slack_ms = property(lambda self: self._core.ttl_slack_ms, doc="The TTL slack, ms.")
    source = property(lambda self: self._core.source, doc="The script sent to Redis.")
    sha = property(lambda self: self._core.sha, doc="The script's SHA-1.")
    redis_clock = property(lambda self: self._core.redis_clock, doc="The offset to Redis's clock.")

    def redis_key(self, key: Key) -> bytes:
        """The Redis key holding ``key``'s state."""
        return self._core.redis_key(key)

    def arguments(self, cost: int, now: Optional[int] = None, op: str = "check", deadline: Union[int, str] = "",
                  *, actual: Optional[int] = None, stamp: Optional[Tuple[int, int]] = None) -> list:
        """``ARGV`` of one call: version, now or "", cost, slack, deadline or
        "", the operation (``settle`` with its ``actual`` and ``stamp``), the
        algorithm's parameters."""
        return self._core.arguments(cost, now, op, deadline, actual=actual, stamp=stamp)

    def decision(self, reply: Any, op: str = "peek", cost: int = 0, now: Optional[int] = None) -> Decision:
        """A script's reply to ``op`` of ``cost`` (at ``now``, when the caller's
        clock was sent) as a :class:`Decision`, trusting nothing in it."""
        return self._core.decision(reply, op, cost, now)

    def receipt_from_json(self, data: Union[str, bytes, dict]) -> Receipt:
        """A receipt serialized by :meth:`Receipt.to_json` (here or in
        another process: a job queue's worker), as a receipt of this
        limiter, usable once. It must name this limiter's prefix, algorithm
        and quota, else :class:`ForeignReceipt`; a malformed one is a
        ``ValueError``. Loading the same JSON again gives another receipt:
        the scripts bound what replays give back (see
        :mod:`ratelab_client.receipt`)."""
        return self._core.receipt_from_json(data)

    def stats(self) -> Stats:
        """What this limiter has done so far."""
        return self._core.stats()

    def check(self, key: Key, cost: int = 1) -> Decision:
        """Decides a request of weight ``cost`` for ``key``: all or nothing;
        cost 0 reports without consuming. At most one round trip for the
        script (none for a cached refusal or an open breaker), plus a
        ``TIME`` when the clock sample is stale.

        An admission of a cost above 0 carries its receipt
        (``decision.receipt``): give it to :meth:`settle` or :meth:`refund`
        when what the request really counts for is known, or drop it to keep
        the charge. A decision the failure policy made (``degraded``) has
        none: nothing was charged on Redis.

        Raises :class:`CostTooHigh`; :class:`DataError`; under
        ``on_failure="error"``, :class:`Unavailable` (:class:`Timeout`,
        :class:`BackendError`, :class:`Expired`, :class:`CircuitOpen`)."""
        return self._decide(self._core.start("check", key, cost))

    def peek(self, key: Key, cost: int = 1) -> Decision:
        """The decision a check of ``cost`` would get now, writing nothing: a
        check at the same instant, with nothing consumed in between, decides
        the same. The refusal cache is neither read nor filled. Raises as
        :meth:`check`; the failure policy answers as for a check."""
        return self._decide(self._core.start("peek", key, cost))

    def settle(self, receipt: Receipt, actual: int) -> Decision:
        """Settles the admission ``receipt`` stands for: it finally counts for
        ``actual`` units instead of the cost it was charged. Less gives the
        difference back, only what the key provably still holds of it (units
        whose debt was repaid, or counted in a window that has ended, belong
        to other requests by then; a reset since gives nothing back); more
        charges the difference as debt that later requests wait out, whatever
        the room. Never takes the key above its capacity. Answers what a peek
        of cost 0 would after it. One round trip.

        The receipt is spent by the call, whatever happens to it: a second
        use raises :class:`ReceiptSpent`. Raises :class:`ForeignReceipt` for
        another limiter's receipt (it stays unspent), ``TypeError`` for
        ``None`` (a decision without a receipt: there is nothing to settle),
        :class:`CostTooHigh` for an ``actual`` above the capacity (spent: the
        admission counts as charged), :class:`DataError`, and
        :class:`Unavailable` on an outage: no failure policy applies, and the
        admission counts as charged."""
        return self._decide(self._core.start_settle(receipt, actual))

    def refund(self, receipt: Receipt) -> Decision:
        """Gives back what the admission ``receipt`` stands for still holds (a
        request that should not count): :meth:`settle` to 0."""
        return self.settle(receipt, 0)

    def reset(self, key: Key) -> None:
        """Puts ``key`` back to full capacity, as if never seen; no receipt
        issued for it before gives anything back afterwards. A key that holds
        something a receipt could still claim keeps a tombstone until none
        could (lua/README.md, "Operations"). One round trip; raises on an
        outage (no failure policy)."""
        self._decide(self._core.start_reset(key))

    def close(self) -> None:
        """Closes the limiter's own connections (not the client's), once the
        late replies it is reading have come (at most
        :data:`~ratelab_client.resilience.LATE_REPLY_WAIT`)."""
        self._io.close()

    def __enter__(self) -> "Limiter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _decide(self, call: Call) -> Decision:
        core = self._core
        cached = core.cached(call)
        if cached is not None:
            return cached
        error = core.permit(call)
        if error is None:
            try:
                return core.answered(call, self._io.run(core.flow(call), call))
            except Exception as e:
                error = core.failed(call, e)
        return core.on_failure(call, error)

    def __repr__(self) -> str:
        core = self._core
        return (f"Limiter({core.algorithm.name!r}, {core.quota!r}, prefix={core.prefix!r}, "
                f"timeout={core.timeout!r}, on_failure={core.failure.value!r})")



