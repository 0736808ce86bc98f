"""The asyncio limiter (``redis.asyncio``): the same keys, arguments,
decisions, timeout, failure policy, breaker, alerts, stats and refusal cache
as the synchronous :class:`~ratelab_client.Limiter`, whose non-I/O half it
shares (``ratelab_client.core``)."""

from __future__ import annotations

import asyncio
from typing import Any, Callable, List, Optional, Tuple, Union

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .clock import RedisClock, monotonic_us
from .core import DEFAULT_QUOTA_CHECK_EVERY, Call, Command, Core, Decision, is_cluster
from .protocol import DEFAULT_PREFIX, Key, Quota
from .receipt import Receipt
from .resilience import (
    DEFAULT_BREAKER_COOL_DOWN,
    DEFAULT_BREAKER_THRESHOLD,
    DEFAULT_TIMEOUT,
    AlertHook,
    FailurePolicy,
    Stats,
)

__all__ = ["AsyncLimiter"]


#: Idle connections a limiter keeps open for its next calls.
MAX_IDLE_CONNECTIONS = 32


class _AsyncIO:
    """Runs a limiter's commands on connections of its own, made with the
    client's settings, each command (and connecting) bounded by the time
    left before the caller gives up, with none of redis-py's own retries. A
    call that fails or is cancelled closes its connection. A cluster client
    routes each command itself."""

    def __init__(self, client: Any, core: Core) -> None:
        self.client = client
        self.core = core
        self.cluster = is_cluster(client)
        self._idle: List[Any] = []

    def _take(self) -> Any:
        if self._idle:
            return self._idle.pop()
        pool = self.client.connection_pool
        connection = pool.connection_class(**pool.connection_kwargs)
        connection.retry = Retry(NoBackoff(), 0)
        return connection

    async def _give(self, connection: Any) -> None:
        if len(self._idle) < MAX_IDLE_CONNECTIONS:
            self._idle.append(connection)
        else:
            await connection.disconnect()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for connection in idle:
            await connection.disconnect()

    async def _bounded(self, awaitable: Any, call: Call) -> Any:
        left = self.core.remaining_s(call)
        if left is None:
            return await awaitable
        if left <= 0:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise redis.exceptions.TimeoutError("the timeout passed before the command was sent")
        try:
            return await asyncio.wait_for(awaitable, left)
        except asyncio.TimeoutError:
            raise redis.exceptions.TimeoutError("the timeout passed waiting for Redis") from None

    async def run(self, flow: Any, call: Call) -> Any:
        if self.cluster:
            return await self._drive(flow, lambda command: self._cluster(command, call))
        connection = self._take()
        try:
            if not connection.is_connected:
                # A new connection, maybe to another server (a failover):
                # its clock is measured again.
                self.core.redis_clock.invalidate()
                await self._bounded(connection.connect(), call)
            result = await self._drive(flow, lambda command: self._execute(connection, command, call))
        except BaseException:
            # Cancelled or timed out mid-reply: the connection holds a
            # half-read answer. Never reuse it.
            await connection.disconnect(nowait=True)
            raise
        await self._give(connection)
        return result

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

    async def _execute(self, connection: Any, command: Command, call: Call) -> Any:
        async def exchange() -> Any:
            if command[0] == "TIME":
                before = monotonic_us()
                await connection.send_command("TIME")
                reply = await connection.read_response()
                return [(before, reply, monotonic_us())]
            await connection.send_command(*command)
            return await connection.read_response()

        return await self._bounded(exchange(), call)

    async def _cluster(self, command: Command, call: Call) -> Any:
        client = self.client
        if command[0] == "TIME":
            times = []
            primaries = client.get_primaries()
            if not primaries:
                # The asyncio cluster client learns its nodes on first use.
                await self._bounded(client.initialize(), call)
                primaries = client.get_primaries()
            for node in primaries:
                before = monotonic_us()
                reply = await self._bounded(client.execute_command("TIME", target_nodes=node), call)
                times.append((before, reply, monotonic_us()))
            return times
        if command[:2] == ("SCRIPT", "LOAD"):
            return await self._bounded(client.script_load(command[2]), call)
        return await self._bounded(client.execute_command(*command), call)


class AsyncLimiter:
    """One algorithm on one quota, any number of keys, state on Redis,
    through ``redis.asyncio`` (a ``redis.asyncio.Redis`` or
    ``redis.asyncio.cluster.RedisCluster``). The options, the answers and the
    errors are :class:`~ratelab_client.Limiter`'s; every method is a
    coroutine. The timeout bounds each call whatever the client's own
    settings (its connection pool's connect included): a call that times out
    has its connection closed, and is never charged.

    One limiter serves every task of its event loop.
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

    async def aclose(self) -> None:
        """Closes the limiter's own connections (not the client's)."""
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
