"""ratelab's Redis script protocol from Python: the same scripts, keys and
decisions as the Rust ``ratelab-redis`` crate and the Node client, so a
polyglot fleet shares one rate limit.

    import redis
    from ratelab_client import Limiter, Quota

    limiter = Limiter(redis.Redis(), "token-bucket", Quota.per_second(5, burst=10))
    decision = limiter.check("client-42")
    if not decision.allowed:
        print(f"retry in {decision.retry_after_secs} s")

The protocol: lua/README.md in the ratelab repository.
"""

from .limiter import CostTooHigh, DataError, Decision, Expired, Limiter, RatelabError
from .protocol import (
    ALGORITHMS,
    DEFAULT_PREFIX,
    MAX_KEY_LEN,
    MAX_STORED_LOG_LIMIT,
    OPS,
    PROTOCOL_VERSION,
    Algorithm,
    Quota,
    algorithm,
    lua_dir,
    redis_key,
    script_source,
)

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "CostTooHigh",
    "DataError",
    "Decision",
    "DEFAULT_PREFIX",
    "Expired",
    "Limiter",
    "MAX_KEY_LEN",
    "MAX_STORED_LOG_LIMIT",
    "OPS",
    "PROTOCOL_VERSION",
    "Quota",
    "RatelabError",
    "algorithm",
    "lua_dir",
    "redis_key",
    "script_source",
]
