"""What one caller cannot do to the others: a request of ten thousand
descriptors does not open the breaker of Redis for everyone, and idle
connections do not use up the file descriptors the server needs to answer
and to reload its configuration.

Outcomes are asserted, never durations: a call that times out on a loaded
machine is not a failure of what is tested here, a refusal by the breaker
is."""

from __future__ import annotations

import resource
import socket
import threading
import time

import grpc

from conftest import OK, clear_of_edges

CONFIG = """\
domain: api
descriptors:
  - key: client
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: gcra}
"""

#: What a breaker's refusal says (ratelab-server's, and the resilience
#: wrapper's it replaced).
BREAKER = ("circuit breaker", "next attempt in")


def test_a_huge_request_does_not_open_the_breaker_for_everyone(start, redis_server):
    clear_of_edges(3600)
    server = start({"api.yaml": CONFIG}, "--redis", redis_server.url, "--redis-timeout-ms", "200")
    assert server.ask("api", [("gcra", "warm")], [("client", "warm")]).overall_code == OK
    outcomes: dict[str, list] = {"huge": [], "others": []}

    def huge(key: str) -> None:
        descriptors = [[(key, f"huge-{i}")] for i in range(10_000)]
        try:
            outcomes["huge"].append(server.ask("api", *descriptors, timeout=120).overall_code)
        except grpc.RpcError as error:
            outcomes["huge"].append(error.details())

    for key in ("gcra", "client"):
        caller = threading.Thread(target=huge, args=(key,))
        caller.start()
        # Other clients of the same limit, while the huge request runs and
        # after it.
        while caller.is_alive() or len(outcomes["others"]) < 40:
            try:
                answer = server.ask("api", [(key, f"other-{len(outcomes['others'])}")])
                outcomes["others"].append(answer.overall_code)
            except grpc.RpcError as error:
                outcomes["others"].append(error.details())
        caller.join()
    refused = [o for o in outcomes["others"] if isinstance(o, str) and any(b in o for b in BREAKER)]
    assert refused == [], f"{len(refused)} of {len(outcomes['others'])} refused by the breaker: {refused[:3]}"
    # Most of them were answered (a loaded machine may time one out).
    answered = [o for o in outcomes["others"] if o == OK]
    assert len(answered) >= len(outcomes["others"]) // 2, outcomes["others"][:20]


def _limit_files(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
    return apply


#: The HTTP/2 client preface and an empty SETTINGS frame: a connection
#: that opens HTTP/2 and then says nothing.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def test_idle_connections_cannot_use_up_the_file_descriptors(start):
    clear_of_edges(3600)
    server = start(
        {"api.yaml": CONFIG.replace("1000}", "2}", 1)},
        "--idle-timeout-ms", "3000",
        preexec=_limit_files(256),
    )
    host, port = server.address.rsplit(":", 1)
    idle = []
    for _ in range(300):
        s = socket.create_connection((host, int(port)), timeout=10)
        try:
            s.sendall(PREFACE)
        except OSError:
            pass
        idle.append(s)
    time.sleep(1.5)
    # A normal call is answered.
    fresh = grpc.insecure_channel(server.address)
    from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

    stub = rls_pb2_grpc.RateLimitServiceStub(fresh)
    request = rls_pb2.RateLimitRequest(domain="api")
    request.descriptors.add().entries.add(key="client", value="normal")
    assert stub.ShouldRateLimit(request, timeout=10).overall_code == OK
    fresh.close()
    # And the configuration reloads.
    server.write("api.yaml", CONFIG.replace("1000}", "7}", 1))
    deadline = time.monotonic() + 20
    while server.ask("api", [("client", "z")]).statuses[0].current_limit.requests_per_unit != 7:
        assert time.monotonic() < deadline, server.log.read_text()[-2000:]
        time.sleep(0.1)
    # The idle ones are closed by the server.
    closed = 0
    deadline = time.monotonic() + 30
    for s in idle:
        s.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            while s.recv(4096):
                pass
            closed += 1
        except (ConnectionResetError, BrokenPipeError):
            closed += 1
        except OSError:
            pass
        s.close()
    assert closed == len(idle), f"{len(idle) - closed} of {len(idle)} idle connections still open after 30 s"
