"""Rust, Python and Node on one Redis: alternating on one key they share one
quota exactly (the same decisions, call for call, as any one of them alone),
for every algorithm; the reference table from each language; and every
key they write is the one the key scheme names.

The Rust side is the example ``protocol_client`` (built here with cargo, in
``CARGO_TARGET_DIR`` or the workspace's ``target/``), the Node side
``dist/testing/protocol_client.js`` (built here with ``npm run build``;
``npm ci`` in lua/clients/node first). Both read ``check <algorithm> <key>
<cost> <now>`` lines and answer JSON lines; Python is driven the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ratelab_client import ALGORITHMS, Limiter, Quota

from conftest import LUA, REPO

T0 = 1_700_000_000_000_000
NODE_DIR = LUA / "clients" / "node"


def _run(cmd, cwd, what):
    result = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        pytest.fail(f"{what} failed ({' '.join(map(str, cmd))}):\n{result.stdout[-4000:]}", pytrace=False)


def _cargo() -> str:
    cargo = os.environ.get("CARGO") or shutil.which("cargo")
    if not cargo:
        home = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo"))
        cargo = str(home / "bin" / "cargo")
    if not Path(cargo).exists():
        pytest.fail("cargo not found: the cross-language test builds the Rust example", pytrace=False)
    return cargo


@pytest.fixture(scope="session")
def rust_binary() -> Path:
    _run([_cargo(), "build", "--locked", "-p", "ratelab", "--example", "protocol_client"], REPO,
         "building the Rust example")
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    if not target.is_absolute():
        target = REPO / target
    return target / "debug" / "examples" / "protocol_client"


@pytest.fixture(scope="session")
def node_driver() -> Path:
    npm, node = shutil.which("npm"), shutil.which("node")
    if not (npm and node):
        pytest.fail("node and npm are needed for the cross-language test", pytrace=False)
    if not (NODE_DIR / "node_modules").is_dir():
        pytest.fail(f"the Node client's dependencies are missing: run `npm ci` in {NODE_DIR}", pytrace=False)
    _run([npm, "run", "build"], NODE_DIR, "building the Node client")
    return NODE_DIR / "dist" / "testing" / "protocol_client.js"


class Driver:
    """A client in another language, spoken to on its stdin."""

    def __init__(self, name: str, cmd: list) -> None:
        self.name = name
        self.process = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def send(self, line: str) -> dict:
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        answer = self.process.stdout.readline()
        if not answer:
            raise AssertionError(f"{self.name} client exited (code {self.process.poll()}) on {line!r}")
        return json.loads(answer)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


class PythonDriver:
    """This package, behind the same line protocol."""

    name = "python"

    def __init__(self, client, prefix: str) -> None:
        self.client, self.prefix = client, prefix
        self.quota = Quota.per_second(5, burst=10)
        self.now = 0
        self.limiters = {}

    def send(self, line: str) -> dict:
        words = line.split()
        if words[0] == "quota":
            self.quota = Quota(*map(int, words[1:]))
            return {"ok": True}
        op, name, key, cost, now, *owed = words
        id = (name, self.quota, now != "-")
        if id not in self.limiters:
            clock = (lambda: self.now) if now != "-" else None
            self.limiters[id] = Limiter(self.client, name, self.quota, prefix=self.prefix, clock=clock,
                                        timeout=5.0)
        if now != "-":
            self.now = int(now)
        d = getattr(self.limiters[id], op)(key, int(cost), *map(int, owed))
        return {
            "allowed": d.allowed,
            "limit": d.limit,
            "remaining": d.remaining,
            "retry_after_micros": d.retry_after_micros,
            "reset_after_micros": d.reset_after_micros,
            "delay_micros": d.delay_micros,
        }

    def close(self) -> None:
        pass


@pytest.fixture
def drivers(server, client, prefix, rust_binary, node_driver):
    rust = Driver("rust", [str(rust_binary), server.url, prefix])
    node = Driver("node", ["node", str(node_driver), server.url, prefix])
    python = PythonDriver(client, prefix)
    yield {"rust": rust, "python": python, "node": node}
    rust.close()
    node.close()


def _sequence():
    """90 checks, 70 ms apart, of costs 1 to 3: past the limit and back."""
    costs = [1, 1, 2, 1, 3, 1, 1, 2, 1, 1]
    return [(T0 + i * 70_000, costs[i % len(costs)]) for i in range(90)]


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_three_languages_on_one_key_share_one_quota(drivers, client, prefix, name):
    langs = ["rust", "python", "node"]
    steps = _sequence()
    shared = []
    for i, (now, cost) in enumerate(steps):
        d = drivers[langs[i % 3]].send(f"check {name} shared {cost} {now}")
        assert "error" not in d, d
        shared.append(d)
    # Each language alone, on a key of its own, decides the same, call for call.
    for lang in langs:
        alone = [drivers[lang].send(f"check {name} {lang}-alone {cost} {now}") for now, cost in steps]
        assert alone == shared, f"{name}: {lang} alone decides otherwise than the three together"
    admitted = sum(cost for d, (_, cost) in zip(shared, steps) if d["allowed"])
    print(f"{name}: {sum(d['allowed'] for d in shared)} of {len(steps)} checks, {admitted} units admitted")
    assert 0 < sum(d["allowed"] for d in shared) < len(steps)
    # The three wrote one key, the one the scheme names: no key of their own
    # (besides the Python and Node clients' quota registry, `<code>:quota`).
    expected = {Limiter(client, name, Quota.per_second(5, burst=10), prefix=prefix).redis_key(k)
                for k in ["shared", "rust-alone", "python-alone", "node-alone"]}
    state = {k for k in client.scan_iter(match=f"{prefix}:*") if not k.endswith(b":quota")}
    assert state == expected


@pytest.mark.parametrize("name", ["token-bucket", "gcra", "leaky-meter", "leaky-queue"])
def test_the_reference_table_from_each_language(drivers, name):
    # Capacity 10, 5 per second: a burst of 20 admits 10; one second later,
    # 10 admit 5; a refusal says retry in 1 s.
    rows = []
    for lang, driver in drivers.items():
        first = [driver.send(f"check {name} table-{lang} 1 {T0}") for _ in range(20)]
        second = [driver.send(f"check {name} table-{lang} 1 {T0 + 1_000_000}") for _ in range(10)]
        waits = {-(-d["retry_after_micros"] // 1_000_000) for d in first + second if not d["allowed"]}
        rows.append((lang, sum(d["allowed"] for d in first), sum(d["allowed"] for d in second), waits))
    print(f"\n{name}: " + "; ".join(f"{lang} {a}/20, then {b}/10, retry {w} s" for lang, a, b, w in rows))
    assert rows == [(lang, 10, 5, {1}) for lang in drivers]


def test_the_redis_clock_is_shared_too(drivers, prefix):
    # On Redis TIME (no `now`), a fresh key's first unit from each language
    # comes out of the same bucket.
    # One unit per 6 minutes: none comes back between the calls.
    for driver in drivers.values():
        assert driver.send("quota 10 3600000000 10") == {"ok": True}
    answers = [drivers[lang].send("check gcra clock 1 -") for lang in ["rust", "python", "node"]]
    assert [d["remaining"] for d in answers] == [9, 8, 7], answers


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_peeks_and_refunds_cross_languages(drivers, name):
    # Rust takes 7; Python peeks what Node's check then decides; Node gives 4
    # back; each language peeks the same 7 remaining; Python refunds the rest. The
    # refunds come at the instant of the check: the whole reset is still owed.
    rust, python, node = drivers["rust"], drivers["python"], drivers["node"]
    taken = rust.send(f"check {name} k 7 {T0}")
    assert taken["remaining"] == 3
    owed = taken["reset_after_micros"]
    peeked = python.send(f"peek {name} k 2 {T0}")
    assert node.send(f"check {name} k 2 {T0}") == peeked
    assert peeked["remaining"] == 1
    assert node.send(f"refund {name} k 4 {T0} {owed}")["remaining"] == 5
    assert [d.send(f"peek {name} k 0 {T0}")["remaining"] for d in (rust, python, node)] == [5, 5, 5]
    assert python.send(f"refund {name} k 10 {T0} {owed}")["remaining"] == 10
    assert rust.send(f"check {name} k 10 {T0}")["allowed"]
