"""The window's edge, through the server: the fixed window (what
envoyproxy/ratelimit counts) admits twice its limit across a window's
edge; GCRA, the default, stays within its bound over the same burst.

Timing drives the requests, never the assertions: each assertion is on
counts, against a bound computed from the span the client measured (the
server decided every request within it)."""

from __future__ import annotations

import re
import time

from conftest import OK

N = 5  # a second
CONFIG = f"""\
domain: edge
descriptors:
  - key: fixed
    rate_limit: {{unit: second, requests_per_unit: {N}, algorithm: fixed-window}}
  - key: gcra
    rate_limit: {{unit: second, requests_per_unit: {N}}}
"""
HALF = 0.3  # seconds each side of the edge


def burst(server, key: str, value: str, until: float) -> tuple[list[bool], float]:
    """Asks as fast as it can until `until` (monotonic); each answer
    (admitted or not), and the span from the first request sent to the last
    answer."""
    outcomes = []
    first = time.monotonic()
    while time.monotonic() < until:
        outcomes.append(server.ask("edge", [(key, value)]).overall_code == OK)
    return outcomes, time.monotonic() - first


def spent_twice(outcomes: list[bool]) -> bool:
    """Refusals in both windows: each window's limit was all taken."""
    text = "".join("a" if o else "r" for o in outcomes)
    return re.search("ra+r", text) is not None


def test_fixed_window_admits_twice_its_limit_at_the_edge_and_gcra_stays_bounded(start):
    server = start({"edge.yaml": CONFIG})
    for attempt in range(5):
        # Where the next edge is: a probe's duration_until_reset (windows of
        # one length line up across keys).
        probe = server.ask("edge", [("fixed", f"probe-{attempt}")]).statuses[0]
        until_edge = probe.duration_until_reset.seconds + probe.duration_until_reset.nanos / 1e9
        now = time.monotonic()
        edge = now + until_edge if until_edge > HALF + 0.05 else now + until_edge + 1.0
        time.sleep(max(0.0, edge - HALF - time.monotonic()))
        outcomes, span = burst(server, "fixed", f"k-{attempt}", edge + HALF)
        if span >= 1.0 or not spent_twice(outcomes):
            # A machine too loaded to spend both windows within a second:
            # again.
            continue
        # Twice the limit within less than one unit.
        assert sum(outcomes) == 2 * N, (outcomes, span)
        break
    else:
        raise AssertionError("no burst fitted in a second in 5 attempts")

    start_at = time.monotonic()
    outcomes, span = burst(server, "gcra", "k", start_at + 2 * HALF)
    gcra = sum(outcomes)
    # GCRA: at most the burst plus one unit per emission interval (1/N s)
    # over any span; under a second, fewer than twice the limit.
    assert N <= gcra <= N + int(span * N), (gcra, span)
    if span < 1.0:
        assert gcra < 2 * N
