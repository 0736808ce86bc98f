"""Rate limiting middleware for ASGI applications (Starlette, FastAPI, any
ASGI 3 app), behaving as the Rust ``ratelab-http`` layer: the same client
identity, policies, rounds, ``429``/``503`` responses and
``RateLimit-Policy``/``RateLimit`` fields (see :mod:`ratelab_client.web`).

    from starlette.applications import Starlette
    from ratelab_client import AsyncLimiter, Quota
    from ratelab_client.asgi import RateLimitMiddleware
    from ratelab_client.web import Identify, Policy

    limiter = AsyncLimiter(redis.asyncio.Redis(), "gcra", Quota.per_minute(100))
    login = AsyncLimiter(redis.asyncio.Redis(), "gcra", Quota(5, 900_000_000))
    app = Starlette(routes=...)
    app.add_middleware(
        RateLimitMiddleware,
        policies=[
            Policy("default", limiter),
            Policy("login", login, routes=[("POST", "/login")], failure="closed",
                   key=lambda request, client: request.header("x-account")),
        ],
        identify=Identify(trusted_proxies=["10.0.0.0/8"]),
    )

A policy's routes are matched against the path the app routes on: the
percent-decoded ``scope["path"]`` less the ``root_path`` of a mount, as
Starlette's router does, so that every spelling of a path that reaches a
handler (``/log%69n`` for ``/login``) counts on that handler's policies.

A request that passes carries what was decided in ``scope["state"]``:
``request.state.rate_limit`` (the :class:`~ratelab_client.web.Verdict`) and
``request.state.rate_limit_client`` (the :class:`~ratelab_client.web.Client`).

A policy that counts only failures (or successes) refunds the request's
receipt once the response head says it does not count; the head is held
until then (bounded by the policy's timeout), so that its ``RateLimit``
fields show the key as the refund left it, and the client's next request
sees it. A request whose response never starts keeps its charge.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Awaitable, Callable, Dict, MutableMapping, Optional, Sequence

from .web import Engine, Failure, Identify, Policy, Request, Verdict, match, settle_after_response

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

logger = logging.getLogger("ratelab_client.asgi")

__all__ = ["RateLimitMiddleware"]


def route_path(scope: Scope) -> str:
    """The path the app routes on, as Starlette (and FastAPI) do: the
    percent-decoded ``path`` with the ``root_path`` of a mount taken off. A
    policy's routes are matched against it, never against ``raw_path``:
    otherwise ``/log%69n`` would reach the ``/login`` handler uncounted."""
    path: str = scope.get("path") or "/"
    root = scope.get("root_path") or ""
    if not root or not path.startswith(root):
        return path
    if path == root:
        return ""
    return path[len(root):] if path[len(root)] == "/" else path


class RateLimitMiddleware:
    """ASGI middleware: ``policies`` (a sequence of
    :class:`~ratelab_client.web.Policy`, names unique), ``identify`` (an
    :class:`~ratelab_client.web.Identify`; default: by IP, no trusted proxy),
    ``on_failure`` (called with each :class:`~ratelab_client.web.Failure` of
    a limiter; a ``logging`` warning is written at most once a second per
    policy as well). Requests other than HTTP (websockets, lifespan) pass
    untouched."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        policies: Sequence[Policy],
        identify: Optional[Identify] = None,
        on_failure: Optional[Callable[[Failure], None]] = None,
    ) -> None:
        names = [p.name for p in policies]
        duplicate = next((n for n in names if names.count(n) > 1), None)
        if duplicate is not None:
            raise ValueError(f"two policies are named {duplicate!r}")
        self.app = app
        self.policies = list(policies)
        self.identify = identify or Identify()
        self.on_failure = on_failure
        self._logged: Dict[str, float] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in scope.get("headers", [])]
        client = scope.get("client")
        request = Request(scope["method"].upper(), route_path(scope), headers, client[0] if client else None)
        who = self.identify.client(request.peer, headers)
        reports = match(self.policies, request, who)
        verdict = await Engine(reports, who, time.monotonic).decide()
        self._alert(verdict)
        fields = [(k.lower().encode(), v.encode()) for k, v in verdict.fields()]
        if verdict.outcome != "pass":
            status, body = verdict.problem()
            response_headers = [(b"content-type", b"application/problem+json")]
            retry = verdict.retry_after_secs
            if retry is not None:
                response_headers.append((b"retry-after", str(retry).encode()))
            response_headers += fields
            response_headers.append((b"content-length", str(len(body)).encode()))
            await send({"type": "http.response.start", "status": status, "headers": response_headers})
            await send({"type": "http.response.body", "body": body})
            return
        state = scope.setdefault("state", {})
        state["rate_limit"] = verdict
        state["rate_limit_client"] = who
        if verdict.delay_us:
            # A queueing policy (leaky queue) gave the request a later slot.
            import asyncio

            await asyncio.sleep(verdict.delay_us / 1_000_000)
        pending = verdict.pending

        async def send_with_fields(message: Message) -> None:
            if message["type"] == "http.response.start":
                head = fields
                if pending:
                    # Whether the response counts is known now: a refund
                    # first, then the fields as it left the key.
                    await settle_after_response(verdict, int(message["status"]))
                    head = [(k.lower().encode(), v.encode()) for k, v in verdict.fields()]
                if head:
                    message = dict(message)
                    message["headers"] = list(message.get("headers", [])) + head
            await send(message)

        await self.app(scope, receive, send_with_fields)

    def _alert(self, verdict: Verdict) -> None:
        for failure in verdict.failures:
            if self.on_failure is not None:
                self.on_failure(failure)
            now = time.monotonic()
            if now - self._logged.get(failure.policy, -2.0) >= 1.0:
                self._logged[failure.policy] = now
                logger.warning(
                    "rate limiter of policy %s failed for %s: %s; the policy fails %s",
                    failure.policy, failure.client, failure.error, failure.mode,
                )

