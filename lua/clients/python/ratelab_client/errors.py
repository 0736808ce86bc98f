"""The errors of this client, and how a Redis error is told to be an outage
(Redis unavailable: the failure policy applies) or a data error (Redis
answered, and what it said needs repair), as the Rust ``ratelab-redis``
crate tells them."""

from __future__ import annotations

import socket
from typing import Optional

import redis


class RatelabError(Exception):
    """Every error of this client."""


class CostTooHigh(RatelabError, ValueError):
    """A cost above the capacity: it could never pass, even on a fresh key.
    An error, not a refusal."""


class DataError(RatelabError):
    """Redis answered, and the answer is about the key or the call, not
    Redis's reachability: corrupt state, a key of another type, invalid
    arguments, another protocol version (``ratelab: protocol version 4
    expected, got ...``), a settlement or reset that would take the key past
    a ceiling of the protocol (``ratelab <algorithm>: out of range at ...``:
    nothing was written), a reply no script could send, out of memory.
    Retrying does not help, and no failure policy hides it (unless asked to,
    with ``policy_on_data_errors``): someone has to look."""


class ReceiptError(RatelabError, ValueError):
    """A receipt that cannot be settled here: see :class:`ForeignReceipt`
    and :class:`ReceiptSpent`. Nothing was sent to Redis."""


class ForeignReceipt(ReceiptError):
    """A receipt another limiter issued (another instance, or a serialized
    receipt of another prefix, algorithm or quota): only its issuer settles
    it. The receipt is untouched."""


class ReceiptSpent(ReceiptError):
    """A receipt already settled or refunded (or handed to a settlement that
    failed): an admission is settled at most once."""


class Unavailable(RatelabError):
    """An outage: Redis could not decide (it did not answer within the
    timeout, the connection failed, a cluster slot is moving or down, the
    circuit breaker is open). This is where the failure policy applies.

    ``retry_after`` is, when known, the seconds until Redis is tried again
    (an open circuit breaker's cool-down)."""

    retry_after: Optional[float] = None


class Timeout(Unavailable):
    """Redis did not answer within the limiter's timeout, or a connection
    was not set up within its ``connect_timeout``. A check that timed out is
    not charged: its deadline on Redis's clock has passed by the time the
    caller gives up, and an admission whose reply comes later is given back
    when it comes (README, "A stall after the script ran")."""


class BackendError(Unavailable):
    """The connection was refused, lost or reset; the server is loading,
    busy, read-only; a cluster slot is moving or down."""


class Expired(BackendError):
    """The call reached Redis after its deadline: nothing was charged (the
    caller had given up on it, or was about to)."""


class CircuitOpen(Unavailable):
    """Redis failed repeatedly and is not called for a while: the circuit
    breaker is open. ``retry_after`` is the wait, in seconds, until a probe
    may try it again."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(
            f"the rate limiter backend is failing; next attempt in {retry_after * 1000:.0f} ms"
        )
        self.retry_after = retry_after


class QuotaMismatch(RatelabError):
    """Another limiter used the same user key and algorithm with another
    quota (another fingerprint): the two count in different Redis keys, and
    each client gets both quotas. Never raised by a check: it is what the
    alert hook receives (see ``quota_check_every``)."""

    def __init__(self, key: bytes, ours: str, theirs: str) -> None:
        super().__init__(
            f"quota mismatch on key {key[:64]!r}: this limiter counts it as {ours}, another "
            f"limiter as {theirs}; they use different Redis keys, so each caller gets both quotas"
        )
        self.key = key
        self.ours = ours
        self.theirs = theirs


# Redis error codes (the first word of an error reply) that mean "not now",
# not "never": the failure policy applies.
_OUTAGE_CODES = ("BUSY", "LOADING", "MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY")


def classify(error: BaseException, timeout: Optional[float]) -> RatelabError:
    """``error`` (raised while talking to Redis) as this client's error: an
    outage (:class:`Unavailable`) or a data error (:class:`DataError`)."""
    if isinstance(error, RatelabError):
        return error
    if isinstance(error, (redis.exceptions.TimeoutError, socket.timeout, TimeoutError)):
        ms = "its timeout" if timeout is None else f"{timeout * 1000:g} ms"
        return _chain(Timeout(f"the rate limiter backend did not answer within {ms}"), error)
    if isinstance(error, redis.exceptions.ResponseError):
        message = str(error)
        if message.startswith("ratelab expired"):
            return _chain(Expired(message), error)
        # redis-py takes the code off the replies it has a class for.
        outage_classes = tuple(
            getattr(redis.exceptions, name)
            for name in ("ReadOnlyError", "MovedError", "AskError", "TryAgainError",
                         "ClusterDownError", "MasterDownError")
            if hasattr(redis.exceptions, name)
        )
        if isinstance(error, outage_classes) or message.split(" ", 1)[0] in _OUTAGE_CODES:
            return _chain(BackendError(f"the rate limiter backend failed: {message}"), error)
        return _chain(DataError(message), error)
    if isinstance(error, (redis.exceptions.InvalidResponse, redis.exceptions.DataError)):
        return _chain(DataError(f"invalid reply from Redis: {error}"), error)
    # Connection refused, lost or reset, loading (a ConnectionError in
    # redis-py), authentication, a cluster node not found: not now.
    if isinstance(error, (redis.exceptions.RedisError, OSError, EOFError)):
        return _chain(BackendError(f"the rate limiter backend failed: {error!r}"), error)
    raise error


def _chain(new: RatelabError, cause: BaseException) -> RatelabError:
    new.__cause__ = cause
    return new
