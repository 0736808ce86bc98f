"""Both limiters through a Sentinel-managed connection (redis-py's
``Sentinel.master_for``): a primary, its replica and a sentinel, all real
processes. The primary is killed; the sentinel promotes the replica; the
limiter, asking the sentinel where the primary is, carries on against it
with the state the replica holds. While there is no primary, checks fail
as outages (the failure policy's business), never as data errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import redis
import redis.asyncio.sentinel
import redis.sentinel

from conftest import RedisServer, _die_with_parent, _free_port
from ratelab_client import Quota, RatelabError, Unavailable

SERVICE = "ratelab-primary"
QUOTA = Quota.per_hour(10)


class SentinelGroup:
    """A primary, a replica of it, and one sentinel watching them (quorum
    1, the primary judged down after 300 ms)."""

    def __init__(self) -> None:
        # Its replica syncs at once, not after the default 5 s wait for more.
        self.primary = RedisServer(extra=("--repl-diskless-sync-delay", "0"))
        self.replica = RedisServer(extra=("--replicaof", "127.0.0.1", str(self.primary.port)))
        binary = os.environ.get("RATELAB_REDIS_SERVER") or shutil.which("redis-server")
        self.dir = tempfile.mkdtemp(prefix="ratelab-py-sentinel-")
        self.port = _free_port()
        config = Path(self.dir) / "sentinel.conf"
        config.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
            f"logfile {self.dir}/sentinel.log\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 1\n"
            f"sentinel down-after-milliseconds {SERVICE} 300\n"
            f"sentinel failover-timeout {SERVICE} 2000\n"
        )
        # A sentinel rewrites its configuration file: it must be its own.
        self.process = subprocess.Popen(
            [binary, str(config), "--sentinel"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        self._wait(lambda: self.primary_port() == self.primary.port, "the sentinel did not see the primary")
        self._wait(self._replica_synced, "the replica did not sync")

    @staticmethod
    def _wait(ready, what: str, seconds: float = 20) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if ready():
                    return
            except redis.exceptions.ConnectionError:
                pass
            time.sleep(0.05)
        pytest.fail(what, pytrace=False)

    def _replica_synced(self) -> bool:
        info = redis.Redis(port=self.replica.port, socket_timeout=1).info("replication")
        return info.get("master_link_status") == "up"

    def primary_port(self) -> int:
        host, port = redis.Redis(port=self.port, socket_timeout=1).sentinel_get_master_addr_by_name(SERVICE)
        return int(port)

    def sentinels(self) -> list:
        return [("127.0.0.1", self.port)]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.primary.stop()
        self.replica.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def group():
    g = SentinelGroup()
    yield g
    g.stop()


def master_client(flavor, group):
    """A client of the current primary, found through the sentinel."""
    if flavor.flavor == "sync":
        sentinel = redis.sentinel.Sentinel(group.sentinels(), socket_timeout=0.5)
    else:
        sentinel = redis.asyncio.sentinel.Sentinel(group.sentinels(), socket_timeout=0.5)
    client = sentinel.master_for(SERVICE, socket_timeout=0.5)
    flavor._clients.append(client)
    return client


def test_a_failover_through_the_sentinel_keeps_the_replicated_state(flavor, group, prefix):
    client = master_client(flavor, group)
    limiter = flavor.limiter(None, "gcra", QUOTA, prefix=prefix, client=client, timeout=1.0, breaker=(0, 0))
    for left in [9, 8, 7]:
        assert limiter.check("k", 1).remaining == left
    # Every admission on the replica before the primary goes: this test is
    # about finding the new primary, not about what asynchronous
    # replication may lose. The replica's offset reaching the primary's is
    # the event (WAIT from a connection that wrote nothing counts only the
    # replicas that acknowledged lately, which a loaded machine may not).
    primary, replica = redis.Redis(port=group.primary.port), redis.Redis(port=group.replica.port)

    def offset(server: redis.Redis, field: str) -> int:
        return int(server.info("replication")[field])

    target = offset(primary, "master_repl_offset")
    caught_up = time.monotonic() + 30
    while offset(replica, "slave_repl_offset") < target:
        assert time.monotonic() < caught_up, "the replica did not catch up in 30 s"
        time.sleep(0.02)
    primary.close()
    replica.close()
    group.primary.stop()

    outages = []
    deadline = time.monotonic() + 30
    while True:
        try:
            decision = limiter.check("k", 1)
            break
        except Unavailable as e:
            outages.append(type(e).__name__)
        except RatelabError as e:  # a data error would be a bug: fail on it
            pytest.fail(f"a failover answered {e!r}, not an outage", pytrace=False)
        assert time.monotonic() < deadline, f"no new primary within 30 s ({len(outages)} outages)"
        time.sleep(0.05)
    assert group.primary_port() == group.replica.port
    # The replica's copy: three taken before, this one now.
    assert decision.remaining == 6, decision
    assert limiter.peek("k", 0).remaining == 6
    print(f"\n{flavor.flavor}: {len(outages)} checks failed as outages during the failover, then served")
