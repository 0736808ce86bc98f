"""What Envoy sees, through real gRPC: the reference's answers by default
(fixed windows on the clock, refused hits counted, no headers), ratelab's
algorithms where a limit names one, and the statistics under the
reference's names. Limits are per hour or day, and every test starts clear
of a window's edge, so that what it asks falls in one window."""

from __future__ import annotations

import json
import re

import grpc
import pytest

from conftest import DAY, HOUR, MINUTE, OK, OVER_LIMIT, clear_of_edges

CONFIG = """\
domain: edge
descriptors:
  # Any remote address: 3 an hour each; under it, one path 2 a day.
  - key: remote_address
    rate_limit:
      unit: HOUR
      requests_per_unit: 3
    descriptors:
      - key: path
        value: /login
        rate_limit:
          unit: day
          requests_per_unit: 2
          name: logins
  - key: plan
    value: free
    shadow_mode: true
    rate_limit:
      name: free-plan
      unit: hour
      requests_per_unit: 2
  - key: plan
    value: paid
    rate_limit:
      unlimited: true
  - key: tokens
    rate_limit:
      unit: hour
      requests_per_unit: 10
  - key: blocked
    rate_limit:
      unit: hour
      requests_per_unit: 0
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 2
  - key: path
    value: /api/*/action
    rate_limit:
      unit: hour
      requests_per_unit: 1
  # ratelab's algorithms, by name.
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: gcra}
  - key: bucket
    rate_limit: {unit: hour, requests_per_unit: 1, algorithm: token-bucket}
"""


def headers(response) -> dict[str, str]:
    return {h.key: h.value for h in response.response_headers_to_add}


def status(response, i: int = 0):
    s = response.statuses[i]
    limit = (s.current_limit.name, s.current_limit.requests_per_unit, s.current_limit.unit) \
        if s.HasField("current_limit") else None
    return s.code, limit, s.limit_remaining


def test_nested_descriptors_answer_as_the_reference(start):
    clear_of_edges(3600, 86400)
    server = start({"edge.yaml": CONFIG})
    addr = [("remote_address", "10.0.0.1")]
    login = [("remote_address", "10.0.0.1"), ("path", "/login")]
    other = [("remote_address", "10.0.0.1"), ("path", "/other")]

    first = server.ask("edge", addr, login, other)
    assert first.overall_code == OK
    assert status(first, 0) == (OK, ("", 3, HOUR), 2)
    assert status(first, 1) == (OK, ("logins", 2, DAY), 1)
    # A fixed window of the hour on the clock: reset at the hour's end.
    assert 0 < first.statuses[0].duration_until_reset.seconds <= 3600
    assert 0 < first.statuses[1].duration_until_reset.seconds <= 86400
    # No configured limit for /other: OK without a limit.
    assert not first.statuses[2].HasField("current_limit") and first.statuses[2].code == OK
    # No headers unless LIMIT_RESPONSE_HEADERS_ENABLED.
    assert headers(first) == {}

    server.ask("edge", login)
    third = server.ask("edge", login)
    assert (third.overall_code, status(third)) == (OVER_LIMIT, (OVER_LIMIT, ("logins", 2, DAY), 0))
    # Another address is another counter.
    assert server.ask("edge", [("remote_address", "10.0.0.2"), ("path", "/login")]).overall_code == OK
    # Unknown domain or descriptor, or no entries at all: OK, no limit.
    assert not server.ask("nowhere", addr).statuses[0].HasField("current_limit")
    assert server.ask("edge", []).statuses[0].code == OK


def test_refused_hits_are_counted_and_zero_refuses_everything(start):
    clear_of_edges(3600)
    server = start({"edge.yaml": CONFIG})
    tokens = [("tokens", "alice")]
    assert status(server.ask("edge", tokens, hits_addend=3))[2] == 7
    # 0 is Envoy's "not set": one hit. A descriptor's own hits_addend wins.
    assert status(server.ask("edge", tokens, hits_addend=0))[2] == 6
    assert status(server.ask("edge", (tokens, 4), hits_addend=1))[2] == 2
    # 3 when 2 are left: over, and counted (11 of 10), as the reference does.
    refused = server.ask("edge", tokens, hits_addend=3)
    assert (refused.overall_code, status(refused)[2]) == (OVER_LIMIT, 0)
    # So even one more is over, and a look (0) sees it over.
    assert server.ask("edge", tokens).overall_code == OVER_LIMIT
    assert server.ask("edge", (tokens, 0)).overall_code == OVER_LIMIT
    # requests_per_unit 0: every request over the limit.
    assert status(server.ask("edge", [("blocked", "x")])) == (OVER_LIMIT, ("", 0, HOUR), 0)
    metrics = server.metrics()
    # 11 of 10 (1 over), 12 (1 more), then a look (0 more).
    assert re.search(r'ratelimit_service_rate_limit_over_limit\{domain="edge",key1="tokens"\} 2\b', metrics), metrics
    assert re.search(r'ratelimit_service_rate_limit_total_hits\{domain="edge",key1="tokens"\} 12\b', metrics), metrics


def test_shadow_mode_unlimited_and_wildcards(start):
    clear_of_edges(3600)
    server = start({"edge.yaml": CONFIG})
    free = [("plan", "free")]
    answers = [server.ask("edge", free) for _ in range(5)]
    assert [a.overall_code for a in answers] == [OK] * 5
    assert [a.statuses[0].limit_remaining for a in answers] == [1, 0, 0, 0, 0]
    assert answers[-1].statuses[0].current_limit.name == "free-plan"
    metrics = server.metrics()
    assert re.search(r'ratelimit_service_rate_limit_shadow_mode\{domain="edge",key1="plan_free"\} 3\b', metrics), metrics
    # Unlimited: OK, no limit, remaining the most there is.
    paid = server.ask("edge", [("plan", "paid")]).statuses[0]
    assert (paid.code, paid.HasField("current_limit"), paid.limit_remaining) == (OK, False, 2**32 - 1)
    # share_threshold: every value under files/* counts in one counter.
    assert server.ask("edge", [("files", "files/a.pdf")]).overall_code == OK
    assert server.ask("edge", [("files", "files/b.csv")]).overall_code == OK
    assert server.ask("edge", [("files", "files/c.txt")]).overall_code == OVER_LIMIT
    # A wildcard in the middle.
    assert status(server.ask("edge", [("path", "/api/7/action")]))[1] == ("", 1, HOUR)
    assert not server.ask("edge", [("path", "/api/7/other")]).statuses[0].HasField("current_limit")


def test_ratelab_algorithms_are_all_or_nothing(start):
    clear_of_edges(3600)
    server = start({"edge.yaml": CONFIG})
    gcra, bucket = [("gcra", "g")], [("bucket", "b")]
    assert server.ask("edge", gcra, bucket).overall_code == OK
    # The bucket is empty: refused, and the gcra unit it took goes back.
    refused = server.ask("edge", gcra, bucket)
    assert refused.overall_code == OVER_LIMIT
    assert [s.code for s in refused.statuses] == [OK, OVER_LIMIT]
    assert status(server.ask("edge", gcra))[2] == 0
    assert server.ask("edge", gcra).overall_code == OVER_LIMIT


def test_a_requests_limit_override(start):
    from envoy.service.ratelimit.v3 import rls_pb2

    clear_of_edges(60, margin=10)
    server = start({"edge.yaml": CONFIG})

    def ask(requests_per_unit: int, unit=MINUTE, domain="edge"):
        request = rls_pb2.RateLimitRequest(domain=domain)
        descriptor = request.descriptors.add()
        descriptor.entries.add(key="tokens", value="carol")
        descriptor.limit.requests_per_unit = requests_per_unit
        descriptor.limit.unit = unit
        return server.stub.ShouldRateLimit(request, timeout=10)

    # The override replaces the configured 10 an hour; it is unnamed.
    answers = [ask(2) for _ in range(3)]
    assert [a.overall_code for a in answers] == [OK, OK, OVER_LIMIT]
    assert status(answers[0]) == (OK, ("", 2, MINUTE), 1)
    # Any uint32 is counted.
    assert ask(4_000_000_000).overall_code == OK
    # An override for a domain that is not configured is not applied.
    assert not ask(0, domain="nowhere").statuses[0].HasField("current_limit")
    # A unit that does not exist is refused.
    with pytest.raises(grpc.RpcError) as error:
        ask(1, unit=0)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_bad_requests_are_invalid_arguments(start):
    server = start({"edge.yaml": CONFIG}, "--max-descriptors", "100")
    with pytest.raises(grpc.RpcError) as error:
        server.ask("", [("tokens", "a")])
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as error:
        server.ask("edge")
    assert "descriptor list must not be empty" in error.value.details()
    with pytest.raises(grpc.RpcError) as error:
        server.ask("edge", *([[("tokens", "a")]] * 101))
    assert "at most 100" in error.value.details()
    assert 'err_type="service_error"' in server.metrics()


def test_headers_the_references_or_ietf(start):
    clear_of_edges(3600)
    reference = start({"edge.yaml": CONFIG}, env={"LIMIT_RESPONSE_HEADERS_ENABLED": "true",
                                                  "LIMIT_REMAINING_HEADER": "X-Left"})
    answer = reference.ask("edge", [("tokens", "h")], [("remote_address", "h")])
    # The descriptor nearest its limit: the address (2 of 3 left).
    got = headers(answer)
    assert (got["RateLimit-Limit"], got["X-Left"]) == ("3", "2"), got
    assert 0 < int(got["RateLimit-Reset"]) <= 3600
    ietf = start({"edge.yaml": CONFIG}, "--response-headers", "ietf")
    answer = ietf.ask("edge", [("tokens", "h")])
    assert headers(answer)["RateLimit-Policy"] == '"edge.tokens";q=10;w=3600'
    assert re.fullmatch(r'"edge.tokens";r=9;t=0', headers(answer)["RateLimit"]), headers(answer)


def test_the_references_environment_alone(start):
    """Started as envoyproxy/ratelimit is: RUNTIME_*, GRPC_*, HOST/PORT,
    DEBUG_*, USE_PROMETHEUS; /healthcheck, /json and /rlconfig served."""
    import urllib.request

    clear_of_edges(3600)
    prometheus = f"127.0.0.1:{__import__('conftest').free_port()}"
    server = start({"edge.yaml": CONFIG}, reference_env=True,
                   env={"USE_PROMETHEUS": "true", "PROMETHEUS_ADDR": prometheus,
                        "SHADOW_MODE": "true"})
    assert server.http_url and server.debug_url, server.log.read_text()
    assert server.get(server.http_url + "/healthcheck") == (200, "OK")
    body = json.dumps({"domain": "edge", "descriptors": [
        {"entries": [{"key": "blocked", "value": "x"}]}, {"entries": []}]}).encode()
    code, text = server.get(server.http_url + "/json", body)
    # Global shadow mode: over the limit, yet answered OK (200).
    answer = json.loads(text)
    assert (code, answer["overallCode"], answer["statuses"][0]["code"]) == (200, "OK", "OVER_LIMIT"), text
    assert answer["statuses"][0]["currentLimit"] == {"unit": "HOUR"}, text
    assert answer["statuses"][1] == {"code": "OK"}, text
    code, text = server.get(server.http_url + "/json", b"{not json")
    assert code == 400
    assert "edge.tokens: unit=HOUR requests_per_unit=10" in server.get(server.debug_url + "/rlconfig")[1]
    with urllib.request.urlopen(f"http://{prometheus}/metrics", timeout=10) as r:
        metrics = r.read().decode()
    assert "ratelimit_service_global_shadow_mode 1" in metrics, metrics


def test_statsd_the_references_default_sink(start):
    """USE_STATSD (the reference's default): counters and timings over TCP
    to STATSD_HOST:STATSD_PORT every STATS_FLUSH_INTERVAL, under the names
    and with the totals envoyproxy/ratelimit sends for the same calls."""
    import socket
    import threading
    import time

    clear_of_edges(3600)
    listener = socket.create_server(("127.0.0.1", 0))
    lines: list[str] = []

    def read(connection):
        pending = b""
        with connection:
            while chunk := connection.recv(65536):
                *complete, pending = (pending + chunk).split(b"\n")
                lines.extend(line.decode() for line in complete if line)

    def accept():
        while True:
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=read, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        server = start({"edge.yaml": CONFIG}, reference_env=True, env={
            "USE_STATSD": "true", "STATSD_HOST": "127.0.0.1",
            "STATSD_PORT": str(listener.getsockname()[1]), "STATS_FLUSH_INTERVAL": "200ms"})
        for _ in range(3):
            server.ask("edge", ([("tokens", "t")], 4))
        server.ask("unknown", [("tokens", "t")])
        with pytest.raises(grpc.RpcError):
            server.ask("", [("tokens", "t")])
        # What the reference sent for these five calls (counters summed over
        # its flushes; timings one a call): 4 + 4 + 4 hits on 10 an hour, the
        # third call 2 within, 2 over; near the limit from 8 (NEAR_LIMIT_RATIO
        # 0.8).
        expected = {
            "ratelimit.service.config_load_success": 1,
            "ratelimit.service.rate_limit.edge.tokens.total_hits": 12,
            "ratelimit.service.rate_limit.edge.tokens.within_limit": 8,
            "ratelimit.service.rate_limit.edge.tokens.near_limit": 2,
            "ratelimit.service.rate_limit.edge.tokens.over_limit": 2,
            "ratelimit.service.rate_limit.unknown.domain_not_found": 1,
            "ratelimit.service.call.should_rate_limit.service_error": 1,
            "ratelimit_server.ShouldRateLimit.total_requests": 5,
            "ratelimit_server.ShouldRateLimit.response_time|ms": 5,
        }

        def totals() -> dict[str, float]:
            out: dict[str, float] = {}
            for line in list(lines):
                name, _, rest = line.partition(":")
                value, _, kind = rest.partition("|")
                if kind == "ms":
                    out[name + "|ms"] = out.get(name + "|ms", 0) + 1
                elif kind == "c":
                    out[name] = out.get(name, 0) + float(value)
            return out

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(
                totals().get(name, 0) < n for name, n in expected.items()):
            time.sleep(0.2)
        got = totals()
        assert {name: got.get(name) for name in expected} == expected, lines
        # Counters nothing happened to are not sent, as gostats does.
        assert not any(name.startswith("ratelimit.service.rate_limit.edge.blocked") for name in got), got
    finally:
        listener.close()
