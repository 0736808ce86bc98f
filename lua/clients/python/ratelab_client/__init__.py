"""ratelab's Redis script protocol from Python: the same scripts, keys and
decisions as the Rust ``ratelab-redis`` crate and the Node client, so a
polyglot fleet shares one rate limit; and the same timeout, failure
policies, circuit breaker, alerts and stats, so that it fails alike.

    import redis
    from ratelab_client import Limiter, Quota

    limiter = Limiter(redis.Redis(), "token-bucket", Quota.per_second(5, burst=10))
    decision = limiter.check("client-42", 3)
    if not decision.allowed:
        print(f"retry in {decision.retry_after_secs} s")
    else:
        ...  # the work, which turned out to use 1 unit
        limiter.settle(decision.receipt, 1)   # gives back what the admission still holds of 2

:class:`AsyncLimiter` is the same on ``redis.asyncio``;
:mod:`ratelab_client.asgi` is a rate limiting middleware for ASGI
applications (Starlette, FastAPI). The protocol: lua/README.md in the
ratelab repository.
"""

from .aio import AsyncLimiter
from .clock import RedisClock
from .core import DEFAULT_QUOTA_CHECK_EVERY, Decision
from .errors import (
    BackendError,
    CircuitOpen,
    CostTooHigh,
    DataError,
    Expired,
    ForeignReceipt,
    QuotaMismatch,
    RatelabError,
    ReceiptError,
    ReceiptSpent,
    Timeout,
    Unavailable,
)
from .limiter import Limiter
from .protocol import (
    ALGORITHMS,
    DEFAULT_PREFIX,
    MAX_END,
    MAX_KEY_LEN,
    MAX_STORED_LOG_LIMIT,
    MAX_TTL_SLACK_MS,
    OPS,
    PROTOCOL_VERSION,
    REPLY_LEN,
    Algorithm,
    Quota,
    algorithm,
    lua_dir,
    redis_key,
    script_source,
)
from .receipt import Receipt
from .resilience import (
    DEFAULT_BREAKER_COOL_DOWN,
    DEFAULT_BREAKER_THRESHOLD,
    DEFAULT_TIMEOUT,
    Alert,
    FailurePolicy,
    Stats,
)

__all__ = [
    "ALGORITHMS",
    "Alert",
    "Algorithm",
    "AsyncLimiter",
    "BackendError",
    "CircuitOpen",
    "CostTooHigh",
    "DataError",
    "Decision",
    "DEFAULT_BREAKER_COOL_DOWN",
    "DEFAULT_BREAKER_THRESHOLD",
    "DEFAULT_PREFIX",
    "DEFAULT_QUOTA_CHECK_EVERY",
    "DEFAULT_TIMEOUT",
    "Expired",
    "FailurePolicy",
    "ForeignReceipt",
    "Limiter",
    "MAX_END",
    "MAX_KEY_LEN",
    "MAX_STORED_LOG_LIMIT",
    "MAX_TTL_SLACK_MS",
    "OPS",
    "PROTOCOL_VERSION",
    "QuotaMismatch",
    "Quota",
    "RatelabError",
    "Receipt",
    "ReceiptError",
    "ReceiptSpent",
    "RedisClock",
    "REPLY_LEN",
    "Stats",
    "Timeout",
    "Unavailable",
    "algorithm",
    "lua_dir",
    "redis_key",
    "script_source",
]
