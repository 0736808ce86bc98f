"""The window's edge, through the server: the fixed window (what
envoyproxy/ratelimit counts) admits twice its limit across a window's
edge; GCRA, the default, stays within its bound over the same burst.

The unit is a minute, so that the bursts around an edge take a small part
of it on any machine, however loaded: the first window is spent in its
last seconds, the second at its start, and the assertions are on counts,
bounded by the span the client measured (the server decided every request
within it), never on how fast the requests went."""

from __future__ import annotations

import time

from conftest import OK

N = 5  # a minute
CONFIG = f"""\
domain: edge
descriptors:
  - key: fixed
    rate_limit: {{unit: minute, requests_per_unit: {N}, algorithm: fixed-window}}
  - key: gcra
    rate_limit: {{unit: minute, requests_per_unit: {N}}}
"""
UNIT = 60.0
#: The first window is spent in its last seconds.
LEAD = 5.0


def until_reset(answer) -> float:
    d = answer.statuses[0].duration_until_reset
    return d.seconds + d.nanos / 1e9


def until_refused(server, key: str, value: str) -> list:
    """Asks until a request is refused (or 3 N were asked): each answer."""
    answers = []
    while len(answers) < 3 * N:
        answers.append(server.ask("edge", [(key, value)]))
        if answers[-1].overall_code != OK:
            break
    return answers


def test_fixed_window_admits_twice_its_limit_at_the_edge_and_gcra_stays_bounded(start):
    server = start({"edge.yaml": CONFIG})
    # Where the next edge is: a probe's duration_until_reset (windows of one
    # length line up across keys); far enough ahead to spend a window before it.
    until_edge = until_reset(server.ask("edge", [("fixed", "probe")]))
    if until_edge < LEAD:
        time.sleep(until_edge + 0.1)
        until_edge = until_reset(server.ask("edge", [("fixed", "probe-2")]))
    time.sleep(max(0.0, until_edge - LEAD))

    first_sent = time.monotonic()
    before = until_refused(server, "fixed", "k")
    # Into the next window, by the server's own count of what is left.
    time.sleep(until_reset(before[-1]) + 0.05)
    after = until_refused(server, "fixed", "k")
    span = time.monotonic() - first_sent
    admitted = [a.overall_code == OK for a in before + after]
    print(f"\nfixed window: {sum(admitted)} admitted over {span:.2f} s around the edge")
    # Each window spent, its limit all taken: twice the limit within less
    # than a unit (a span a machine would take a minute for is a hang).
    assert [a.overall_code == OK for a in before] == [True] * N + [False], before
    assert [a.overall_code == OK for a in after] == [True] * N + [False], after
    assert span < UNIT, span

    started = time.monotonic()
    answers = until_refused(server, "gcra", "k")
    answers += [server.ask("edge", [("gcra", "k")]) for _ in range(len(before + after) - len(answers))]
    span = time.monotonic() - started
    gcra = sum(a.overall_code == OK for a in answers)
    # GCRA: at most the burst plus one unit per emission interval (a
    # twelfth of a minute) over the span; under a minute, fewer than twice
    # the limit.
    assert N <= gcra <= N + int(span * N / UNIT), (gcra, span)
    assert span < UNIT and gcra < 2 * N
