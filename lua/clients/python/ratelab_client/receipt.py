"""Receipts: what one admission took, handed back by the check that made it,
so that a settlement (or a refund) gives back only what the limiter can
prove that admission still holds (lua/README.md, "Receipts and
settlements").

A receipt holds the key, the cost the admission was charged, and the stamp
the script answered (``stamp_at``, ``stamp_mark``: what the key held right
after the admission). It names the limiter that issued it, and is usable
once: :meth:`Limiter.settle <ratelab_client.Limiter.settle>` or
:meth:`~ratelab_client.Limiter.refund` spends it, and a second use raises
:class:`~ratelab_client.ReceiptSpent`. ``copy.copy`` and ``copy.deepcopy``
answer the receipt itself (one admission, one receipt); pickling is refused,
with a pointer to :meth:`Receipt.to_json`.

What Python cannot stop: an object can be built by hand, and a receipt
serialized with :meth:`Receipt.to_json` can be loaded
(:meth:`Limiter.receipt_from_json <ratelab_client.Limiter.receipt_from_json>`)
any number of times, in any process. The scripts bound what such a replay
or forgery does: never above the key's capacity, never more than the unused
cost per call, nothing for an admission whose time has passed; a debt's
replayed stamp gives back, over all its replays, at most what remains of its
end; at most what a reset of that key would do (lua/README.md, "What a
replayed or forged stamp can do").
"""

from __future__ import annotations

import json
from typing import Any, Dict, Tuple, Union

from .protocol import MAX_EXACT

#: The version of :meth:`Receipt.to_json`'s format.
RECEIPT_FORMAT = 1


class Receipt:
    """What one admission took: settle it once with the limiter that issued
    it (``limiter.settle(receipt, actual)``, ``limiter.refund(receipt)``), or
    drop it (the admission then counts as charged). Made by a limiter's
    check, never by hand."""

    __slots__ = ("_issuer", "_key", "_cost", "_stamp_at", "_stamp_mark", "_unspent")

    def __init__(self, issuer: Any, key: bytes, cost: int, stamp_at: int, stamp_mark: int) -> None:
        self._issuer = issuer
        self._key = bytes(key)
        self._cost = cost
        self._stamp_at = stamp_at
        self._stamp_mark = stamp_mark
        # Spent by popping: list.pop is atomic, so two threads settling one
        # receipt cannot both get it.
        self._unspent = [True]

    @property
    def key(self) -> bytes:
        """The user key the admission was charged to, as bytes."""
        return self._key

    @property
    def cost(self) -> int:
        """The cost the admission was charged."""
        return self._cost

    @property
    def stamp_at(self) -> int:
        """What the script wrote at the admission: for a debt, the instant
        the key was full again right after it (µs); for a window, the
        window's index or the instant the units were logged at."""
        return self._stamp_at

    @property
    def stamp_mark(self) -> int:
        """A debt's ledger at the admission; 0 for a window."""
        return self._stamp_mark

    @property
    def stamp(self) -> Tuple[int, int]:
        """``(stamp_at, stamp_mark)``."""
        return (self._stamp_at, self._stamp_mark)

    @property
    def spent(self) -> bool:
        """Settled or refunded already (or handed to a settlement that
        failed)."""
        return not self._unspent

    def _spend(self) -> bool:
        try:
            self._unspent.pop()
        except IndexError:
            return False
        return True

    def to_json(self) -> str:
        """The receipt as JSON, for another process (a job queue's worker)
        to settle with a limiter of the same prefix, algorithm and quota
        (:meth:`Limiter.receipt_from_json
        <ratelab_client.Limiter.receipt_from_json>`). Serializing does not
        spend it: each copy loaded is a receipt of its own, which the
        scripts bound as they bound any replayed stamp (see the module
        docs)."""
        core = self._issuer
        return json.dumps({
            "ratelab_receipt": RECEIPT_FORMAT,
            "prefix": core.prefix,
            "fingerprint": core.algorithm.fingerprint_input,
            "key_hex": self._key.hex(),
            "cost": self._cost,
            "stamp_at": self._stamp_at,
            "stamp_mark": self._stamp_mark,
        }, separators=(",", ":"))

    def __copy__(self) -> "Receipt":
        # One admission, one receipt: a copy is the receipt itself.
        return self

    def __deepcopy__(self, memo: Dict[int, Any]) -> "Receipt":
        return self

    def __reduce__(self) -> Any:
        raise TypeError(
            "a Receipt is not pickled (a pickled copy would be a second, unspent receipt): "
            "send receipt.to_json() and load it with limiter.receipt_from_json()"
        )

    def __repr__(self) -> str:
        return (f"Receipt(key={self._key!r}, cost={self._cost}, stamp=({self._stamp_at}, "
                f"{self._stamp_mark}), spent={self.spent})")


def parse_receipt(data: Union[str, bytes, Dict[str, Any]]) -> Dict[str, Any]:
    """The fields of :meth:`Receipt.to_json`'s output, checked for shape
    (``ValueError`` otherwise); whose they are is the limiter's to check."""
    if isinstance(data, (str, bytes, bytearray)):
        try:
            data = json.loads(data)
        except ValueError as e:
            raise ValueError(f"not a receipt: invalid JSON ({e})") from None
    if not isinstance(data, dict) or data.get("ratelab_receipt") != RECEIPT_FORMAT:
        raise ValueError(f"not a receipt of format {RECEIPT_FORMAT}: {str(data)[:200]}")
    for name in ("prefix", "fingerprint", "key_hex"):
        if not isinstance(data.get(name), str):
            raise ValueError(f"not a receipt: {name} must be a string")
    try:
        data["key"] = bytes.fromhex(data["key_hex"])
    except ValueError:
        raise ValueError("not a receipt: key_hex is not hexadecimal") from None
    for name, maximum in (("cost", 0xFFFFFFFF), ("stamp_at", MAX_EXACT), ("stamp_mark", MAX_EXACT)):
        value = data.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= maximum:
            raise ValueError(f"not a receipt: {name} must be an integer from 0 to {maximum}, not {value!r}")
    if data["cost"] == 0:
        raise ValueError("not a receipt: a cost of 0 takes nothing, and has no receipt")
    return data
