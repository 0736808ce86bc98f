"""The pure half of ratelab's script protocol (lua/README.md): quotas, each
algorithm's parameters, the key scheme, and the scripts themselves. No I/O
besides reading the script files."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Tuple, Union

# Everything that changes with the protocol's version is in this block: the
# version sent, the operations and how they are written into ``ARGV[6]``, the
# length of a reply, and the bounds a reply and the slack are held to.

#: The protocol version this client speaks: the first argument of every call.
PROTOCOL_VERSION = 4

#: What a call does with the key (``ARGV[6]``): decide and consume, decide
#: without writing, settle one admission by its stamp, or put the key back to
#: full capacity.
OPS = ("check", "peek", "settle", "reset")

#: The integers of a script's reply: allowed, limit, remaining,
#: retry_after_us, reset_after_us, delay_us, stamp_at, stamp_mark.
REPLY_LEN = 8

#: The most TTL slack the scripts take, in ms (``ARGV[4]``): 2^52 µs rounded
#: up, the whole range of instants (no clock steps back further). The
#: limiters refuse a larger one before any call.
MAX_TTL_SLACK_MS = -(-(1 << 52) // 1000)

#: The latest instant a debt may end at (lua/README.md, "State"): 2^52 +
#: 2^51 µs. A debt's refusals, peeks, settlements and resets may wait until
#: then: settlements charge debt whatever the room, once per receipt.
MAX_END = (1 << 52) + (1 << 51)

#: The largest integer the scripts send and take exactly: 2^53 - 1.
MAX_EXACT = (1 << 53) - 1


def _integer(name: str, value: object, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
        raise ValueError(f"{name} must be an integer from 0 to {maximum}, not {value!r}")
    return value


def encode_op(op: str, actual: Optional[int] = None, stamp: Optional[Tuple[int, int]] = None) -> str:
    """``ARGV[6]`` for ``op``: ``check``, ``peek``, ``reset``, or for a
    settlement ``settle:<actual>:<stamp_at>:<stamp_mark>`` (what the admission
    finally counts for, and the stamp its check answered)."""
    if op not in OPS:
        raise ValueError(f"op must be one of {', '.join(OPS)}, not {op!r}")
    if op == "settle":
        if actual is None or stamp is None:
            raise ValueError("a settlement needs the units it finally counts for and the admission's stamp")
        at, mark = stamp
        return (f"settle:{_integer('actual', actual, 0xFFFFFFFF)}:{_integer('stamp_at', at, MAX_EXACT)}"
                f":{_integer('stamp_mark', mark, MAX_EXACT)}")
    if actual is not None or stamp is not None:
        raise ValueError(f"only a settlement takes an actual and a stamp, not {op!r}")
    return op

#: The default key prefix.
DEFAULT_PREFIX = "ratelab"

#: The longest user key, in bytes, used as is in a Redis key; longer keys are
#: replaced by ``%H`` and the hex SHA-1 of their bytes.
MAX_KEY_LEN = 128

#: The longest span the arithmetic carries exactly, in µs (2^50).
MAX_SPAN_MICROS = 1 << 50

#: The sliding counter weighs the previous window in at most this many steps.
MAX_STEPS = 1 << 16
# The largest sliding log on Redis: one sorted-set member per unit (the script
# answers "invalid arguments" above it).
MAX_STORED_LOG_LIMIT = 10_000

#: Each algorithm: (key code, script file).
ALGORITHMS: Dict[str, Tuple[str, str]] = {
    "fixed-window": ("fw", "fixed_window.lua"),
    "sliding-log": ("sl", "sliding_log.lua"),
    "sliding-counter": ("sc", "sliding_counter.lua"),
    "leaky-meter": ("lm", "leaky_meter.lua"),
    "leaky-queue": ("lq", "leaky_queue.lua"),
    "token-bucket": ("tb", "token_bucket.lua"),
    "gcra": ("gcra", "gcra.lua"),
}

Key = Union[str, bytes]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Quota:
    """``limit`` units per ``period_us`` microseconds, up to ``burst`` at once
    (default: the limit). Validated as the Rust ``Quota`` is: a ``ValueError``
    says what is wrong."""

    limit: int
    period_us: int
    burst: Optional[int] = None

    def __post_init__(self) -> None:
        if self.burst is None:
            object.__setattr__(self, "burst", self.limit)
        for name in ("limit", "period_us", "burst"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a non-negative integer, not {value!r}")
        if self.limit == 0:
            raise ValueError("the limit must be at least 1 per period, not 0")
        if self.limit > 0xFFFFFFFF or self.burst > 0xFFFFFFFF:
            raise ValueError("the limit and the burst must fit in 32 bits")
        if self.period_us == 0:
            raise ValueError("the period must be longer than zero")
        if self.burst == 0:
            raise ValueError("the burst must be at least 1, not 0")
        if self.period_us > MAX_SPAN_MICROS:
            raise ValueError(f"the period is longer than the longest supported, {MAX_SPAN_MICROS} µs")
        if self.limit > self.period_us:
            raise ValueError("more than one per microsecond, finer than the time resolution")
        tolerance = self.burst * self.emission_interval_us
        if tolerance > max(MAX_SPAN_MICROS, self.limit * self.emission_interval_us):
            raise ValueError("the burst takes longer to refill than the longest supported span")

    @classmethod
    def per_second(cls, limit: int, burst: Optional[int] = None) -> "Quota":
        return cls(limit, 1_000_000, burst)

    @classmethod
    def per_minute(cls, limit: int, burst: Optional[int] = None) -> "Quota":
        return cls(limit, 60_000_000, burst)

    @classmethod
    def per_hour(cls, limit: int, burst: Optional[int] = None) -> "Quota":
        return cls(limit, 3_600_000_000, burst)

    @property
    def emission_interval_us(self) -> int:
        """``T = ceil(period / limit)``: rounds up, never faster than asked."""
        return _ceil_div(self.period_us, self.limit)

    @property
    def burst_tolerance_us(self) -> int:
        """``burst × T``: the time an empty bucket takes to refill."""
        return self.burst * self.emission_interval_us

    @property
    def window_us(self) -> int:
        """The window algorithms' window: ``ceil(period × burst / limit)``."""
        return _ceil_div(self.period_us * self.burst, self.limit)


@dataclass(frozen=True)
class Algorithm:
    """One algorithm on one quota, as the scripts see it."""

    name: str
    code: str
    script_file: str
    params: Tuple[int, ...]
    capacity: int
    max_wait_us: int
    #: The state is a debt (GCRA, token bucket, leaky meter and queue): a
    #: settlement above the cost charges it whatever the room, so its waits
    #: outside an admission may run up to :data:`MAX_END`.
    debt: bool = False

    @property
    def fingerprint_input(self) -> str:
        """``v2:<code>:<params>``: ``v2`` is the version of the stored
        state's format (protocol version 4 changed every format)."""
        return f"v2:{self.code}:" + ",".join(str(p) for p in self.params)

    @property
    def key_suffix(self) -> str:
        """``<code>:<first 8 hex digits of sha1(v2:<code>:<params>)>``."""
        digest = hashlib.sha1(self.fingerprint_input.encode()).hexdigest()
        return f"{self.code}:{digest[:8]}"


def algorithm(name: str, quota: Quota) -> Algorithm:
    """The algorithm ``name`` (``token-bucket``, ``gcra``, ...) on ``quota``:
    its script parameters, capacity, longest wait, and whether it is a debt."""
    try:
        code, script_file = ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}: one of {', '.join(ALGORITHMS)}") from None
    t, tau, window, burst = (
        quota.emission_interval_us,
        quota.burst_tolerance_us,
        quota.window_us,
        quota.burst,
    )
    if name == "sliding-log" and burst > MAX_STORED_LOG_LIMIT:
        raise ValueError(
            f"a sliding log of {burst} units cannot run on Redis: it keeps one sorted-set "
            f"member per unit, at most {MAX_STORED_LOG_LIMIT}; use the sliding counter"
        )
    if name in ("fixed-window", "sliding-log"):
        params: List[int] = [window, burst]
        max_wait = window
    elif name == "sliding-counter":
        step = _ceil_div(window, MAX_STEPS)
        params = [window, burst, step, _ceil_div(window, step)]
        max_wait = 2 * window
    elif name in ("leaky-meter", "leaky-queue"):
        params = [t, tau, burst]
        max_wait = tau
    elif name == "token-bucket":
        params = [t, burst]
        max_wait = burst * t
    else:  # gcra
        params = [t, tau, burst]
        max_wait = tau
    debt = name in ("leaky-meter", "leaky-queue", "token-bucket", "gcra")
    return Algorithm(name, code, script_file, tuple(params), burst, max_wait, debt)


def _escape(data: bytes) -> bytes:
    return data.replace(b"%", b"%25").replace(b"{", b"%7B").replace(b"}", b"%7D")


def key_bytes(key: Key) -> bytes:
    """A user key as bytes: ``str`` as UTF-8, ``bytes`` as they are."""
    return key.encode("utf-8") if isinstance(key, str) else bytes(key)


def redis_key(prefix: str, key: Key, suffix: str) -> bytes:
    """``<prefix escaped>:{<key escaped, or %, or %H + sha1 hex>}:<suffix>``."""
    data = key_bytes(key)
    if not data:
        tag = b"%"
    elif len(data) > MAX_KEY_LEN:
        tag = b"%H" + hashlib.sha1(data).hexdigest().encode()
    else:
        tag = _escape(data)
    return _escape(prefix.encode("utf-8")) + b":{" + tag + b"}:" + suffix.encode("utf-8")


def lua_dir() -> Path:
    """Where the scripts are read from: ``RATELAB_LUA_DIR`` if set, else the
    copy a built wheel ships in ``ratelab_client/lua``, else the repository's
    ``lua/`` this package sits in (``lua/clients/python/ratelab_client``)."""
    env = os.environ.get("RATELAB_LUA_DIR")
    if env:
        return Path(env)
    here = Path(__file__).resolve().parent
    shipped = here / "lua"
    if (shipped / "prologue.lua").is_file():
        return shipped
    return here.parent.parent.parent


_SOURCES: Dict[str, str] = {}


def script_source(name: str) -> str:
    """The script of algorithm ``name``: the prologue followed by its file,
    read once, byte for byte as the Rust crate embeds them."""
    source = _SOURCES.get(name)
    if source is None:
        _, script_file = ALGORITHMS[name]
        directory = lua_dir()
        parts = []
        for file in ("prologue.lua", script_file):
            path = directory / file
            try:
                parts.append(path.read_bytes().decode("utf-8"))
            except OSError as e:
                raise FileNotFoundError(
                    f"ratelab script {path} not found ({e}): set RATELAB_LUA_DIR to ratelab's lua/ folder"
                ) from e
        source = _SOURCES[name] = "".join(parts)
    return source


def script_sha(source: str) -> str:
    """The SHA-1 ``EVALSHA`` names a script by."""
    return hashlib.sha1(source.encode("utf-8")).hexdigest()
