"""Rust, Python, Node and Go on one Redis: alternating on one key they share
one quota exactly (the same decisions and stamps, call for call, as any one
of them alone), for every algorithm, with checks, peeks, settlements below
and above the cost, refunds and resets interleaved; the reference table from
each language; the seed's experiment (a burst of 20 calls at once split over
every language, then 10 more a second later), on the scripts and on the
native module; and every key they write is the one the key scheme names.

The Rust side is the example ``protocol_client`` (built here with cargo, with
the workspace's features, in ``CARGO_TARGET_DIR`` or the workspace's
``target/``), the Node side
``dist/testing/protocol_client.js`` (built here with ``npm run build``;
``npm ci`` in lua/clients/node first), the Go side ``cmd/protocol-client``
of lua/clients/go (built here with ``go build``). All read the line protocol of
crates/ratelab/examples/protocol_client.rs (``check <algorithm> <key> <cost>
<now>``, ``peek ...``, ``settle <algorithm> <receipt> <actual> <now>``,
``refund <algorithm> <receipt> <now>``, ``reset <algorithm> <key> <now>``)
and answer JSON lines; Python is driven the same way. A receipt is a number
its own process gave: a language settles the admissions it made.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, List

import pytest

from ratelab_client import ALGORITHMS, Limiter, Quota, RatelabError

from conftest import LUA, REPO, RedisServer

T0 = 1_700_000_000_000_000
NODE_DIR = LUA / "clients" / "node"
GO_DIR = LUA / "clients" / "go"


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
    # With the workspace's features (every member's examples, not `-p ratelab`),
    # so that after `cargo test --workspace` the build is a no-op instead of a
    # second build of ratelab's dependency graph with other features.
    _run([_cargo(), "build", "--locked", "--workspace", "--examples"], REPO,
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


def _go() -> str:
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(go).exists():
        pytest.fail("go not found: the cross-language test builds the Go client (Go 1.26: https://go.dev/dl, "
                    "or the golang package of a recent distribution; scripts/setup says how)", pytrace=False)
    return go


@pytest.fixture(scope="session")
def go_driver() -> Path:
    binary = Path(tempfile.mkdtemp(prefix="ratelab-go-")) / "protocol-client"
    _run([_go(), "build", "-o", str(binary), "./cmd/protocol-client"], GO_DIR, "building the Go client")
    return binary


def _module_path() -> Path:
    """ratelab's native module: $RATELAB_MODULE_PATH, else the one `cargo test
    --workspace` leaves in the target directory."""
    env = os.environ.get("RATELAB_MODULE_PATH")
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    if not target.is_absolute():
        target = REPO / target
    candidates = [Path(env)] if env else [target / "debug" / "deps" / "libratelab_redis_module.so",
                                          target / "debug" / "libratelab_redis_module.so"]
    for path in candidates:
        if path.is_file():
            return path
    pytest.fail(f"ratelab's native module not found ({', '.join(map(str, candidates))}): build it with "
                "`cargo build -p ratelab-redis-module` (just test does) or set RATELAB_MODULE_PATH", pytrace=False)


class Driver:
    """A client in another language, spoken to on its stdin."""

    def __init__(self, name: str, cmd: list) -> None:
        self.name = name
        self.process = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def send(self, line: str) -> dict:
        self.write(line)
        return self.read(line)

    def write(self, line: str) -> None:
        """Sends a line without waiting for its answer (see read)."""
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def read(self, line: str = "") -> dict:
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
        self.receipts = {}
        self.next_receipt = 1

    def send(self, line: str) -> dict:
        words = line.split()
        try:
            return self._answer(line, words)
        except RatelabError as e:
            return {"error": str(e), "kind": type(e).__name__}

    def write(self, line: str) -> None:
        """Starts the line's call on a thread of its own (see read): a
        process's calls are in flight together, as a thread pool's are."""
        self._pending = getattr(self, "_pending", [])
        box: dict = {}
        thread = threading.Thread(target=lambda: box.update(answer=self.send(line)))
        thread.start()
        self._pending.append((thread, box))

    def read(self, line: str = "") -> dict:
        thread, box = self._pending.pop(0)
        thread.join()
        return box["answer"]

    def _answer(self, line: str, words: list) -> dict:
        if words[0] == "quota" and len(words) == 4:
            self.quota = Quota(*map(int, words[1:]))
            return {"ok": True}
        if words[0] in ("check", "peek", "settle") and len(words) == 5:
            op, name, what, number, now = words
        elif words[0] in ("refund", "reset") and len(words) == 4:
            op, name, what, now = words
            number = "0"
        else:
            return {"error": f"unknown command: {line}", "kind": "Usage"}
        id = (name, self.quota, now != "-")
        if id not in self.limiters:
            clock = (lambda: self.now) if now != "-" else None
            self.limiters[id] = Limiter(self.client, name, self.quota, prefix=self.prefix, clock=clock,
                                        timeout=5.0, connect_timeout=30.0)
        if now != "-":
            self.now = int(now)
        limiter = self.limiters[id]
        if op == "reset":
            limiter.reset(what)
            return {"ok": True}
        if op in ("settle", "refund"):
            held = self.receipts.pop(int(what), None)
            if held is None or held[0] != id:
                return {"error": f"no receipt {what} of this limiter", "kind": "Usage"}
            return self._json(limiter.settle(held[1], int(number)))
        d = getattr(limiter, op)(what, int(number))
        answer = self._json(d)
        if d.receipt is not None:
            self.receipts[self.next_receipt] = (id, d.receipt)
            answer.update(receipt=self.next_receipt, stamp_at=d.receipt.stamp_at, stamp_mark=d.receipt.stamp_mark)
            self.next_receipt += 1
        return answer

    @staticmethod
    def _json(d) -> dict:
        return {
            "allowed": d.allowed,
            "limit": d.limit,
            "remaining": d.remaining,
            "retry_after_micros": d.retry_after_micros,
            "reset_after_micros": d.reset_after_micros,
            "delay_micros": d.delay_micros,
        }

    def close(self) -> None:
        for limiter in self.limiters.values():
            limiter.close()


LANGS = ["rust", "python", "node", "go"]


@pytest.fixture
def drivers(server, client, prefix, rust_binary, node_driver, go_driver):
    rust = Driver("rust", [str(rust_binary), server.url, prefix])
    node = Driver("node", ["node", str(node_driver), server.url, prefix])
    go = Driver("go", [str(go_driver), server.url, prefix])
    python = PythonDriver(client, prefix)
    yield {"rust": rust, "python": python, "node": node, "go": go}
    rust.close()
    node.close()
    go.close()
    python.close()


def _sequence():
    """90 checks, 70 ms apart, of costs 1 to 3: past the limit and back."""
    costs = [1, 1, 2, 1, 3, 1, 1, 2, 1, 1]
    return [(T0 + i * 70_000, costs[i % len(costs)]) for i in range(90)]


def _decision(answer: dict) -> dict:
    """An answer without its receipt number: each process numbers its own."""
    return {k: v for k, v in answer.items() if k != "receipt"}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_language_on_one_key_shares_one_quota(drivers, client, prefix, name):
    langs = LANGS
    steps = _sequence()
    shared = []
    for i, (now, cost) in enumerate(steps):
        d = drivers[langs[i % len(langs)]].send(f"check {name} shared {cost} {now}")
        assert "error" not in d, d
        shared.append(_decision(d))
    # Each language alone, on a key of its own, decides the same, call for call.
    for lang in langs:
        alone = [_decision(drivers[lang].send(f"check {name} {lang}-alone {cost} {now}")) for now, cost in steps]
        assert alone == shared, f"{name}: {lang} alone decides otherwise than the languages together"
    admitted = sum(cost for d, (_, cost) in zip(shared, steps) if d["allowed"])
    print(f"{name}: {sum(d['allowed'] for d in shared)} of {len(steps)} checks, {admitted} units admitted")
    assert 0 < sum(d["allowed"] for d in shared) < len(steps)
    # Together they wrote one key, the one the scheme names: no key of their
    # own (besides every client's quota registry, `<code>:quota`).
    expected = {Limiter(client, name, Quota.per_second(5, burst=10), prefix=prefix).redis_key(k)
                for k in ["shared", *(f"{lang}-alone" for lang in langs)]}
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
    answers = [drivers[lang].send("check gcra clock 1 -") for lang in LANGS]
    assert [d["remaining"] for d in answers] == [9, 8, 7, 6], answers


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_peeks_settlements_and_resets_cross_languages(drivers, name):
    # Rust takes 7; Python peeks what Node's check then decides; Rust settles
    # its admission to 3 (4 back); each language peeks the same 5 remaining;
    # Node refunds its 2; Go resets the key; Rust takes all 10.
    rust, python, node, go = drivers["rust"], drivers["python"], drivers["node"], drivers["go"]
    taken = rust.send(f"check {name} k 7 {T0}")
    assert taken["remaining"] == 3
    peeked = python.send(f"peek {name} k 2 {T0}")
    checked = node.send(f"check {name} k 2 {T0}")
    assert _decision(checked) == {**peeked, "stamp_at": checked["stamp_at"], "stamp_mark": checked["stamp_mark"]}
    assert peeked["remaining"] == 1
    assert rust.send(f"settle {name} {taken['receipt']} 3 {T0}")["remaining"] == 5
    assert [d.send(f"peek {name} k 0 {T0}")["remaining"] for d in (rust, python, node, go)] == [5, 5, 5, 5]
    assert node.send(f"refund {name} {checked['receipt']} {T0}")["remaining"] == 7
    # A receipt is used once, and only by the process that holds it.
    assert node.send(f"refund {name} {checked['receipt']} {T0}")["kind"] == "Usage"
    assert go.send(f"reset {name} k {T0}") == {"ok": True}
    assert [d.send(f"peek {name} k 0 {T0}")["remaining"] for d in (rust, python, node, go)] == [10, 10, 10, 10]
    assert rust.send(f"check {name} k 10 {T0}")["allowed"]


def _interleaving(name: str, seed: int) -> list:
    """A script of 72 operations on one key, 50 ms to 400 ms apart, each by
    one language: checks of costs 1 to 4, peeks, settlements below the cost
    (refunds included) and above it, of any admission still outstanding, by
    the language that made it, soon or long after, and a few resets. An
    operation is ``(lang, op, now, cost_or_actual, check_index)``."""
    rng = random.Random(f"{name}-{seed}")
    langs = LANGS
    script, now, checks = [], T0, []
    for i in range(72):
        now += rng.choice([50_000, 70_000, 150_000, 400_000])
        roll = rng.random()
        if roll < 0.45 or not checks:
            lang = langs[i % len(langs)]
            checks.append((len(script), lang))
            script.append((lang, "check", now, rng.randint(1, 4), None))
        elif roll < 0.6:
            script.append((rng.choice(langs), "peek", now, rng.randint(0, 3), None))
        elif roll < 0.94:
            index, lang = checks.pop(rng.randrange(len(checks)))
            cost = script[index][3]
            actual = rng.choice([0, max(0, cost - 1), cost + 1, min(10, cost + 3)])
            script.append((lang, "settle" if actual else "refund", now, actual, index))
        else:
            script.append((rng.choice(langs), "reset", now, 0, None))
    return script


def _play(drivers, name: str, script: list, key: str, lang_of) -> list:
    """Runs ``script`` on ``key``, each operation by ``lang_of(its lang)``;
    the answers, receipt numbers left out (a settlement of an admission that
    was refused is skipped, and recorded so)."""
    answers, receipts = [], {}
    for i, (lang, op, now, number, index) in enumerate(script):
        driver = drivers[lang_of(lang)]
        if op in ("check", "peek"):
            answer = driver.send(f"{op} {name} {key} {number} {now}")
            if "receipt" in answer:
                receipts[i] = answer["receipt"]
        elif op in ("settle", "refund"):
            if index not in receipts:
                answers.append({"skipped": "no admission to settle"})
                continue
            tail = f"{number} {now}" if op == "settle" else f"{now}"
            answer = driver.send(f"{op} {name} {receipts.pop(index)} {tail}")
        else:
            answer = driver.send(f"reset {name} {key} {now}")
        assert "error" not in answer, (lang_of(lang), op, answer)
        answers.append(_decision(answer))
    return answers


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_checks_peeks_settlements_and_resets_interleaved_across_languages(drivers, client, prefix, name):
    # Two scripts per algorithm. The languages interleaved on one key answer,
    # call for call (decisions and stamps), what each one alone answers
    # running the whole script on a key of its own.
    for seed in range(2):
        script = _interleaving(name, seed)
        shared = _play(drivers, name, script, f"mixed{seed}", lambda lang: lang)
        for lang in LANGS:
            alone = _play(drivers, name, script, f"mixed{seed}-{lang}", lambda _, lang=lang: lang)
            for i, (ours, theirs) in enumerate(zip(alone, shared)):
                assert ours == theirs, (
                    f"{name}, script {seed}, step {i} {script[i][:4]}: {lang} alone answered {ours}, "
                    f"the languages together {theirs}")
        ops = [op for _, op, *_ in script]
        settled = sum(1 for a, op in zip(shared, ops) if op in ("settle", "refund") and "remaining" in a)
        refused = sum(1 for a, op in zip(shared, ops) if op == "check" and not a["allowed"])
        print(f"\n{name}, script {seed}: {ops.count('check')} checks ({refused} refused), {ops.count('peek')} peeks, "
              f"{ops.count('settle') + ops.count('refund')} settlements ({settled} made), {ops.count('reset')} resets")
        # The script reaches what it is for: refusals, settlements, resets.
        assert refused > 0 and settled > 3 and ops.count("reset") > 0


NODE_RECEIPT = r"""
import { Redis } from "ioredis";
import { Limiter, Quota } from "%(index)s";
const [url, prefix, text] = process.argv.slice(1);
const redis = new Redis(url);
const limiter = new Limiter(redis, "gcra", Quota.perSecond(5, 10), { prefix, clock: () => %(t0)d, timeoutMs: 5000, connectTimeoutMs: 30000 });
const refunded = await limiter.refund(limiter.receiptFromJSON(text));
const taken = await limiter.check("job", 3);
console.log(JSON.stringify({ remaining: refunded.remaining, taken: taken.remaining, receipt: taken.receipt }));
redis.disconnect();
"""


def test_a_serialized_receipt_crosses_between_python_and_node(server, client, prefix, node_driver):
    # A job queue whose producer is Python and whose worker is Node, and back:
    # the receipt's JSON is one format in both clients.
    limiter = Limiter(client, "gcra", Quota.per_second(5, burst=10), prefix=prefix, clock=lambda: T0, timeout=5.0,
                      connect_timeout=30.0)
    text = limiter.check("job", 4).receipt.to_json()
    index = NODE_DIR / "dist" / "src" / "index.js"
    script = NODE_RECEIPT % {"index": index.as_uri(), "t0": T0}
    result = subprocess.run(["node", "--input-type=module", "-e", script, server.url, prefix, text],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60, cwd=NODE_DIR)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    # Node gave back Python's 4, then took 3 and sent its own receipt.
    assert (answer["remaining"], answer["taken"]) == (10, 7)
    back = limiter.receipt_from_json(json.dumps(answer["receipt"]))
    assert (back.key, back.cost) == (b"job", 3)
    assert limiter.refund(back).remaining == 10
    limiter.close()


def test_another_quota_on_a_key_is_reported_across_rust_and_python(server, client, prefix, rust_binary):
    # Python and Rust use one key with different quotas: separate buckets,
    # and each finds the other's quota in the registry.
    rust = Driver("rust", [str(rust_binary), server.url, prefix])
    # Python on its own clock, frozen: nothing comes back while Rust is asked.
    python = Limiter(client, "gcra", Quota.per_second(5, burst=10), prefix=prefix, quota_check_every=1,
                     clock=lambda: T0, timeout=5.0, connect_timeout=30.0)
    try:
        assert python.check("shared").remaining == 9
        assert rust.send("quota 10 1000000 10") == {"ok": True}
        # Rust's first check records its quota and meets Python's.
        assert rust.send("check gcra shared 1 -")["remaining"] == 9
        assert rust.send("mismatches") == {"quota_mismatches": 1}
        assert python.check("shared").remaining == 8
        assert python.stats().quota_mismatches == 1
        assert client.get(f"{prefix}:{{shared}}:gcra:quota") == b"v3:gcra:200000,2000000,10"
    finally:
        rust.close()
        python.close()


# -- the seed's experiment ------------------------------------------------------


@dataclass(frozen=True)
class Language:
    """One language of the seed's experiment: how to make one of its
    clients (a process speaking the line protocol, or this process) on a
    server, from the built drivers. A language joins the experiment with one
    entry in SEED_LANGUAGES (and its build in the ``builds`` fixture)."""

    name: str
    make: Callable[[dict, "RedisServer", object, str], object]


SEED_LANGUAGES: List[Language] = [
    Language("rust", lambda builds, server, client, prefix: Driver("rust", [str(builds["rust"]), server.url, prefix])),
    Language("python", lambda builds, server, client, prefix: PythonDriver(client, prefix)),
    Language("node", lambda builds, server, client, prefix:
             Driver("node", ["node", str(builds["node"]), server.url, prefix])),
    Language("go", lambda builds, server, client, prefix: Driver("go", [str(builds["go"]), server.url, prefix])),
    Language("java", lambda builds, server, client, prefix:
             Driver("java", java_command(builds["java"], server.url, prefix))),
]


@pytest.fixture(scope="session")
def builds(rust_binary, node_driver, go_driver, java_build) -> dict:
    return {"rust": rust_binary, "node": node_driver, "go": go_driver, "java": java_build}


@pytest.fixture(scope="session")
def module_server():
    s = RedisServer(extra=("--loadmodule", str(_module_path())))
    yield s
    s.stop()
    shutil.rmtree(s.dir, ignore_errors=True)


@pytest.mark.parametrize("backend", ["scripts", "module"])
@pytest.mark.parametrize("name", ["token-bucket", "gcra"])
def test_the_seed_experiment_across_every_language(builds, server, module_server, prefix, backend, name):
    # The first reference article's table, from every language at once: one
    # key, capacity 10 and 5 per second; a burst of 20 calls split over the
    # languages admits 10, ten more a second later admit 5, and every
    # refusal says retry in 1 s. Every call of a phase is sent (each to a
    # client of its own: a process, or a thread of this one) before any
    # answer is read, so they are in flight together; the decisions depend
    # only on the clock the test passes. With the native module loaded, the
    # Rust and Go clients run its commands and the others the scripts, on
    # the same key.
    srv = module_server if backend == "module" else server
    client = srv.client()
    per_language = -(-20 // len(SEED_LANGUAGES))
    pools = {lang.name: [lang.make(builds, srv, client, prefix) for _ in range(per_language)]
             for lang in SEED_LANGUAGES}
    try:
        # Each client connects, loads its script and samples the clock first.
        for lang, pool in pools.items():
            for d in pool:
                assert "error" not in d.send(f"peek {name} warm 0 {T0}"), lang

        def phase(n: int, now: int) -> list:
            taken = {lang.name: 0 for lang in SEED_LANGUAGES}
            calls = []
            for i in range(n):
                lang = SEED_LANGUAGES[i % len(SEED_LANGUAGES)].name
                calls.append((lang, pools[lang][taken[lang]]))
                taken[lang] += 1
            line = f"check {name} seed 1 {now}"
            for _, d in calls:
                d.write(line)
            return [(lang, d.read(line)) for lang, d in calls]

        first = phase(20, T0)
        second = phase(10, T0 + 1_000_000)
        for lang, answer in first + second:
            assert "error" not in answer, (lang, answer)
        admitted = [sum(a["allowed"] for _, a in p) for p in (first, second)]
        waits = {-(-a["retry_after_micros"] // 1_000_000) for _, a in first + second if not a["allowed"]}
        by_language = {lang.name: sum(a["allowed"] for l, a in first if l == lang.name) for lang in SEED_LANGUAGES}
        print(f"\n{name} on the {backend}: {admitted[0]}/20, then {admitted[1]}/10, retry {waits} s; "
              f"the first burst's admissions by language: {by_language}")
        assert (admitted, waits) == ([10, 5], {1})
        assert {lang for lang, _ in first} == {lang.name for lang in SEED_LANGUAGES}
        ran = f"cmdstat_ratelab.{name}" in client.info("commandstats")
        assert ran == (backend == "module")
    finally:
        for pool in pools.values():
            for d in pool:
                d.close()
        client.close()


# -- Java -----------------------------------------------------------------------

JAVA_DIR = LUA / "clients" / "java"


@pytest.fixture(scope="session")
def java_build() -> list:
    """The Java client's line-protocol program (lua/clients/java,
    ``dev.ratelab.client.ProtocolClient`` in its test classes), compiled here
    with Maven: the ``java`` command line that runs it, less its arguments."""
    mvn, java = shutil.which("mvn"), shutil.which("java")
    if not (mvn and java):
        pytest.fail("java (17 or later) and mvn are needed for the cross-language test: scripts/setup installs them",
                    pytrace=False)
    _run([mvn, "-q", "test-compile"], JAVA_DIR, "building the Java client")
    classpath = (JAVA_DIR / "target" / "classpath.txt").read_text().strip()
    jars = os.pathsep.join([str(JAVA_DIR / "target" / "classes"), str(JAVA_DIR / "target" / "test-classes"), classpath])
    # A test driver starts often and runs briefly: the quick-starting JIT and GC.
    return [java, "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-cp", jars, "dev.ratelab.client.ProtocolClient"]


def java_command(java_build: list, url: str, prefix: str) -> list:
    """The command that starts a Java client of the line protocol on ``url``
    with ``prefix``: what a driver of the seed's experiment runs (one line in
    its list of languages: ``Driver("java", java_command(...))``)."""
    return [*java_build, url, prefix]


@pytest.fixture
def with_java(drivers, server, prefix, java_build):
    java = Driver("java", java_command(java_build, server.url, prefix))
    yield {**drivers, "java": java}
    java.close()


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_java_with_rust_python_and_node_decides_as_one_client(with_java, name):
    # One Java process per test (a JVM starts in seconds on a loaded machine): the four languages
    # alternating on one key, the interleaved scripts with Java playing Python's part and then
    # Node's, and the reference table, each call for call what one client alone answers.
    langs = ["rust", "python", "node", "java"]
    steps = _sequence()
    shared = [_decision(with_java[langs[i % 4]].send(f"check {name} shared4 {cost} {now}"))
              for i, (now, cost) in enumerate(steps)]
    assert all("error" not in d for d in shared), shared
    alone = [_decision(with_java["java"].send(f"check {name} java-alone4 {cost} {now}")) for now, cost in steps]
    assert alone == shared, f"{name}: Java alone decides otherwise than the four languages together"
    assert 0 < sum(d["allowed"] for d in shared) < len(steps)
    for seed in range(2):
        script = _interleaving(name, seed)
        oracle = _play(with_java, name, script, f"java-oracle{seed}", lambda _: "rust")
        for replaced in ["python", "node"]:
            mixed = _play(with_java, name, script, f"java-{replaced}{seed}",
                          lambda lang, replaced=replaced: "java" if lang == replaced else lang)
            for i, (ours, theirs) in enumerate(zip(mixed, oracle)):
                assert ours == theirs, (f"{name}, script {seed}, step {i} {script[i][:4]}: with Java for "
                                        f"{replaced}, {ours}; Rust alone {theirs}")
    if ALGORITHMS_ARE_DEBTS.get(name):
        # Capacity 10, 5 per second: 20 at t admit 10; 10 at t + 1 s admit 5; a refusal says retry in 1 s.
        java = with_java["java"]
        first = [java.send(f"check {name} table-java 1 {T0}") for _ in range(20)]
        second = [java.send(f"check {name} table-java 1 {T0 + 1_000_000}") for _ in range(10)]
        waits = {-(-d["retry_after_micros"] // 1_000_000) for d in first + second if not d["allowed"]}
        assert (sum(d["allowed"] for d in first), sum(d["allowed"] for d in second), waits) == (10, 5, {1})


#: The algorithms of the reference table (the debts: one unit back every interval).
ALGORITHMS_ARE_DEBTS = {name: True for name in ["token-bucket", "gcra", "leaky-meter", "leaky-queue"]}


def test_a_serialized_receipt_crosses_between_python_and_java(server, client, prefix, java_build):
    # A job queue whose producer is Python and whose worker is Java, and back.
    limiter = Limiter(client, "gcra", Quota.per_second(5, burst=10), prefix=prefix, clock=lambda: T0)
    text = limiter.check("job", 4).receipt.to_json()
    hop = [*java_build[:-1], "dev.ratelab.client.ReceiptHop", server.url, prefix, str(T0), text]
    result = subprocess.run(hop, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    # Java gave back Python's 4, then took 3 and sent its own receipt.
    assert (answer["remaining"], answer["taken"]) == (10, 7)
    back = limiter.receipt_from_json(json.dumps(answer["receipt"]))
    assert (back.key, back.cost) == (b"job", 3)
    assert limiter.refund(back).remaining == 10
    limiter.close()
