"""What Envoy sees: nested descriptors, shadow mode, hits_addend, the
response headers, and the metrics, through real gRPC."""

from __future__ import annotations

import re

import grpc
import pytest

from conftest import HOUR, MINUTE, OK, OVER_LIMIT

CONFIG = """\
domain: edge
descriptors:
  # Any remote address: 3 a minute each; under it, one path 2 an hour.
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 3
    descriptors:
      - key: path
        value: /login
        rate_limit:
          unit: hour
          requests_per_unit: 2
          algorithm: fixed-window
  - key: plan
    value: free
    shadow_mode: true
    rate_limit:
      name: free-plan
      unit: minute
      requests_per_unit: 2
  - key: plan
    value: paid
    rate_limit:
      unlimited: true
  - key: tokens
    rate_limit:
      unit: minute
      requests_per_unit: 10
"""


def headers(response) -> dict[str, str]:
    return {h.key: h.value for h in response.response_headers_to_add}


def test_nested_descriptors_each_get_their_status(start):
    server = start({"edge.yaml": CONFIG})
    addr = [("remote_address", "10.0.0.1")]
    login = [("remote_address", "10.0.0.1"), ("path", "/login")]
    other = [("remote_address", "10.0.0.1"), ("path", "/other")]

    first = server.ask("edge", addr, login, other)
    assert first.overall_code == OK
    a, b, c = first.statuses
    assert (a.code, a.current_limit.requests_per_unit, a.current_limit.unit, a.limit_remaining) \
        == (OK, 3, MINUTE, 2)
    assert a.current_limit.name == "edge.remote_address"
    assert (b.code, b.current_limit.requests_per_unit, b.current_limit.unit, b.limit_remaining) \
        == (OK, 2, HOUR, 1)
    # A fixed window of an hour: reset at the window's end, within the hour.
    assert 0 < b.duration_until_reset.seconds <= 3600
    # No configured limit for /other: OK without a limit, as the reference.
    assert not c.HasField("current_limit") and c.code == OK
    assert headers(first)["RateLimit-Policy"] == \
        '"edge.remote_address";q=3;w=60, "edge.remote_address.path_/login";q=2;w=3600'
    # t: GCRA's next unit back in 60 s / 3; the fixed window's at its end.
    limit_field = re.fullmatch(r'"edge.remote_address";r=2;t=20, "edge.remote_address.path_/login";r=1;t=(\d+)',
                               headers(first)["RateLimit"])
    assert limit_field and 0 < int(limit_field[1]) <= 3600, headers(first)
    assert "Retry-After" not in headers(first)

    server.ask("edge", login)
    third = server.ask("edge", login)
    assert third.overall_code == OVER_LIMIT
    (status,) = third.statuses
    assert (status.code, status.limit_remaining) == (OVER_LIMIT, 0)
    assert int(headers(third)["Retry-After"]) >= 1
    # Another address is another counter.
    assert server.ask("edge", [("remote_address", "10.0.0.2"), ("path", "/login")]).overall_code == OK
    # Unknown domain or descriptor: OK, no limit.
    assert server.ask("nowhere", addr).statuses[0].HasField("current_limit") is False


def test_shadow_mode_counts_and_reports_but_never_refuses(start):
    server = start({"edge.yaml": CONFIG})
    free = [("plan", "free")]
    answers = [server.ask("edge", free) for _ in range(5)]
    assert [a.overall_code for a in answers] == [OK] * 5
    assert [a.statuses[0].code for a in answers] == [OK] * 5
    assert [a.statuses[0].limit_remaining for a in answers] == [1, 0, 0, 0, 0]
    assert answers[-1].statuses[0].current_limit.name == "free-plan"
    assert "Retry-After" not in headers(answers[-1])
    metrics = server.metrics()
    assert re.search(r'ratelab_server_shadow_mode\{domain="edge",descriptor="free-plan"\} 3\b', metrics), metrics
    assert re.search(r'ratelab_server_total_hits\{domain="edge",descriptor="free-plan"\} 5\b', metrics), metrics
    # Unlimited: OK, no limit, remaining the reference's maximum.
    paid = server.ask("edge", [("plan", "paid")]).statuses[0]
    assert (paid.code, paid.HasField("current_limit"), paid.limit_remaining) == (OK, False, 2**32 - 1)


def test_hits_addend_is_the_cost(start):
    server = start({"edge.yaml": CONFIG})
    tokens = [("tokens", "alice")]
    assert server.ask("edge", tokens, hits_addend=3).statuses[0].limit_remaining == 7
    # 0 is Envoy's "not set": one hit.
    assert server.ask("edge", tokens, hits_addend=0).statuses[0].limit_remaining == 6
    # A descriptor's own hits_addend wins over the request's.
    assert server.ask("edge", (tokens, 4), hits_addend=1).statuses[0].limit_remaining == 2
    # More than what is left: refused, nothing taken.
    refused = server.ask("edge", tokens, hits_addend=3)
    assert (refused.overall_code, refused.statuses[0].limit_remaining) == (OVER_LIMIT, 2)
    # 0 on the descriptor: a look without a hit.
    assert server.ask("edge", (tokens, 0)).statuses[0].limit_remaining == 2
    assert server.ask("edge", tokens, hits_addend=2).statuses[0].limit_remaining == 0
    # More than the whole limit at once can never pass: over the limit.
    assert server.ask("edge", [("tokens", "bob")], hits_addend=11).overall_code == OVER_LIMIT
    metrics = server.metrics()
    assert re.search(r'ratelab_server_over_limit\{domain="edge",descriptor="edge.tokens"\} 14\b', metrics), metrics
    assert "ratelab_server_request_duration_seconds_bucket" in metrics


def test_a_refused_request_costs_nothing_in_its_other_descriptors(start):
    server = start({"edge.yaml": CONFIG})
    addr = [("remote_address", "10.0.0.9")]
    tokens = [("tokens", "dave")]
    assert server.ask("edge", (tokens, 9)).statuses[0].limit_remaining == 1
    # The address admits one, the tokens refuse two: the request is refused.
    refused = server.ask("edge", addr, (tokens, 2))
    assert refused.overall_code == OVER_LIMIT
    # Each status is what its own check said...
    assert [(s.code, s.limit_remaining) for s in refused.statuses] == [(OK, 2), (OVER_LIMIT, 1)]
    # ...but the address was given back: its next request finds all 3.
    after = server.ask("edge", addr)
    assert (after.overall_code, after.statuses[0].limit_remaining) == (OK, 2)
    # A shadow refusal refuses nothing, and gives nothing back.
    free = [("plan", "free")]
    server.ask("edge", free)
    server.ask("edge", free)
    shadowed = server.ask("edge", addr, free)
    assert shadowed.overall_code == OK
    assert [(s.code, s.limit_remaining) for s in shadowed.statuses] == [(OK, 1), (OK, 0)]
    assert server.ask("edge", (addr, 0)).statuses[0].limit_remaining == 1


def test_bad_requests_are_invalid_arguments(start):
    server = start({"edge.yaml": CONFIG})
    with pytest.raises(grpc.RpcError) as error:
        server.ask("edge", (([("tokens", "a")]), 2**33))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(grpc.RpcError) as error:
        server.ask("", [("tokens", "a")])
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_requests_limit_override(start):
    from envoy.service.ratelimit.v3 import rls_pb2

    server = start({"edge.yaml": CONFIG})

    def ask(requests_per_unit: int):
        request = rls_pb2.RateLimitRequest(domain="edge")
        descriptor = request.descriptors.add()
        descriptor.entries.add(key="tokens", value="carol")
        descriptor.limit.requests_per_unit = requests_per_unit
        descriptor.limit.unit = MINUTE
        return server.stub.ShouldRateLimit(request, timeout=10)

    # The override replaces the configured 10 a minute.
    answers = [ask(2) for _ in range(3)]
    assert [a.overall_code for a in answers] == [OK, OK, OVER_LIMIT]
    assert answers[0].statuses[0].current_limit.requests_per_unit == 2
    assert answers[0].statuses[0].current_limit.name == "edge.tokens"
    # What ratelab cannot count is refused, not a crash.
    with pytest.raises(grpc.RpcError) as error:
        ask(4_000_000_000)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "limit override" in error.value.details()
    assert ask(2).overall_code == OVER_LIMIT
