"""A real redis-server for the tests, started here: random port, no
persistence, output to a log file, killed at the end (and by the kernel if
this process dies first)."""

from __future__ import annotations

import asyncio
import ctypes
import inspect
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import redis
import redis.cluster

#: lua/clients/python/tests -> the repository root.
REPO = Path(__file__).resolve().parents[4]
LUA = REPO / "lua"

# The client these tests test is this checkout's, whatever another checkout
# installed in editable mode (the packaging test installs its own wheel in a
# virtual environment of its own).
sys.path.insert(0, str(REPO / "lua" / "clients" / "python"))


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: the server gets SIGKILL when this process dies.
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RedisServer:
    """A throwaway redis-server (``RATELAB_REDIS_SERVER`` or PATH)."""

    def __init__(self, extra=()) -> None:
        binary = os.environ.get("RATELAB_REDIS_SERVER") or shutil.which("redis-server")
        if not binary:
            pytest.fail(
                "redis-server not found: install it (Debian/Ubuntu: sudo apt-get install "
                "redis-server) or set RATELAB_REDIS_SERVER",
                pytrace=False,
            )
        self.binary = binary
        self.extra = tuple(extra)
        self.dir = tempfile.mkdtemp(prefix="ratelab-py-redis-")
        self.log = Path(self.dir) / "redis.log"
        for _ in range(10):
            self.port = _free_port()
            if self._spawn():
                return
        pytest.fail(f"redis-server did not start; see {self.log}", pytrace=False)

    def _spawn(self) -> bool:
        self.process = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--logfile", str(self.log), *self.extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=_die_with_parent,
        )
        if self._ready():
            return True
        self.stop()
        return False

    def restart(self) -> None:
        """Starts it again, empty, on the same port (after :meth:`stop`). A client
        reconnecting meanwhile may hold the port for a moment (a connection
        the kernel gave the port itself as its source): tried a few times.
        """
        for _ in range(20):
            if self._spawn():
                return
            time.sleep(0.1)
        log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
        pytest.fail(f"redis-server did not start again on port {self.port}:\n{log}", pytrace=False)

    def _ready(self) -> bool:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            try:
                if redis.Redis(port=self.port, socket_timeout=1).ping():
                    return True
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        return False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)

    def aclient(self):
        import redis.asyncio

        return redis.asyncio.Redis(port=self.port, socket_timeout=5)

    def pause(self) -> None:
        """SIGSTOP: the server holds every connection and answers nothing
        (the kernel still accepts connections into its backlog)."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.resume()
            self.process.kill()
        self.process.wait()


class Proxy:
    """A TCP proxy in front of a redis-server, for faults a server does not
    show on cue: connections held before they reach it (a host slow to
    accept), and its replies held back after it ran what it was sent (a
    stall between a script and its reply). Threads, blocking sockets."""

    def __init__(self, port: int) -> None:
        self.upstream = port
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(128)
        self.port = self._listener.getsockname()[1]
        self._connecting = threading.Event()
        self._connecting.set()
        self._replying = threading.Event()
        self._replying.set()
        self._changed = threading.Condition()
        #: Monotonic instants at which each connection was accepted.
        self.accepted: list = []
        self._sockets: list = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_timeout=5)

    def aclient(self):
        import redis.asyncio

        return redis.asyncio.Redis(port=self.port, socket_timeout=5)

    def hold_connections(self) -> None:
        """New connections are accepted, then reach Redis only on
        :meth:`release_connections`."""
        self._connecting.clear()

    def release_connections(self) -> None:
        self._connecting.set()

    def hold_replies(self) -> None:
        """What Redis sends back waits in the proxy until
        :meth:`release_replies`; what clients send still reaches it."""
        self._replying.clear()

    def release_replies(self) -> None:
        self._replying.set()

    def wait_accepted(self, n: int, seconds: float = 30) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.accepted) >= n, seconds):
                raise AssertionError(f"the proxy accepted {len(self.accepted)} connections, not {n}")

    def close(self) -> None:
        self._closed = True
        self._connecting.set()
        self._replying.set()
        for sock in [self._listener, *self._sockets]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            with self._changed:
                self.accepted.append(time.monotonic())
                self._changed.notify_all()
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        self._connecting.wait()
        try:
            upstream = socket.create_connection(("127.0.0.1", self.upstream))
        except OSError:
            client.close()
            return
        self._sockets.append(upstream)
        threading.Thread(target=self._pump, args=(client, upstream, None), daemon=True).start()
        self._pump(upstream, client, self._replying)

    def _pump(self, source: socket.socket, sink: socket.socket, gate) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if gate is not None:
                    gate.wait()
                sink.sendall(data)
        except OSError:
            pass
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


@pytest.fixture
def proxy(own_server):
    """A :class:`Proxy` in front of a server of this test's own."""
    p = Proxy(own_server.port)
    yield p
    p.close()


def wait_until(condition, what: str, seconds: float = 30) -> None:
    """Waits for ``condition()`` (polled), failing after ``seconds``: a
    bound on a hang, never on speed."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.005)


def core_of(limiter):
    """The non-I/O half of a limiter (or of the one a ``SyncView`` shows)."""
    return limiter._core if hasattr(limiter, "_core") else limiter._limiter._core


class ManualBreakerClock:
    """A breaker's clock the test advances by hand: cool-downs end when the
    test says, not when the machine gets there."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def manual_breaker_clock(limiter) -> ManualBreakerClock:
    clock = ManualBreakerClock()
    core_of(limiter).breaker._clock = clock
    return clock


@pytest.fixture(scope="session")
def server():
    s = RedisServer()
    yield s
    s.stop()
    shutil.rmtree(s.dir, ignore_errors=True)


@pytest.fixture
def client(server):
    c = server.client()
    yield c
    c.close()


_prefixes = iter(range(1_000_000))


@pytest.fixture
def own_server():
    """A server of this test's own, to pause, stall (``DEBUG SLEEP``) or kill."""
    s = RedisServer(["--enable-debug-command", "local"])
    yield s
    s.stop()
    shutil.rmtree(s.dir, ignore_errors=True)


class RedisCluster:
    """Three masters with cluster mode on, joined by ``redis-cli --cluster
    create``, killed at the end."""

    def __init__(self) -> None:
        self.nodes = [RedisServer(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
                      for _ in range(3)]
        cli = shutil.which("redis-cli")
        if not cli:
            pytest.fail("redis-cli not found: install redis-tools", pytrace=False)
        subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
                        "--cluster-replicas", "0", "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            info = redis.Redis(port=self.nodes[0].port).cluster("info")
            if info.get("cluster_state") == "ok":
                return
            time.sleep(0.1)
        pytest.fail("the cluster did not come up", pytrace=False)

    def client(self, socket_timeout: float = 0.1):
        # A synchronous cluster client routes each command itself: its own
        # socket timeouts bound the limiter's calls.
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.nodes[0].port, socket_timeout=socket_timeout,
                                          socket_connect_timeout=socket_timeout)

    def aclient(self):
        import redis.asyncio.cluster

        return redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=self.nodes[0].port, socket_timeout=5)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
            shutil.rmtree(node.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def cluster():
    c = RedisCluster()
    yield c
    c.stop()


#: The timeouts of the limiters the cases make, unless they set theirs.
PATIENT_TIMEOUT = 5.0
PATIENT_CONNECT_TIMEOUT = 30.0


class SyncView:
    """An :class:`~ratelab_client.AsyncLimiter` seen through the synchronous
    interface: each coroutine run to completion on the test's loop. The
    table of cases runs unchanged against both limiters."""

    def __init__(self, limiter, loop) -> None:
        self._limiter = limiter
        self._loop = loop

    def __getattr__(self, name):
        attribute = getattr(self._limiter, name)
        if inspect.iscoroutinefunction(attribute):
            return lambda *a, **k: self._loop.run_until_complete(attribute(*a, **k))
        return attribute


class Flavors:
    """Makes limiters of one flavor ("sync": redis-py, "async":
    redis.asyncio) on a server, each call answered synchronously."""

    def __init__(self, flavor: str) -> None:
        self.flavor = flavor
        self.loop = asyncio.new_event_loop() if flavor == "async" else None
        self._clients = []
        self._limiters = []

    def client_for(self, server):
        client = server.aclient() if self.loop else server.client()
        self._clients.append(client)
        return client

    def limiter(self, server, *args, **kwargs):
        from ratelab_client import AsyncLimiter, Limiter

        client = kwargs.pop("client", None) or self.client_for(server)
        # What most cases decide on is Redis's answers, not how fast a loaded
        # machine gets them: a timeout it cannot miss, unless the case sets
        # its own (the cases about timeouts).
        kwargs.setdefault("timeout", PATIENT_TIMEOUT)
        kwargs.setdefault("connect_timeout", PATIENT_CONNECT_TIMEOUT)
        if self.loop is None:
            limiter = Limiter(client, *args, **kwargs)
        else:
            limiter = SyncView(AsyncLimiter(client, *args, **kwargs), self.loop)
        self._limiters.append(limiter)
        return limiter

    def close(self) -> None:
        for limiter in self._limiters:
            if self.loop is not None:
                limiter.aclose()
            else:
                limiter.close()
        for client in self._clients:
            if self.loop is not None:
                self.loop.run_until_complete(client.aclose())
            else:
                client.close()
        if self.loop is not None:
            self.loop.close()


@pytest.fixture(params=["sync", "async"])
def flavor(request):
    """Both limiters, one after the other: every test taking this fixture
    is a case of the table both run."""
    f = Flavors(request.param)
    yield f
    f.close()


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses."""
    return f"pytest{os.getpid()}-{next(_prefixes)}"


# A run in which no test ran (none collected, or every one skipped) fails:
# the tests of a client that silently did nothing prove nothing.
_ran = {"count": 0}


def pytest_runtest_logreport(report):
    if report.when == "call" and not report.skipped:
        _ran["count"] += 1


def pytest_sessionfinish(session, exitstatus):
    if _ran["count"] == 0 and exitstatus == 0:
        session.exitstatus = 1
        print("\nno test ran: failing the run", file=sys.stderr)
    elif exitstatus == 5:  # no tests collected
        session.exitstatus = 1
