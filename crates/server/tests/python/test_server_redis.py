"""On Redis: replicas share one count; when Redis is down, the failure
policy answers, each as configured."""

from __future__ import annotations

import grpc
import pytest

from conftest import OK, OVER_LIMIT, clear_of_edges

CONFIG = """\
domain: api
descriptors:
  - key: client
    rate_limit:
      unit: hour
      requests_per_unit: 3
  - key: gcra
    rate_limit:
      unit: hour
      requests_per_unit: 3
      algorithm: gcra
"""


def test_replicas_share_one_count_on_redis(start, redis_server):
    clear_of_edges(3600)
    args = ["--redis", redis_server.url, "--redis-timeout-ms", "2000"]
    a = start({"api.yaml": CONFIG}, *args)
    b = start({"api.yaml": CONFIG}, *args)
    client = [("client", "c1")]
    codes = [server.ask("api", client).overall_code for server in (a, b, a, b)]
    assert codes == [OK, OK, OK, OVER_LIMIT]


def test_on_a_cluster_every_key_counts_once(start, redis_cluster):
    clear_of_edges(3600)
    args = [arg for url in redis_cluster.urls for arg in ("--redis", url)]
    # Generous: a first call loads the script on a loaded machine.
    args += ["--redis-timeout-ms", "2000"]
    a = start({"api.yaml": CONFIG}, *args)
    b = start({"api.yaml": CONFIG}, *args)
    # Many clients: their keys spread over the three masters' slots; the
    # reference's counters and GCRA alike, several in one request.
    for n in range(20):
        client = [("client", f"c{n}")]
        codes = [server.ask("api", client).overall_code for server in (a, b, a, b)]
        assert codes == [OK, OK, OK, OVER_LIMIT], n
        both = [("client", f"d{n}")], [("gcra", f"d{n}")]
        codes = [server.ask("api", *both).overall_code for server in (a, b, a, b)]
        assert codes == [OK, OK, OK, OVER_LIMIT], n


@pytest.mark.parametrize("policy", ["error", "allow", "deny"])
def test_redis_down_answers_the_failure_policy(start, redis_server, policy):
    # Generous: a first call loads the script on a loaded machine; the
    # outage below is a refused connection, answered at once.
    server = start({"api.yaml": CONFIG}, "--redis", redis_server.url, "--on-redis-failure", policy,
                   "--redis-timeout-ms", "2000")
    client = [("client", "c2")]
    assert server.ask("api", client).overall_code == OK
    redis_server.stop()
    if policy == "error":
        # UNAVAILABLE: Envoy's failure_mode_deny decides.
        with pytest.raises(grpc.RpcError) as error:
            server.ask("api", client)
        assert error.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "backend" in error.value.details()
    else:
        answer = server.ask("api", client)
        assert answer.overall_code == {"allow": OK, "deny": OVER_LIMIT}[policy]
    metrics = server.metrics()
    assert 'ratelimit_service_should_rate_limit_error{err_type="redis_error"}' in metrics, metrics


def test_the_server_counts_again_once_redis_is_back(start, redis_server):
    import time

    server = start({"api.yaml": CONFIG}, "--redis", redis_server.url, "--redis-timeout-ms", "2000")
    client = [("client", "c3")]
    assert server.ask("api", client).overall_code == OK
    redis_server.stop()
    with pytest.raises(grpc.RpcError):
        server.ask("api", client)
    redis_server.restart()
    # The breaker's cool-down, then a fresh connection: within seconds.
    deadline = time.monotonic() + 30
    while True:
        try:
            answer = server.ask("api", client)
            break
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error
            assert time.monotonic() < deadline, "Redis is back but the server does not count"
            time.sleep(0.2)
    # The restarted Redis is empty: the key starts anew (unless the hour
    # turned meanwhile: anew either way).
    assert (answer.overall_code, answer.statuses[0].limit_remaining) == (OK, 2)
