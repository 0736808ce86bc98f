#!/usr/bin/env python3
"""envoyproxy/ratelimit against ratelab-server, answer by answer.

Starts, for each case, the reference service and ratelab-server twice (on
Redis, and in memory) with the same environment and the same YAML, all on
one throwaway redis-server (each with its own CACHE_KEY_PREFIX, so that
they do not share counters), sends every request of the case to each in
turn over gRPC with Envoy's generated messages, and compares the answers
(overall code; each status's code, current limit, limit remaining and
duration until reset; the response headers; errors) and, at the end of
each case, the statistics each exports to Prometheus, or in some cases
sends to statsd (the reference's default). Some cases ask over HTTP
(`/json`) instead of gRPC and compare the HTTP status and body.

Windows are on the wall clock in both services, so the driver decides
when requests are sent: every sequence starts just after a second's edge,
when no window of the units in play ends within its margin, and a
sequence during which one did end is run again (on fresh counters).

The cases: README examples 1 to 11, every file of test/config and the
configuration of its docker-compose example (read from the reference's
checkout; the latter with quota mode and dynamic metadata), the request
sequences of its integration tests (with and without the local cache, with
STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT), its environment's switches
(global shadow mode, response headers, a Redis for limits per second),
and randomised sequences of descriptors over all of them.

    python differential.py --reference-bin /path/to/ratelimit \\
        --reference-src /path/to/ratelimit-checkout [--ratelab-bin PATH] \\
        [--seed N] [--random-requests N] [--report out.json]

See README.md beside it.
"""

from __future__ import annotations

import argparse
import atexit
import collections
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import yaml
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc
from google.protobuf import json_format

REPO = Path(__file__).resolve().parents[4]
UNIT_SECONDS = {"SECOND": 1, "MINUTE": 60, "HOUR": 3600, "DAY": 86400,
                "WEEK": 7 * 86400, "MONTH": 30 * 86400, "YEAR": 365 * 86400}
UNIT_NUMBER = {"SECOND": 1, "MINUTE": 2, "HOUR": 3, "DAY": 4, "MONTH": 5, "YEAR": 6, "WEEK": 7}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, process: subprocess.Popen, seconds: float = 30) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return True
        except OSError:
            time.sleep(0.05)
    return False


#: Every process started, stopped when this program exits, whatever stops it.
STARTED: list[subprocess.Popen] = []


@atexit.register
def _stop_everything() -> None:
    for process in STARTED:
        if process.poll() is None:
            process.kill()


class Redis:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="differential-redis-")
        self.port = free_port()
        self.process = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(self.port), "--bind",
             "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        STARTED.append(self.process)
        if not wait_port(self.port, self.process):
            raise SystemExit("redis-server did not start")

    def flush(self) -> None:
        with socket.create_connection(("127.0.0.1", self.port)) as s:
            s.sendall(b"FLUSHALL\r\n")
            s.recv(64)

    def keys(self) -> list[str]:
        out = subprocess.run([shutil.which("redis-cli") or "redis-cli", "-p", str(self.port), "--scan"],
                             check=True, capture_output=True, text=True).stdout
        return out.split()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class StatsdSink:
    """A statsd server over TCP (the reference's statsd sink speaks TCP):
    keeps every line it is sent."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.lines: list[str] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(connection,), daemon=True).start()

    def _read(self, connection: socket.socket) -> None:
        pending = b""
        with connection:
            while chunk := connection.recv(65536):
                *lines, pending = (pending + chunk).split(b"\n")
                with self.lock:
                    self.lines.extend(line.decode(errors="replace") for line in lines if line)

    def series(self) -> dict[str, float]:
        """Counters summed by name, timers counted; the Go runtime's and
        the Redis pool's gauges (which ratelab-server has no counterpart
        of) left out."""
        out: dict[str, float] = collections.defaultdict(float)
        with self.lock:
            lines = list(self.lines)
        for line in lines:
            name, _, rest = line.partition(":")
            value, _, kind = rest.partition("|")
            if name.startswith(("ratelimit.go.", "runtime.", "ratelimit.redis_pool.")):
                continue
            if kind.startswith("c"):
                out[name] += float(value)
            elif kind.startswith("ms"):
                out[name + " (timings)"] += 1
        return dict(out)

    def close(self) -> None:
        self.listener.close()


class Server:
    """One service on a runtime directory, with the reference's environment.
    ratelab-server is given port 0 and says where it listens; the reference
    is given free ports."""

    def __init__(self, name: str, binary: str, runtime: Path, env: dict[str, str],
                 redis: Redis | None, prefix: str, ratelab: bool,
                 statsd: StatsdSink | None = None) -> None:
        self.name = name
        ports = ["0"] * 4 if ratelab else [str(free_port()) for _ in range(4)]
        self.grpc_port, http_port, debug_port, prom_port = ports
        environment = {
            "PATH": os.environ.get("PATH", ""),
            "USE_STATSD": "false",
            "USE_PROMETHEUS": "true",
            "PROMETHEUS_ADDR": f"127.0.0.1:{prom_port}",
            "STATS_FLUSH_INTERVAL": "1s",
            "LOG_LEVEL": "warn",
            "RUNTIME_ROOT": str(runtime),
            "RUNTIME_SUBDIRECTORY": "ratelimit",
            "RUNTIME_WATCH_ROOT": "false",
            "GRPC_HOST": "127.0.0.1", "GRPC_PORT": self.grpc_port,
            "HOST": "127.0.0.1", "PORT": http_port,
            "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": debug_port,
            "CACHE_KEY_PREFIX": prefix,
            **env,
        }
        if redis is not None:
            environment.update({"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": f"127.0.0.1:{redis.port}"})
        if statsd is not None:
            environment.update({"USE_STATSD": "true", "USE_PROMETHEUS": "false",
                                "STATSD_HOST": "127.0.0.1", "STATSD_PORT": str(statsd.port)})
        self.log = tempfile.NamedTemporaryFile(prefix=f"differential-{name}-", suffix=".log", delete=False)
        # No preexec function: this process runs gRPC, whose threads a
        # fork must not run Python in.
        self.process = subprocess.Popen([binary], env=environment, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.PIPE if ratelab else subprocess.DEVNULL,
                                        stderr=self.log, text=True)
        STARTED.append(self.process)
        self.metrics_url = f"http://127.0.0.1:{prom_port}/metrics"
        self.http_url = f"http://127.0.0.1:{http_port}"
        if ratelab:
            self.address = None
            for line in self.process.stdout:
                if line.startswith("metrics on "):
                    self.metrics_url = line.split()[2]
                elif line.startswith("http on "):
                    self.http_url = line.split()[2]
                elif line.startswith("listening on "):
                    self.address = line.split()[2]
                    break
            self.up = self.address is not None
        else:
            self.address = f"127.0.0.1:{self.grpc_port}"
            self.up = wait_port(int(self.grpc_port), self.process)
        self.channel = grpc.insecure_channel(self.address or "127.0.0.1:1")
        self.stub = rls_pb2_grpc.RateLimitServiceStub(self.channel)

    def ask(self, request):
        try:
            return self.stub.ShouldRateLimit(request, timeout=10)
        except grpc.RpcError as error:
            return error

    def ask_json(self, request):
        """The request POSTed to /json in protobuf's JSON form: ("http",
        status, body: its JSON parsed, or its text)."""
        body = json_format.MessageToJson(request).encode()
        post = urllib.request.Request(self.http_url + "/json", data=body, method="POST")
        try:
            with urllib.request.urlopen(post, timeout=10) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read().decode()
        except OSError as error:
            return ("http", None, str(error))
        try:
            return ("http", status, json.loads(text))
        except ValueError:
            return ("http", status, text.strip())

    def metrics(self) -> dict[str, float]:
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return {}
        series = {}
        for line in text.splitlines():
            if line.startswith("ratelimit_service_") and not line.startswith("ratelimit_service_response_time") \
                    and not line.startswith("ratelimit_service_total_requests"):
                name, value = line.rsplit(" ", 1)
                series[name] = float(value)
        return series

    def log_text(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        self.channel.close()
        if self.process.stdout:
            self.process.stdout.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        os.unlink(self.log.name)


# ---------------------------------------------------------------------------
# Requests and answers.

def request(domain: str, descriptors, hits_addend: int = 0):
    """descriptors: each a dict {entries: [(k, v)], hits: int|None, limit: (rpu, unit)|None}."""
    r = rls_pb2.RateLimitRequest(domain=domain, hits_addend=hits_addend)
    for d in descriptors:
        descriptor = r.descriptors.add()
        for key, value in d["entries"]:
            descriptor.entries.add(key=key, value=value)
        if d.get("hits") is not None:
            descriptor.hits_addend.value = d["hits"]
        if d.get("limit") is not None:
            descriptor.limit.requests_per_unit = d["limit"][0]
            descriptor.limit.unit = UNIT_NUMBER[d["limit"][1]]
    return r


def answer(response) -> tuple:
    """What is compared of an answer."""
    if isinstance(response, tuple):
        return response
    if isinstance(response, grpc.RpcError):
        return ("error",)
    statuses = tuple(
        (s.code,
         (s.current_limit.name, s.current_limit.requests_per_unit, s.current_limit.unit)
         if s.HasField("current_limit") else None,
         s.limit_remaining,
         (s.duration_until_reset.seconds, s.duration_until_reset.nanos)
         if s.HasField("duration_until_reset") else None)
        for s in response.statuses)
    headers = tuple((h.key, h.value) for h in response.response_headers_to_add)
    metadata = None
    if response.HasField("dynamic_metadata"):
        fields = json_format.MessageToDict(response.dynamic_metadata)
        # A limit override is in Go's protobuf text form, which puts one or
        # two spaces between fields, chosen per build on purpose (its output
        # is not to be relied on): compared with single spaces.
        for descriptor in fields.get("descriptors", []):
            if isinstance(descriptor, dict) and "limit" in descriptor:
                descriptor["limit"] = " ".join(str(descriptor["limit"]).split())
        metadata = json.dumps(fields, sort_keys=True)
    return ("ok", response.overall_code, statuses, headers, metadata)


def describe(response) -> str:
    if isinstance(response, grpc.RpcError):
        return f"error {response.code().name}: {response.details()}"
    return str(answer(response))


def why(reference: tuple, ratelab: tuple) -> str:
    """A short class for a difference."""
    if reference[0] != ratelab[0]:
        return "one answered, the other failed"
    if reference[0] == "error":
        return "error"
    if reference[0] == "http":
        return "http status" if reference[1] != ratelab[1] else "http body"
    if reference[1] != ratelab[1]:
        return "overall code"
    for a, b in zip(reference[2], ratelab[2]):
        if a[0] != b[0]:
            return "descriptor code"
        if a[1] != b[1]:
            return "current limit"
        if a[2] != b[2]:
            return "limit remaining"
        if a[3] != b[3]:
            return "duration until reset"
    if reference[3] != ratelab[3]:
        return "headers"
    if reference[4] != ratelab[4]:
        return "dynamic metadata"
    return "statuses"


# ---------------------------------------------------------------------------
# Cases.

class Case:
    def __init__(self, name: str, files: dict[str, str], env: dict[str, str] | None = None,
                 sequences=None, generate: bool = True, restart_all: bool = False,
                 statsd: bool = False, over_http: bool = False, persecond: bool = False) -> None:
        self.name = name
        self.files = files
        self.env = env or {}
        self.sequences = sequences or []
        self.generate = generate
        self.restart_all = restart_all
        # Statistics to statsd rather than Prometheus; requests to /json.
        self.statsd = statsd
        self.over_http = over_http
        # Limits per second on a second Redis (REDIS_PERSECOND): where
        # each service's keys land is compared too.
        self.persecond = persecond


def load_yaml(text: str):
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def units_of(files: dict[str, str]) -> set[str]:
    units = set()
    for text in files.values():
        for match in re.finditer(r"unit:\s*['\"]?([A-Za-z]+)", text):
            unit = match.group(1).upper()
            if unit in UNIT_SECONDS:
                units.add(unit)
    return units


def concrete(value, rng: random.Random, n: int) -> list[str]:
    if value is None or value == "":
        return [f"v{rng.randrange(10**6)}" for _ in range(n)]
    value = str(value) if not isinstance(value, bool) else ("true" if value else "false")
    if "*" in value:
        return [value.replace("*", f"x{rng.randrange(100)}"), value.replace("*", "")]
    return [value]


def paths(descriptors, rng: random.Random, prefix=()) -> list[tuple]:
    """(entries, limit or None) for every node, values made up where any fits."""
    out = []
    if not isinstance(descriptors, list):
        return out
    for d in descriptors:
        if not isinstance(d, dict) or "key" not in d:
            continue
        key = str(d["key"])
        for value in concrete(d.get("value"), rng, 2):
            entries = prefix + ((key, value),)
            limit = d.get("rate_limit") if isinstance(d.get("rate_limit"), dict) else None
            out.append((entries, limit))
            out.extend(paths(d.get("descriptors"), rng, entries))
    return out


def generated_sequences(files: dict[str, str], rng: random.Random) -> list[list[tuple]]:
    """For each configured descriptor: enough hits to go over its limit, in
    few requests; then requests of several descriptors; then ones that match
    nothing."""
    sequences = []
    pool = []
    for text in files.values():
        config = load_yaml(text)
        if not isinstance(config, dict):
            continue
        domain = str(config.get("domain", ""))
        for entries, limit in paths(config.get("descriptors"), rng)[:40]:
            pool.append((domain, entries, limit))
    for domain, entries, limit in pool:
        rpu = 3
        if limit and isinstance(limit.get("requests_per_unit"), int):
            rpu = limit["requests_per_unit"]
        plan = [1, max(0, min(rpu, 2**32) - 2), 1, 1, 3, 0]
        sequences.append([(domain, [{"entries": list(entries), "hits": hits}], 0) for hits in plan])
        # Deeper and shallower than configured, and an unknown key.
        sequences.append([
            (domain, [{"entries": list(entries) + [("extra", "e")]}], 0),
            (domain, [{"entries": list(entries[:-1])}], 0),
            (domain, [{"entries": [("unknown_key", "u")]}], 0),
        ])
    for _ in range(min(len(pool), 12)):
        group = rng.sample(pool, k=min(len(pool), rng.randint(2, 3)))
        domain = group[0][0]
        same = [g for g in group if g[0] == domain]
        sequences.append([(domain, [{"entries": list(e)} for _, e, _ in same], rng.choice([0, 1, 2]))
                          for _ in range(rng.randint(3, 8))])
    return sequences


def random_sequences(cases: list[Case], rng: random.Random, total: int) -> list[Case]:
    """Random requests over every accepted case's descriptors: 1 to 3
    descriptors, random hits, now and then a limit override or an empty
    descriptor."""
    out = []
    for case in cases:
        pool = []
        for text in case.files.values():
            config = load_yaml(text)
            if isinstance(config, dict):
                for entries, _ in paths(config.get("descriptors"), rng)[:30]:
                    pool.append((str(config.get("domain", "")), entries))
        if not pool:
            continue
        sequence = []
        for _ in range(total):
            domain = rng.choice(pool)[0]
            mine = [e for d, e in pool if d == domain]
            descriptors = []
            for _ in range(rng.randint(1, 3)):
                d = {"entries": list(rng.choice(mine))}
                roll = rng.random()
                if roll < 0.3:
                    d["hits"] = rng.choice([0, 1, 2, 5])
                elif roll < 0.35:
                    d["limit"] = (rng.choice([0, 1, 3]), rng.choice(["MINUTE", "HOUR"]))
                elif roll < 0.38:
                    d = {"entries": []}
                descriptors.append(d)
            sequence.append((domain, descriptors, rng.choice([0, 0, 0, 1, 3])))
        # Runs of a few requests, each run within a second.
        chunks = [sequence[i:i + 20] for i in range(0, len(sequence), 20)]
        out.append(Case(f"random: {case.name}", case.files, case.env, chunks, generate=False,
                        persecond=case.persecond))
    return out


def readme_cases(source: Path) -> list[Case]:
    text = (source / "README.md").read_text()
    cases = []
    parts = re.split(r"^#### Example (\d+)\s*$", text, flags=re.M)
    for number, body in zip(parts[1::2], parts[2::2]):
        body = body.split("\n## ", 1)[0].split("\n### ", 1)[0]
        blocks = re.findall(r"```yaml\n(.*?)```", body, flags=re.S)
        by_domain = collections.defaultdict(list)
        for block in blocks:
            config = load_yaml(block)
            if isinstance(config, dict):
                by_domain[str(config.get("domain"))].append(block)
        # Blocks of one domain are alternatives: one case each.
        variant = 0
        while any(by_domain.values()):
            files = {f"{domain}.yaml": blocks.pop(0) for domain, blocks in by_domain.items() if blocks}
            variant += 1
            cases.append(Case(f"README example {number} ({variant})", files))
    return cases


def test_config_cases(source: Path) -> list[Case]:
    directory = source / "test" / "config"
    cases = []
    for path in sorted(directory.glob("*.yaml")):
        cases.append(Case(f"test/config/{path.name}", {path.name: path.read_text()}))
    # The pair the reference merges when MERGE_DOMAIN_CONFIG is set.
    pair = {p: (directory / p).read_text() for p in ("merge_domain_key1.yaml", "merge_domain_key2.yaml")}
    cases.append(Case("test/config merge pair", pair))
    cases.append(Case("test/config merge pair (MERGE_DOMAIN_CONFIG)", pair, {"MERGE_DOMAIN_CONFIG": "true"}))
    cases.append(Case("test/config basic + duplicate domain",
                      {p: (directory / p).read_text() for p in ("basic_config.yaml", "duplicate_domain.yaml")}))
    return cases


def example_cases(source: Path) -> list[Case]:
    """The configuration of the reference's docker-compose example, as
    deployed, with quota mode and dynamic metadata switched on in turn."""
    directory = source / "examples" / "ratelimit" / "config"
    files = {p.name: p.read_text() for p in sorted(directory.glob("*.yaml"))}
    service = [[("service", "service_1")], [("service", "service_2")]]
    quota = [[("rl", [{"entries": service[0]}, {"entries": service[1]}], 1)] * 4,
             [("rl", [{"entries": service[1]}], 1)] * 3]
    cases = []
    for env in [{}, {"RESPONSE_DYNAMIC_METADATA": "true"},
                {"RESPONSE_DYNAMIC_METADATA": "true", "QUOTA_MODE": "true"}]:
        name = "examples/ratelimit/config" + "".join(f" {k}={v}" for k, v in env.items())
        cases.append(Case(name, files, env, quota))
    return cases


def integration_cases(source: Path, rng: random.Random) -> list[Case]:
    directory = source / "test" / "integration" / "runtime" / "current" / "ratelimit" / "config"
    files = {p.name: p.read_text() for p in sorted(directory.glob("*.yaml"))}
    cases = []
    for suffix, env in [("", {}),
                        ("_local", {"LOCAL_CACHE_SIZE_IN_BYTES": "1000000"}),
                        ("", {"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true"}),
                        ("_local", {"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT": "true",
                                    "LOCAL_CACHE_SIZE_IN_BYTES": "1000000"})]:
        r1, r2 = rng.randrange(10**9), rng.randrange(10**9)
        sequences = [
            [("foo", [{"entries": [(f"hello{suffix}", "world")]}], 1)],
            [("basic", [{"entries": [(f"key1{suffix}", "foo")]}], 1)],
            [("another", [{"entries": [(f"key2{suffix}", str(r1))]}], 1)] * 25,
            [("another", [{"entries": [(f"key2{suffix}", str(r2))]}, {"entries": [(f"key3{suffix}", str(r2))]}], 1)] * 15,
            [("share-threshold-test", [{"entries": [("files", "files/a.pdf")]}], 1)] * 10
            + [("share-threshold-test", [{"entries": [("files", "files/b.csv")]}], 1)],
            [("share-threshold-test", [{"entries": [("files_no_share", f"files_no_share/{i}-{rng.randrange(10**9)}")]}], 1)
             for i in range(10)],
        ]
        name = "integration" + (" " + " ".join(f"{k}={v}" for k, v in env.items()) if env else "")
        cases.append(Case(name, files, env, sequences, generate=False,
                          restart_all="LOCAL_CACHE_SIZE_IN_BYTES" in env))
        # The same with the reference's default statistics (statsd), and
        # asked over HTTP.
        cases.append(Case(name + " (statsd)", files, env, sequences, generate=False,
                          restart_all="LOCAL_CACHE_SIZE_IN_BYTES" in env, statsd=True))
        # Over HTTP also: no domain, an unknown one, a descriptor without entries.
        odd = [[("", [{"entries": [("key1", "foo")]}], 1),
                ("unknown", [{"entries": [("key1", "foo")]}], 1),
                ("basic", [{"entries": []}], 1)]]
        cases.append(Case(name + " (/json)", files, env, sequences + odd, generate=False,
                          restart_all="LOCAL_CACHE_SIZE_IN_BYTES" in env, over_http=True))
    reload_files = dict(files)
    reload_files["reload.yaml"] = (source / "test" / "integration" / "runtime" / "current" / "ratelimit" / "reload.yaml").read_text()
    cases.append(Case("integration reload.yaml", reload_files, {}, [
        [("reload", [{"entries": [("block", "foo")]}], 1)] * 2,
        [("reload", [{"entries": [("key1", "foo")]}], 1)] * 3,
        [("reload", [{"entries": [("one_per_minute", "foo")]}], 1)] * 3,
    ], generate=False))
    # Limits per second on a Redis of their own, as the reference's
    # integration tests also run.
    r = rng.randrange(10**9)
    cases.append(Case("integration REDIS_PERSECOND", files, {}, [
        [("basic", [{"entries": [("key1", str(r))]}], 1)] * 3,
        [("another", [{"entries": [("key2", str(r))]}, {"entries": [("key3", str(r))]}], 1)] * 6,
    ], generate=True, persecond=True))
    # The environment's switches, on the integration files.
    for env in [{"SHADOW_MODE": "true"},
                {"LIMIT_RESPONSE_HEADERS_ENABLED": "true"},
                {"LIMIT_RESPONSE_HEADERS_ENABLED": "true", "LIMIT_LIMIT_HEADER": "X-L",
                 "LIMIT_REMAINING_HEADER": "X-R", "LIMIT_RESET_HEADER": "X-S"},
                {"NEAR_LIMIT_RATIO": "0.5"}]:
        name = "integration " + " ".join(f"{k}={v}" for k, v in env.items())
        r = rng.randrange(10**9)
        cases.append(Case(name, files, env, [
            [("another", [{"entries": [("key2", str(r))]}, {"entries": [("key3", str(r))]}], 1)] * 12,
            [("basic", [{"entries": [("one_per_minute", str(r))]}], 1)] * 3,
        ], generate=True))
    return cases


# ---------------------------------------------------------------------------
# Running.

def align(units: set[str], margin: float) -> None:
    """Sleeps until no window of `units` ends within `margin` seconds (a
    second's window: until just after the next second's edge)."""
    while True:
        now = time.time()
        if "SECOND" in units:
            time.sleep(1.0 - (now % 1.0) + 0.02)
            return
        waits = [UNIT_SECONDS[u] - (now % UNIT_SECONDS[u]) for u in units]
        soon = [w for w in waits if w < margin]
        if not soon:
            return
        time.sleep(max(soon) + 0.05)


def crossed(units: set[str], start: float, end: float) -> bool:
    return any(int(start // UNIT_SECONDS[u]) != int(end // UNIT_SECONDS[u]) for u in units)


class Report:
    def __init__(self) -> None:
        self.compared = collections.Counter()
        self.differ = collections.Counter()
        self.examples = collections.defaultdict(list)
        self.metrics = collections.Counter()
        self.metric_examples = []
        self.refusals = []

    def note(self, pair: str, case: str, req, a, b) -> None:
        self.compared[pair] += 1
        ka, kb = answer(a), answer(b)
        if ka != kb:
            kind = why(ka, kb)
            self.differ[(pair, kind)] += 1
            if len(self.examples[(pair, kind)]) < 5:
                self.examples[(pair, kind)].append(
                    {"case": case, "request": str(req).replace("\n", " "),
                     "reference": describe(a), "ratelab": describe(b)})


def start_all(case: Case, args, runtime: Path, redis: Redis,
              sinks: dict[str, StatsdSink], persecond: Redis | None = None) -> dict[str, Server]:
    env = dict(case.env)
    if persecond is not None:
        env.update({"REDIS_PERSECOND": "true", "REDIS_PERSECOND_SOCKET_TYPE": "tcp",
                    "REDIS_PERSECOND_URL": f"127.0.0.1:{persecond.port}"})
    servers = {
        "reference": Server("reference", args.reference_bin, runtime, env, redis, "ref_", False,
                            sinks.get("reference")),
        "ratelab-redis": Server("ratelab-redis", args.ratelab_bin, runtime, env, redis, "rl_", True,
                                sinks.get("ratelab-redis")),
        "ratelab-memory": Server("ratelab-memory", args.ratelab_bin, runtime, case.env, None, "mem_", True),
    }
    return servers


def run_case(case: Case, args, redis: Redis, report: Report, rng: random.Random) -> None:
    root = Path(tempfile.mkdtemp(prefix="differential-runtime-"))
    config_dir = root / "ratelimit" / "config"
    config_dir.mkdir(parents=True)
    for name, text in case.files.items():
        (config_dir / name).write_text(text)
    redis.flush()
    sinks = {"reference": StatsdSink(), "ratelab-redis": StatsdSink()} if case.statsd else {}
    persecond = Redis() if case.persecond else None
    servers = start_all(case, args, root, redis, sinks, persecond)
    try:
        # A configuration the reference refuses: it serves errors; ratelab
        # refuses to start.
        ref = servers["reference"]
        probe = request("probe", [{"entries": [("probe", "p")]}])
        refused_ref = not ref.up or isinstance(ref.ask(probe), grpc.RpcError)
        ours = servers["ratelab-redis"]
        refused_ours = not ours.up or isinstance(ours.ask(probe), grpc.RpcError)
        if servers["ratelab-memory"].up:
            servers["ratelab-memory"].ask(probe)
        if refused_ref or refused_ours:
            ours_log = [line for line in ours.log_text().strip().splitlines()
                        if "configuration" in line or line.startswith("ratelab-server:")]
            ref_error = [line for line in ref.log_text().splitlines() if "Error loading" in line or "error" in line.lower()]
            report.refusals.append({
                "case": case.name, "reference refused": refused_ref, "ratelab refused": refused_ours,
                "reference says": (ref_error or [""])[-1][-200:],
                "ratelab says": (ours_log or [""])[-1][-300:],
            })
            report.compared["config acceptance"] += 1
            if refused_ref != refused_ours:
                report.differ[("config acceptance", "accepted by one only")] += 1
            return
        report.compared["config acceptance"] += 1
        # Every answer's duration_until_reset is in whole seconds of each
        # service's clock: a sequence stays within one second.
        units = units_of(case.files) | {"SECOND"}
        sequences = list(case.sequences)
        if case.generate:
            sequences += generated_sequences(case.files, rng)
        for sequence in sequences:
            for attempt in range(6):
                # Keys live on for a random jitter after their window: with
                # a per-second Redis, where they land is compared on each
                # sequence's keys alone, every service starting afresh.
                if attempt or persecond is not None:
                    redis.flush()
                    if persecond is not None:
                        persecond.flush()
                    if case.restart_all:
                        for s in servers.values():
                            s.stop()
                        servers = start_all(case, args, root, redis, sinks, persecond)
                    else:
                        servers["ratelab-memory"].stop()
                        servers["ratelab-memory"] = Server("ratelab-memory", args.ratelab_bin, root,
                                                           case.env, None, "mem_", True)
                align(units, margin=max(5.0, len(sequence) * 0.05))
                start = time.time()
                results = []
                for domain, descriptors, hits in sequence:
                    req = request(domain, descriptors, hits)
                    results.append((req, {name: s.ask_json(req) if case.over_http else s.ask(req)
                                          for name, s in servers.items()}))
                keys = {name: sorted(r.keys()) for name, r in
                        [("main", redis), ("per second", persecond)] if r is not None} \
                    if persecond is not None else {}
                if not crossed(units, start, time.time()):
                    break
            else:
                print(f"  {case.name}: a window kept ending during a sequence; skipped", file=sys.stderr)
                continue
            for where, names in keys.items():
                # The same keys in the same Redis, but for the prefix.
                ours = sorted(k[len("rl_"):] for k in names if k.startswith("rl_"))
                theirs = sorted(k[len("ref_"):] for k in names if k.startswith("ref_"))
                report.compared[f"Redis keys ({where})"] += 1
                if ours != theirs:
                    report.differ[(f"Redis keys ({where})", "placement")] += 1
                    report.examples[(f"Redis keys ({where})", "placement")].append(
                        {"case": case.name, "reference": theirs, "ratelab": ours})
            for req, answers in results:
                report.note("reference vs ratelab on Redis", case.name, req,
                            answers["reference"], answers["ratelab-redis"])
                report.note("reference vs ratelab in memory", case.name, req,
                            answers["reference"], answers["ratelab-memory"])
        # The statistics, once both have flushed them.
        time.sleep(2.5)
        if sinks:
            ref_metrics, our_metrics = sinks["reference"].series(), sinks["ratelab-redis"].series()
        else:
            ref_metrics, our_metrics = servers["reference"].metrics(), servers["ratelab-redis"].metrics()
        for name in sorted(set(ref_metrics) | set(our_metrics)):
            report.metrics["compared"] += 1
            if ref_metrics.get(name) != our_metrics.get(name):
                report.metrics["differ"] += 1
                if len(report.metric_examples) < 30:
                    report.metric_examples.append({"case": case.name, "series": name,
                                                   "reference": ref_metrics.get(name),
                                                   "ratelab": our_metrics.get(name)})
    finally:
        for s in servers.values():
            s.stop()
        for sink in sinks.values():
            sink.close()
        if persecond is not None:
            persecond.stop()
        shutil.rmtree(root, ignore_errors=True)


def default_ratelab_bin() -> str:
    target = os.environ.get("CARGO_TARGET_DIR", str(REPO / "target"))
    return str(Path(target) / "debug" / "ratelab-server")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference-bin", required=True, help="envoyproxy/ratelimit's service binary, built by you")
    parser.add_argument("--reference-src", required=True, type=Path, help="its source checkout (README, test/)")
    parser.add_argument("--ratelab-bin", default=default_ratelab_bin())
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--random-requests", type=int, default=60, help="per configuration")
    parser.add_argument("--only", help="run the cases whose name contains this")
    parser.add_argument("--report", type=Path, help="write the full report as JSON here")
    args = parser.parse_args()
    rng = random.Random(args.seed)

    cases = readme_cases(args.reference_src) + test_config_cases(args.reference_src) \
        + integration_cases(args.reference_src, rng) + example_cases(args.reference_src)
    accepted = [c for c in cases if c.generate and "duplicate" not in c.name]
    cases += random_sequences(accepted, rng, args.random_requests)
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    report = Report()
    redis = Redis()
    try:
        for i, case in enumerate(cases, 1):
            print(f"[{i}/{len(cases)}] {case.name}", file=sys.stderr, flush=True)
            run_case(case, args, redis, report, rng)
    finally:
        redis.stop()

    summary = {
        "cases": len(cases),
        "answers compared": dict(report.compared),
        "answers that differ": {f"{pair}: {kind}": n for (pair, kind), n in sorted(report.differ.items())},
        "examples": {f"{pair}: {kind}": ex for (pair, kind), ex in report.examples.items()},
        "statistics series compared": report.metrics["compared"],
        "statistics series that differ": report.metrics["differ"],
        "statistics examples": report.metric_examples,
        "configurations refused": report.refusals,
    }
    print(json.dumps({k: summary[k] for k in ("cases", "answers compared", "answers that differ",
                                              "statistics series compared", "statistics series that differ")},
                     indent=2))
    if args.report:
        args.report.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
