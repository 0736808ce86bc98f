"""The asyncio limiter (``redis.asyncio``): the same keys, arguments,
decisions, timeout, failure policy, breaker, alerts, stats and refusal cache
as the synchronous :class:`~ratelab_client.Limiter`, whose non-I/O half it
shares (``ratelab_client.core``)."""

from __future__ import annotations

import asyncio
import select
from collections import deque
from typing import Any, Callable, Deque, List, Optional, Set, Tuple, Union

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .clock import RedisClock, monotonic_us
from .core import DEFAULT_QUOTA_CHECK_EVERY, Call, Command, Core, Decision, connect_timed_out, is_cluster
from .errors import RatelabError
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

__all__ = ["AsyncLimiter"]


class _Pipe:
    """One connection that every task of a limiter shares: each command is
    written in turn, and one reader task reads the replies back in order
    (Redis answers a connection's commands in the order they came), so that
    a caller who gives up leaves the connection as it was: its reply is
    still read, and handed to whoever waits for it (:meth:`watch`).

    Closed, with every pending command failed, when its connection is lost,
    when a reply is overdue by :data:`LATE_REPLY_WAIT` (a host gone without
    a word), or once retired and drained."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.loop = asyncio.get_running_loop()
        self.closed = False
        self._retired = False
        self._pending: Deque["asyncio.Future[Any]"] = deque()
        self._owed = 0
        self._send_lock = asyncio.Lock()
        self._tasks: Set["asyncio.Task[Any]"] = set()
        self._reader = self.loop.create_task(self._read())

    def submit(self, command: Command) -> "asyncio.Future[Any]":
        """Sends ``command`` (after those submitted before it) and answers
        the future of its reply, at once: a caller cancelled or timed out
        afterwards never leaves a reply unmatched."""
        reply = self.loop.create_future()
        reply.add_done_callback(_retrieve)
        if self.closed:
            reply.set_exception(redis.exceptions.ConnectionError("the connection to Redis was closed"))
            return reply
        self._spawn(self._write(command, reply))
        return reply

    def usable(self) -> bool:
        """Open, and, when no reply is owed, with nothing to read: a server
        that closed the connection (a restart) is seen before a command is
        sent, even when the event loop has not run since."""
        if self.closed or self._retired or self._reader.done():
            return False
        if self.loop is not _running_loop():
            return False
        transport = getattr(getattr(self.connection, "_writer", None), "transport", None)
        if transport is None or transport.is_closing():
            return False
        if self._pending:
            return True
        sock = transport.get_extra_info("socket")
        try:
            return not _readable(sock.fileno())
        except (OSError, ValueError, AttributeError):
            return False

    def watch(self, reply: "asyncio.Future[Any]") -> None:
        """Its caller gave up on ``reply``: the connection is closed if it
        has not come within :data:`LATE_REPLY_WAIT`."""
        if not reply.done():
            handle = self.loop.call_later(LATE_REPLY_WAIT, self._overdue, reply)
            self._owed += 1

            def came(_: Any) -> None:
                handle.cancel()
                self._owed -= 1

            reply.add_done_callback(came)

    def stalled(self) -> bool:
        """A reply whose caller gave up has not come yet."""
        return self._owed > 0 and not self.closed

    def retire(self) -> None:
        """No new command: closed once the replies owed have come (or are
        overdue)."""
        self._retired = True
        if not self._pending:
            self.close()
        else:
            self.loop.call_later(LATE_REPLY_WAIT, self.close)

    def close(self, error: Optional[BaseException] = None) -> None:
        if self.closed:
            return
        self.closed = True
        failure = error if isinstance(error, redis.exceptions.ConnectionError) else (
            redis.exceptions.ConnectionError(f"the connection to Redis was closed: {error!r}"
                                             if error else "the connection to Redis was closed"))
        while self._pending:
            reply = self._pending.popleft()
            if not reply.done():
                reply.set_exception(failure)
        if self.loop.is_closed():
            return
        if self._reader is not asyncio.current_task():
            self._reader.cancel()
        self._spawn(self.connection.disconnect(nowait=True))

    async def wait_closed(self) -> None:
        await asyncio.gather(self._reader, *self._tasks, return_exceptions=True)

    def _overdue(self, reply: "asyncio.Future[Any]") -> None:
        if not reply.done():
            self.close(redis.exceptions.TimeoutError(f"no reply within {LATE_REPLY_WAIT:g} s"))

    def _spawn(self, coroutine: Any) -> None:
        task = self.loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_retrieve)

    async def _write(self, command: Command, reply: "asyncio.Future[Any]") -> None:
        async with self._send_lock:
            if self.closed:
                reply.set_exception(redis.exceptions.ConnectionError("the connection to Redis was closed"))
                return
            self._pending.append(reply)
            try:
                await self.connection.send_packed_command(self.connection.pack_command(*command),
                                                          check_health=False)
            except BaseException as e:
                # Written in part, or not: nothing after it can be trusted.
                self.close(e)
                raise

    async def _read(self) -> None:
        try:
            while True:
                try:
                    answer: Any = await self.connection.read_response()
                except redis.exceptions.ResponseError as e:
                    answer = e  # an error reply: the command's answer
                if not self._pending:
                    raise redis.exceptions.ConnectionError(f"Redis sent a reply no command asked for: {answer!r}")
                reply = self._pending.popleft()
                if not reply.done():
                    if isinstance(answer, BaseException):
                        reply.set_exception(answer)
                    else:
                        reply.set_result(answer)
                if self._retired and not self._pending:
                    self.close()
                    return
        except asyncio.CancelledError:
            self.close()
            raise
        except GeneratorExit:
            # Collected with its event loop gone (a limiter never closed):
            # nothing can be scheduled any more.
            self.closed = True
            raise
        except BaseException as e:
            self.close(e)


def _readable(fd: int) -> bool:
    """Something to read on ``fd`` now (data, or the end of the stream)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


def _retrieve(future: "asyncio.Future[Any]") -> None:
    # An error no caller awaits any more (it gave up) is not worth a warning.
    if not future.cancelled():
        future.exception()


def _running_loop() -> Optional[asyncio.AbstractEventLoop]:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class _AsyncIO:
    """Runs a limiter's commands, with none of redis-py's own retries (the
    limiter's breaker and policy decide), on one connection of its own (a
    :class:`_Pipe`) made with the client's settings:

    - Set up (TCP, the handshake, a sample of Redis's clock) once for every
      caller that needs it at the time, within ``connect_timeout``; each
      call's own timeout starts once it is ready. A connection the server
      closed (a restart) is replaced before any command is sent on it, and a
      breaker's probe always sets up a new one.
    - A caller that gives up (its timeout, or a cancellation) is answered at
      once; the command goes on, and a check's late admission is given back
      by its stamp when its reply comes.
    - A cluster client routes each command itself; its calls are bounded
      the same way, and go on in the background as well."""

    def __init__(self, client: Any, core: Core) -> None:
        self.client = client
        self.core = core
        self.cluster = is_cluster(client)
        self._pipe: Optional[_Pipe] = None
        self._opening: Optional["asyncio.Task[_Pipe]"] = None
        self._old: List[_Pipe] = []
        self._late: Set["asyncio.Task[Any]"] = set()

    # -- the connection ----------------------------------------------------------

    def stalled(self) -> bool:
        """Redis owes a reply whose caller gave up (a stall): a new
        connection would wait as long, and setting one up counts against
        the call's timeout."""
        return any(p.stalled() for p in [self._pipe, *self._old] if p is not None)

    async def pipe(self, fresh: bool = False, within: Optional[float] = None) -> _Pipe:
        """The connection, set up if needed (``fresh``: anew), within
        ``connect_timeout`` (or ``within`` seconds)."""
        pipe = self._pipe
        if pipe is not None and (fresh or not pipe.usable()):
            self._pipe = None
            self._old = [p for p in self._old if not p.closed]
            if pipe.loop is _running_loop():
                pipe.retire()
                self._old.append(pipe)
            pipe = None
        if pipe is not None:
            return pipe
        opening = self._opening
        if opening is None or opening.done() or opening.get_loop() is not _running_loop():
            opening = self._opening = asyncio.get_running_loop().create_task(self._open())
            opening.add_done_callback(_retrieve)
        bound = self.core.connect_timeout if within is None else within
        try:
            if bound is None:
                return await asyncio.shield(opening)
            return await asyncio.wait_for(asyncio.shield(opening), bound)
        except asyncio.TimeoutError:
            if within is not None:
                raise redis.exceptions.TimeoutError("the timeout passed while connecting") from None
            raise connect_timed_out(self.core.connect_timeout) from None

    async def _open(self) -> _Pipe:
        core = self.core
        pool = self.client.connection_pool
        connection = pool.connection_class(**pool.connection_kwargs)
        connection.retry = Retry(NoBackoff(), 0)
        connection.socket_connect_timeout = core.connect_timeout
        connection.socket_timeout = core.connect_timeout
        try:
            await _bounded_by(connection.connect(), core.connect_timeout)
        except (asyncio.TimeoutError, redis.exceptions.TimeoutError) as e:
            await connection.disconnect(nowait=True)
            raise connect_timed_out(core.connect_timeout) from e
        # Each reply is awaited as long as one is owed: callers bound their
        # own waits.
        connection.socket_timeout = None
        pipe = _Pipe(connection)
        # A new connection, maybe to another server (a failover): its clock
        # is measured again, as part of setting it up.
        core.redis_clock.invalidate()
        if core.timeout is not None:
            try:
                before = monotonic_us()
                reply = await _bounded_by(asyncio.shield(pipe.submit(("TIME",))), core.connect_timeout)
                core.record_sample([(before, reply, monotonic_us())])
            except BaseException as e:
                pipe.close(e)
                if isinstance(e, asyncio.TimeoutError):
                    raise connect_timed_out(core.connect_timeout) from e
                raise
        if self._opening is asyncio.current_task():
            self._pipe = pipe
        return pipe

    async def warm(self) -> bool:
        try:
            if self.cluster:
                if not self.client.get_primaries():
                    await _bounded_by(self.client.initialize(), self.core.connect_timeout)
            else:
                await self.pipe()
            return True
        except (redis.exceptions.RedisError, OSError, RatelabError, asyncio.TimeoutError):
            return False

    async def aclose(self) -> None:
        late = list(self._late)
        if late:
            await asyncio.wait(late, timeout=LATE_REPLY_WAIT)
        opening, self._opening = self._opening, None
        if opening is not None and not opening.done() and opening.get_loop() is _running_loop():
            opening.cancel()
            await asyncio.gather(opening, return_exceptions=True)
        pipes = [p for p in [self._pipe, *self._old] if p is not None]
        self._pipe, self._old = None, []
        for pipe in pipes:
            if pipe.loop is _running_loop():
                pipe.close()
                await pipe.wait_closed()

    # -- calls --------------------------------------------------------------------

    async def run(self, flow: Any, call: Call) -> Any:
        if self.cluster:
            return await self._drive(flow, lambda command: self._cluster(command, call))
        stalled = self.stalled()
        pipe = await self.pipe(fresh=call.probe, within=self._left(call) if stalled else None)
        if not stalled:
            self.core.arm(call)
        return await self._drive(flow, lambda command: self._execute(pipe, command, call))

    @staticmethod
    async def _drive(flow: Any, execute: Callable[[Command], Any]) -> Any:
        try:
            command = next(flow)
            while True:
                try:
                    result = await execute(command)
                except Exception as e:
                    command = flow.throw(e)
                else:
                    command = flow.send(result)
        except StopIteration as done:
            return done.value

    async def _execute(self, pipe: _Pipe, command: Command, call: Call) -> Any:
        left = self._left(call)
        before = monotonic_us()
        reply = await self._await(pipe.submit(command), left, command, call, pipe)
        if command[0] == "TIME":
            return [(before, reply, monotonic_us())]
        return reply

    def _left(self, call: Call) -> Optional[float]:
        left = self.core.remaining_s(call)
        if left is not None and left <= 0:
            raise redis.exceptions.TimeoutError("the timeout passed before the command was sent")
        return left

    async def _await(self, reply: "asyncio.Future[Any]", left: Optional[float], command: Command, call: Call,
                     pipe: Optional[_Pipe]) -> Any:
        """``reply``, within ``left`` seconds: past them (or cancelled) the
        caller is answered, and the command goes on."""
        try:
            if left is None:
                return await asyncio.shield(reply)
            return await asyncio.wait_for(asyncio.shield(reply), left)
        except asyncio.TimeoutError:
            self._gave_up(reply, command, call, pipe)
            raise redis.exceptions.TimeoutError("the timeout passed waiting for Redis") from None
        except asyncio.CancelledError:
            self._gave_up(reply, command, call, pipe)
            raise

    def _gave_up(self, reply: "asyncio.Future[Any]", command: Command, call: Call, pipe: Optional[_Pipe]) -> None:
        if pipe is not None:
            pipe.watch(reply)
        if command[0] == "EVALSHA" and self.core.may_charge(call):
            reply.add_done_callback(lambda done: self._late_reply(call, done))

    def _late_reply(self, call: Call, reply: "asyncio.Future[Any]") -> None:
        if reply.cancelled() or reply.exception() is not None:
            return  # an error (expired, NOSCRIPT, the connection lost): nothing to give back
        try:
            refund = self.core.late_refund(call, reply.result())
        except RatelabError:
            return
        if refund is None:
            return
        task = asyncio.get_running_loop().create_task(self._refund(refund))
        self._late.add(task)
        task.add_done_callback(self._late.discard)
        task.add_done_callback(_retrieve)

    async def _refund(self, refund: Call) -> None:
        """Gives a late admission back: a settlement to 0 by its stamp,
        within :data:`LATE_REPLY_WAIT`."""
        try:
            await _bounded_by(self._settle(refund), LATE_REPLY_WAIT)
        except Exception as e:
            self.core.late_refund_failed(refund, e)
            return
        self.core.counters.count("late_refunds")

    async def _settle(self, refund: Call) -> None:
        if self.cluster:
            await self._drive(self.core.flow(refund), lambda command: self._cluster(command, refund))
        else:
            pipe = await self.pipe()
            await self._drive(self.core.flow(refund), lambda command: self._execute(pipe, command, refund))

    async def _cluster(self, command: Command, call: Call) -> Any:
        client = self.client
        if command[0] == "TIME":
            times = []
            primaries = client.get_primaries()
            if not primaries:
                # The asyncio cluster client learns its nodes on first use.
                await self._bounded(client.initialize(), call, command)
                primaries = client.get_primaries()
            for node in primaries:
                before = monotonic_us()
                reply = await self._bounded(client.execute_command("TIME", target_nodes=node), call, command)
                times.append((before, reply, monotonic_us()))
            return times
        if command[:2] == ("SCRIPT", "LOAD"):
            return await self._bounded(client.script_load(command[2]), call, command)
        return await self._bounded(client.execute_command(*command), call, command)

    async def _bounded(self, awaitable: Any, call: Call, command: Command) -> Any:
        try:
            left = self._left(call)
        except BaseException:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise
        task = asyncio.ensure_future(awaitable)
        task.add_done_callback(_retrieve)
        return await self._await(task, left, command, call, None)


async def _bounded_by(awaitable: Any, seconds: Optional[float]) -> Any:
    if seconds is None:
        return await awaitable
    return await asyncio.wait_for(awaitable, seconds)


class AsyncLimiter:
    """One algorithm on one quota, any number of keys, state on Redis,
    through ``redis.asyncio`` (a ``redis.asyncio.Redis`` or
    ``redis.asyncio.cluster.RedisCluster``). The options, the answers and the
    errors are :class:`~ratelab_client.Limiter`'s; every method is a
    coroutine. The timeout bounds each call whatever the client's own
    settings, once the limiter has a connection (setting one up is bounded
    by ``connect_timeout``): a call that times out is never charged.

    One limiter serves every task of its event loop, on one connection of
    its own that they share (each command written in turn, the replies read
    back in order), as ioredis and the Rust client do.
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
        self._io = _AsyncIO(client, self._core)

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
        """``ARGV`` of one call."""
        return self._core.arguments(cost, now, op, deadline, actual=actual, stamp=stamp)

    def decision(self, reply: Any, op: str = "peek", cost: int = 0, now: Optional[int] = None) -> Decision:
        """A script's reply as a :class:`Decision`, trusting nothing in it."""
        return self._core.decision(reply, op, cost, now)

    def receipt_from_json(self, data: Union[str, bytes, dict]) -> Receipt:
        """As :meth:`Limiter.receipt_from_json <ratelab_client.Limiter.receipt_from_json>`."""
        return self._core.receipt_from_json(data)

    def stats(self) -> Stats:
        """What this limiter has done so far."""
        return self._core.stats()

    async def check(self, key: Key, cost: int = 1) -> Decision:
        """As :meth:`Limiter.check <ratelab_client.Limiter.check>`."""
        return await self._decide(self._core.start("check", key, cost))

    async def peek(self, key: Key, cost: int = 1) -> Decision:
        """As :meth:`Limiter.peek <ratelab_client.Limiter.peek>`."""
        return await self._decide(self._core.start("peek", key, cost))

    async def settle(self, receipt: Receipt, actual: int) -> Decision:
        """As :meth:`Limiter.settle <ratelab_client.Limiter.settle>`. The
        receipt is spent when the call starts: two tasks settling one receipt
        get one settlement and one :class:`ReceiptSpent`."""
        return await self._decide(self._core.start_settle(receipt, actual))

    async def refund(self, receipt: Receipt) -> Decision:
        """As :meth:`Limiter.refund <ratelab_client.Limiter.refund>`."""
        return await self.settle(receipt, 0)

    async def reset(self, key: Key) -> None:
        """As :meth:`Limiter.reset <ratelab_client.Limiter.reset>`."""
        await self._decide(self._core.start_reset(key))

    async def warm(self) -> bool:
        """Sets up the limiter's connection (and samples Redis's clock) if it
        has none, within ``connect_timeout``, so that the next calls start
        at once: at an application's start, or before a deadline that should
        not count connecting. True when it is ready; never raises for an
        outage (the next call will), and tries nothing while the breaker is
        open."""
        if self._core.breaker.state()[0]:
            return False
        return await self._io.warm()

    async def aclose(self) -> None:
        """Closes the limiter's own connections (not the client's), once the
        late admissions it is giving back are given back (at most
        :data:`~ratelab_client.resilience.LATE_REPLY_WAIT`)."""
        await self._io.aclose()

    async def __aenter__(self) -> "AsyncLimiter":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _decide(self, call: Call) -> Decision:
        core = self._core
        cached = core.cached(call)
        if cached is not None:
            return cached
        error = core.permit(call)
        if error is None:
            try:
                return core.answered(call, await self._io.run(core.flow(call), call))
            except Exception as e:
                error = core.failed(call, e)
        return core.on_failure(call, error)

    def __repr__(self) -> str:
        core = self._core
        return (f"AsyncLimiter({core.algorithm.name!r}, {core.quota!r}, prefix={core.prefix!r}, "
                f"timeout={core.timeout!r}, on_failure={core.failure.value!r})")
