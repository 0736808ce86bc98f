"""The Python clients against a real Redis, as one table of cases that the
synchronous :class:`Limiter` and the asyncio :class:`AsyncLimiter` both run
(the ``flavor`` fixture): the reference table on the caller's clock, every
algorithm's first answers and TTLs, EVALSHA after a script flush, every
error reply, peeks, receipts (settlements, refunds) and resets."""

import copy
import json
import pickle

import pytest
import redis

from ratelab_client import (
    ALGORITHMS,
    CostTooHigh,
    DataError,
    Expired,
    ForeignReceipt,
    Quota,
    Receipt,
    ReceiptSpent,
    RedisClock,
)

QUOTA = Quota.per_second(5, burst=10)
T0 = 1_700_000_000_000_000  # µs: an arbitrary instant on the caller's clock


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def make(flavor, server):
    """A limiter of the case's flavor on the session's server."""
    return lambda *args, **kwargs: flavor.limiter(server, *args, **kwargs)


@pytest.mark.parametrize("name", ["token-bucket", "gcra", "leaky-meter", "leaky-queue"])
def test_the_reference_table(make, client, prefix, name):
    # Capacity 10, 5 per second: a burst of 20 admits 10; one second later,
    # 10 requests admit 5; every refusal says retry in 1 s.
    clock = Clock()
    limiter = make(name, QUOTA, prefix=prefix, clock=clock)
    first = [limiter.check("client") for _ in range(20)]
    clock.now += 1_000_000
    second = [limiter.check("client") for _ in range(10)]
    assert sum(d.allowed for d in first) == 10
    assert sum(d.allowed for d in second) == 5
    assert {d.retry_after_secs for d in first + second if not d.allowed} == {1}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_fresh_key_on_the_redis_clock(make, client, prefix, name):
    limiter = make(name, QUOTA, prefix=prefix)
    peek = limiter.check("fresh", 0)
    assert peek.allowed and peek.remaining == 10
    assert client.exists(limiter.redis_key("fresh")) == 0, "a peek writes nothing"
    d = limiter.check("fresh", 3)
    assert (d.allowed, d.limit, d.remaining, d.retry_after_micros) == (True, 10, 7, 0)
    assert 0 < d.reset_after_micros <= limiter.algorithm.max_wait_us
    # The key expires when it is full again (rounded up to the ms, no slack).
    ttl = client.pttl(limiter.redis_key("fresh"))
    assert 0 < ttl <= -(-d.reset_after_micros // 1000)


def test_a_caller_clock_keeps_keys_a_slack_longer(make, client, prefix):
    limiter = make("gcra", QUOTA, prefix=prefix, clock=Clock())
    d = limiter.check("k", 1)
    assert d.reset_after_micros == 200_000
    ttl = client.pttl(limiter.redis_key("k"))
    assert 60_000 < ttl <= 60_200


def test_a_flushed_script_is_loaded_again(make, client, prefix):
    limiter = make("token-bucket", QUOTA, prefix=prefix, clock=Clock())
    assert limiter.check("k").remaining == 9
    client.script_flush()
    assert client.script_exists(limiter.sha) == [False]
    assert limiter.check("k").remaining == 8
    assert client.script_exists(limiter.sha) == [True]


def test_a_cost_over_the_capacity_is_an_error_not_a_refusal(make, client, prefix):
    limiter = make("gcra", QUOTA, prefix=prefix)
    with pytest.raises(CostTooHigh):
        limiter.check("k", 11)
    assert limiter.check("k", 10).allowed


def test_corrupt_state_and_wrong_types_are_data_errors(make, client, prefix):
    limiter = make("gcra", QUOTA, prefix=prefix, clock=Clock())
    client.set(limiter.redis_key("text"), "not a timestamp")
    with pytest.raises(DataError, match=r"^ratelab gcra: corrupt state at .*not a timestamp"):
        limiter.check("text")
    client.lpush(limiter.redis_key("list"), "x")
    with pytest.raises(DataError, match="a list, not a string"):
        limiter.check("list")


def test_another_protocol_version_gets_a_clear_error(make, client, prefix):
    limiter = make("token-bucket", QUOTA, prefix=prefix, clock=Clock())
    client.script_load(limiter.source)
    args = limiter.arguments(1, T0)
    args[0] = 999
    with pytest.raises(redis.exceptions.ResponseError, match=r"^ratelab: protocol version 5 expected, got 999$"):
        client.evalsha(limiter.sha, 1, limiter.redis_key("k"), *args)
    # A caller of the layout before the version (now first) is refused too.
    with pytest.raises(redis.exceptions.ResponseError, match=f"^ratelab: protocol version .* expected, got {T0}$"):
        client.evalsha(limiter.sha, 1, limiter.redis_key("k"), *args[1:])
    assert client.exists(limiter.redis_key("k")) == 0


def test_a_call_past_its_deadline_charges_nothing(make, client, prefix):
    # A clock sample that puts Redis's clock an hour behind: the deadline
    # sent is an hour early, and the script starts after it. The timeout (a
    # minute) leaves a loaded machine all the time it needs to warm up.
    skewed = RedisClock(max_age_us=3_600_000_000)
    limiter = make("token-bucket", QUOTA, prefix=prefix, redis_clock=skewed, breaker=(0, 0), timeout=60)
    limiter.check("warm", 0)  # connects, and samples the clock
    offset = skewed.offset_us
    skewed._state = (offset - 3_600_000_000, 0, skewed.monotonic())
    with pytest.raises(Expired, match="^ratelab expired: .*nothing was charged"):
        limiter.check("k", 5)
    assert client.exists(limiter.redis_key("k")) == 0
    skewed.invalidate()
    assert limiter.check("k", 5).remaining == 5


@pytest.mark.parametrize(
    "reply",
    [
        [1, 10, 9, 0, 200_000, 0, 0],
        [1, 11, 9, 0, 0, 0, 0, 0],
        [1, 10, 11, 0, 0, 0, 0, 0],
        [2, 10, 9, 0, 0, 0, 0, 0],
        [1, 10, 9, 5, 0, 0, 0, 0],
        [0, 10, 9, 5, 0, 5, 0, 0],
        # Past the debts' ceiling (a gcra peek may wait up to 2^52 + 2^51 µs).
        [0, 10, 9, (1 << 52) + (1 << 51) + 1, 0, 0, 0, 0],
        [1, 10, -1, 0, 0, 0, 0, 0],
        [b"1", 10, 9, 0, 0, 0, 0, 0],
        None,
        # Six integers: version 3's reply.
        [1, 10, 9, 0, 200_000, 0],
        # A stamp for no admission (a peek's reply).
        [1, 10, 9, 0, 200_000, 0, T0 + 200_000, 0],
    ],
)
def test_replies_are_never_trusted(make, client, reply):
    limiter = make("gcra", QUOTA)
    with pytest.raises(DataError, match="^ratelab gcra: invalid reply"):
        limiter.decision(reply)


@pytest.mark.parametrize(
    "name, reply",
    [
        # No stamp for an admission of a positive cost.
        ("gcra", [1, 10, 9, 0, 200_000, 0, 0, 0]),
        # A stamp for a refusal.
        ("gcra", [0, 10, 0, 200_000, 2_000_000, 0, T0 + 2_000_000, 0]),
        # A debt's end not after now, or past the longest wait after it
        # (2 s + 1 s + the slack of 60 s).
        ("gcra", [1, 10, 9, 0, 200_000, 0, T0, 0]),
        ("gcra", [1, 10, 9, 0, 200_000, 0, T0 + 63_000_001, 0]),
        # An admission's waits stay within the quota's, debt or not.
        ("gcra", [1, 10, 0, 0, 63_000_001, 0, T0 + 200_000, 0]),
        # A window's stamp without a mark (version 4's).
        ("fixed-window", [1, 10, 9, 0, 2_000_000, 0, 850_000_000, 0]),
    ],
)
def test_stamps_are_never_trusted(make, name, reply):
    limiter = make(name, QUOTA, clock=Clock())
    with pytest.raises(DataError, match=f"^ratelab {name}: invalid reply"):
        limiter.decision(reply, "check", 1, T0)


def test_a_debts_waits_run_to_the_protocols_ceiling_outside_an_admission(make):
    # Settlements charge debt whatever the room: a debt's peeks, refusals,
    # settlements and resets may wait up to 2^52 + 2^51 µs; a window's never
    # pass the quota's own (plus 1 s and the slack).
    debt = make("gcra", QUOTA, clock=Clock())
    ceiling = (1 << 52) + (1 << 51)
    far = [0, 10, 0, ceiling, ceiling, 0, 0, 0]
    assert debt.decision(far, "peek", 1, T0).retry_after_micros == ceiling
    assert debt.decision(far, "check", 1, T0).reset_after_micros == ceiling
    with pytest.raises(DataError, match="a wait longer"):
        debt.decision([0, 10, 0, ceiling + 1, 0, 0, 0, 0], "peek", 1, T0)
    window = make("fixed-window", QUOTA, clock=Clock())
    with pytest.raises(DataError, match="a wait longer"):
        window.decision([0, 10, 0, 63_000_001, 0, 0, 0, 0], "peek", 1, T0)
    # Valid admissions: a debt's end ahead of now, a window's index and mark.
    d = debt.decision([1, 10, 9, 0, 200_000, 0, T0 + 200_000, 7], "check", 1, T0)
    assert d.allowed and d.receipt is None  # a receipt comes only from a call
    assert window.decision([1, 10, 9, 0, 2_000_000, 0, 0, 1], "check", 1, T0).allowed


def test_arguments_are_the_protocol_layout(make):
    limiter = make("gcra", QUOTA, clock=Clock(), timeout=None)
    assert limiter.arguments(1, T0) == [5, T0, 1, 60_000, "", "check", 200_000, 2_000_000, 10]
    assert limiter.arguments(3, T0, "settle", actual=1, stamp=(T0 + 600_000, 7))[5] == (
        f"settle:1:{T0 + 600_000}:7")
    assert limiter.arguments(0, T0, "reset")[2:6] == [0, 60_000, "", "reset"]
    with pytest.raises(ValueError):
        limiter.arguments(3, T0, "settle", actual=-1, stamp=(T0, 0))
    with pytest.raises(ValueError):
        limiter.arguments(3, T0, "settle", actual=1, stamp=(2**53, 0))
    with pytest.raises(ValueError):
        limiter.arguments(3, T0, "settle")
    with pytest.raises(ValueError):
        limiter.arguments(3, T0, "refund")
    with pytest.raises(ValueError):
        limiter.arguments(1, T0, "take")
    limiter = make("gcra", QUOTA)
    version, now, cost, slack, deadline, op, *params = limiter.arguments(2, deadline=1_234)
    assert (version, now, cost, slack, deadline, op, params) == (
        5, "", 2, 0, 1_234, "check", [200_000, 2_000_000, 10])
    # Exactly the algorithm's parameters: two for the token bucket, four for
    # the sliding counter.
    assert make("token-bucket", QUOTA).arguments(1)[6:] == [200_000, 10]
    assert make("sliding-counter", QUOTA).arguments(1)[6:] == [2_000_000, 10, 31, 64517]


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_peek_decides_as_a_check_and_writes_nothing(make, client, prefix, name):
    clock = Clock()
    limiter = make(name, QUOTA, prefix=prefix, clock=clock)
    for step, cost in enumerate([4, 3, 2, 3, 1, 5, 2]):
        clock.now = T0 + step * 150_000
        before = client.dump(limiter.redis_key("k"))
        peeked = limiter.peek("k", cost)
        assert client.dump(limiter.redis_key("k")) == before, "a peek wrote"
        assert limiter.check("k", cost) == peeked


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_refund_gives_back_what_was_taken(make, client, prefix, name):
    clock = Clock()
    limiter = make(name, QUOTA, prefix=prefix, clock=clock)
    taken = limiter.check("k", 7)
    assert taken.remaining == 3
    receipt = taken.receipt
    assert isinstance(receipt, Receipt) and (receipt.key, receipt.cost) == (b"k", 7)
    # At the instant of the check: settled to 3, the admission gives 4 back.
    after = limiter.settle(receipt, 3)
    assert (after.allowed, after.remaining) == (True, 7)
    assert after.receipt is None
    assert limiter.peek("k", 0) == after
    # Usable once.
    with pytest.raises(ReceiptSpent, match="settled once"):
        limiter.refund(receipt)
    assert receipt.spent
    # Never above the capacity. The key full again keeps what the receipt
    # gave back (so that it gives nothing more), with a TTL.
    more = limiter.check("j", 4)
    assert limiter.refund(more.receipt).remaining == 10
    assert client.pttl(limiter.redis_key("j")) > 0
    assert limiter.check("j", 10).allowed
    # A reset puts a key back to full capacity; on a key that holds nothing
    # it writes nothing.
    limiter.reset("j")
    assert limiter.peek("j", 0).remaining == 10
    limiter.reset("never-seen")
    assert client.exists(limiter.redis_key("never-seen")) == 0


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_a_settlement_above_the_cost_charges_the_difference(make, prefix, name):
    clock = Clock()
    limiter = make(name, QUOTA, prefix=prefix, clock=clock)
    d = limiter.check("k", 2)
    after = limiter.settle(d.receipt, 9)
    assert (after.allowed, after.remaining) == (True, 1)
    assert limiter.peek("k", 2).allowed is False


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_no_receipt_gives_anything_back_after_a_reset(make, client, prefix, name):
    clock = Clock()
    limiter = make(name, QUOTA, prefix=prefix, clock=clock)
    old = limiter.check("k", 6).receipt
    limiter.reset("k")
    assert limiter.peek("k", 0).remaining == 10
    fresh = limiter.check("k", 4)
    assert fresh.remaining == 6
    # The receipt from before the reset gives nothing back.
    assert limiter.refund(old).remaining == 6
    # The reset left a tombstone, with a TTL.
    assert client.pttl(limiter.redis_key("k")) > 0


def test_a_decision_without_a_receipt_has_nothing_to_settle(make, prefix):
    limiter = make("gcra", QUOTA, prefix=prefix, clock=Clock())
    for d in (limiter.peek("k", 3), limiter.check("k", 0)):
        assert d.receipt is None
    for _ in range(10):
        limiter.check("k")
    refused = limiter.check("k")
    assert not refused.allowed and refused.receipt is None
    with pytest.raises(TypeError, match="not None: only a check that Redis admitted"):
        limiter.settle(refused.receipt, 0)
    with pytest.raises(TypeError, match="not str"):
        limiter.refund("k")


def test_a_receipt_goes_back_only_to_its_limiter(make, flavor, server, prefix):
    ours = make("gcra", QUOTA, prefix=prefix, clock=Clock())
    same_quota = make("gcra", QUOTA, prefix=prefix, clock=Clock())
    receipt = ours.check("k", 4).receipt
    with pytest.raises(ForeignReceipt, match="another limiter"):
        same_quota.refund(receipt)
    # Refused, not spent: its own limiter still takes it.
    assert not receipt.spent
    assert ours.refund(receipt).remaining == 10
    # A serialized receipt names its limiter: another prefix or quota refuses it.
    text = ours.check("k", 4).receipt.to_json()
    for other in (make("gcra", QUOTA, prefix=prefix + "x"), make("gcra", Quota.per_second(5, burst=11), prefix=prefix),
                  make("token-bucket", QUOTA, prefix=prefix)):
        with pytest.raises(ForeignReceipt, match="another limiter"):
            other.receipt_from_json(text)
    # The same prefix, algorithm and quota takes it (another process would).
    loaded = same_quota.receipt_from_json(text)
    assert (loaded.key, loaded.cost) == (b"k", 4)
    assert same_quota.refund(loaded).remaining == 10
    for bad in ("{", "[]", '{"ratelab_receipt": 1}', text.replace('"cost":4', '"cost":-4'),
                text.replace('"cost":4', '"cost":11'), text.replace('"key_hex":"6b"', '"key_hex":"zz"')):
        with pytest.raises(ValueError):
            ours.receipt_from_json(bad)


def test_a_copy_is_the_receipt_itself_and_pickling_is_refused(make, prefix):
    limiter = make("gcra", QUOTA, prefix=prefix, clock=Clock())
    receipt = limiter.check("k", 4).receipt
    assert copy.copy(receipt) is receipt and copy.deepcopy(receipt) is receipt
    with pytest.raises(TypeError, match="to_json"):
        pickle.dumps(receipt)
    limiter.refund(copy.copy(receipt))
    with pytest.raises(ReceiptSpent):
        limiter.refund(receipt)


def test_a_settlement_above_the_capacity_is_an_error_and_spends_the_receipt(make, prefix):
    limiter = make("gcra", QUOTA, prefix=prefix, clock=Clock())
    receipt = limiter.check("k", 4).receipt
    with pytest.raises(ValueError, match="actual must be an integer"):
        limiter.settle(receipt, -1)
    assert not receipt.spent
    with pytest.raises(CostTooHigh, match="the receipt is spent"):
        limiter.settle(receipt, 11)
    assert receipt.spent
    # The admission counts as charged.
    assert limiter.peek("k", 0).remaining == 6


def test_a_settlement_past_the_protocols_ceiling_is_out_of_range(make, client, prefix):
    # At the end of the instants (now clamped at 2^52), four receipts of a
    # quota of 4 per 2^50 µs each settled to 4: the second settlement would
    # leave a debt ending past 2^52 + 2^51 µs.
    clock = Clock(1 << 52)
    limiter = make("gcra", Quota(4, 1 << 50, 4), prefix=prefix, clock=clock)
    receipts = [limiter.check("k").receipt for _ in range(4)]
    assert limiter.settle(receipts[0], 4).remaining == 0
    before = client.get(limiter.redis_key("k"))
    with pytest.raises(DataError, match=r"^ratelab gcra: out of range at .*past 2\^52 \+ 2\^51"):
        limiter.settle(receipts[1], 4)
    assert client.get(limiter.redis_key("k")) == before, "an out-of-range settlement wrote"
    assert receipts[1].spent


@pytest.mark.parametrize("version", [1, 3, 4, 6])
def test_another_versions_calls_get_the_version_error(make, client, prefix, version):
    limiter = make("gcra", QUOTA, prefix=prefix)
    client.script_load(limiter.source)
    # Version 1: no operation, the parameters from ARGV[6]; 3: six-integer
    # replies and refund:<owed>; 4: stamps settled again and again. None is
    # answered any more.
    args = [version, T0, 1, 0, "", 200_000, 2_000_000, 10] if version == 1 else [
        version, T0, 1, 0, "", "check", 200_000, 2_000_000, 10]
    with pytest.raises(redis.exceptions.ResponseError, match=f"^ratelab: protocol version 5 expected, got {version}$"):
        client.evalsha(limiter.sha, 1, limiter.redis_key("k"), *args)
    assert client.exists(limiter.redis_key("k")) == 0


def test_a_replayed_receipt_gives_back_its_own_units_once(make, prefix):
    # A receipt serialized for another process (a job queue) can be loaded
    # any number of times: each load is a receipt of its own. The scripts
    # give an admission's units back once, whatever the replays
    # (lua/README.md, "What a replayed or forged stamp can do");
    # crates/tests/tests/redis/settle_bound.rs checks the same from Rust.
    second = 1_000_000
    clock = Clock(T0)
    gcra = make("gcra", Quota(1, second, 10), prefix=prefix, clock=clock)
    texts = [gcra.check("k").receipt.to_json() for _ in range(10)]
    assert gcra.peek("k", 0).remaining == 0
    # The third, replayed 50 times: its own unit back, once.
    answers = [gcra.refund(gcra.receipt_from_json(texts[2])).remaining for _ in range(50)]
    assert set(answers) == {1}
    # The last one's too.
    answers = [gcra.refund(gcra.receipt_from_json(texts[9])).remaining for _ in range(50)]
    assert set(answers) == {2}
    # Never past full capacity, however many stamps are forged.
    for s in range(20):
        forged = json.loads(texts[0])
        forged.update(cost=10, stamp_at=T0 + s * second, stamp_mark=s % 3)
        assert gcra.refund(gcra.receipt_from_json(forged)).remaining <= 10

    # A fixed window of 3 per second: likewise, and nothing for a window
    # that has ended.
    window = make("fixed-window", Quota.per_second(3), prefix=prefix, clock=clock)
    clock.now = T0 + 10 * second
    text = [window.check("w").receipt.to_json() for _ in range(3)][0]
    answers = [window.refund(window.receipt_from_json(text)).remaining for _ in range(50)]
    assert set(answers) == {1}
    clock.now = T0 + 11 * second
    for _ in range(3):
        assert window.check("w").allowed
    assert window.refund(window.receipt_from_json(text)).remaining == 0


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_one_receipt_delivered_thirty_times_lets_no_more_pass(make, prefix, name):
    # A job queue delivers one serialized receipt of a refunded job thirty
    # times, while other jobs check the same key (5 an hour): no more than
    # the 5 pass. Version 4's scripts let each delivery give a unit back.
    clock = Clock(T0)
    limiter = make(name, Quota(5, 3_600_000_000, 5), prefix=prefix, clock=clock)
    text = limiter.check("jobs").receipt.to_json()
    limiter.refund(limiter.receipt_from_json(text))
    passed = 0
    for _ in range(30):
        passed += limiter.check("jobs").allowed
        limiter.refund(limiter.receipt_from_json(text))
    assert passed == 5
