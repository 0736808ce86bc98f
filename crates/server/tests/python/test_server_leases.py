"""Leasing hot descriptors, through the binary over gRPC: replicas on one
Redis give back what their leases hold unused when they stop (SIGTERM); a
replica killed leaves it charged; leasing where it cannot apply is refused
at startup with the reason."""

from __future__ import annotations

import subprocess

from conftest import OK, RateLimitServer

# 10 a day: nothing comes back while the test runs (a unit every 2.4 h).
CONFIG = """\
domain: api
descriptors:
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 10, algorithm: gcra}
"""

# Leases that outlive the test: only stopping gives their units back.
LONG_LEASES = ["--lease-lifetime-ms", "600000", "--redis-timeout-ms", "2000"]


def admitted(server, tenant: str, tries: int) -> int:
    return sum(server.ask("api", [("tenant", tenant)]).overall_code == OK for _ in range(tries))


def test_a_stopped_replica_gives_back_what_its_leases_hold_and_a_killed_one_does_not(
        start, server_binary, redis_server):
    args = ["--redis", redis_server.url, *LONG_LEASES]
    counter = start({"api.yaml": CONFIG}, "--redis", redis_server.url, "--redis-timeout-ms", "2000")
    # Set by the environment for this one, by flags for the other.
    stopped = start({"api.yaml": CONFIG}, "--redis", redis_server.url, "--redis-timeout-ms", "2000",
                    env={"RATELAB_LEASE_LIFETIME_MS": "600000"})
    killed = RateLimitServer(server_binary, {"api.yaml": CONFIG}, *args)
    try:
        # Each admits 2 and holds a lease larger than what it used.
        assert admitted(stopped, "t1", 2) == 2
        assert admitted(killed, "t2", 2) == 2
        assert stopped.stop() == 0
        assert "leases released" in stopped.log.read_text()
        killed.process.kill()
        killed.process.wait()
    finally:
        killed.channel.close()
        killed.process.stdout.close()
    # Counted by a replica that does not lease: every unit the stopped one
    # did not use is back; the killed one's lease still holds some.
    assert admitted(counter, "t1", 12) == 8
    assert admitted(counter, "t2", 12) < 8


def run(server_binary, tmp_path, yaml: str, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "api.yaml").write_text(yaml)
    return subprocess.run([str(server_binary), "--config", str(tmp_path / "api.yaml"),
                           "--listen", "127.0.0.1:0", *args],
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_leasing_where_it_cannot_apply_is_refused_at_startup(server_binary, redis_server, tmp_path):
    memory = run(server_binary, tmp_path, CONFIG, "--lease-lifetime-ms", "100")
    assert memory.returncode != 0
    assert "nothing to lease from" in memory.stderr, memory.stderr
    reference = CONFIG.replace("algorithm: gcra", "lease: true")
    envoy = run(server_binary, tmp_path, reference, "--redis", redis_server.url,
                "--lease-lifetime-ms", "100")
    assert envoy.returncode != 0
    assert "api.yaml:4:" in envoy.stderr and "lease: true needs one of ratelab's algorithms" \
        in envoy.stderr, envoy.stderr
    off = run(server_binary, tmp_path, CONFIG.replace("gcra}", "gcra, lease: true}"),
              "--redis", redis_server.url)
    assert off.returncode != 0
    assert "the server does not lease" in off.stderr, off.stderr
    bad = run(server_binary, tmp_path, CONFIG, "--redis", redis_server.url,
              "--lease-lifetime-ms", "100", "--lease-share-percent", "0")
    assert bad.returncode != 0
    assert "share_percent must be between 1 and 100" in bad.stderr, bad.stderr
