"""The ASGI middleware through a real HTTP server: Starlette on uvicorn, on
a dual-stack socket, requests from httpx bound to the peer address each
case names (127.0.0.x, ::1). The cases are lua/clients/http/cases.json,
which the Express middleware's tests and ratelab-http's
(crates/http/tests/it/shared_cases.rs) run too."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Dict, List, Optional

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request as StarletteRequest
from starlette.responses import PlainTextResponse
from starlette.routing import Route as StarletteRoute

import redis
import redis.asyncio
from ratelab_client import AsyncLimiter, Limiter, Quota
from ratelab_client.asgi import RateLimitMiddleware
from ratelab_client.web import Identify, Policy, Request, TrustedProxies

from conftest import LUA, PATIENT_CONNECT_TIMEOUT, wait_until

CASES = json.loads((LUA / "clients" / "http" / "cases.json").read_text(encoding="utf-8"))
METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


async def echo_client(request: StarletteRequest) -> PlainTextResponse:
    # The status the request asks for (the counting cases' failures).
    status = int(request.headers.get("x-respond-status", "200"))
    return PlainTextResponse(request.state.rate_limit_client.key, status_code=status)


class Switch:
    """The served app: whatever the current suite's middleware is."""

    def __init__(self) -> None:
        self.app: Any = None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            message = await receive()
            while message["type"] != "lifespan.shutdown":
                await send({"type": message["type"] + ".complete"})
                message = await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        await self.app(scope, receive, send)


@pytest.fixture(scope="module")
def http_server():
    """uvicorn on [::]:<random> (IPv4 peers reach it as ::ffff:a.b.c.d),
    in a thread of its own."""
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("::", 0))
    switch = Switch()
    # proxy_headers off: uvicorn would otherwise rewrite the peer address from
    # X-Forwarded-For itself (for 127.0.0.1 and ::1), before the middleware.
    server = uvicorn.Server(uvicorn.Config(switch, log_level="warning", lifespan="on", proxy_headers=False))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=lambda: loop.run_until_complete(server.serve(sockets=[sock])), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.01)
    yield switch, sock.getsockname()[1], loop
    server.should_exit = True
    thread.join(10)
    sock.close()


def build_policy(spec: Dict[str, Any], server, down_port: int, prefix: str, clock) -> Policy:
    q = spec["quota"]
    port = down_port if spec.get("redis") == "down" else server.port
    limiter = AsyncLimiter(redis.asyncio.Redis(port=port), spec["algorithm"],
                           Quota(q["limit"], q["period_us"], q["burst"]), prefix=prefix, clock=clock,
                           quota_check_every=None, timeout=2.0, connect_timeout=PATIENT_CONNECT_TIMEOUT)
    key = None
    if "key" in spec:
        header = spec["key"]["header"]

        def key(request: Request, client, header=header) -> Optional[str]:
            return request.header(header)

    return Policy(spec["name"], limiter, routes=[tuple(r) for r in spec.get("routes", [])], key=key,
                  cost=spec.get("cost", 1), failure=spec.get("failure", "open"), count=spec.get("count", "all"),
                  # A loaded machine: a slow answer is not what is tested.
                  timeout=2.0)


def send(port: int, step: Dict[str, Any]) -> httpx.Response:
    request = step["request"]
    peer = request["peer"]
    host = "[::1]" if ":" in peer else "127.0.0.1"
    transport = httpx.HTTPTransport(local_address=peer)
    with httpx.Client(transport=transport, timeout=10) as client:
        return client.request(request["method"], f"http://{host}:{port}{request['path']}",
                              headers=[tuple(h) for h in request["headers"]])


@pytest.fixture(scope="module")
def nothing_listens():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("suite", CASES["suites"], ids=lambda s: s["name"][:60])
def test_the_shared_http_cases(http_server, server, nothing_listens, prefix, suite):
    switch, port, loop = http_server
    now = {"us": CASES["t0_us"]}
    policies = [build_policy(p, server, nothing_listens, prefix, lambda: now["us"]) for p in suite["policies"]]
    identify_spec = suite.get("identify", {})
    identify = Identify(TrustedProxies(identify_spec.get("trusted_proxies", []),
                                       identify_spec.get("header", "x-forwarded-for")))
    inner = Starlette(routes=[StarletteRoute("/{path:path}", echo_client, methods=METHODS)])
    switch.app = RateLimitMiddleware(inner, policies=policies, identify=identify)
    for i, step in enumerate(suite["steps"]):
        now["us"] = CASES["t0_us"] + step["at_us"]
        response = send(port, step)
        check_step(f"{suite['name']}, step {i + 1} ({step.get('note', '')})", step["response"], response)
    for policy in policies:
        asyncio.run_coroutine_threadsafe(policy.limiter.aclose(), loop).result(5)


def check_step(where: str, expected: Dict[str, Any], response: httpx.Response) -> None:
    got = (response.status_code, {name: response.headers.get(name) for name in expected["headers"]})
    assert got == (expected["status"], expected["headers"]), where
    if "body" in expected:
        assert response.text == expected["body"], where
    if "problem" in expected:
        assert response.headers["content-type"] == "application/problem+json", where
        assert response.json() == expected["problem"], where
        # Member order as ratelab-http (serde_json) writes it.
        assert list(response.json()) == list(expected["problem"]), where


def test_all_or_nothing_under_concurrency(http_server, server, prefix):
    # 30 requests at once under a narrow policy (3 per hour) and three wide
    # ones (100 per hour: a fixed window, a sliding log, a GCRA). Whatever
    # the interleaving, a wide window ends up holding exactly the requests
    # that passed: what it took for the ones the narrow policy refused was
    # given back by receipt. A debt (GCRA) gives back at least one and never
    # more than it took: refunds of admissions other than the last meet the
    # ledger's conservative bound (lua/README.md, "Receipts and
    # settlements"), as ratelab-http's do on Redis. Peeking first, as the
    # middleware did before receipts, every request saw the same 3 remaining
    # and each wide policy was charged for all 30.
    switch, port, loop = http_server
    clock = lambda: CASES["t0_us"]  # noqa: E731

    def limiter(algorithm, limit):
        return AsyncLimiter(redis.asyncio.Redis(port=server.port), algorithm, Quota.per_hour(limit), prefix=prefix,
                            clock=clock, quota_check_every=None, timeout=5.0, connect_timeout=PATIENT_CONNECT_TIMEOUT)

    class Gated(AsyncLimiter):
        """Its calls wait until all 30 requests are being decided (3 s at
        most): every decision overlaps every other."""

        arrived, event = 0, None

        async def check(self, key, cost=1):
            if Gated.event is None:
                Gated.event = asyncio.Event()  # in the server's loop
            Gated.arrived += 1
            if Gated.arrived == 30:
                Gated.event.set()
            try:
                await asyncio.wait_for(Gated.event.wait(), 3)
            except asyncio.TimeoutError:
                pass
            return await super().check(key, cost)

    narrow = Gated(redis.asyncio.Redis(port=server.port), "gcra", Quota.per_hour(3), prefix=prefix, clock=clock,
                   quota_check_every=None, timeout=5.0, connect_timeout=PATIENT_CONNECT_TIMEOUT)
    wide = {"wide-fw": "fixed-window", "wide-sl": "sliding-log", "wide-gcra": "gcra"}
    policies = [Policy("narrow", narrow, timeout=5.0)] + [
        Policy(name, limiter(algorithm, 100), timeout=5.0) for name, algorithm in wide.items()]
    inner = Starlette(routes=[StarletteRoute("/{path:path}", echo_client, methods=METHODS)])
    switch.app = RateLimitMiddleware(inner, policies=policies)
    step = {"request": {"method": "GET", "path": "/", "peer": "127.0.0.1", "headers": []}}
    with ThreadPoolExecutor(30) as pool:
        statuses = list(pool.map(lambda _: send(port, step).status_code, range(30)))
    assert sorted(set(statuses)) == [200, 429] and statuses.count(200) == 3, statuses
    left = {}
    for name, algorithm in wide.items():
        with Limiter(redis.Redis(port=server.port), algorithm, Quota.per_hour(100), prefix=prefix, clock=clock) as peek:
            left[name] = peek.peek(f"{name}:ip:127.0.0.1", 0).remaining
    print(f"\nafter 30 requests at once, 3 passed: {left} remaining of 100")
    # Every unit a refused request took is given back, in any order.
    assert (left["wide-fw"], left["wide-sl"], left["wide-gcra"]) == (97, 97, 97)
    for policy in policies:
        asyncio.run_coroutine_threadsafe(policy.limiter.aclose(), loop).result(5)


def test_non_http_scopes_pass_untouched():
    seen: List[str] = []

    async def app(scope, receive, send):
        seen.append(scope["type"])

    middleware = RateLimitMiddleware(app, policies=[])
    asyncio.run(middleware({"type": "websocket"}, None, None))
    assert seen == ["websocket"]


def test_bad_configuration_is_a_clear_error(server):
    limiter = AsyncLimiter(redis.asyncio.Redis(port=server.port), "gcra", Quota.per_minute(5))
    with pytest.raises(ValueError, match="policy name 'a:b'"):
        Policy("a:b", limiter)
    with pytest.raises(ValueError, match="failure is 'open' or 'closed'"):
        Policy("p", limiter, failure="maybe")
    with pytest.raises(ValueError, match="count is 'all', 'failures' or 'successes'"):
        Policy("p", limiter, count="errors")
    with pytest.raises(ValueError, match="invalid route pattern 'login'"):
        Policy("p", limiter, routes=[("POST", "login")])
    with pytest.raises(ValueError, match="catch-all"):
        Policy("p", limiter, routes=[(None, "/{*rest}/x")])
    from ratelab_client import Limiter

    with pytest.raises(TypeError, match="must be an AsyncLimiter"):
        Policy("p", Limiter(redis.Redis(port=server.port), "gcra", Quota.per_minute(5)))
    with pytest.raises(ValueError, match="two policies are named 'p'"):
        RateLimitMiddleware(None, policies=[Policy("p", limiter), Policy("p", limiter)])
    with pytest.raises(ValueError, match="host names are not resolved"):
        TrustedProxies(["proxy.local"])
    with pytest.raises(ValueError, match="x-forwarded-for or forwarded"):
        TrustedProxies([], header="x-real-ip")


def serve_app(http_server, policies) -> int:
    switch, port, _ = http_server
    inner = Starlette(routes=[StarletteRoute("/{path:path}", echo_client, methods=METHODS)])
    switch.app = RateLimitMiddleware(inner, policies=policies)
    return port


GET = {"request": {"method": "GET", "path": "/", "peer": "127.0.0.1", "headers": []}}


def at_once(port: int, n: int) -> List[httpx.Response]:
    with ThreadPoolExecutor(n) as pool:
        return list(pool.map(lambda _: send(port, GET), range(n)))


def test_failing_closed_requests_are_decided_again_at_the_first_after_a_restart(http_server, own_server):
    # A limiter that served 20 requests at once; Redis killed, then started
    # again (empty) on the same port: the next request is decided by it,
    # not answered 503.
    clock = lambda: CASES["t0_us"]  # noqa: E731
    limiter = AsyncLimiter(redis.asyncio.Redis(port=own_server.port), "gcra", Quota.per_hour(100), prefix="restart",
                           clock=clock, quota_check_every=None, timeout=2.0, connect_timeout=PATIENT_CONNECT_TIMEOUT)
    port = serve_app(http_server, [Policy("default", limiter, failure="closed", timeout=2.0)])
    assert [r.status_code for r in at_once(port, 20)] == [200] * 20
    own_server.stop()
    own_server.restart()
    for left in (99, 98, 97):
        response = send(port, GET)
        assert response.status_code == 200, response.text
        assert f'"default";r={left};' in response.headers["ratelimit"]
    asyncio.run_coroutine_threadsafe(limiter.aclose(), http_server[2]).result(15)


def test_a_burst_on_a_cold_limiter_is_decided_not_passed_unchecked(http_server, proxy):
    # Redis slow to accept: the proxy holds the limiter's connection until
    # the policy's timeout has passed for the first request. Connecting is
    # not counted against it: Redis decides all 20 (10 admitted, 10
    # refused), none passes unchecked.
    clock = lambda: CASES["t0_us"]  # noqa: E731
    limiter = AsyncLimiter(redis.asyncio.Redis(port=proxy.port), "gcra", Quota.per_hour(10), prefix="cold",
                           clock=clock, quota_check_every=None, timeout=2.0, connect_timeout=30.0)
    failures = []
    _, port, loop = http_server
    inner = Starlette(routes=[StarletteRoute("/{path:path}", echo_client, methods=METHODS)])
    http_server[0].app = RateLimitMiddleware(inner, policies=[Policy("default", limiter, timeout=2.0)],
                                             on_failure=failures.append)
    proxy.hold_connections()

    def release() -> None:
        proxy.wait_accepted(1)
        time.sleep(max(0.0, proxy.accepted[0] + 2.05 - time.monotonic()))
        proxy.release_connections()

    releaser = threading.Thread(target=release)
    releaser.start()
    statuses = sorted(r.status_code for r in at_once(port, 20))
    releaser.join()
    assert (statuses, failures) == ([200] * 10 + [429] * 10, [])
    asyncio.run_coroutine_threadsafe(limiter.aclose(), loop).result(15)


def test_an_admission_after_the_policys_timeout_is_given_back(http_server, own_server, proxy):
    # The policy gives up (0.5 s) before the limiter does (5 s): the
    # request is answered 503 (failing closed) while Redis's reply is held;
    # the admission that reply brings is refunded when it comes.
    clock = lambda: CASES["t0_us"]  # noqa: E731
    limiter = AsyncLimiter(redis.asyncio.Redis(port=proxy.port), "gcra", Quota.per_hour(10), prefix="late-policy",
                           clock=clock, quota_check_every=None, timeout=5.0, connect_timeout=PATIENT_CONNECT_TIMEOUT)
    port = serve_app(http_server, [Policy("default", limiter, failure="closed", timeout=0.5)])
    assert send(port, GET).status_code == 200
    direct = Limiter(redis.Redis(port=own_server.port), "gcra", Quota.per_hour(10), prefix="late-policy", clock=clock)
    key = "default:ip:127.0.0.1"
    assert direct.peek(key, 0).remaining == 9
    proxy.hold_replies()
    assert send(port, GET).status_code == 503
    assert direct.peek(key, 0).remaining == 8  # the script ran: charged
    proxy.release_replies()
    wait_until(lambda: direct.peek(key, 0).remaining == 9, "the late admission was not given back")
    direct.close()
    asyncio.run_coroutine_threadsafe(limiter.aclose(), http_server[2]).result(15)
