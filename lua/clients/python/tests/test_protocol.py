"""The pure protocol: the shared test vectors (lua/clients/vectors.json,
which the Rust and Node tests check too), the scripts read from lua/ byte
for byte, and quotas validated as Rust validates them."""

import json
from pathlib import Path

import pytest

import ratelab_client
from ratelab_client import (
    ALGORITHMS,
    MAX_KEY_LEN,
    MAX_STORED_LOG_LIMIT,
    MAX_TTL_SLACK_MS,
    PROTOCOL_VERSION,
    Quota,
    algorithm,
    redis_key,
)
from ratelab_client.protocol import lua_dir, script_source, spec_path

from conftest import LUA

VECTORS = json.loads((LUA / "clients" / "vectors.json").read_text(encoding="utf-8"))


def test_version_key_length_and_slack_are_the_vectors():
    assert PROTOCOL_VERSION == VECTORS["protocol_version"] == 5
    assert MAX_KEY_LEN == VECTORS["max_key_len"]
    assert MAX_TTL_SLACK_MS == VECTORS["max_ttl_slack_ms"]


@pytest.mark.parametrize(
    "v", VECTORS["algorithms"], ids=lambda v: f"{v['algorithm']}-{v['quota']['limit']}"
)
def test_parameters_and_fingerprints_are_the_vectors(v):
    q = v["quota"]
    a = algorithm(v["algorithm"], Quota(q["limit"], q["period_us"], q["burst"]))
    assert a.code == v["code"]
    assert a.script_file == v["script"]
    assert list(a.params) == v["params"]
    assert a.capacity == v["capacity"]
    assert a.max_wait_us == v["max_wait_us"]
    assert a.debt == v["debt"]
    assert a.fingerprint_input == v["fingerprint_input"]
    assert a.key_suffix == v["key_suffix"]


def test_every_algorithm_has_vectors():
    assert {v["algorithm"] for v in VECTORS["algorithms"]} == set(ALGORITHMS)


SPEC = json.loads((LUA / "clients" / "algorithms.json").read_text(encoding="utf-8"))


def test_the_algorithms_are_the_spec_s_in_rust_s_order():
    # What the client read at import (lua/clients/algorithms.json, which
    # crates/tests/tests/protocol/protocol_vectors.rs generates and checks).
    assert SPEC["protocol_version"] == PROTOCOL_VERSION
    assert list(ALGORITHMS) == [a["name"] for a in SPEC["algorithms"]]
    assert spec_path().resolve() == (lua_dir() / "clients" / "algorithms.json").resolve()
    for a in SPEC["algorithms"]:
        assert (LUA / a["script"]).read_bytes(), a["script"]
        assert ALGORITHMS[a["name"]] == (a["code"], a["script"])


@pytest.mark.parametrize("v", VECTORS["keys"], ids=lambda v: v["key_hex"][:24] or "empty")
def test_keys_are_the_vectors(v):
    expected = bytes.fromhex(v["redis_key_hex"])
    assert redis_key(v["prefix"], bytes.fromhex(v["key_hex"]), v["suffix"]) == expected
    if "key" in v:
        # A str key is its UTF-8 bytes.
        assert redis_key(v["prefix"], v["key"], v["suffix"]) == expected
        assert v["redis_key"].encode("utf-8") == expected


def test_the_scripts_are_the_files_in_lua_byte_for_byte():
    prologue = (LUA / "prologue.lua").read_bytes()
    for name, (_, file) in ALGORITHMS.items():
        assert script_source(name).encode("utf-8") == prologue + (LUA / file).read_bytes(), name
    # A built package's copies, when there are any, are the same files.
    shipped = lua_dir()
    if shipped.resolve() != LUA.resolve():
        for path in LUA.glob("*.lua"):
            assert (shipped / path.name).read_bytes() == path.read_bytes(), path.name


def test_the_package_reads_lua_from_its_repository():
    # From a checkout (an editable install), the package sits in lua/clients/python.
    package = Path(ratelab_client.__file__).resolve().parent
    if not (package / "lua").is_dir():
        assert lua_dir().resolve() == LUA.resolve()


@pytest.mark.parametrize(
    "args, message",
    [
        ((0, 1_000_000), "limit must be at least 1"),
        ((1, 0), "period must be longer than zero"),
        ((1, 1_000_000, 0), "burst must be at least 1"),
        ((2_000_000, 1_000_000), "finer than the time resolution"),
        ((1, (1 << 50) + 1), "longer than the longest"),
        ((1, 1 << 40, 2_000), "takes longer to refill"),
    ],
)
def test_invalid_quotas_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        Quota(*args)


def test_the_reference_quota():
    q = Quota.per_second(5, burst=10)
    assert (q.emission_interval_us, q.burst_tolerance_us, q.window_us) == (200_000, 2_000_000, 2_000_000)
    assert Quota.per_minute(10).burst == 10


def test_a_sliding_log_on_redis_takes_at_most_the_cap():
    # One sorted-set member per unit: the script refuses a larger log.
    assert MAX_STORED_LOG_LIMIT == 10_000
    assert algorithm("sliding-log", Quota.per_hour(MAX_STORED_LOG_LIMIT)).capacity == 10_000
    with pytest.raises(ValueError, match="sliding counter"):
        algorithm("sliding-log", Quota.per_hour(MAX_STORED_LOG_LIMIT + 1))
    with pytest.raises(ValueError, match="sliding counter"):
        algorithm("sliding-log", Quota.per_second(5, burst=4_000_000_000))
    # Other algorithms keep one value a key, whatever the burst.
    assert algorithm("sliding-counter", Quota.per_hour(1_000_000)).capacity == 1_000_000
