package ratelab

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelab/ratelab/lua/clients/go/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// downClient is a client of a port where nothing listens: every call fails
// at once (connection refused).
func downClient(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + itoa(redistest.FreePort(t)), DialerRetries: 1})
	t.Cleanup(func() { c.Close() })
	return c
}

// settled waits until every call's goroutine of l has finished (a call
// whose caller gave up may still wait for its reply).
func settled(t *testing.T, l *Limiter) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for l.inFlight.Load() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls still in flight after 30 s", l.inFlight.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRedisDownFailsAndThePoliciesAnswer(t *testing.T) {
	client := downClient(t)
	var alerts []Alert
	var mu sync.Mutex
	hook := WithAlertHook(func(a Alert) { mu.Lock(); alerts = append(alerts, a); mu.Unlock() })
	l := limiterOn(t, client, GCRA, reference, WithBreaker(0, 0), hook)
	_, err := l.Check(background(), "k", 1)
	mustErr(t, err, ErrBackend)
	mustErr(t, err, ErrUnavailable)
	if errors.Is(err, ErrData) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatal(err)
	}
	open := limiterOn(t, client, GCRA, reference, WithBreaker(0, 0), WithFailurePolicy(FailOpen), hook)
	d := must(t)(open.Check(background(), "k", 3))
	if !d.Allowed || !d.Degraded || d.Remaining != 7 || d.Receipt != nil || d.ResetAfter != 2*time.Second {
		t.Fatalf("fail open: %+v", d)
	}
	closed := limiterOn(t, client, GCRA, reference, WithBreaker(0, 0), WithFailurePolicy(FailClosed), WithTimeout(250*time.Millisecond), hook)
	d = must(t)(closed.Peek(background(), "k", 1))
	if d.Allowed || !d.Degraded || d.RetryAfter != 250*time.Millisecond || d.RetryAfterSeconds() != 1 {
		t.Fatalf("fail closed: %+v", d)
	}
	// Settlements and resets have no policy: the error.
	if err := closed.Reset(background(), "k"); !errors.Is(err, ErrBackend) {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(alerts) != 3 || *alerts[1].Policy != FailOpen || alerts[2].Key != "k" || !errors.Is(alerts[0].Err, ErrBackend) {
		t.Fatalf("%+v", alerts)
	}
}

func TestAPausedRedisTimesOutAtTheCallersInstant(t *testing.T) {
	s, client := server(t)
	l := limiterOn(t, client, GCRA, reference, WithTimeout(100*time.Millisecond), WithBreaker(0, 0))
	warm(t, l, "warm", 0)
	s.Pause()
	_, err := l.Check(background(), "k", 1)
	mustErr(t, err, ErrTimeout)
	mustErr(t, err, context.DeadlineExceeded)
	// The caller's context gives up first: its own deadline.
	ctx, cancel := context.WithTimeout(background(), 30*time.Millisecond)
	defer cancel()
	_, err = limiterOn(t, client, GCRA, reference, WithBreaker(0, 0)).Check(ctx, "k", 1)
	mustErr(t, err, ErrTimeout)
	s.Resume()
	settled(t, l)
	if d := must(t)(l.Peek(background(), "k", 0)); d.Remaining != 10 {
		t.Fatalf("a check that timed out was charged: %+v", d)
	}
	if s := l.Stats(); s.Timeouts == 0 {
		t.Fatalf("%+v", s)
	}
}

func TestTheBreakerOpensAfterFiveOutagesThenOneProbeClosesIt(t *testing.T) {
	s, client := server(t)
	l := limiterOn(t, client, GCRA, reference, WithBreaker(5, time.Second), WithFailurePolicy(FailClosed))
	must(t)(l.Check(background(), "k", 1))
	s.Kill()
	for i := range 5 {
		if d := must(t)(l.Check(background(), "k", 1)); !d.Degraded {
			t.Fatalf("check %d after the kill: %+v", i, d)
		}
	}
	st := l.Stats()
	if !st.BreakerOpen || st.BreakerOpened != 1 || st.Errors != 5 {
		t.Fatalf("%+v", st)
	}
	d := must(t)(l.Check(background(), "k", 1))
	if !d.Degraded || d.RetryAfter <= 0 || d.RetryAfter > time.Second || l.Stats().ShortCircuited != 1 {
		t.Fatalf("short-circuited: %+v %+v", d, l.Stats())
	}
	_, err := limiterOn(t, client, GCRA, reference).Check(background(), "k", 1)
	mustErr(t, err, ErrUnavailable)
	s.Restart(t)
	time.Sleep(l.Stats().CoolDownLeft) // the cool-down: then one probe
	d = must(t)(l.Check(background(), "k", 1))
	if d.Degraded || !d.Allowed || d.Remaining != 9 {
		// A restart empties the key: 9 left after this one.
		t.Fatalf("the probe: %+v", d)
	}
	if l.Stats().BreakerOpen {
		t.Fatal("the probe's answer did not close the breaker")
	}
}

func TestAFailedProbeOpensItAgain(t *testing.T) {
	b := breaker{threshold: 2, coolDown: time.Second, probeTimeout: 100 * time.Millisecond}
	now := time.Unix(0, 0)
	b.failure(false, now)
	if p, _ := b.permit(now); p != permitCall {
		t.Fatal("opened after one failure")
	}
	b.failure(false, now)
	if p, wait := b.permit(now); p != permitRefused || wait != time.Second {
		t.Fatal("not open after two")
	}
	now = now.Add(time.Second)
	if p, _ := b.permit(now); p != permitProbe {
		t.Fatal("no probe after the cool-down")
	}
	if p, _ := b.permit(now); p != permitRefused {
		t.Fatal("two probes at once")
	}
	// A probe that takes longer than a call lets another go.
	if p, _ := b.permit(now.Add(100 * time.Millisecond)); p != permitProbe {
		t.Fatal("a lost probe kept the breaker shut")
	}
	b.failure(true, now.Add(100*time.Millisecond))
	if p, wait := b.permit(now.Add(100 * time.Millisecond)); p != permitRefused || wait != time.Second {
		t.Fatal("a failed probe did not open it again")
	}
	b.success()
	if p, _ := b.permit(now); p != permitCall {
		t.Fatal("an answer did not close it")
	}
	never := breaker{threshold: 0}
	for range 100 {
		never.failure(false, now)
	}
	if p, _ := never.permit(now); p != permitCall {
		t.Fatal("a threshold of 0 opened")
	}
}

func TestDataErrorsAreReturnedWhateverThePolicyAndKeepTheBreakerClosed(t *testing.T) {
	_, client := server(t)
	l := limiterOn(t, client, GCRA, reference, WithFailurePolicy(FailOpen), WithBreaker(1, time.Minute))
	client.LPush(background(), l.RedisKey("list"), "x")
	for range 3 {
		_, err := l.Check(background(), "list", 1)
		mustErr(t, err, ErrData)
	}
	if s := l.Stats(); s.BreakerOpen || s.DataErrors != 3 {
		t.Fatalf("%+v", s)
	}
	asked := limiterOn(t, client, GCRA, reference, WithFailurePolicy(FailClosed), WithPolicyOnDataErrors())
	client.LPush(background(), asked.RedisKey("list"), "x")
	if d := must(t)(asked.Check(background(), "list", 1)); d.Allowed || !d.Degraded {
		t.Fatalf("%+v", d)
	}
}

func TestStatsCountCallsReloadsAndClockSamples(t *testing.T) {
	_, client := server(t)
	l := limiterOn(t, client, TokenBucket, reference, WithBackend(BackendScripts))
	for range 3 {
		must(t)(l.Check(background(), "k", 1))
	}
	client.ScriptFlush(background())
	must(t)(l.Peek(background(), "k", 1))
	s := l.Stats()
	if s.Answered != 4 || s.ScriptCalls != 4 || s.Reloads != 2 || s.ClockSamples != 1 || s.ModuleCalls != 0 {
		t.Fatalf("%+v", s)
	}
}

func TestRefusalsAreCachedUntilTheirRetryAfter(t *testing.T) {
	_, client := server(t)
	clock := newClock(T0)
	l := limiterOn(t, client, GCRA, PerSecond(1).WithBurst(2), clock.option(), WithRefusalCache(100))
	must(t)(l.Check(background(), "k", 2))
	refused := must(t)(l.Check(background(), "k", 1))
	calls := l.Stats().ScriptCalls + l.Stats().ModuleCalls
	cached := must(t)(l.Check(background(), "k", 1))
	if cached.Allowed || l.Stats().CachedRefusals != 1 || l.Stats().ScriptCalls+l.Stats().ModuleCalls != calls {
		t.Fatalf("%+v %+v", cached, l.Stats())
	}
	if cached.RetryAfter != refused.RetryAfter {
		t.Fatalf("cached %v, Redis said %v", cached.RetryAfter, refused.RetryAfter)
	}
	// Another cost asks Redis; once the wait has passed, so does the same.
	must(t)(l.Check(background(), "k", 2))
	clock.advance(int64(refused.RetryAfter / time.Microsecond))
	if d := must(t)(l.Check(background(), "k", 1)); !d.Allowed {
		t.Fatalf("%+v", d)
	}
	if l.Stats().CachedRefusals != 1 {
		t.Fatal("a refusal past its wait came from the cache")
	}
}

func TestAQuotaMismatchOnASharedKeyIsLoud(t *testing.T) {
	_, client := server(t)
	var mismatches []*QuotaMismatch
	hook := WithAlertHook(func(a Alert) {
		var m *QuotaMismatch
		if errors.As(a.Err, &m) {
			mismatches = append(mismatches, m)
		}
	})
	shared := WithPrefix("shared-" + t.Name())
	ours := limiterOn(t, client, GCRA, reference, shared, WithQuotaCheckEvery(1), hook)
	theirs := limiterOn(t, client, GCRA, PerSecond(10), shared, WithQuotaCheckEvery(1))
	must(t)(theirs.Check(background(), "k", 1))
	d := must(t)(ours.Check(background(), "k", 1))
	if d.Remaining != 9 || len(mismatches) != 1 || mismatches[0].Theirs != "v3:gcra:100000,1000000,10" || ours.Stats().QuotaMismatches != 1 {
		t.Fatalf("%+v %+v", d, mismatches)
	}
	if got := client.Get(background(), "shared-"+t.Name()+":{k}:gcra:quota").Val(); got != "v3:gcra:200000,2000000,10" {
		t.Fatal(got)
	}
	// Peeks never record; by default one check in 100 does.
	sampled := limiterOn(t, client, GCRA, reference)
	for range 150 {
		must(t)(sampled.Peek(background(), "s", 1))
		must(t)(sampled.Check(background(), "s", 0))
	}
	if ttl := client.PTTL(background(), sampled.registryKey("s")).Val(); ttl <= 0 {
		t.Fatal("the first check recorded nothing")
	}
}

func TestBadOptionsAreClearErrors(t *testing.T) {
	_, client := server(t)
	cases := []struct {
		opt     Option
		message string
	}{
		{WithTTLSlack(-time.Second), "TTL slack must not be negative"},
		{WithTTLSlack(MaxTTLSlack + time.Millisecond), "at most 2^52 µs"},
		{WithTimeout(2 * time.Hour), "longer than an hour"},
		{WithConnectTimeout(0), "connect timeout must be positive"},
		{WithFailurePolicy(7), "unknown failure policy"},
		{WithBreaker(-1, 0), "breaker threshold"},
		{WithRefusalCache(-1), "refusal cache"},
		{WithQuotaCheckEvery(-1), "quota check every"},
		{WithBackend(9), "unknown backend"},
	}
	for _, c := range cases {
		_, err := NewLimiter(client, GCRA, reference, c.opt)
		if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), c.message) {
			t.Errorf("%v, want %q", err, c.message)
		}
	}
	if _, err := NewLimiter(nil, GCRA, reference); !errors.Is(err, ErrInvalidArgument) {
		t.Fatal(err)
	}
	l := limiterOn(t, client, GCRA, reference, WithClock(func() time.Time { return time.UnixMicro(-5) }))
	if _, err := l.Check(background(), "k", 1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatal(err)
	}
}

func TestASettlementDuringAnOutageFailsAndTheAdmissionStaysCharged(t *testing.T) {
	s, client := server(t)
	clock := newClock(T0)
	l := limiterOn(t, client, GCRA, reference, clock.option(), WithTimeout(200*time.Millisecond), WithBreaker(0, 0), WithFailurePolicy(FailOpen))
	d := warm(t, l, "k", 4)
	s.Pause()
	_, err := l.Refund(background(), d.Receipt)
	mustErr(t, err, ErrTimeout)
	if !d.Receipt.Spent() {
		t.Fatal("a failed settlement left its receipt unspent")
	}
	s.Resume()
	settled(t, l)
	// The refund was sent before the pause took the reply: a settlement
	// that ran gave back; one that did not kept the charge. Never more.
	if left := must(t)(l.Peek(background(), "k", 0)).Remaining; left != 6 && left != 10 {
		t.Fatalf("%d left", left)
	}
}

// After Redis restarts (every pooled connection dead), the limiter decides
// with Redis again at its next call: no stale connection fails a call, and
// the breaker does not stay open.
func TestAfterARestartEveryPooledConnectionIsReplaced(t *testing.T) {
	s := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 40, DialerRetries: 1})
	t.Cleanup(func() { client.Close() })
	l := limiterOn(t, client, GCRA, PerHour(1000), WithFailurePolicy(FailOpen), WithBreaker(5, 500*time.Millisecond))
	burst := func() (degraded int) {
		var wg sync.WaitGroup
		var n atomic.Int64
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if d := must(t)(l.Check(background(), "k"+itoa(i), 1)); d.Degraded {
					n.Add(1)
				}
			}()
		}
		wg.Wait()
		return int(n.Load())
	}
	if got := burst(); got != 0 {
		t.Fatalf("%d of 20 degraded before the restart", got)
	}
	if idle := client.PoolStats().IdleConns; idle < 10 {
		t.Fatalf("the pool holds %d idle connections; the test needs many", idle)
	}
	s.Restart(t)
	back := time.Now()
	// Sparse traffic, then a burst: every one decided by Redis.
	for i := range 3 {
		if d := must(t)(l.Check(background(), "sparse", 1)); d.Degraded {
			t.Fatalf("sparse check %d after the restart failed open (%+v)", i, l.Stats())
		}
	}
	if got := burst(); got != 0 {
		t.Fatalf("%d of 20 failed open after the restart (%+v)", got, l.Stats())
	}
	t.Logf("decided with Redis %v after it was back; %+v", time.Since(back), l.Stats())
	if s := l.Stats(); s.Errors+s.Timeouts != 0 || s.BreakerOpened != 0 {
		t.Fatalf("%+v", s)
	}
}

// The same with an outage the breaker saw: once Redis is back, the first
// call after the cool-down is decided by Redis, whatever the pool held.
func TestAfterAnOutageTheFirstProbeDecides(t *testing.T) {
	s := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 40, DialerRetries: 1})
	t.Cleanup(func() { client.Close() })
	l := limiterOn(t, client, GCRA, PerHour(1000), WithFailurePolicy(FailOpen), WithBreaker(5, 500*time.Millisecond))
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() { defer wg.Done(); must(t)(l.Check(background(), "k"+itoa(i), 1)) }()
	}
	wg.Wait()
	s.Kill()
	for range 6 {
		must(t)(l.Check(background(), "k", 1))
	}
	if !l.Stats().BreakerOpen {
		t.Fatalf("%+v", l.Stats())
	}
	s.Restart(t)
	time.Sleep(l.Stats().CoolDownLeft)
	if d := must(t)(l.Check(background(), "k", 1)); d.Degraded {
		t.Fatalf("the first call after the cool-down failed open: %+v", l.Stats())
	}
}

// Connecting to a busy but healthy Redis (here each new connection takes 2
// s to reach it) is not an outage: the call's timeout (1 s) starts once a
// connection is ready; the connect timeout bounds the set-up.
func TestConnectingToABusyRedisIsNotAnOutage(t *testing.T) {
	s := redistest.Start(t)
	proxy := redistest.StartProxy(t, s.Addr())
	proxy.SetConnectDelay(2 * time.Second)
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), PoolSize: 40})
	t.Cleanup(func() { client.Close() })
	clock := newClock(T0)
	l := limiterOn(t, client, TokenBucket, reference, clock.option(), WithTimeout(time.Second),
		WithConnectTimeout(20*time.Second), WithFailurePolicy(FailOpen))
	var admitted, degraded atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := must(t)(l.Check(background(), "cold", 1))
			if d.Degraded {
				degraded.Add(1)
			} else if d.Allowed {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if degraded.Load() != 0 || admitted.Load() != 10 {
		t.Fatalf("a cold burst of 20: %d admitted by Redis, %d failed open (%+v)", admitted.Load(), degraded.Load(), l.Stats())
	}
	// With no connect timeout of its own, a call's timeout would have
	// covered connecting: each of these would have failed open.
	proxy.SetConnectDelay(0)
	_, err := l.Check(background(), "cold", 11)
	mustErr(t, err, ErrCostTooHigh)
	// The connect timeout still bounds a set-up that never ends.
	proxy.SetConnectDelay(time.Hour)
	cold := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { cold.Close() })
	bounded := limiterOn(t, cold, TokenBucket, reference, WithConnectTimeout(300*time.Millisecond), WithBreaker(0, 0))
	_, err = bounded.Check(background(), "k", 1)
	mustErr(t, err, ErrTimeout)
}

// A check whose script ran, but whose reply came after its caller gave up
// (the network held it), is given back by its stamp as the reply comes.
func TestALateAdmissionIsGivenBackWhenItsReplyComes(t *testing.T) {
	s, direct := server(t)
	proxy := redistest.StartProxy(t, s.Addr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { client.Close() })
	clock := newClock(T0)
	opts := []Option{clock.option(), WithPrefix("late-" + t.Name())}
	l := limiterOn(t, client, GCRA, reference, append(opts, WithTimeout(200*time.Millisecond), WithBreaker(0, 0))...)
	watcher := limiterOn(t, direct, GCRA, reference, opts...)
	warm(t, l, "warm", 1)
	proxy.Hold()
	_, err := l.Check(background(), "k", 3)
	mustErr(t, err, ErrTimeout)
	// Redis ran it: the key is charged while the reply is held.
	if left := must(t)(watcher.Peek(background(), "k", 0)).Remaining; left != 7 {
		t.Fatalf("the held check left %d", left)
	}
	proxy.Release()
	settled(t, l)
	if left := must(t)(watcher.Peek(background(), "k", 0)).Remaining; left != 10 {
		t.Fatalf("the late admission was not given back: %d left (%+v)", left, l.Stats())
	}
	if st := l.Stats(); st.LateAdmissionsRefunded != 1 || st.LateRefundsFailed != 0 || st.Timeouts != 1 {
		t.Fatalf("%+v", st)
	}
}

// Checks are started all through stalls of a real Redis (DEBUG SLEEP from
// another connection, or SIGSTOP), each on its own key with a 50 ms
// timeout; once every reply is in, each key holds exactly what its caller
// was told: one unit for an admission, nothing for a timeout.
func TestACheckThatTimedOutIsNeverCharged(t *testing.T) {
	for _, how := range []string{"debug-sleep", "sigstop"} {
		t.Run(how, func(t *testing.T) {
			s := redistest.Start(t, "--enable-debug-command", "yes")
			direct := s.Client(t)
			client := redis.NewClient(&redis.Options{Addr: s.Addr(), PoolSize: 64})
			t.Cleanup(func() { client.Close() })
			clock := newClock(T0)
			opts := []Option{clock.option(), WithPrefix("stall-" + how)}
			l := limiterOn(t, client, GCRA, PerHour(100), append(opts, WithTimeout(50*time.Millisecond), WithBreaker(0, 0))...)
			watcher := limiterOn(t, direct, GCRA, PerHour(100), opts...)
			stalls := redis.NewClient(&redis.Options{Addr: s.Addr()})
			t.Cleanup(func() { stalls.Close() })
			for i := range 40 {
				warm(t, l, "warm"+itoa(i), 0)
			}
			told := map[string]bool{}
			var mu sync.Mutex
			rng := rand.New(rand.NewPCG(1, 2))
			for round := range 8 {
				var wg sync.WaitGroup
				for i := range 8 {
					key := "r" + itoa(round) + "-" + itoa(i)
					offset := time.Duration(rng.IntN(40)) * time.Millisecond
					wg.Add(1)
					go func() {
						defer wg.Done()
						time.Sleep(offset)
						d, err := l.Check(background(), key, 1)
						if err != nil && !errors.Is(err, ErrUnavailable) {
							t.Error(err)
						}
						mu.Lock()
						told[key] = err == nil && d.Allowed
						mu.Unlock()
					}()
				}
				time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
				if how == "sigstop" {
					s.Pause()
					time.Sleep(150 * time.Millisecond)
					s.Resume()
				} else {
					if err := stalls.Do(background(), "DEBUG", "SLEEP", "0.15").Err(); err != nil {
						t.Fatal(err)
					}
				}
				wg.Wait()
			}
			settled(t, l)
			var admitted, timedOut int
			for key, allowed := range told {
				left := must(t)(watcher.Peek(background(), key, 0)).Remaining
				want := 100
				if allowed {
					want, admitted = 99, admitted+1
				} else {
					timedOut++
				}
				if left != want {
					t.Errorf("%s: its caller was told allowed=%v, the key holds %d", key, allowed, 100-left)
				}
			}
			st := l.Stats()
			t.Logf("%s: %d admitted, %d timed out; %d late admissions given back", how, admitted, timedOut, st.LateAdmissionsRefunded)
			if timedOut == 0 || st.LateRefundsFailed != 0 {
				t.Fatalf("the stalls timed nothing out (%+v)", st)
			}
		})
	}
}
