"""Both limiters on a real Redis Cluster (three masters): keys in every
slot, the scripts loaded on each master after NOSCRIPT, the deadline from
a clock sampled on every master, and a paused master timing its checks out
uncharged."""

import time

import pytest

from ratelab_client import Quota, Timeout

QUOTA = Quota.per_minute(10)


def test_checks_on_every_master(flavor, cluster):
    # Routing and script loading, not timing: generous timeouts so that a
    # loaded machine cannot turn a slow first load into a timeout.
    client = cluster.client(socket_timeout=5) if flavor.flavor == "sync" else None
    if client is not None:
        flavor._clients.append(client)
    limiter = flavor.limiter(cluster, "gcra", QUOTA, prefix=f"cluster-{flavor.flavor}", timeout=5, client=client)
    for node in cluster.nodes:
        node.client().script_flush()
    keys = [f"user{i}" for i in range(30)]
    for key in keys:
        assert limiter.check(key, 3).remaining == 7
    for key in keys:
        assert limiter.peek(key, 0).remaining == 7
    stats = limiter.stats()
    # One TIME sample (each master sampled once) for all of them; the script
    # loaded on the masters that lacked it.
    assert (stats.answered, stats.clock_samples, stats.timeouts, stats.errors) == (60, 1, 0, 0)
    assert 1 <= stats.reloads <= 3
    # Every master holds some of the keys: the slots were spread.
    raw = cluster.client()
    counts = [node_client.dbsize() for node_client in (n.client() for n in cluster.nodes)]
    assert all(c > 0 for c in counts), counts
    raw.close()


def test_a_paused_master_times_out_uncharged(flavor, cluster):
    limiter = flavor.limiter(cluster, "gcra", QUOTA, prefix=f"clusterpause-{flavor.flavor}", breaker=(0, 0))
    # Find a key on the first master.
    raw = cluster.client()
    port = cluster.nodes[0].port
    key = next(k for k in (f"k{i}" for i in range(1000))
               if raw.get_node_from_key(limiter.redis_key(k)).port == port)
    # Connections, the script and the clock's offset first, retried on a
    # loaded machine: the test times the paused call, not these.
    for _ in range(50):
        try:
            limiter.peek(key, 0)
            break
        except Timeout:
            continue
    assert limiter.check(key).remaining == 9
    cluster.nodes[0].pause()
    try:
        started = time.monotonic()
        with pytest.raises(Timeout):
            limiter.check(key)
        took = time.monotonic() - started
    finally:
        cluster.nodes[0].resume()
    # The asyncio limiter bounds each command itself; a synchronous cluster
    # client is bounded by its own socket timeout (0.1 s here) and retries.
    assert took < (0.3 if flavor.flavor == "async" else 2.0), took
    assert limiter.peek(key, 0).remaining == 9
    raw.close()
