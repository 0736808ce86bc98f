"""The configuration: reloaded when its files change; a bad one is a clear
error naming the file and line, and a bad reload keeps the last good one."""

from __future__ import annotations

import subprocess
import time

from conftest import OK, OVER_LIMIT, clear_of_edges

LIMIT = """\
domain: reload
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: {n}
"""

BAD = """\
domain: reload
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 1
      per_connection: true
"""


def limit_of(server) -> int:
    return server.ask("reload", [("user", "ann")]).statuses[0].current_limit.requests_per_unit


def wait_for(condition, what: str, seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.1)


def test_reload_takes_a_new_limit_and_keeps_the_last_good_one(start):
    clear_of_edges(86400, margin=60)
    server = start({"reload.yaml": LIMIT.format(n=1)})
    assert limit_of(server) == 1
    server.write("reload.yaml", LIMIT.format(n=5))
    wait_for(lambda: limit_of(server) == 5, "the new limit")

    server.write("reload.yaml", BAD)
    wait_for(lambda: "not reloaded" in server.log.read_text(), "the failed reload logged")
    log = server.log.read_text()
    assert "reload.yaml:7:7: config error, unknown key 'per_connection'" in log, log
    assert limit_of(server) == 5

    # A new file, a new domain.
    server.write("other.yaml", "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1}\n")
    server.write("reload.yaml", LIMIT.format(n=2))
    wait_for(lambda: limit_of(server) == 2, "the fixed file")
    assert server.ask("other", [("k", "v")]).overall_code == OK
    assert server.ask("other", [("k", "v")]).overall_code == OVER_LIMIT


def test_a_reload_is_refused_what_a_start_would_be(start):
    """A reloaded file that asks for a lease the server does not give is
    refused as a start refuses it: logged with file and line, the last good
    configuration kept."""
    clear_of_edges(86400, margin=60)
    server = start({"reload.yaml": LIMIT.format(n=3)})
    assert limit_of(server) == 3
    server.write("reload.yaml", LIMIT.format(n=7) + "      algorithm: gcra\n      lease: true\n")
    wait_for(lambda: "not reloaded" in server.log.read_text(), "the refused reload logged")
    log = server.log.read_text()
    assert "reload.yaml:" in log and "lease: true, but the server does not lease" in log, log
    assert limit_of(server) == 3


def test_a_bad_configuration_at_start_names_the_file_and_line(server_binary, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    run = subprocess.run([str(server_binary), "--config", str(bad), "--listen", "127.0.0.1:0"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode != 0
    assert f"{bad}:7:7: config error, unknown key 'per_connection'" in run.stderr, run.stderr

    dup = tmp_path / "dir"
    dup.mkdir()
    (dup / "a.yaml").write_text(LIMIT.format(n=1))
    (dup / "b.yml").write_text(LIMIT.format(n=2))
    run = subprocess.run([str(server_binary), "--config", str(dup), "--listen", "127.0.0.1:0"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode != 0
    assert "b.yml" in run.stderr and "duplicate domain 'reload' in config file" in run.stderr, run.stderr


def test_json_logs_are_one_object_a_line(start):
    import json

    server = start({"reload.yaml": LIMIT.format(n=1)}, "--log-json")
    server.write("reload.yaml", BAD)
    wait_for(lambda: "not reloaded" in server.log.read_text(), "the failed reload logged")
    lines = [json.loads(line) for line in server.log.read_text().splitlines() if line]
    failed = [line for line in lines if "not reloaded" in line["fields"]["message"]]
    assert failed and failed[0]["level"] == "ERROR", lines
    assert "reload.yaml:7:" in failed[0]["fields"]["error"], failed


ACCEPTED = """\
domain: accepted
descriptors:
  - key: blocked
    rate_limit: {unit: MINUTE, requests_per_unit: 0}
  - key: huge
    rate_limit: {unit: Second, requests_per_unit: 4294967295}
  - key: files
    value: files/*
    share_threshold: true
    value_to_metric: true
    quota_mode: true
    metadata:
      owner: team-a
      tags: [x, 1]
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: route
    value: /api/*/x*
    detailed_metric: true
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: ldap
    rate_limit: {unlimited: true, requests_per_unit: 7}
"""

REFUSED = [
    ("replaces_self.yaml", "domain: r\ndescriptors:\n  - key: k\n    rate_limit:\n      name: me\n      unit: second\n"
     "      requests_per_unit: 1\n      replaces:\n        - name: me\n",
     ":9:11: replaces should not contain name of same descriptor"),
    ("replaces_empty.yaml", "domain: r\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n"
     "      requests_per_unit: 1\n      replaces:\n        - name: ''\n",
     ":8:11: should not have an empty replaces entry"),
    ("bad_unit.yaml", "domain: r\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
     ":4:24: invalid rate limit unit 'fortnight'"),
    ("not_a_map.yaml", "domain: r\ndescriptors:\n  - a\n",
     ":3:5: config error, yaml file contains list of type other than map: a"),
]


def test_what_the_reference_accepts_starts_and_what_it_refuses_does_not(start, server_binary, tmp_path):
    server = start({"accepted.yaml": ACCEPTED})
    assert server.ask("accepted", [("blocked", "x")]).overall_code == OVER_LIMIT
    assert server.ask("accepted", [("huge", "x")]).overall_code == OK
    assert server.ask("accepted", [("route", "/api/1/xyz")]).statuses[0].current_limit.requests_per_unit == 5
    assert server.ask("accepted", [("ldap", "u")]).statuses[0].limit_remaining == 2**32 - 1
    for name, text, where in REFUSED:
        path = tmp_path / name
        path.write_text(text)
        run = subprocess.run([str(server_binary), "--config", str(path), "--listen", "127.0.0.1:0"],
                             capture_output=True, text=True, timeout=30)
        assert run.returncode != 0, name
        assert f"{path}{where}" in run.stderr, run.stderr


def test_with_the_references_environment_a_bad_configuration_answers_errors_until_fixed(start):
    """As the reference: it starts on files it refuses, answers every call
    with an error naming the problem, and serves once they are fixed."""
    import grpc
    import pytest

    clear_of_edges(3600)
    server = start({"reload.yaml": BAD}, reference_env=True)
    with pytest.raises(grpc.RpcError) as error:
        server.ask("reload", [("user", "ann")])
    assert error.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "no rate limit configuration loaded" in error.value.details()
    assert "reload.yaml:7:7: config error, unknown key 'per_connection'" in error.value.details()
    server.write("reload.yaml", LIMIT.format(n=3))
    wait_for(lambda: _answers(server), "the fixed configuration")
    assert limit_of(server) == 3


def _answers(server) -> bool:
    import grpc

    try:
        server.ask("reload", [("user", "probe")])
        return True
    except grpc.RpcError:
        return False
