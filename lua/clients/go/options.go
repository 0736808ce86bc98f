package ratelab

import (
	"fmt"
	"log/slog"
	"time"
)

// The defaults of a limiter's options.
const (
	// DefaultTimeout bounds each call's exchange with Redis (the caller's
	// context may end it sooner).
	DefaultTimeout = 100 * time.Millisecond
	// DefaultConnectTimeout bounds setting up a connection (dial and
	// handshake) when a call finds none ready; it is not taken from the
	// call's timeout.
	DefaultConnectTimeout = time.Second
	// DefaultLateReplyGrace is how long a call's command stays in flight
	// after its caller gave up, so that a late admission is given back.
	DefaultLateReplyGrace = 5 * time.Second
	// DefaultBreakerThreshold is the consecutive outages that open the
	// breaker.
	DefaultBreakerThreshold = 5
	// DefaultBreakerCoolDown is how long an open breaker keeps Redis
	// uncalled before one probe.
	DefaultBreakerCoolDown = 500 * time.Millisecond
	// DefaultQuotaCheckEvery: every 100th check (and the first) records its
	// quota for its key.
	DefaultQuotaCheckEvery = 100
	// DefaultClientTTLSlack is the TTL slack with the caller's clock
	// (WithClock): keys outlive what the caller's clock says they need by
	// this much, since Redis expires them on its own.
	DefaultClientTTLSlack = time.Minute
)

// MaxTTLSlack is the most TTL slack the scripts take: 2^52 µs, the whole
// range of instants.
const MaxTTLSlack = time.Duration(1<<52) * time.Microsecond

// Backend is what runs a limiter's decisions on Redis.
type Backend int

const (
	// BackendAuto runs the native module's commands where the server has
	// them (RATELAB.PROTOCOL answers this client's version; on a cluster,
	// the module's command answered), the scripts otherwise; "missing" is
	// checked again every 30 s. The default.
	BackendAuto Backend = iota
	// BackendModule always runs the module: a server without it answers
	// every call with a data error saying so.
	BackendModule
	// BackendScripts always runs the Lua scripts (EVALSHA).
	BackendScripts
)

// Option configures a limiter (NewLimiter).
type Option func(*settings)

type settings struct {
	prefix             string
	clock              func() time.Time
	ttlSlack           *time.Duration
	timeout            time.Duration
	connectTimeout     time.Duration
	lateGrace          time.Duration
	failure            FailurePolicy
	policyOnDataErrors bool
	breakerThreshold   int
	breakerCoolDown    time.Duration
	alertHook          func(Alert)
	logger             *slog.Logger
	loggerSet          bool
	refusalKeys        int
	quotaCheckEvery    int
	backend            Backend
}

func defaults() settings {
	return settings{
		prefix:           DefaultPrefix,
		timeout:          DefaultTimeout,
		connectTimeout:   DefaultConnectTimeout,
		lateGrace:        DefaultLateReplyGrace,
		breakerThreshold: DefaultBreakerThreshold,
		breakerCoolDown:  DefaultBreakerCoolDown,
		quotaCheckEvery:  DefaultQuotaCheckEvery,
	}
}

// WithPrefix sets the key prefix (default "ratelab").
func WithPrefix(prefix string) Option { return func(s *settings) { s.prefix = prefix } }

// WithClock passes the caller's clock to the scripts as now (µs since the
// Unix epoch, UnixMicro) instead of Redis TIME: for tests and simulations,
// on an epoch every caller of a key shares.
func WithClock(clock func() time.Time) Option { return func(s *settings) { s.clock = clock } }

// WithTTLSlack keeps keys this much longer than their state needs (default
// 0 on Redis time, DefaultClientTTLSlack with WithClock); at most
// MaxTTLSlack, in whole milliseconds rounded up.
func WithTTLSlack(slack time.Duration) Option { return func(s *settings) { s.ttlSlack = &slack } }

// WithTimeout bounds each call's exchange with Redis (default
// DefaultTimeout); the caller's context deadline bounds it too, whichever
// comes first. 0 or less: only the context bounds it.
func WithTimeout(timeout time.Duration) Option { return func(s *settings) { s.timeout = timeout } }

// WithConnectTimeout bounds connection set-up when a call finds no
// connection ready (default DefaultConnectTimeout): the call's own timeout
// starts once one is, so that connecting to a healthy but busy Redis is
// not an outage. The caller's context bounds it too.
func WithConnectTimeout(timeout time.Duration) Option {
	return func(s *settings) { s.connectTimeout = timeout }
}

// WithLateReplyGrace is how long a command stays in flight after its caller
// gave up (default DefaultLateReplyGrace): an admission whose reply comes in
// that time is given back by its stamp at once.
func WithLateReplyGrace(grace time.Duration) Option {
	return func(s *settings) { s.lateGrace = grace }
}

// WithFailurePolicy sets what a check or a peek answers on an outage
// (default FailError).
func WithFailurePolicy(policy FailurePolicy) Option { return func(s *settings) { s.failure = policy } }

// WithPolicyOnDataErrors applies the failure policy to data errors too.
func WithPolicyOnDataErrors() Option { return func(s *settings) { s.policyOnDataErrors = true } }

// WithBreaker sets the circuit breaker: threshold consecutive outages open
// it (0: never) for coolDown (defaults 5 and 500 ms).
func WithBreaker(threshold int, coolDown time.Duration) Option {
	return func(s *settings) { s.breakerThreshold, s.breakerCoolDown = threshold, coolDown }
}

// WithAlertHook calls hook with every failure and quota mismatch (keep it
// quick: it runs on the call's goroutine, or on the one sending the call
// for a quota mismatch).
func WithAlertHook(hook func(Alert)) Option { return func(s *settings) { s.alertHook = hook } }

// WithLogger sets where a warning goes, at most once a second (default
// slog.Default(); nil: nowhere).
func WithLogger(logger *slog.Logger) Option {
	return func(s *settings) { s.logger, s.loggerSet = logger, true }
}

// WithRefusalCache remembers refusals locally, for at most maxKeys keys: a
// refused key is refused again without a round trip until its RetryAfter
// has passed (off by default).
func WithRefusalCache(maxKeys int) Option { return func(s *settings) { s.refusalKeys = maxKeys } }

// WithQuotaCheckEvery records this limiter's quota beside the key on the
// first check and every n-th after, and alerts when another quota was
// recorded there (default 100; 0: never).
func WithQuotaCheckEvery(n int) Option { return func(s *settings) { s.quotaCheckEvery = n } }

// WithBackend chooses scripts or the native module (default BackendAuto).
func WithBackend(backend Backend) Option { return func(s *settings) { s.backend = backend } }

func (s *settings) validate() error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
	}
	switch {
	case s.ttlSlack != nil && *s.ttlSlack < 0:
		return invalid("the TTL slack must not be negative, not %v", *s.ttlSlack)
	case s.ttlSlack != nil && *s.ttlSlack > MaxTTLSlack:
		return invalid("the TTL slack must be at most 2^52 µs (MaxTTLSlack), which the scripts refuse past, not %v", *s.ttlSlack)
	case s.timeout > time.Hour:
		return invalid("a timeout of %v is longer than an hour: pass 0 for none", s.timeout)
	case s.connectTimeout <= 0:
		return invalid("the connect timeout must be positive, not %v", s.connectTimeout)
	case s.lateGrace < 0:
		return invalid("the late reply grace must not be negative, not %v", s.lateGrace)
	case s.failure < FailError || s.failure > FailClosed:
		return invalid("unknown failure policy %d", s.failure)
	case s.breakerThreshold < 0:
		return invalid("the breaker threshold must not be negative, not %d", s.breakerThreshold)
	case s.breakerCoolDown < 0:
		return invalid("the breaker cool-down must not be negative, not %v", s.breakerCoolDown)
	case s.refusalKeys < 0:
		return invalid("the refusal cache's size must not be negative, not %d", s.refusalKeys)
	case s.quotaCheckEvery < 0:
		return invalid("quota check every must not be negative (0: never), not %d", s.quotaCheckEvery)
	case s.backend < BackendAuto || s.backend > BackendScripts:
		return invalid("unknown backend %d", s.backend)
	}
	return nil
}
