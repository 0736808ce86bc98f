package ratelab

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Limiter is one algorithm on one quota, any number of keys, state on
// Redis, deciding as the Rust, Python and Node clients do on the same keys
// (lua/README.md). Safe for concurrent use; make one per algorithm and
// quota, and share it.
type Limiter struct {
	client    redis.UniversalClient
	multiNode bool // a cluster or a ring: keys live on several nodes

	algorithm     Algorithm
	quota         Quota
	prefix        string
	keySuffix     string
	source, sha   string
	moduleCommand string
	peekCommand   string

	clock              func() time.Time
	ttlSlackMs         uint64
	timeout            time.Duration
	connectTimeout     time.Duration
	lateGrace          time.Duration
	failure            FailurePolicy
	policyOnDataErrors bool
	backend            Backend
	quotaCheckEvery    uint64
	// maxWait is the longest wait a reply may carry: the quota's longest,
	// plus 1 s and the slack (the scripts accept stored instants that far
	// ahead of now).
	maxWait uint64

	breaker   breaker
	alerts    alerts
	counters  counters
	refusals  *refusalCache
	checks    atomic.Uint64
	rclock    redisClock
	detection detection
	peekTwin  detection
	// inFlight counts the calls' goroutines still running (a call whose
	// caller gave up may still be waiting for its reply).
	inFlight atomic.Int64
}

// NewLimiter is a limiter of algorithm name on quota, on client: a
// *redis.Client (NewClient, or NewFailoverClient for Sentinel), a
// *redis.ClusterClient (NewClusterClient, NewFailoverClusterClient) or a
// *redis.Ring. It does no I/O. An invalid quota is an error wrapping
// ErrInvalidQuota; an unknown algorithm or a bad option, ErrInvalidArgument.
//
// Recommended client settings: the limiter bounds each call itself, so the
// client's own defaults do (go-redis: DialTimeout 5 s, ReadTimeout 5 s); a
// MinIdleConns of a few keeps connections warm.
func NewLimiter(client redis.UniversalClient, name AlgorithmName, quota Quota, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: no Redis client", ErrInvalidArgument)
	}
	s := defaults()
	for _, opt := range opts {
		opt(&s)
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	algorithm, err := NewAlgorithm(name, quota)
	if err != nil {
		return nil, err
	}
	source, _ := Script(name)
	slack := time.Duration(0)
	if s.clock != nil {
		// Redis expires keys on its own clock: a caller's clock may differ.
		slack = DefaultClientTTLSlack
	}
	if s.ttlSlack != nil {
		slack = *s.ttlSlack
	}
	slackMs := uint64((slack + time.Millisecond - 1) / time.Millisecond)
	logger := slog.Default()
	if s.loggerSet {
		logger = s.logger
	}
	probeTimeout := s.timeout
	if probeTimeout <= 0 {
		probeTimeout = time.Second
	}
	l := &Limiter{
		client:             client,
		algorithm:          algorithm,
		quota:              quota,
		prefix:             s.prefix,
		keySuffix:          algorithm.KeySuffix(),
		source:             source,
		sha:                ScriptSHA(source),
		moduleCommand:      algorithm.ModuleCommand(),
		peekCommand:        algorithm.ModuleCommand() + "_RO",
		clock:              s.clock,
		ttlSlackMs:         slackMs,
		timeout:            max(0, s.timeout),
		connectTimeout:     s.connectTimeout,
		lateGrace:          s.lateGrace,
		failure:            s.failure,
		policyOnDataErrors: s.policyOnDataErrors,
		backend:            s.backend,
		quotaCheckEvery:    uint64(s.quotaCheckEvery),
		maxWait:            algorithm.MaxWaitMicros + 1_000_000 + slackMs*1000,
		// A probe may take as long as a call: then another caller may probe.
		breaker: breaker{threshold: s.breakerThreshold, coolDown: s.breakerCoolDown, probeTimeout: probeTimeout},
		alerts:  alerts{hook: s.alertHook, logger: logger},
	}
	switch client.(type) {
	case *redis.ClusterClient, *redis.Ring:
		l.multiNode = true
	}
	if s.refusalKeys > 0 {
		l.refusals = &refusalCache{maxKeys: s.refusalKeys, entries: map[string]refusal{}}
	}
	return l, nil
}

// Algorithm is the algorithm and its parameters.
func (l *Limiter) Algorithm() Algorithm { return l.algorithm }

// Quota is the limiter's quota.
func (l *Limiter) Quota() Quota { return l.quota }

// RedisKey is the Redis key holding key's state.
func (l *Limiter) RedisKey(key string) string { return RedisKey(l.prefix, key, l.keySuffix) }

// registryKey is the quota registry's key for key: the state key's hash
// tag (its cluster slot), then "<code>:quota".
func (l *Limiter) registryKey(key string) string {
	state := l.RedisKey(key)
	return state[:len(state)-len(l.keySuffix)] + l.algorithm.Code + ":quota"
}

// Allow is Check of cost 1.
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.Check(ctx, key, 1)
}

// Check decides a request of weight cost for key, all or nothing; cost 0
// reports without consuming. One round trip (none for a cached refusal or
// an open breaker), plus a TIME sample when the clock's is stale.
//
// The caller gives up at its context's deadline or after the limiter's
// timeout, whichever is first: the script is sent that instant on Redis's
// clock as its deadline, and refuses to run after it. A check whose reply
// comes after its caller gave up is given back by its stamp as the reply
// comes (see the README): a check that timed out is never charged.
//
// An admission of a cost above 0 carries its receipt (Decision.Receipt):
// give it to Settle or Refund once what the request really counts for is
// known, or drop it to keep the charge.
//
// Errors: ErrCostTooHigh, ErrInvalidArgument, ErrData, and under FailError
// the outages (ErrUnavailable: ErrTimeout, ErrBackend, ErrExpired,
// ErrCircuitOpen).
func (l *Limiter) Check(ctx context.Context, key string, cost int) (Decision, error) {
	c, err := l.start(opCheck, key, cost)
	if err != nil {
		return Decision{}, err
	}
	return l.decide(ctx, c)
}

// Peek is the decision a Check of cost would get now, writing nothing: a
// check at the same instant, with nothing consumed in between, decides the
// same. The refusal cache is neither read nor filled.
func (l *Limiter) Peek(ctx context.Context, key string, cost int) (Decision, error) {
	c, err := l.start(opPeek, key, cost)
	if err != nil {
		return Decision{}, err
	}
	return l.decide(ctx, c)
}

// Settle settles the admission receipt stands for: it finally counts for
// actual units instead of its cost. Less gives the difference back, only
// what the key provably still holds of it; more charges the difference as
// debt later requests wait out, whatever the room. Never takes the key
// above its capacity. Answers what a Peek of cost 0 would after it.
//
// The receipt is spent by the call, whatever happens to it: a second use
// is ErrReceiptSpent. ErrForeignReceipt for another limiter's receipt (it
// stays unspent); ErrCostTooHigh for an actual above the capacity (spent:
// the admission counts as charged); on an outage the error, whatever the
// failure policy (the admission counts as charged).
func (l *Limiter) Settle(ctx context.Context, receipt *Receipt, actual int) (Decision, error) {
	c, err := l.startSettle(receipt, actual)
	if err != nil {
		return Decision{}, err
	}
	return l.decide(ctx, c)
}

// Refund gives back what the admission receipt stands for still holds (a
// request that should not count): Settle to 0.
func (l *Limiter) Refund(ctx context.Context, receipt *Receipt) (Decision, error) {
	return l.Settle(ctx, receipt, 0)
}

// Reset puts key back to full capacity, as if never seen; no receipt
// issued for it before gives anything back afterwards (a key that holds
// something a receipt could claim keeps a tombstone until none could). On
// an outage the error, whatever the failure policy.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	c, err := l.start(opReset, key, 0)
	if err != nil {
		return err
	}
	_, err = l.decide(ctx, c)
	return err
}

// ReceiptFromJSON loads a receipt marshalled by json.Marshal (here or in
// another process: a job queue's worker, in any client's language) as a
// receipt of this limiter, usable once. It must name this limiter's
// prefix, algorithm and quota (else ErrForeignReceipt); a malformed one is
// ErrInvalidArgument. Loading the same JSON again gives another receipt:
// the scripts bound what replays give back.
func (l *Limiter) ReceiptFromJSON(data []byte) (*Receipt, error) {
	fields, key, err := parseReceipt(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	ours := l.algorithm.FingerprintInput()
	if fields.Prefix != l.prefix || fields.Fingerprint != ours {
		return nil, newError(ErrForeignReceipt, nil, "a receipt of another limiter (prefix %q, %s); this one is prefix %q, %s",
			fields.Prefix, fields.Fingerprint, l.prefix, ours)
	}
	if fields.Cost > l.algorithm.Capacity {
		return nil, fmt.Errorf("%w: not a receipt of this limiter: a cost of %d is above its capacity", ErrInvalidArgument, fields.Cost)
	}
	return &Receipt{issuer: l, key: key, cost: fields.Cost, stampAt: fields.StampAt, stampMark: fields.StampMark}, nil
}

// Stats is what this limiter has done so far.
func (l *Limiter) Stats() Stats {
	open, left, opened, short := l.breaker.state(time.Now())
	c := &l.counters
	return Stats{
		Answered: c.answered.Load(), Timeouts: c.timeouts.Load(), Errors: c.errors.Load(),
		DataErrors: c.dataErrors.Load(), ScriptCalls: c.scriptCalls.Load(), ModuleCalls: c.moduleCalls.Load(),
		Reloads: c.reloads.Load(), CachedRefusals: c.cachedRefusals.Load(), ShortCircuited: short,
		BreakerOpened: opened, BreakerOpen: open, CoolDownLeft: left, ClockSamples: c.clockSamples.Load(),
		QuotaMismatches: c.quotaMismatches.Load(), LateAdmissionsRefunded: c.lateRefunded.Load(),
		LateRefundsFailed: c.lateFailed.Load(),
	}
}

func (l *Limiter) String() string {
	return fmt.Sprintf("ratelab.Limiter(%s, %v, prefix %q, timeout %v, on failure %v)",
		l.algorithm.Name, l.quota, l.prefix, l.timeout, l.failure)
}

// call is one call in progress.
type call struct {
	op       op
	key      string
	redisKey string
	// cost is the request's; a settlement's: the cost the admission was
	// charged; a reset's: 0.
	cost                       uint64
	actual, stampAt, stampMark uint64
	now                        *uint64 // the caller's clock, µs
	localNow                   int64   // the refusal cache's clock
	probe                      bool
	registry                   bool
	giveUp                     time.Time // zero: never
}

func (l *Limiter) start(o op, key string, cost int) (*call, error) {
	if cost < 0 || uint64(cost) > 0xFFFFFFFF {
		return nil, fmt.Errorf("%w: cost must be an integer from 0 to 2^32 - 1, not %d", ErrInvalidArgument, cost)
	}
	if uint64(cost) > l.algorithm.Capacity {
		return nil, newError(ErrCostTooHigh, nil, "a cost of %d can never fit: the capacity is %d", cost, l.algorithm.Capacity)
	}
	c, err := l.newCall(o, key, uint64(cost))
	if err != nil {
		return nil, err
	}
	if o == opCheck && l.quotaCheckEvery > 0 {
		c.registry = (l.checks.Add(1)-1)%l.quotaCheckEvery == 0
	}
	return c, nil
}

func (l *Limiter) startSettle(r *Receipt, actual int) (*call, error) {
	if r == nil {
		return nil, fmt.Errorf("%w: Settle and Refund take the receipt of an admission (Decision.Receipt), not nil: only a "+
			"check Redis admitted with a cost above 0 has one; a refusal, a peek, a cost of 0 and a decision the failure "+
			"policy made (Degraded: nothing was charged on Redis) have none, and there is nothing to settle", ErrInvalidArgument)
	}
	if r.issuer != l {
		return nil, newError(ErrForeignReceipt, nil, "a receipt of another limiter (prefix %q, %s): only the limiter whose "+
			"check issued it settles it (another process: json.Marshal it and load it there with ReceiptFromJSON)",
			r.issuer.prefix, r.issuer.algorithm.FingerprintInput())
	}
	if actual < 0 || uint64(actual) > 0xFFFFFFFF {
		return nil, fmt.Errorf("%w: actual must be an integer from 0 to 2^32 - 1, not %d", ErrInvalidArgument, actual)
	}
	if !r.spent.CompareAndSwap(false, true) {
		return nil, newError(ErrReceiptSpent, nil, "this receipt (key %q, cost %d) was settled or refunded already: "+
			"an admission is settled once", truncate(r.key, 64), r.cost)
	}
	if uint64(actual) > l.algorithm.Capacity {
		return nil, newError(ErrCostTooHigh, nil, "a settlement to %d units can never fit: the capacity is %d "+
			"(the receipt is spent; the admission counts as charged)", actual, l.algorithm.Capacity)
	}
	c, err := l.newCall(opSettle, r.key, r.cost)
	if err != nil {
		return nil, err
	}
	c.actual, c.stampAt, c.stampMark = uint64(actual), r.stampAt, r.stampMark
	return c, nil
}

func (l *Limiter) newCall(o op, key string, cost uint64) (*call, error) {
	c := &call{op: o, key: key, redisKey: l.RedisKey(key), cost: cost, localNow: monotonicMicros()}
	if l.clock != nil {
		now := l.clock().UnixMicro()
		if now < 0 {
			return nil, fmt.Errorf("%w: the clock answered %d µs since the epoch, before it", ErrInvalidArgument, now)
		}
		clamped := min(uint64(now), 1<<52)
		c.now, c.localNow = &clamped, int64(clamped)
	}
	return c, nil
}

// arguments is ARGV: version, now or "", cost, slack, deadline or "", the
// operation, the algorithm's parameters.
func (l *Limiter) arguments(c *call, deadline any) []any {
	var now any = ""
	if c.now != nil {
		now = *c.now
	}
	args := []any{ProtocolVersion(), now, c.cost, l.ttlSlackMs, deadline, encodeOp(c.op, c.actual, c.stampAt, c.stampMark)}
	for _, p := range l.algorithm.Params {
		args = append(args, p)
	}
	return args
}

func (l *Limiter) decide(ctx context.Context, c *call) (Decision, error) {
	if err := ctx.Err(); err != nil {
		return Decision{}, newError(ErrTimeout, err, "the caller's context ended before the call")
	}
	if l.refusals != nil {
		switch c.op {
		case opCheck:
			if r, ok := l.refusals.lookup(c.key, c.cost, c.localNow); ok {
				l.counters.cachedRefusals.Add(1)
				return Decision{Limit: int(r.limit), Remaining: int(r.remaining), RetryAfter: micros(uint64(r.until - c.localNow)),
					ResetAfter: micros(uint64(max(0, r.fullAt-c.localNow)))}, nil
			}
		case opSettle, opReset:
			l.refusals.forget(c.key)
		}
	}
	switch p, wait := l.breaker.permit(time.Now()); p {
	case permitRefused:
		err := newError(ErrCircuitOpen, nil, "the rate limiter backend is failing; next attempt in %v", wait.Round(time.Millisecond))
		err.RetryAfter = wait
		return l.onFailure(c, err)
	case permitProbe:
		c.probe = true
	}
	reply, err := l.exchange(ctx, c)
	if err == nil {
		var d Decision
		var at, mark uint64
		if d, at, mark, err = l.validate(reply, c.op, c.cost, c.now); err == nil {
			return l.answered(c, d, at, mark), nil
		}
	}
	return l.onFailure(c, l.failed(c, err))
}

func (l *Limiter) answered(c *call, d Decision, at, mark uint64) Decision {
	l.breaker.success()
	l.counters.answered.Add(1)
	if c.op == opCheck && !d.Allowed && l.refusals != nil {
		l.refusals.remember(c.key, c.localNow, refusal{cost: c.cost, until: c.localNow + int64(d.RetryAfter/time.Microsecond),
			fullAt: c.localNow + int64(d.ResetAfter/time.Microsecond), limit: uint64(d.Limit), remaining: uint64(d.Remaining)})
	}
	if c.op == opCheck && c.cost > 0 && d.Allowed {
		d.Receipt = &Receipt{issuer: l, key: c.key, cost: c.cost, stampAt: at, stampMark: mark}
	}
	return d
}

// failed classifies and counts a call's error.
func (l *Limiter) failed(c *call, err error) *Error {
	e := classify(err)
	switch {
	case e.Kind == ErrTimeout:
		l.counters.timeouts.Add(1)
	case e.Kind == ErrData:
		l.counters.dataErrors.Add(1)
	default:
		l.counters.errors.Add(1)
	}
	if isOutage(e.Kind) {
		l.breaker.failure(c.probe, time.Now())
		// A reconnection may reach another server: measure its clock again.
		l.rclock.forget()
	} else {
		// Redis answered: it is up, whatever it said.
		l.breaker.success()
	}
	return e
}

// onFailure is the failure policy's answer for a check or a peek (after an
// alert), or the error. Settlements and resets return the error: there is
// nothing to give back on a store that is not there.
func (l *Limiter) onFailure(c *call, err *Error) (Decision, error) {
	if c.op == opSettle || c.op == opReset {
		return Decision{}, err
	}
	policy := FailError
	if isOutage(err.Kind) || l.policyOnDataErrors {
		policy = l.failure
	}
	l.alerts.raise(Alert{Algorithm: l.algorithm.Name, Err: err, Policy: &policy, Key: c.key}, l.Stats())
	capacity := int(l.algorithm.Capacity)
	switch policy {
	case FailOpen:
		// As a fresh key would answer: full iff nothing is missing.
		var reset time.Duration
		if c.cost > 0 {
			reset = micros(max(1, l.algorithm.MaxWaitMicros))
		}
		return Decision{Allowed: true, Limit: capacity, Remaining: capacity - int(c.cost), ResetAfter: reset, Degraded: true}, nil
	case FailClosed:
		// An open breaker says when Redis is tried again; else the next
		// check may find it back after a timeout at most.
		wait := err.RetryAfter
		if err.Kind != ErrCircuitOpen || wait <= 0 {
			wait = l.timeout
			if wait <= 0 {
				wait = time.Second
			}
		}
		wait = max(time.Microsecond, wait.Truncate(time.Microsecond))
		return Decision{Limit: capacity, RetryAfter: wait, ResetAfter: wait, Degraded: true}, nil
	}
	return Decision{}, err
}

// A call's command runs on a goroutine of its own, on a context that
// outlives the caller's give-up instant by the late reply grace: the
// caller is answered at its instant, and a reply that comes later is still
// read, so that an admission its caller never learned of is given back.
type flight struct {
	state atomic.Int32
	done  chan result
}

type result struct {
	reply any
	err   error
}

const (
	inFlight int32 = iota
	delivered
	abandoned
)

// exchange runs a call on Redis: connection set-up first (its own
// timeout), then the call, which its caller waits for until it gives up.
func (l *Limiter) exchange(ctx context.Context, c *call) (any, error) {
	if err := l.connect(ctx, c.redisKey); err != nil {
		return nil, err
	}
	// The call's own timeout starts once a connection is ready.
	if l.timeout > 0 {
		c.giveUp = time.Now().Add(l.timeout)
	}
	if deadline, ok := ctx.Deadline(); ok && (c.giveUp.IsZero() || deadline.Before(c.giveUp)) {
		c.giveUp = deadline
	}
	opCtx, cancel := context.WithoutCancel(ctx), context.CancelFunc(func() {})
	if !c.giveUp.IsZero() {
		opCtx, cancel = context.WithDeadline(opCtx, c.giveUp.Add(l.lateGrace))
	}
	f := &flight{done: make(chan result, 1)}
	l.inFlight.Add(1)
	go func() {
		defer l.inFlight.Add(-1)
		defer cancel()
		reply, err := l.flow(opCtx, c, f)
		if f.state.CompareAndSwap(inFlight, delivered) {
			f.done <- result{reply, err}
			return
		}
		l.late(c, reply, err)
	}()
	var expired <-chan time.Time
	if !c.giveUp.IsZero() {
		timer := time.NewTimer(time.Until(c.giveUp))
		defer timer.Stop()
		expired = timer.C
	}
	select {
	case r := <-f.done:
		return r.reply, r.err
	case <-expired:
	case <-ctx.Done():
	}
	if !f.state.CompareAndSwap(inFlight, abandoned) {
		r := <-f.done
		return r.reply, r.err
	}
	cause := ctx.Err()
	if cause == nil {
		cause = context.DeadlineExceeded
	}
	return nil, newError(ErrTimeout, cause, "the rate limiter backend did not answer in time (%v)", l.describeTimeout(ctx))
}

func (l *Limiter) describeTimeout(ctx context.Context) string {
	if ctx.Err() != nil {
		return "the caller's context ended"
	}
	return fmt.Sprintf("timeout %v", l.timeout)
}

// flow is one call's commands: a TIME sample when the clock's is stale,
// the quota registry when due, then the script or the module's command.
func (l *Limiter) flow(ctx context.Context, c *call, f *flight) (any, error) {
	var deadline any = ""
	if !c.giveUp.IsZero() {
		if !l.rclock.fresh(monotonicMicros()) {
			if err := l.sampleTime(ctx); err != nil {
				return nil, err
			}
		}
		if d, ok := l.rclock.deadline(monotonicAt(c.giveUp), monotonicMicros()); ok {
			deadline = d
		}
	}
	if c.registry {
		l.recordQuota(ctx, c)
	}
	if f.state.Load() == abandoned || (!c.giveUp.IsZero() && !time.Now().Before(c.giveUp)) {
		// The script would answer "expired": spare Redis the call.
		return nil, newError(ErrTimeout, context.DeadlineExceeded, "the rate limiter backend did not answer in time")
	}
	return l.invoke(ctx, c.redisKey, l.arguments(c, deadline), c.op == opPeek)
}

// late handles the reply of a call whose caller gave up: an admission is
// given back by its stamp at once (a refund's deadline is none: giving back
// late can only give back).
func (l *Limiter) late(c *call, reply any, err error) {
	if err != nil || c.op != opCheck || c.cost == 0 {
		return
	}
	d, at, mark, verr := l.validate(reply, c.op, c.cost, c.now)
	if verr != nil || !d.Allowed {
		return
	}
	refund, cerr := l.newCall(opSettle, c.key, c.cost)
	if cerr != nil {
		refund = &call{op: opSettle, key: c.key, redisKey: c.redisKey, cost: c.cost, now: c.now}
	}
	refund.stampAt, refund.stampMark = at, mark
	ctx, cancel := context.WithTimeout(context.Background(), max(l.timeout, time.Second)+l.lateGrace)
	defer cancel()
	if _, err := l.invoke(ctx, refund.redisKey, l.arguments(refund, ""), false); err != nil {
		l.counters.lateFailed.Add(1)
		l.alerts.raise(Alert{Algorithm: l.algorithm.Name, Key: c.key, Err: newError(ErrBackend, err,
			"an admission whose reply came after its caller gave up could not be given back: its charge stands")}, l.Stats())
		return
	}
	l.counters.lateRefunded.Add(1)
}

// connect makes sure a connection to key's node is ready, when none is
// idle and the pool would dial one: the call's own timeout starts once it
// is, so that connecting to a busy but healthy Redis is not an outage.
func (l *Limiter) connect(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, l.connectTimeout)
	defer cancel()
	var node *redis.Client
	switch client := l.client.(type) {
	case *redis.Client:
		node = client
	case *redis.ClusterClient:
		n, err := client.MasterForKey(ctx, key)
		if err != nil {
			return err
		}
		node = n
	default:
		return nil
	}
	stats := node.PoolStats()
	if stats.IdleConns > 0 || int(stats.TotalConns) >= node.Options().PoolSize {
		return nil
	}
	// A new connection may reach another server (a failover): its clock
	// is measured again.
	l.rclock.forget()
	return node.Ping(ctx).Err()
}

// sampleTime measures the offset to Redis's clock: TIME on the node (every
// master of a cluster, every shard of a ring), the lowest bound kept.
func (l *Limiter) sampleTime(ctx context.Context) error {
	var samples []timeSample
	var mu sync.Mutex
	sample := func(ctx context.Context, node interface {
		Do(context.Context, ...any) *redis.Cmd
	}) error {
		before := monotonicMicros()
		reply, err := node.Do(ctx, "TIME").Result()
		after := monotonicMicros()
		if err != nil {
			return err
		}
		at, err := parseTime(reply)
		if err != nil {
			return newError(ErrData, err, "invalid reply to TIME: %v", err)
		}
		mu.Lock()
		samples = append(samples, timeSample{before, at, after})
		mu.Unlock()
		return nil
	}
	var err error
	switch client := l.client.(type) {
	case *redis.ClusterClient:
		err = client.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return sample(ctx, node) })
	case *redis.Ring:
		err = client.ForEachShard(ctx, func(ctx context.Context, node *redis.Client) error { return sample(ctx, node) })
	default:
		err = sample(ctx, l.client)
	}
	if err != nil {
		return err
	}
	l.counters.clockSamples.Add(1)
	return l.rclock.record(samples)
}

// recordQuota writes this limiter's quota beside the key and alerts when
// another was there. A warning system: it never fails a decision.
func (l *Limiter) recordQuota(ctx context.Context, c *call) {
	ours := l.algorithm.FingerprintInput()
	ttl := max(60_000, ceilDiv(l.algorithm.MaxWaitMicros, 1000))
	theirs, err := l.client.Do(ctx, "SET", l.registryKey(c.key), ours, "PX", ttl, "GET").Text()
	if err != nil || theirs == ours {
		return
	}
	l.counters.quotaMismatches.Add(1)
	l.alerts.raise(Alert{Algorithm: l.algorithm.Name, Err: &QuotaMismatch{Key: c.key, Ours: ours, Theirs: theirs}, Key: c.key}, l.Stats())
}
