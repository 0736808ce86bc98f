"""The framework-neutral half of the HTTP middleware
(:mod:`ratelab_client.asgi`), behaving as the Rust ``ratelab-http`` layer:
who the client is (API key, else IP address, believing forwarding headers
only from trusted proxies, IPv6 grouped by /64), which policies apply (per
route), the decision across several policies (all or nothing: every limiter
with receipts takes the cost at once, and a request refused by one policy
gets back what the others took, by receipt), counting only failures or only
successes (by receipt: consume first, refund when the response does not
count), and what the response carries: ``429``
with ``Retry-After`` and an RFC 9457 problem body, ``503`` when a policy
that fails closed cannot decide, and the ``RateLimit-Policy`` and
``RateLimit`` fields of draft-ietf-httpapi-ratelimit-headers-11, byte for
byte as ``ratelab-http`` writes them."""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from .core import Decision
from .errors import CostTooHigh, DataError, RatelabError, Timeout, Unavailable
from .protocol import Quota

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
Network = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]
#: Request headers: (lower-case name, value) pairs, in order, repeats kept.
Headers = Sequence[Tuple[str, str]]

#: The problem type of a refusal (draft-ietf-httpapi-ratelimit-headers-11).
QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
#: The largest structured-field Integer: values past it are clamped.
INTEGER_MAX = 999_999_999_999_999
#: The default bound on one policy's limiter calls for a request, seconds.
DEFAULT_POLICY_TIMEOUT = 0.1

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


# -- who the client is ---------------------------------------------------------


def canonical(ip: IPAddress) -> IPAddress:
    """An IPv4 address written as IPv6 (mapped ``::ffff:1.2.3.4``, or
    compatible ``::1.2.3.4``) is the IPv4 address; ``::`` and ``::1`` stay."""
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return ip.ipv4_mapped
        packed = ip.packed
        if packed[:12] == bytes(12) and not ip.is_loopback and not ip.is_unspecified:
            return ipaddress.IPv4Address(packed[12:])
    return ip


def _parse_node(text: str) -> Optional[IPAddress]:
    """One hop: ``1.2.3.4``, ``2001:db8::1``, ``[2001:db8::1]``, with or
    without a port; anything else (``unknown``, ``_hidden``, junk) is None."""
    text = text.strip(" \t")
    for candidate in (text,):
        try:
            return ipaddress.ip_address(candidate)
        except ValueError:
            pass
    if text.startswith("["):
        inner, _, rest = text[1:].partition("]")
        if rest and not re.fullmatch(r":\d{1,5}", rest):
            return None
        try:
            return ipaddress.IPv6Address(inner)
        except ValueError:
            return None
    host, sep, port = text.rpartition(":")
    if sep and re.fullmatch(r"\d{1,5}", port) and ":" not in host:
        try:
            return ipaddress.IPv4Address(host)
        except ValueError:
            return None
    return None


def _elements_from_the_right(line: str) -> List[str]:
    """A ``Forwarded`` line's elements, split on commas outside quoted
    strings, found from its end: a quote a client leaves open on the left
    cannot run over the elements proxies appended after it."""
    elements = []
    end, quoted = len(line), False
    for i in range(len(line) - 1, -1, -1):
        c = line[i]
        if c == '"':
            backslashes = len(line[:i]) - len(line[:i].rstrip("\\"))
            if not quoted or backslashes % 2 == 0:
                quoted = not quoted
        elif c == "," and not quoted:
            elements.append(line[i + 1:end])
            end = i
    elements.append(line[:end])
    elements.reverse()
    return elements


def _split_outside_quotes(text: str, separator: str) -> List[str]:
    parts, start, quoted, escaped = [], 0, False, False
    for i, c in enumerate(text):
        if escaped:
            escaped = False
        elif quoted and c == "\\":
            escaped = True
        elif c == '"':
            quoted = not quoted
        elif c == separator and not quoted:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def _unquote(value: str) -> Optional[str]:
    if not value.startswith('"'):
        return value
    out, i = [], 1
    while i < len(value):
        c = value[i]
        if c == "\\":
            if i + 1 >= len(value):
                return None
            out.append(value[i + 1])
            i += 2
        elif c == '"':
            return "".join(out) if i == len(value) - 1 else None
        else:
            out.append(c)
            i += 1
    return None


def _forwarded_for(element: str) -> Optional[IPAddress]:
    node = None
    for pair in _split_outside_quotes(element, ";"):
        name, sep, value = pair.partition("=")
        if not sep:
            return None
        if name.strip().lower() == "for":
            if node is not None:
                return None  # Two `for`s: which one would a proxy mean?
            node = _unquote(value.strip())
            if node is None:
                return None
    return None if node is None else _parse_node(node)


class TrustedProxies:
    """The networks of the proxies in front of the application, whose
    forwarding header (``x-forwarded-for`` by default, or ``forwarded``) is
    believed, as ``ratelab_http::TrustedProxies`` does: a peer outside them
    is the client whatever the headers say; through them, the header is read
    from the right, skipping trusted proxies; an element that is not an
    address stops the walk at the last address that was vouched for."""

    def __init__(self, networks: Iterable[str] = (), header: str = "x-forwarded-for") -> None:
        header = header.lower()
        if header not in ("x-forwarded-for", "forwarded"):
            raise ValueError(f"the forwarding header is x-forwarded-for or forwarded, not {header!r}")
        self.header = header
        self.networks: List[Network] = []
        for text in networks:
            try:
                net = ipaddress.ip_network(str(text).strip(), strict=False)
            except ValueError:
                raise ValueError(
                    f"{text!r} is neither an IP address nor a network in CIDR notation "
                    "(10.0.0.0/8, fd00::/8); host names are not resolved: give the proxy's address"
                ) from None
            if isinstance(net, ipaddress.IPv6Network) and net.prefixlen >= 96 and net.network_address.ipv4_mapped:
                net = ipaddress.IPv4Network((net.network_address.ipv4_mapped, net.prefixlen - 96), strict=False)
            self.networks.append(net)

    def contains(self, ip: IPAddress) -> bool:
        ip = canonical(ip)
        return any(ip.version == net.version and ip in net for net in self.networks)

    def _hops(self, headers: Headers) -> List[Optional[IPAddress]]:
        hops: List[Optional[IPAddress]] = []
        for name, value in headers:
            if name != self.header:
                continue
            if self.header == "x-forwarded-for":
                hops.extend(_parse_node(element) for element in value.split(","))
            else:
                hops.extend(_forwarded_for(element) for element in _elements_from_the_right(value))
        return hops

    def client_ip(self, peer: IPAddress, headers: Headers) -> IPAddress:
        peer = canonical(peer)
        if not self.contains(peer):
            return peer
        client = peer
        for hop in reversed(self._hops(headers)):
            if hop is None:
                return client  # Nothing left of this was vouched for.
            client = canonical(hop)
            if not self.contains(client):
                return client
        return client


@dataclass(frozen=True)
class Identity:
    """An identity the application vouches for: an account id and its plan."""

    id: str
    plan: Optional[str] = None


@dataclass(frozen=True)
class Client:
    """The caller of one request: ``key`` is ``key:<id>``, ``user:<id>`` or
    ``ip:<address or IPv6 network>``."""

    kind: str
    key: str
    plan: Optional[str]
    ip: Optional[IPAddress]

    @property
    def id(self) -> str:
        return self.key.split(":", 1)[1]

    def __str__(self) -> str:
        return self.key


class Identify:
    """Who is calling: a known API key (``api_key=(header, resolve)``:
    ``resolve`` returns the :class:`Identity` of a key it knows, else None),
    else the IP address: the peer's, or behind ``trusted_proxies`` the one
    they recorded; IPv6 clients grouped by their first ``ipv6_prefix`` bits
    (64 by default). A missing peer address is the one client ``ip:unknown``."""

    def __init__(
        self,
        trusted_proxies: Union[TrustedProxies, Iterable[str], None] = None,
        *,
        ipv6_prefix: int = 64,
        api_key: Optional[Tuple[str, Callable[[str], Optional[Identity]]]] = None,
        anonymous_plan: Optional[str] = None,
    ) -> None:
        if trusted_proxies is None:
            trusted_proxies = TrustedProxies()
        elif not isinstance(trusted_proxies, TrustedProxies):
            trusted_proxies = TrustedProxies(trusted_proxies)
        self.proxies = trusted_proxies
        if isinstance(ipv6_prefix, bool) or not isinstance(ipv6_prefix, int) or ipv6_prefix < 0:
            raise ValueError(f"ipv6_prefix must be 0 to 128, not {ipv6_prefix!r}")
        self.ipv6_prefix = min(ipv6_prefix, 128)
        self.api_key = (api_key[0].lower(), api_key[1]) if api_key else None
        self.anonymous_plan = anonymous_plan

    def client(self, peer: Optional[str], headers: Headers) -> Client:
        ip: Optional[IPAddress] = None
        if peer is not None:
            try:
                ip = self.proxies.client_ip(ipaddress.ip_address(peer.split("%", 1)[0]), headers)
            except ValueError:
                ip = None
        if self.api_key is not None:
            header, resolve = self.api_key
            for name, value in headers:
                if name == header and value.strip():
                    identity = resolve(value.strip())
                    if identity is not None:
                        return Client("api_key", f"key:{identity.id}", identity.plan, ip)
                    break
        if ip is None:
            return Client("ip", "ip:unknown", self.anonymous_plan, None)
        if isinstance(ip, ipaddress.IPv6Address) and self.ipv6_prefix < 128:
            net = ipaddress.IPv6Network((ip, self.ipv6_prefix), strict=False)
            return Client("ip", f"ip:{net}", self.anonymous_plan, ip)
        return Client("ip", f"ip:{ip}", self.anonymous_plan, ip)


# -- which policies apply -----------------------------------------------------


class Route:
    """A method (None: any) and a path pattern in axum's syntax: literal
    segments, ``{name}`` for one non-empty segment, ``{*name}`` last for the
    rest (even nothing). Matched against the raw path; a ``GET`` route also
    matches ``HEAD``."""

    def __init__(self, method: Optional[str], pattern: str) -> None:
        def error(reason: str) -> ValueError:
            return ValueError(f"invalid route pattern {pattern!r}: {reason}")

        if not isinstance(pattern, str) or not pattern.startswith("/"):
            raise error("a pattern starts with '/'")
        pieces = pattern[1:].split("/")
        self.segments: List[Tuple[str, str]] = []
        for i, piece in enumerate(pieces):
            if piece.startswith("{"):
                if not piece.endswith("}"):
                    raise error("a '{' must close with '}' at the end of its segment")
                name = piece[1:-1]
                kind = "param"
                if name.startswith("*"):
                    if i + 1 != len(pieces):
                        raise error("a catch-all {*name} must be the last segment")
                    name, kind = name[1:], "rest"
                if not name or any(c in name for c in "{}*"):
                    raise error("a parameter needs a name: {id}, {*rest}")
                self.segments.append((kind, name))
            elif "{" in piece or "}" in piece:
                raise error("braces are only allowed around a whole segment: {name} or {*name}")
            else:
                self.segments.append(("literal", piece))
        self.method = method.upper() if method else None
        self.pattern = pattern

    def matches(self, method: str, path: str) -> bool:
        if self.method is not None and not (self.method == method or (self.method == "GET" and method == "HEAD")):
            return False
        if not path.startswith("/"):
            return False
        pieces = path[1:].split("/")
        i = 0
        for kind, value in self.segments:
            if kind == "rest":
                return True
            if i >= len(pieces):
                return False
            if kind == "literal" and pieces[i] != value:
                return False
            if kind == "param" and not pieces[i]:
                return False
            i += 1
        return i == len(pieces)


@dataclass(frozen=True)
class Request:
    """What the policies see of a request: its head."""

    method: str
    path: str
    headers: Headers
    peer: Optional[str]

    def header(self, name: str) -> Optional[str]:
        name = name.lower()
        for n, v in self.headers:
            if n == name:
                return v
        return None


class Policy:
    """One quota policy: a name (1 to 64 of ``A-Z a-z 0-9 _ . -``, what
    clients see in the fields), a limiter (an
    :class:`~ratelab_client.AsyncLimiter`, built with the default
    ``on_failure="error"``: the policy's own ``failure`` decides), the routes
    it applies to (none: every route; ``(method or None, pattern)``), the
    plans (none: every client), the key (by default the client's; a function
    of the request and client, None for "does not apply"), the cost (an int
    or a function), ``failure`` (``"open"``: pass unchecked, with an alert;
    ``"closed"``: ``503``), ``timeout`` (seconds for all its limiter calls
    for one request), and ``count``: ``"all"`` (the default),
    ``"failures"`` (only requests whose response is a failure count: failed
    logins) or ``"successes"``; ``failed_when`` says which statuses are
    failures (default: 400 or more). A counting policy takes the cost with a
    receipt before the request runs, and refunds it once the response head
    says it does not count: requests in flight together never pass beyond
    the quota, and the refund gives back only what the admission still
    holds. The limiter sees ``<name>:<key>``."""

    def __init__(
        self,
        name: str,
        limiter: Any,
        *,
        routes: Iterable[Tuple[Optional[str], str]] = (),
        plans: Iterable[str] = (),
        key: Optional[Callable[[Request, Client], Optional[str]]] = None,
        cost: Union[int, Callable[[Request, Client], int]] = 1,
        failure: str = "open",
        timeout: float = DEFAULT_POLICY_TIMEOUT,
        count: str = "all",
        failed_when: Optional[Callable[[int], bool]] = None,
    ) -> None:
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(
                f"policy name {name!r} is not 1 to 64 characters among A-Z a-z 0-9 _ . - "
                "(it appears in the RateLimit headers and the limiter keys)"
            )
        if failure not in ("open", "closed"):
            raise ValueError(f"failure is 'open' or 'closed', not {failure!r}")
        if count not in ("all", "failures", "successes"):
            raise ValueError(f"count is 'all', 'failures' or 'successes', not {count!r}")
        if not callable(cost) and (isinstance(cost, bool) or not isinstance(cost, int) or cost < 0):
            raise ValueError(f"cost must be a non-negative integer or a function, not {cost!r}")
        if not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        if not inspect.iscoroutinefunction(getattr(limiter, "check", None)):
            raise TypeError(
                f"policy {name!r}: the limiter must be an AsyncLimiter (its check a coroutine), "
                f"not {type(limiter).__name__}"
            )
        #: The limiter issues receipts and settles them (an AsyncLimiter):
        #: what one policy took for a request another refused is given back.
        self.refunds = inspect.iscoroutinefunction(getattr(limiter, "settle", None))
        if count != "all" and not self.refunds:
            raise TypeError(
                f"policy {name!r}: count={count!r} consumes first and refunds by receipt, and "
                f"{type(limiter).__name__} has no settle coroutine (an AsyncLimiter has)"
            )
        self.name = name
        self.limiter = limiter
        self.routes = [Route(method, pattern) for method, pattern in routes]
        self.plans = list(plans)
        self.key = key
        self.cost = cost
        self.failure = failure
        self.timeout = float(timeout)
        self.count = count
        self.failed_when = failed_when if failed_when is not None else (lambda status: status >= 400)
        quota: Quota = limiter.quota
        # Rounded up, at least 1 s: the advertised rate is never faster.
        self.q = quota.burst
        self.w = max(1, -(-quota.window_us // 1_000_000))
        described = getattr(limiter, "algorithm", None)
        algorithm = getattr(described, "name", None)
        # How the quota comes back, for `t` (ratelab-http's `Refill`): one
        # unit every interval (a debt: GCRA, the token bucket, the leaky
        # buckets, as algorithms.json says), all at once at the window's end,
        # or on a schedule only the limiter knows (it is asked, with a peek);
        # any other algorithm, only when the key is full again.
        self.interval = quota.emission_interval_us if getattr(described, "debt", False) else None
        self.sliding = algorithm in ("sliding-log", "sliding-counter")
        self.item = f'"{name}";q={min(self.q, INTEGER_MAX)};w={min(self.w, INTEGER_MAX)}'

    @property
    def after_response(self) -> bool:
        """Whether something about a request is decided once its response
        is known (here: whether it counts)."""
        return self.count != "all"

    def counts(self, status: int) -> bool:
        """Whether a response of ``status`` counts."""
        if self.count == "all":
            return True
        failed = bool(self.failed_when(status))
        return failed if self.count == "failures" else not failed

    def applies(self, request: Request, client: Client) -> Optional[Tuple[str, int]]:
        """(limiter key, cost) if the policy applies to the request."""
        if self.routes and not any(r.matches(request.method, request.path) for r in self.routes):
            return None
        if self.plans and client.plan not in self.plans:
            return None
        key = client.key if self.key is None else self.key(request, client)
        if key is None:
            return None
        cost = self.cost(request, client) if callable(self.cost) else self.cost
        return f"{self.name}:{key}", cost


# -- deciding ---------------------------------------------------------------------

logger = logging.getLogger("ratelab_client.web")


@dataclass
class Report:
    """One applicable policy's part of a verdict."""

    policy: Policy
    key: str
    cost: int
    #: "pending", "peeked", "decided", "given_back" (admitted, then refunded:
    #: another policy refused the request), "never", "failed_open",
    #: "failed_closed"
    state: str = "pending"
    decision: Optional[Decision] = None
    error: Optional[RatelabError] = None
    retry_after: Optional[float] = None
    deadline: Optional[float] = None
    #: What the admission took, while something may give it back: another
    #: policy's refusal, or the response (a request that does not count).
    receipt: Any = None
    #: ``t`` when a peek said it (the sliding log and counter), µs.
    next_us: Optional[int] = None

    def set(self, state: str, decision: Optional[Decision]) -> None:
        """A new state: ``t`` is for the decision it came with."""
        self.state, self.decision, self.next_us = state, decision, None

    @property
    def violated(self) -> bool:
        return (self.state == "decided" and self.decision is not None and not self.decision.allowed) or (
            self.state == "never")

    @property
    def admitted(self) -> bool:
        return self.state == "decided" and self.decision is not None and self.decision.allowed

    def next_after_us(self) -> Optional[int]:
        """``t``: the wait until more quota is available than ``remaining``."""
        d = self.decision
        if d is None:
            return None
        if self.next_us is not None:
            return self.next_us
        if d.remaining >= d.limit:
            return 0
        if not d.allowed and self.cost == 1 and d.retry_after_micros > 0:
            return d.retry_after_micros
        return wait_for(d, self.policy.interval, d.remaining + 1)

    def wanted(self) -> Optional[int]:
        """The units to peek for when ``t`` needs the limiter (the sliding
        log and counter): ``r + 1``; None when the decision says it."""
        d = self.decision
        if not self.policy.sliding or self.next_us is not None or d is None:
            return None
        if d.remaining >= d.limit or (not d.allowed and self.cost == 1 and d.retry_after_micros > 0):
            return None
        if not inspect.iscoroutinefunction(getattr(self.policy.limiter, "peek", None)):
            return None
        return d.remaining + 1


def wait_for(d: Decision, interval: Optional[int], units: int) -> int:
    """µs until ``units`` are available: exact for a steady refill, else the
    wait until the key is full. Never shorter than the real wait."""
    if d.remaining >= units:
        return 0
    if interval is not None:
        return max(0, d.reset_after_micros - max(0, d.limit - units) * interval)
    return d.reset_after_micros


@dataclass
class Failure:
    policy: str
    client: Client
    error: RatelabError
    mode: str


@dataclass
class Verdict:
    """What happens to a request: ``outcome`` is ``"pass"``, ``"refuse"``
    (429) or ``"unavailable"`` (503)."""

    reports: List[Report]
    outcome: str
    client: Client
    failures: List[Failure] = field(default_factory=list)
    delay_us: int = 0

    @property
    def pending(self) -> bool:
        """Some policy decides something from the response (it counts only
        failures or successes, and took the cost with a receipt)."""
        return any(_waits_for_response(r) for r in self.reports)

    @property
    def retry_after_secs(self) -> Optional[int]:
        """``Retry-After``: for a refusal, the longest wait of the violated
        policies, whole seconds rounded up, at least 1 (None when no wait
        helps); for 503 the limiter's hint, at least 1 s."""
        if self.outcome == "refuse":
            waits = []
            for r in self.reports:
                if r.violated:
                    if r.decision is None:
                        return None
                    waits.append(r.decision.retry_after_micros)
            return max(1, -(-max(waits, default=0) // 1_000_000))
        if self.outcome == "unavailable":
            hints = [r.retry_after for r in self.reports if r.state == "failed_closed" and r.retry_after]
            return max(1, -(-int(max(hints, default=0) * 1_000_000) // 1_000_000))
        return None

    def fields(self) -> List[Tuple[str, str]]:
        """``RateLimit-Policy`` (every policy that applied) and ``RateLimit``
        (every one that decided), as ``ratelab-http`` writes them."""
        out = []
        if self.reports:
            out.append(("RateLimit-Policy", ", ".join(r.policy.item for r in self.reports)))
        items = []
        for r in self.reports:
            t = r.next_after_us()
            if t is None or r.decision is None:
                continue
            secs = -(-t // 1_000_000)
            items.append(f'"{r.policy.name}";r={min(r.decision.remaining, INTEGER_MAX)};t={min(secs, INTEGER_MAX)}')
        if items:
            out.append(("RateLimit", ", ".join(items)))
        return out

    def problem(self) -> Tuple[int, bytes]:
        """The status and RFC 9457 body of a refusal or a 503."""
        if self.outcome == "unavailable":
            body: Dict[str, Any] = {
                "type": "about:blank",
                "title": "Service Unavailable",
                "status": 503,
                "detail": "The rate limiter could not decide whether this request is within its quota, "
                "and refuses it rather than let it pass unchecked. Try again later.",
                "unavailable-policies": [r.policy.name for r in self.reports if r.state == "failed_closed"],
            }
            return 503, _json(body)
        violated = [r for r in self.reports if r.violated]
        reasons = []
        for r in violated:
            if r.state == "never":
                reasons.append(
                    f'a request costing {r.cost} can never pass policy "{r.policy.name}", '
                    f"which admits at most {r.policy.q} at once"
                )
            else:
                reasons.append(f'policy "{r.policy.name}" allows {r.policy.q} per {r.policy.w} s')
        retry = self.retry_after_secs
        detail = "; ".join(reasons) + (f"; retry in {retry} s." if retry is not None else ".")
        body = {
            "type": QUOTA_EXCEEDED,
            "title": "Request cannot be satisfied as assigned quota has been exceeded",
            "status": 429,
            "detail": detail,
            "violated-policies": [r.policy.name for r in violated],
        }
        return 429, _json(body)


def _json(body: Dict[str, Any]) -> bytes:
    # As serde_json writes it: compact, members in this order, UTF-8.
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def match(policies: Sequence[Policy], request: Request, client: Client) -> List[Report]:
    reports = []
    for policy in policies:
        applied = policy.applies(request, client)
        if applied is not None:
            key, cost = applied
            reports.append(Report(policy, key, cost))
    return reports


async def _bounded(policy: Policy, awaitable: Awaitable[Any]) -> Any:
    """A call made after the decision (a refund, a peek for ``t``), bounded by
    its policy's timeout on its own."""
    try:
        return await asyncio.wait_for(awaitable, policy.timeout)
    except asyncio.TimeoutError:
        raise Timeout(f"the rate limiter did not answer within {policy.timeout * 1000:g} ms") from None


async def _warm(limiters: Iterable[Any]) -> None:
    warms = [limiter.warm() for limiter in limiters if inspect.iscoroutinefunction(getattr(limiter, "warm", None))]
    if warms:
        await asyncio.gather(*warms, return_exceptions=True)


#: Refunds of admissions that came after their request was answered.
_late_refunds: Set["asyncio.Task[Any]"] = set()


def _give_back_late(policy: Policy, check: "asyncio.Future[Any]") -> None:
    if check.cancelled() or check.exception() is not None:
        return
    receipt = getattr(check.result(), "receipt", None)
    if receipt is None:
        return
    refund = asyncio.ensure_future(_bounded(policy, policy.limiter.refund(receipt)))
    _late_refunds.add(refund)
    refund.add_done_callback(_late_refunds.discard)
    refund.add_done_callback(lambda done: done.cancelled() or done.exception())


def _waits_for_response(report: Report) -> bool:
    return (report.policy.after_response and report.cost != 0 and report.admitted
            and report.receipt is not None)


async def complete_next(reports: Sequence[Report]) -> None:
    """``t`` for the policies whose decision does not say it (the sliding
    log and counter): a peek of ``r + 1`` units, whose ``retry_after`` is
    when more than ``r`` is available (concurrently, each bounded by its
    policy's timeout). A peek that fails leaves ``t`` the wait until full:
    late, never early."""
    wanted = [(r, r.wanted()) for r in reports]
    wanted = [(r, units) for r, units in wanted if units is not None]
    if not wanted:
        return
    answers = await asyncio.gather(*(_bounded(r.policy, r.policy.limiter.peek(r.key, units)) for r, units in wanted),
                                   return_exceptions=True)
    for (report, _), answer in zip(wanted, answers):
        if isinstance(answer, Decision):
            # Units came back since the decision (another request's refund): none to wait for.
            report.next_us = 0 if answer.allowed else answer.retry_after_micros
        elif isinstance(answer, BaseException) and not isinstance(answer, Exception):
            raise answer


async def settle_after_response(verdict: Verdict, status: int) -> None:
    """After the response head (its ``status``): each policy that counts only
    failures or successes and admitted the request refunds its receipt if
    the response does not count (concurrently, each bounded by its policy's
    timeout); the refund's answer becomes the policy's decision, so that the
    response's fields show the key as the refund left it. A refund that fails
    keeps the charge, with a warning."""
    calls = []
    for report in verdict.reports:
        if not _waits_for_response(report):
            continue
        receipt, report.receipt = report.receipt, None
        if report.policy.counts(status):
            continue  # The charge stands.
        calls.append((report, _bounded(report.policy, report.policy.limiter.refund(receipt))))
    if not calls:
        return
    answers = await asyncio.gather(*(call for _, call in calls), return_exceptions=True)
    for (report, _), answer in zip(calls, answers):
        if isinstance(answer, Decision):
            if not answer.degraded:
                report.set("decided", answer)
        elif isinstance(answer, Exception):
            logger.warning("rate limiter of policy %s failed after the response: the request's refund is lost: %s",
                           report.policy.name, answer)
        else:
            raise answer
    await complete_next(verdict.reports)


class Engine:
    """Decides one request against every policy that applies to it, as
    ``ratelab-http``'s guide says ("Several policies on one request"): one
    policy is asked once, with its cost. With several, all or nothing: every
    policy whose limiter issues receipts takes the cost with one, all at
    once, while the others are peeked (cost 0); then those are asked with
    the cost (the ones the peek predicted to refuse first: a refusal
    consumes nothing). A request refused (or failed closed) anywhere gives
    every receipt back before it is answered, so it leaves every policy as
    if it never came. A policy that decides from the response takes its cost
    with a receipt even alone, and keeps it for the response."""

    def __init__(self, reports: List[Report], client: Client, monotonic: Callable[[], float]) -> None:
        self.reports = reports
        self.client = client
        self.failures: List[Failure] = []
        self.monotonic = monotonic

    def _receipted(self, report: Report) -> bool:
        return (report.policy.refunds and report.cost > 0
                and (len(self.reports) > 1 or report.policy.after_response))

    async def decide(self) -> Verdict:
        if not self.reports:
            return Verdict([], "pass", self.client)
        # Setting up a limiter's connection is bounded by its own
        # connect_timeout, not by the policy's: the first requests on a busy
        # Redis are decided, not failed open.
        await _warm({id(r.policy.limiter): r.policy.limiter for r in self.reports}.values())
        started = self.monotonic()
        for r in self.reports:
            # Every call of a policy for this request shares one deadline.
            r.deadline = started + r.policy.timeout
        several = len(self.reports) > 1
        first = []
        for i, r in enumerate(self.reports):
            if self._receipted(r):
                first.append((i, "receipt"))
            elif several and r.cost > 0:
                first.append((i, "peek"))
            else:
                first.append((i, "charge"))
        await self._ask(first)
        outcome = self._after()
        if outcome is not None:
            return await self._finish(outcome)
        # The policies that only peeked (limiters without receipts): those
        # predicted to refuse go first, alone, since a refusal consumes
        # nothing; then the rest.
        peeked = [i for i, r in enumerate(self.reports) if r.state == "peeked"]
        predicted = [i for i in peeked if self.reports[i].decision.remaining < self.reports[i].cost]
        rest = [i for i in peeked if i not in predicted]
        for round_ in (predicted, rest):
            await self._ask([(i, "charge") for i in round_])
            outcome = self._after()
            if outcome is not None:
                return await self._finish(outcome)
        return await self._finish("pass")

    def _after(self) -> Optional[str]:
        if any(r.violated for r in self.reports):
            return "refuse"
        if any(r.state == "failed_closed" for r in self.reports):
            return "unavailable"
        return None

    async def _finish(self, outcome: str) -> Verdict:
        verdict = Verdict(self.reports, outcome, self.client, self.failures)
        if outcome == "pass":
            for r in self.reports:
                if not r.policy.after_response:
                    r.receipt = None  # Nothing will give it back: the charge stands.
            verdict.delay_us = max((r.decision.delay_micros for r in self.reports
                                    if r.state == "decided" and r.decision is not None), default=0)
        else:
            await self._give_back()
        await complete_next(self.reports)
        return verdict

    async def _give_back(self) -> None:
        """Refunds, concurrently, every receipt held: the request is not
        served. Each answer (the key as the refund left it) becomes its
        report's decision. A refund that fails keeps its units taken."""
        held = [r for r in self.reports if r.receipt is not None]
        receipts = [r.receipt for r in held]
        for r in held:
            r.receipt = None
        if not held:
            return
        answers = await asyncio.gather(
            *(_bounded(r.policy, r.policy.limiter.refund(receipt)) for r, receipt in zip(held, receipts)),
            return_exceptions=True)
        for report, answer in zip(held, answers):
            if isinstance(answer, Decision):
                if not answer.degraded and report.admitted:
                    report.set("given_back", answer)
            elif isinstance(answer, Exception):
                logger.warning("rate limiter of policy %s failed to give back the units of a refused request: "
                               "they stay taken: %s", report.policy.name, answer)
            else:
                raise answer

    async def _ask(self, asks: Sequence[Tuple[int, str]]) -> None:
        if not asks:
            return
        results = await asyncio.gather(*(self._call(self.reports[i], how) for i, how in asks),
                                       return_exceptions=True)
        for (i, how), result in zip(asks, results):
            self._record(self.reports[i], result, how)

    async def _call(self, report: Report, how: str) -> Decision:
        cost = 0 if how == "peek" else report.cost
        left = (report.deadline or 0) - self.monotonic()
        if left <= 0:
            raise Timeout(f"policy {report.policy.name}: its timeout passed")
        check = asyncio.ensure_future(report.policy.limiter.check(report.key, cost))
        try:
            return await asyncio.wait_for(asyncio.shield(check), left)
        except asyncio.TimeoutError:
            # The check goes on: an admission it brings after all is given
            # back, as the request was answered without it.
            check.add_done_callback(lambda done: _give_back_late(report.policy, done))
            raise Timeout(f"the rate limiter did not answer within {report.policy.timeout * 1000:g} ms") from None

    def _record(self, report: Report, result: Any, how: str) -> None:
        if isinstance(result, Decision) and not result.degraded:
            report.set("peeked" if how == "peek" else "decided", result)
            if how == "receipt" and result.allowed:
                report.receipt = getattr(result, "receipt", None)
            return
        # A state without a decision: the peek's is not reported.
        report.set(report.state, None)
        if isinstance(result, CostTooHigh):
            report.state = "never"
            return
        if isinstance(result, Decision):
            # A limiter's own failure policy answered: to the layer that is
            # an outage, and the route's mode wins.
            error: RatelabError = Unavailable("the limiter's backend is failing: its failure policy "
                                              f"{'admitted' if result.allowed else 'refused'} the request")
            hint = result.retry_after_micros / 1_000_000 or None
        elif isinstance(result, RatelabError):
            error, hint = result, getattr(result, "retry_after", None)
        elif isinstance(result, Exception):
            error, hint = RatelabError(repr(result)), None
        else:  # Cancellation and the like: not ours to swallow.
            raise result
        # Data errors fail closed whatever the mode: nothing repairs them by
        # waiting, and failing open would admit on state no one can read.
        mode = "closed" if isinstance(error, DataError) else report.policy.failure
        report.error = error
        self.failures.append(Failure(report.policy.name, self.client, error, mode))
        if mode == "open":
            report.state = "failed_open"
        else:
            report.state = "failed_closed"
            report.retry_after = hint


FailureHook = Callable[[Failure], None]
Decide = Callable[[Request], Awaitable[Verdict]]
