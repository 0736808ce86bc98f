package ratelab

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// FailurePolicy is what a check or a peek answers on an outage (a timeout,
// a failed connection, a cluster slot moving or down, an open breaker).
// Data errors are returned whatever it is (unless WithPolicyOnDataErrors);
// settlements and resets return the error whatever it is.
type FailurePolicy int

const (
	// FailError returns the error (ErrUnavailable): the caller decides.
	// The default, as in the Rust, Python and Node clients.
	FailError FailurePolicy = iota
	// FailOpen admits, as a fresh key would (Remaining = capacity − cost),
	// the decision marked Degraded, with an alert.
	FailOpen
	// FailClosed refuses, RetryAfter the breaker's remaining cool-down when
	// it is open, else the timeout; Degraded, with an alert.
	FailClosed
)

func (p FailurePolicy) String() string {
	switch p {
	case FailError:
		return "error"
	case FailOpen:
		return "allow"
	case FailClosed:
		return "deny"
	}
	return "unknown"
}

// Stats is what a limiter did, counted (Rust: ratelab_redis::Stats).
type Stats struct {
	// Answered: calls Redis answered.
	Answered uint64
	// Timeouts: calls whose caller gave up before Redis answered.
	Timeouts uint64
	// Errors: calls that failed on another outage (a connection refused or
	// lost, a cluster slot moving, a call that reached Redis after its
	// deadline).
	Errors uint64
	// DataErrors: calls that failed on a data error.
	DataErrors uint64
	// ScriptCalls: calls sent as a script (EVALSHA), answered or not.
	ScriptCalls uint64
	// ModuleCalls: calls sent to the native module (RATELAB.<ALGORITHM>).
	ModuleCalls uint64
	// Reloads: scripts loaded again after NOSCRIPT.
	Reloads uint64
	// CachedRefusals: refusals answered from the local cache.
	CachedRefusals uint64
	// ShortCircuited: calls answered without calling Redis, the breaker open.
	ShortCircuited uint64
	// BreakerOpened: times the breaker opened.
	BreakerOpened uint64
	// BreakerOpen: the breaker is open now.
	BreakerOpen bool
	// CoolDownLeft: the wait before an open breaker lets a probe through.
	CoolDownLeft time.Duration
	// ClockSamples: Redis TIME samples taken to place deadlines on Redis's
	// clock.
	ClockSamples uint64
	// QuotaMismatches: times another quota was found on a key this limiter
	// uses.
	QuotaMismatches uint64
	// LateAdmissionsRefunded: checks Redis admitted whose reply came after
	// their caller gave up, given back by their stamp as the reply came.
	LateAdmissionsRefunded uint64
	// LateRefundsFailed: such admissions whose refund failed (their charge
	// stands).
	LateRefundsFailed uint64
}

type counters struct {
	answered, timeouts, errors, dataErrors, scriptCalls, moduleCalls, reloads atomic.Uint64
	cachedRefusals, clockSamples, quotaMismatches, lateRefunded, lateFailed   atomic.Uint64
}

// Alert is one failure (or a quota mismatch), as the alert hook sees it.
type Alert struct {
	// Algorithm is the limiter's algorithm.
	Algorithm AlgorithmName
	// Err is what went wrong: an *Error (an outage or a data error) or a
	// *QuotaMismatch.
	Err error
	// Policy is what the limiter did about it; nil for a quota mismatch,
	// which changes no decision.
	Policy *FailurePolicy
	// Key is the user key of the call.
	Key string
}

// breaker: after threshold consecutive outages, Redis is not called for
// coolDown; then one call at a time probes it (a probe that takes longer
// than probeTimeout lets another through), and the first answer closes it.
// A threshold of 0 never opens.
type breaker struct {
	threshold    int
	coolDown     time.Duration
	probeTimeout time.Duration

	mu             sync.Mutex
	consecutive    int
	openUntil      time.Time // zero: closed
	probingUntil   time.Time
	opened         uint64
	shortCircuited uint64
}

type permit int

const (
	permitCall permit = iota
	permitProbe
	permitRefused
)

func (b *breaker) permit(now time.Time) (permit, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.openUntil.IsZero() {
		return permitCall, 0
	}
	if now.Before(b.openUntil) {
		b.shortCircuited++
		return permitRefused, b.openUntil.Sub(now)
	}
	if now.Before(b.probingUntil) {
		b.shortCircuited++
		return permitRefused, b.probingUntil.Sub(now)
	}
	b.probingUntil = now.Add(b.probeTimeout)
	return permitProbe, 0
}

// success: Redis answered (a decision or a data error: it is up).
func (b *breaker) success() {
	b.mu.Lock()
	b.consecutive = 0
	b.openUntil = time.Time{}
	b.probingUntil = time.Time{}
	b.mu.Unlock()
}

// failure: an outage.
func (b *breaker) failure(probe bool, now time.Time) {
	if b.threshold == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.consecutive++
	if probe || (b.openUntil.IsZero() && b.consecutive >= b.threshold) {
		b.openUntil = now.Add(b.coolDown)
		b.probingUntil = time.Time{}
		b.opened++
	}
}

func (b *breaker) state(now time.Time) (open bool, left time.Duration, opened, short uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.openUntil.IsZero() {
		open, left = true, max(0, b.openUntil.Sub(now))
	}
	return open, left, b.opened, b.shortCircuited
}

// alerts: every alert reaches the hook; a log record goes out at most once
// a second, with the count of those suppressed since, so that an outage
// does not flood the logs.
type alerts struct {
	hook   func(Alert)
	logger *slog.Logger

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (a *alerts) raise(alert Alert, stats Stats) {
	if a.hook != nil {
		a.hook(alert)
	}
	if a.logger == nil {
		return
	}
	a.mu.Lock()
	now := time.Now()
	if !a.last.IsZero() && now.Sub(a.last) < time.Second {
		a.suppressed++
		a.mu.Unlock()
		return
	}
	suppressed := a.suppressed
	a.last, a.suppressed = now, 0
	a.mu.Unlock()
	policy := "none"
	if alert.Policy != nil {
		policy = alert.Policy.String()
	}
	a.logger.LogAttrs(context.Background(), slog.LevelWarn, "ratelab: rate limiter failure",
		slog.String("algorithm", string(alert.Algorithm)), slog.String("error", alert.Err.Error()),
		slog.String("policy", policy), slog.Uint64("timeouts", stats.Timeouts),
		slog.Uint64("errors", stats.Errors), slog.Int("suppressed", suppressed))
}

// refusalCache remembers refusals: a key refused with RetryAfter d is
// refused again without a round trip until d has passed, for a request of
// the same cost. At most maxKeys keys. It only refuses what Redis would:
// nothing but time makes a refused request pass.
type refusalCache struct {
	maxKeys int
	mu      sync.Mutex
	entries map[string]refusal
}

type refusal struct {
	cost             uint64
	until, fullAt    int64
	limit, remaining uint64
}

func (c *refusalCache) lookup(key string, cost uint64, now int64) (refusal, bool) {
	if cost == 0 {
		return refusal{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.entries[key]
	if !ok {
		return refusal{}, false
	}
	if now >= r.until {
		delete(c.entries, key)
		return refusal{}, false
	}
	return r, r.cost == cost
}

func (c *refusalCache) forget(key string) {
	c.mu.Lock()
	delete(c.entries, key)
	c.mu.Unlock()
}

// remember: now was read before the request was sent, so Redis decided no
// earlier and now + retryAfter is never later than what it said.
func (c *refusalCache) remember(key string, now int64, r refusal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.maxKeys {
		for k, e := range c.entries {
			if e.until <= now {
				delete(c.entries, k)
			}
		}
		if len(c.entries) >= c.maxKeys {
			return
		}
	}
	c.entries[key] = r
}
