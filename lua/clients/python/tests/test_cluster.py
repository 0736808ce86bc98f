"""Both limiters on a real Redis Cluster (three masters): keys in every
slot, the scripts loaded on each master after NOSCRIPT, the deadline from
a clock sampled on every master, and a paused master timing its checks out
uncharged."""

import pytest

from ratelab_client import Expired, Quota, Timeout

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
    # What is tested is that a paused master times the call out, while it is
    # still paused, and that the call is not charged: the limiter whose call
    # is paused (timeout 1 s) is warmed first, retried on a loaded machine;
    # the check before and the peek after are a patient limiter's (5 s), on
    # the same keys and the caller's clock, frozen (however long the sync
    # cluster client's own retries take, nothing comes back meanwhile).
    clock = lambda: 1_700_000_000_000_000  # noqa: E731
    prefix = f"clusterpause-{flavor.flavor}"
    sync = flavor.flavor == "sync"
    clients = [cluster.client(socket_timeout=1.0), cluster.client(socket_timeout=5.0)] if sync else [None, None]
    flavor._clients.extend(c for c in clients if c is not None)
    limiter = flavor.limiter(cluster, "gcra", QUOTA, prefix=prefix, breaker=(0, 0), timeout=1.0, client=clients[0],
                             clock=clock)
    patient = flavor.limiter(cluster, "gcra", QUOTA, prefix=prefix, client=clients[1], clock=clock)
    # Find a key on the first master.
    raw = cluster.client()
    port = cluster.nodes[0].port
    key = next(k for k in (f"k{i}" for i in range(1000))
               if raw.get_node_from_key(limiter.redis_key(k)).port == port)
    assert patient.check(key).remaining == 9
    for _ in range(50):
        try:
            limiter.peek(key, 0)
            break
        except (Timeout, Expired):
            continue
    cluster.nodes[0].pause()
    try:
        with pytest.raises(Timeout):
            limiter.check(key)
    finally:
        cluster.nodes[0].resume()
    assert patient.peek(key, 0).remaining == 9
    raw.close()
