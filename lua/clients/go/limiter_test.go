package ratelab

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

var reference = PerSecond(5).WithBurst(10)

func TestTheReferenceTable(t *testing.T) {
	_, client := server(t)
	for _, name := range debts {
		t.Run(string(name), func(t *testing.T) {
			clock := newClock(T0)
			l := limiterOn(t, client, name, reference, clock.option())
			first, second := 0, 0
			waits := map[int64]bool{}
			for range 20 {
				d := must(t)(l.Check(background(), "table", 1))
				if d.Allowed {
					first++
				} else {
					waits[d.RetryAfterSeconds()] = true
				}
			}
			clock.advance(1_000_000)
			for range 10 {
				d := must(t)(l.Check(background(), "table", 1))
				if d.Allowed {
					second++
				} else {
					waits[d.RetryAfterSeconds()] = true
				}
			}
			if first != 10 || second != 5 || len(waits) != 1 || !waits[1] {
				t.Fatalf("%d of 20, then %d of 10, waits %v s; want 10, 5, {1}", first, second, waits)
			}
		})
	}
}

func TestTheReviewersCase(t *testing.T) {
	// GCRA 1 per second, burst 3: at t admit a, b, c and refund a; at t + 2 s
	// admit d, e, f and refund c: c gives nothing back, and a seventh is
	// refused.
	_, client := server(t)
	clock := newClock(T0)
	l := limiterOn(t, client, GCRA, PerSecond(1).WithBurst(3), clock.option())
	a := must(t)(l.Check(background(), "k", 1))
	must(t)(l.Check(background(), "k", 1))
	c := must(t)(l.Check(background(), "k", 1))
	must(t)(l.Refund(background(), a.Receipt))
	clock.advance(2 * second)
	for i := range 3 {
		if d := must(t)(l.Check(background(), "k", 1)); !d.Allowed {
			t.Fatalf("the %d-th at t + 2 s was refused", i+4)
		}
	}
	before := must(t)(l.Peek(background(), "k", 0)).Remaining
	if after := must(t)(l.Refund(background(), c.Receipt)).Remaining; after != before {
		t.Fatalf("c gave back %d", after-before)
	}
	if must(t)(l.Check(background(), "k", 1)).Allowed {
		t.Fatal("a seventh passed")
	}
}

func TestAFreshKeyOnTheRedisClock(t *testing.T) {
	_, client := server(t)
	for _, name := range Algorithms() {
		l := limiterOn(t, client, name, reference)
		d := must(t)(l.Check(background(), "fresh", 1))
		if !d.Allowed || d.Remaining != 9 || d.Limit != 10 || d.Receipt == nil {
			t.Fatalf("%s: %+v", name, d)
		}
		ttl := client.PTTL(background(), l.RedisKey("fresh")).Val()
		if ttl <= 0 || ttl > 4*time.Second {
			t.Fatalf("%s: the key's TTL is %v", name, ttl)
		}
		if l.Stats().ClockSamples != 1 {
			t.Fatalf("%s: %d clock samples", name, l.Stats().ClockSamples)
		}
	}
}

func TestACallerClockKeepsKeysASlackLonger(t *testing.T) {
	_, client := server(t)
	l := limiterOn(t, client, GCRA, reference, newClock(T0).option())
	must(t)(l.Check(background(), "k", 1))
	if ttl := client.PTTL(background(), l.RedisKey("k")).Val(); ttl < 60*time.Second || ttl > 61*time.Second {
		t.Fatalf("TTL %v, want the 60 s slack and the key's 200 ms", ttl)
	}
}

func TestAFlushedScriptIsLoadedAgain(t *testing.T) {
	_, client := server(t)
	l := limiterOn(t, client, GCRA, reference, WithBackend(BackendScripts))
	must(t)(l.Check(background(), "k", 1))
	client.ScriptFlush(background())
	if d := must(t)(l.Check(background(), "k", 1)); d.Remaining != 8 {
		t.Fatalf("%+v", d)
	}
	if s := l.Stats(); s.Reloads != 2 || s.ScriptCalls != 2 {
		// The first check loaded it too: a fresh server never saw it.
		t.Fatalf("%+v", s)
	}
}

func TestACostOverTheCapacityIsAnErrorNotARefusal(t *testing.T) {
	_, client := server(t)
	l := limiterOn(t, client, GCRA, reference)
	_, err := l.Check(background(), "k", 11)
	mustErr(t, err, ErrCostTooHigh)
	if !strings.Contains(err.Error(), "a cost of 11 can never fit: the capacity is 10") {
		t.Fatal(err)
	}
	_, err = l.Check(background(), "k", -1)
	mustErr(t, err, ErrInvalidArgument)
	if l.Stats().ScriptCalls+l.Stats().ModuleCalls != 0 {
		t.Fatal("a bad call reached Redis")
	}
}

func TestCorruptStateAndWrongTypesAreDataErrors(t *testing.T) {
	_, client := server(t)
	l := limiterOn(t, client, GCRA, reference, newClock(T0).option(), WithFailurePolicy(FailOpen))
	client.Set(background(), l.RedisKey("text"), "not a timestamp", 0)
	_, err := l.Check(background(), "text", 1)
	mustErr(t, err, ErrData)
	if !strings.HasPrefix(err.Error(), "ratelab: ratelab gcra: corrupt state at ") {
		t.Fatal(err)
	}
	client.LPush(background(), l.RedisKey("list"), "x")
	_, err = l.Check(background(), "list", 1)
	mustErr(t, err, ErrData)
	if !strings.Contains(err.Error(), "a list, not a string") || errors.Is(err, ErrUnavailable) {
		t.Fatal(err)
	}
}

func TestAnotherProtocolVersionGetsAClearError(t *testing.T) {
	_, client := server(t)
	l := limiterOn(t, client, TokenBucket, reference, newClock(T0).option())
	c, _ := l.newCall(opCheck, "k", 1)
	args := l.arguments(c, "")
	args[0] = 999
	err := client.EvalSha(background(), l.sha, []string{l.RedisKey("k")}, args...).Err()
	if err == nil || !strings.Contains(err.Error(), "NOSCRIPT") {
		client.ScriptLoad(background(), l.source)
	}
	client.ScriptLoad(background(), l.source)
	err = client.EvalSha(background(), l.sha, []string{l.RedisKey("k")}, args...).Err()
	want := "ratelab: protocol version " + itoa(ProtocolVersion()) + " expected, got 999"
	if err == nil || err.Error() != want {
		t.Fatalf("%v, want %q", err, want)
	}
	if classify(err).Kind != ErrData {
		t.Fatal("the version error is not a data error")
	}
	if client.Exists(background(), l.RedisKey("k")).Val() != 0 {
		t.Fatal("the key was written")
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestACallPastItsDeadlineChargesNothing(t *testing.T) {
	// A clock sample that puts Redis's clock an hour behind: the deadline
	// sent is an hour early, and the script starts after it.
	_, client := server(t)
	l := limiterOn(t, client, TokenBucket, reference, WithBreaker(0, 0))
	must(t)(l.Check(background(), "warm", 0))
	l.rclock.mu.Lock()
	l.rclock.offset -= 3_600_000_000
	l.rclock.taken = monotonicMicros()
	l.rclock.mu.Unlock()
	_, err := l.Check(background(), "k", 5)
	mustErr(t, err, ErrExpired)
	mustErr(t, err, ErrUnavailable)
	if !strings.Contains(err.Error(), "ratelab expired: ") || !strings.Contains(err.Error(), "nothing was charged") {
		t.Fatal(err)
	}
	if client.Exists(background(), l.RedisKey("k")).Val() != 0 {
		t.Fatal("an expired call wrote its key")
	}
	// The outage forgot the sample: the next call measures again.
	if d := must(t)(l.Check(background(), "k", 5)); d.Remaining != 5 {
		t.Fatalf("%+v", d)
	}
}

func TestAPeekDecidesAsACheckAndWritesNothing(t *testing.T) {
	_, client := server(t)
	for _, name := range Algorithms() {
		clock := newClock(T0)
		l := limiterOn(t, client, name, reference, clock.option())
		for i := range 14 {
			cost := 1 + i%3
			p := must(t)(l.Peek(background(), "k", cost))
			keys := client.Keys(background(), l.RedisKey("*")).Val()
			c := must(t)(l.Check(background(), "k", cost))
			c.Receipt = nil
			if p != c {
				t.Fatalf("%s, step %d: peek %+v, check %+v", name, i, p, c)
			}
			if i == 0 && len(keys) != 0 {
				t.Fatalf("%s: a peek wrote %v", name, keys)
			}
			clock.advance(70_000)
		}
	}
}

func TestReceiptsSettleAndRefundByTheProtocol(t *testing.T) {
	_, client := server(t)
	for _, name := range Algorithms() {
		t.Run(string(name), func(t *testing.T) {
			clock := newClock(T0)
			l := limiterOn(t, client, name, reference, clock.option())
			taken := must(t)(l.Check(background(), "k", 7))
			if taken.Receipt == nil || taken.Remaining != 3 {
				t.Fatalf("%+v", taken)
			}
			if at, mark := taken.Receipt.Stamp(); at == 0 && mark == 0 && name != FixedWindow && name != SlidingCounter {
				t.Fatalf("no stamp: %v", taken.Receipt)
			}
			// Settled to 3: 4 back.
			if d := must(t)(l.Settle(background(), taken.Receipt, 3)); d.Remaining != 7 || d.Receipt != nil {
				t.Fatalf("%+v", d)
			}
			_, err := l.Refund(background(), taken.Receipt)
			mustErr(t, err, ErrReceiptSpent)
			// A settlement above the cost charges the difference.
			two := must(t)(l.Check(background(), "k", 2))
			if d := must(t)(l.Settle(background(), two.Receipt, 5)); d.Remaining != 2 {
				t.Fatalf("settled 2 to 5: %+v", d)
			}
			// After a reset no receipt gives anything back.
			one := must(t)(l.Check(background(), "k", 1))
			if err := l.Reset(background(), "k"); err != nil {
				t.Fatal(err)
			}
			if d := must(t)(l.Refund(background(), one.Receipt)); d.Remaining != 10 {
				t.Fatalf("after a reset: %+v", d)
			}
			if d := must(t)(l.Check(background(), "k", 10)); !d.Allowed {
				t.Fatalf("a reset key refused its capacity: %+v", d)
			}
		})
	}
}

func TestAReceiptGoesBackOnlyToItsLimiterAndOnlyOnce(t *testing.T) {
	_, client := server(t)
	clock := newClock(T0)
	l := limiterOn(t, client, GCRA, reference, clock.option())
	other := limiterOn(t, client, GCRA, reference, clock.option())
	d := must(t)(l.Check(background(), "k", 4))
	_, err := other.Refund(background(), d.Receipt)
	mustErr(t, err, ErrForeignReceipt)
	if d.Receipt.Spent() {
		t.Fatal("a foreign settlement spent it")
	}
	_, err = l.Settle(background(), nil, 0)
	mustErr(t, err, ErrInvalidArgument)
	_, err = l.Settle(background(), d.Receipt, 11)
	mustErr(t, err, ErrCostTooHigh)
	if !d.Receipt.Spent() {
		t.Fatal("a settlement above the capacity left it unspent")
	}
	_, err = l.Refund(background(), d.Receipt)
	mustErr(t, err, ErrReceiptSpent)
	// Refusals, peeks, cost 0 and degraded decisions carry none.
	for _, cost := range []int{0, 10} {
		if d := must(t)(l.Check(background(), "k", cost)); d.Receipt != nil {
			t.Fatalf("cost %d: %+v", cost, d)
		}
	}
	if d := must(t)(l.Peek(background(), "k", 1)); d.Receipt != nil {
		t.Fatal("a peek has a receipt")
	}
}

func TestASerializedReceiptSettlesInAnotherLimiterOfTheSameQuota(t *testing.T) {
	_, client := server(t)
	clock := newClock(T0)
	opts := []Option{clock.option(), WithPrefix("shared-" + t.Name())}
	producer := limiterOn(t, client, GCRA, reference, opts...)
	worker := limiterOn(t, client, GCRA, reference, opts...)
	d := must(t)(producer.Check(background(), "job", 4))
	text, err := json.Marshal(d.Receipt)
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	_ = json.Unmarshal(text, &fields)
	if fields["ratelab_receipt"] != 1.0 || fields["key_hex"] != "6a6f62" || fields["cost"] != 4.0 || fields["fingerprint"] != "v3:gcra:200000,2000000,10" {
		t.Fatalf("%s", text)
	}
	r, err := worker.ReceiptFromJSON(text)
	if err != nil {
		t.Fatal(err)
	}
	if got := must(t)(worker.Refund(background(), r)); got.Remaining != 10 {
		t.Fatalf("%+v", got)
	}
	// Another quota, another prefix, garbage: refused, nothing sent.
	otherQuota := limiterOn(t, client, GCRA, PerSecond(5), opts...)
	if _, err := otherQuota.ReceiptFromJSON(text); !errors.Is(err, ErrForeignReceipt) {
		t.Fatal(err)
	}
	for _, bad := range []string{`{}`, `[]`, `nope`, `{"ratelab_receipt":2}`,
		strings.Replace(string(text), `"cost":4`, `"cost":0`, 1), strings.Replace(string(text), `"key_hex":"6a6f62"`, `"key_hex":"zz"`, 1),
		strings.Replace(string(text), `"cost":4`, `"cost":-1`, 1), strings.Replace(string(text), `"cost":4`, `"cost":4.5`, 1)} {
		if _, err := worker.ReceiptFromJSON([]byte(bad)); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

func TestAReplayedReceiptGivesBackItsOwnUnitsOnce(t *testing.T) {
	// A receipt serialized for another process can be loaded any number of
	// times: each load is a receipt of its own, and the scripts give an
	// admission's units back once, whatever the replays (lua/README.md,
	// "What a replayed or forged stamp can do"), as the Python and Node
	// clients' tests check.
	_, client := server(t)
	clock := newClock(T0)
	gcra := limiterOn(t, client, GCRA, PerSecond(1).WithBurst(10), clock.option())
	var texts [][]byte
	for range 10 {
		text, _ := json.Marshal(must(t)(gcra.Check(background(), "k", 1)).Receipt)
		texts = append(texts, text)
	}
	replay := func(l *Limiter, text []byte) int {
		r, err := l.ReceiptFromJSON(text)
		if err != nil {
			t.Fatal(err)
		}
		return must(t)(l.Refund(background(), r)).Remaining
	}
	for i := range 50 {
		if got := replay(gcra, texts[2]); got != 1 {
			t.Fatalf("the third's replay %d left %d, not its own unit back once", i, got)
		}
	}
	for range 50 {
		if got := replay(gcra, texts[9]); got != 2 {
			t.Fatalf("the last one's replays: %d", got)
		}
	}
	for s := range 20 {
		var forged map[string]any
		_ = json.Unmarshal(texts[0], &forged)
		forged["cost"], forged["stamp_at"], forged["stamp_mark"] = 10, T0+s*second, s%3
		text, _ := json.Marshal(forged)
		if got := replay(gcra, text); got > 10 {
			t.Fatalf("a forged stamp took the key to %d", got)
		}
	}
	// One receipt of a refunded job delivered thirty times while other jobs
	// check the key: no more pass than the burst, for every algorithm.
	for _, name := range Algorithms() {
		l := limiterOn(t, client, name, PerHour(5).WithBurst(5), clock.option())
		text, _ := json.Marshal(must(t)(l.Check(background(), "jobs", 1)).Receipt)
		replay(l, text)
		passed := 0
		for range 30 {
			if must(t)(l.Check(background(), "jobs", 1)).Allowed {
				passed++
			}
			replay(l, text)
		}
		if passed != 5 {
			t.Fatalf("%s: %d passed on a burst of 5", name, passed)
		}
	}
}

func slicesMax(xs []int) int {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
