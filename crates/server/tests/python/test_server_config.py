"""The configuration: reloaded when its files change; a bad one is a clear
error naming the file and line, and a bad reload keeps the last good one."""

from __future__ import annotations

import subprocess
import time

from conftest import OK, OVER_LIMIT

LIMIT = """\
domain: reload
descriptors:
  - key: user
    rate_limit:
      unit: minute
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
    server = start({"reload.yaml": LIMIT.format(n=1)})
    assert limit_of(server) == 1
    server.write("reload.yaml", LIMIT.format(n=5))
    wait_for(lambda: limit_of(server) == 5, "the new limit")

    server.write("reload.yaml", BAD)
    wait_for(lambda: "not reloaded" in server.log.read_text(), "the failed reload logged")
    log = server.log.read_text()
    assert "reload.yaml:7:" in log and "per_connection" in log, log
    assert limit_of(server) == 5

    # A new file, a new domain.
    server.write("other.yaml", "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
    server.write("reload.yaml", LIMIT.format(n=2))
    wait_for(lambda: limit_of(server) == 2, "the fixed file")
    assert server.ask("other", [("k", "v")]).overall_code == OK
    assert server.ask("other", [("k", "v")]).overall_code == OVER_LIMIT


def test_a_bad_configuration_at_start_names_the_file_and_line(server_binary, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    run = subprocess.run([str(server_binary), "--config", str(bad), "--listen", "127.0.0.1:0"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode != 0
    assert f"{bad}:7:" in run.stderr and "unknown field `per_connection`" in run.stderr, run.stderr

    dup = tmp_path / "dir"
    dup.mkdir()
    (dup / "a.yaml").write_text(LIMIT.format(n=1))
    (dup / "b.yml").write_text(LIMIT.format(n=2))
    run = subprocess.run([str(server_binary), "--config", str(dup), "--listen", "127.0.0.1:0"],
                         capture_output=True, text=True, timeout=30)
    assert run.returncode != 0
    assert "b.yml" in run.stderr and '"reload" is also in' in run.stderr, run.stderr


def test_json_logs_are_one_object_a_line(start):
    import json

    server = start({"reload.yaml": LIMIT.format(n=1)}, "--log-json")
    server.write("reload.yaml", BAD)
    wait_for(lambda: "not reloaded" in server.log.read_text(), "the failed reload logged")
    lines = [json.loads(line) for line in server.log.read_text().splitlines() if line]
    failed = [line for line in lines if "not reloaded" in line["fields"]["message"]]
    assert failed and failed[0]["level"] == "ERROR", lines
    assert "reload.yaml:7:" in failed[0]["fields"]["error"], failed
