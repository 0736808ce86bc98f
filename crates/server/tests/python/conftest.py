"""The real ``ratelab-server`` binary (built once per session with cargo),
driven over real gRPC by grpcio with Envoy's own generated messages
(``xds-protos``), and throwaway redis-servers: random ports, killed at the
end (and by the kernel if this process dies first)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
import pytest
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

#: crates/server/tests/python -> the repository root.
REPO = Path(__file__).resolve().parents[4]


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG: the child gets SIGKILL when this process dies.
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


#: `setpriv --pdeathsig KILL` does what `_die_with_parent` does, in the
#: child after exec: with it, no Python runs between fork and exec. grpcio's
#: threads live in this process, and its fork handlers, run in a child
#: forked for a `preexec_fn`, may kill that child before it execs.
_SETPRIV = shutil.which("setpriv") if sys.platform.startswith("linux") else None


def spawn(args: list, **kwargs) -> subprocess.Popen:
    """Starts ``args``, killed when this process dies."""
    if _SETPRIV:
        return subprocess.Popen([_SETPRIV, "--pdeathsig", "KILL", "--", *map(str, args)], **kwargs)
    return subprocess.Popen(args, preexec_fn=_die_with_parent, **kwargs)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def server_binary() -> Path:
    """``RATELAB_SERVER_BIN``, or the one ``cargo test --workspace`` builds."""
    if os.environ.get("RATELAB_SERVER_BIN"):
        return Path(os.environ["RATELAB_SERVER_BIN"])
    # With the workspace's test features, as `just test` has just built it: a
    # no-op there, where `-p ratelab-server` would build it again with others.
    out = subprocess.run(
        ["cargo", "test", "--workspace", "--locked", "--no-run",
         "--message-format=json-render-diagnostics"],
        cwd=REPO, check=True, stdout=subprocess.PIPE, text=True,
    ).stdout
    for line in out.splitlines():
        message = json.loads(line)
        # The binary itself, not its unit tests' harness of the same name.
        if message.get("reason") == "compiler-artifact" and message.get("executable") \
                and message["target"]["name"] == "ratelab-server" \
                and not message["profile"]["test"]:
            return Path(message["executable"])
    pytest.fail("cargo built no ratelab-server executable", pytrace=False)


class RedisServer:
    """A throwaway redis-server (``RATELAB_REDIS_SERVER`` or PATH)."""

    def __init__(self, *extra: str) -> None:
        binary = os.environ.get("RATELAB_REDIS_SERVER") or shutil.which("redis-server")
        if not binary:
            pytest.fail(
                "redis-server not found: install it (Debian/Ubuntu: sudo apt-get install "
                "redis-server) or set RATELAB_REDIS_SERVER",
                pytrace=False,
            )
        self.binary = binary
        self.extra = extra
        self.dir = tempfile.mkdtemp(prefix="ratelab-server-redis-")
        self.log = Path(self.dir) / "redis.log"
        for _ in range(10):
            self.port = _free_port()
            if self._spawn():
                return
        pytest.fail(f"redis-server did not start; see {self.log}", pytrace=False)

    def _spawn(self) -> bool:
        self.process = spawn(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, "--logfile", str(self.log), *self.extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        if self._ready():
            return True
        self.stop()
        return False

    def restart(self) -> None:
        """Starts it again on the same port (after :meth:`stop`). A client
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
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return True
            except OSError:
                time.sleep(0.05)
        return False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def free_port() -> int:
    return _free_port()


class RateLimitServer:
    """``ratelab-server`` on a free port, its configuration in a directory
    of its own, its log in a file; stopped with SIGTERM, which it must obey
    at once and cleanly.

    By default it is started with ratelab's flags (``--config``); with
    ``reference_env`` it is started as envoyproxy/ratelimit is, by its
    environment alone (``RUNTIME_ROOT``, ``GRPC_PORT``, ``PORT``, ...), the
    files in ``RUNTIME_ROOT/ratelimit/config``."""

    def __init__(self, binary: Path, config: dict[str, str], *args: str,
                 env: dict[str, str] | None = None, reference_env: bool = False,
                 preexec=None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ratelab-server-"))
        self.config = self.dir / "ratelimit" / "config" if reference_env else self.dir / "config"
        self.config.mkdir(parents=True)
        for name, text in config.items():
            (self.config / name).write_text(text)
        self.log = self.dir / "server.log"
        environment = {k: v for k, v in os.environ.items() if not k.startswith(("RATELAB_", "REDIS_"))}
        if reference_env:
            command = [str(binary)]
            environment.update({
                "RUNTIME_ROOT": str(self.dir), "RUNTIME_SUBDIRECTORY": "ratelimit",
                "RUNTIME_WATCH_ROOT": "false", "USE_STATSD": "false",
                "GRPC_HOST": "127.0.0.1", "GRPC_PORT": str(_free_port()),
                "HOST": "127.0.0.1", "PORT": str(_free_port()),
                "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": str(_free_port()),
                "RATELAB_RELOAD_INTERVAL_MS": "200", "RATELAB_SHUTDOWN_GRACE_MS": "5000",
            })
        else:
            command = [str(binary), "--config", str(self.config), "--listen", "127.0.0.1:0",
                       "--metrics", "127.0.0.1:0", "--reload-interval-ms", "200",
                       "--shutdown-grace-ms", "5000"]
        environment.update(env or {})
        options = dict(env=environment, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=open(self.log, "w"), text=True)
        if preexec:
            # Work in the child before exec (a resource limit): Python runs
            # there, so the parent's death is asked for there too.
            def before_exec():
                _die_with_parent()
                preexec()

            self.process = subprocess.Popen([*command, *args], preexec_fn=before_exec, **options)
        else:
            self.process = spawn([*command, *args], **options)
        self.metrics_url = self.http_url = self.debug_url = None
        self.address = None
        # The binary prints its endpoints, then the gRPC address.
        while self.address is None:
            line = self.process.stdout.readline()
            if not line:
                self.process.wait()
                pytest.fail(f"ratelab-server did not start: {self.log.read_text()}", pytrace=False)
            words = line.split()
            if line.startswith("metrics on "):
                self.metrics_url = words[2]
            elif line.startswith("http on "):
                self.http_url = words[2]
            elif line.startswith("debug on "):
                self.debug_url = words[2]
            elif line.startswith("listening on "):
                self.address = words[2]
        self.channel = grpc.insecure_channel(self.address)
        self.stub = rls_pb2_grpc.RateLimitServiceStub(self.channel)

    def write(self, name: str, text: str) -> None:
        """Replaces a configuration file at once (the reload never reads a
        half-written file)."""
        tmp = self.dir / (name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, self.config / name)

    def ask(self, domain: str, *descriptors, hits_addend: int = 0, timeout: float = 10):
        """``ShouldRateLimit``: each descriptor a list of (key, value), or a
        (list, hits_addend) pair."""
        request = rls_pb2.RateLimitRequest(domain=domain, hits_addend=hits_addend)
        for d in descriptors:
            entries, hits = (d, None) if isinstance(d, list) else d
            descriptor = request.descriptors.add()
            for key, value in entries:
                descriptor.entries.add(key=key, value=value)
            if hits is not None:
                descriptor.hits_addend.value = hits
        return self.stub.ShouldRateLimit(request, timeout=timeout)

    def get(self, url: str, data: bytes | None = None) -> tuple[int, str]:
        import urllib.error
        import urllib.request

        try:
            with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=10) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    def metrics(self) -> str:
        return self.get(self.metrics_url)[1]

    def stop(self) -> int:
        # The channel stays open through the shutdown, as Envoy's would.
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                raise AssertionError("ratelab-server ignored SIGTERM for 10 s")
        self.channel.close()
        self.process.stdout.close()
        # Closed gracefully: not cut at the end of the grace period.
        assert "after the grace period" not in self.log.read_text(), self.log.read_text()
        return self.process.returncode


def clear_of_edges(*units: int, margin: float = 20.0) -> None:
    """Waits, when a window of one of ``units`` (seconds) ends within
    ``margin`` seconds, until it has: what a test then asks falls in one
    window on the clock, however slow the machine (the test asks for less
    than ``margin`` seconds of work)."""
    while True:
        now = time.time()
        waits = [u - now % u for u in units if u - now % u < margin]
        if not waits:
            return
        time.sleep(max(waits) + 0.05)


@pytest.fixture
def start(server_binary):
    """Starts servers; each is stopped with SIGTERM at the end of the test,
    and must exit 0."""
    servers = []

    def start(config: dict[str, str], *args: str, **options) -> RateLimitServer:
        server = RateLimitServer(server_binary, config, *args, **options)
        servers.append(server)
        return server

    yield start
    codes = [server.stop() for server in servers]
    for server in servers:
        shutil.rmtree(server.dir, ignore_errors=True)
    assert codes == [0] * len(codes), f"exit codes after SIGTERM: {codes}"


@pytest.fixture
def redis_server():
    s = RedisServer()
    yield s
    s.remove()


class RedisCluster:
    """Three masters with cluster mode on, joined by ``redis-cli --cluster
    create``."""

    def __init__(self) -> None:
        self.nodes = [RedisServer("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
                      for _ in range(3)]
        cli = shutil.which("redis-cli")
        if not cli:
            self.remove()
            pytest.fail("redis-cli not found: install it (Debian/Ubuntu: sudo apt-get install "
                        "redis-tools)", pytrace=False)
        subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
                        "--cluster-replicas", "0", "--cluster-yes"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while True:
            info = subprocess.run([cli, "-p", str(self.nodes[0].port), "cluster", "info"],
                                  capture_output=True, text=True).stdout
            if "cluster_state:ok" in info:
                return
            if time.monotonic() > deadline:
                self.remove()
                pytest.fail("the cluster did not come up", pytrace=False)
            time.sleep(0.1)

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    def remove(self) -> None:
        for node in self.nodes:
            node.remove()


@pytest.fixture
def redis_cluster():
    c = RedisCluster()
    yield c
    c.remove()


DAY = rls_pb2.RateLimitResponse.RateLimit.DAY
OK = rls_pb2.RateLimitResponse.OK
OVER_LIMIT = rls_pb2.RateLimitResponse.OVER_LIMIT
SECOND = rls_pb2.RateLimitResponse.RateLimit.SECOND
MINUTE = rls_pb2.RateLimitResponse.RateLimit.MINUTE
HOUR = rls_pb2.RateLimitResponse.RateLimit.HOUR
