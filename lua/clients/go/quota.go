package ratelab

import (
	"fmt"
	"math/bits"
	"time"
)

// MaxSpan is the longest span the protocol's arithmetic carries exactly:
// 2^50 µs, about 35 years.
const MaxSpan = time.Duration(1<<50) * time.Microsecond

// Quota is limit units per period, up to burst at once (by default the
// limit). Build one with PerSecond, PerMinute, PerHour or NewQuota, and
// WithBurst; NewLimiter refuses an invalid one with an error wrapping
// ErrInvalidQuota (see Quota.Validate).
type Quota struct {
	limit  uint64
	period time.Duration
	burst  uint64
	// burstSet: WithBurst was called (a zero burst is then an error, not
	// "the limit").
	burstSet bool
}

// NewQuota is limit units per period, bursts of limit, validated.
func NewQuota(limit int, period time.Duration) (Quota, error) {
	q := quotaOf(limit, period)
	return q, q.Validate()
}

// PerSecond is limit units a second, bursts of limit. NewLimiter (or
// Validate) says what is wrong with it, if anything.
func PerSecond(limit int) Quota { return quotaOf(limit, time.Second) }

// PerMinute is limit units a minute, bursts of limit.
func PerMinute(limit int) Quota { return quotaOf(limit, time.Minute) }

// PerHour is limit units an hour, bursts of limit.
func PerHour(limit int) Quota { return quotaOf(limit, time.Hour) }

func quotaOf(limit int, period time.Duration) Quota {
	q := Quota{period: period}
	if limit > 0 {
		q.limit = uint64(limit)
	} else if limit < 0 {
		// Kept as an impossible value: Validate names it.
		q.limit = ^uint64(0)
		q.period = -1
	}
	return q
}

// WithBurst is the quota with up to burst units at once.
func (q Quota) WithBurst(burst int) Quota {
	q.burstSet = true
	if burst < 0 {
		q.burst = ^uint64(0)
	} else {
		q.burst = uint64(burst)
	}
	return q
}

// Limit is the units per period.
func (q Quota) Limit() int { return int(q.limit) }

// Period is the quota's period.
func (q Quota) Period() time.Duration { return q.period }

// Burst is the units admitted at once: the capacity of every algorithm.
func (q Quota) Burst() int { return int(q.effectiveBurst()) }

func (q Quota) effectiveBurst() uint64 {
	if q.burstSet {
		return q.burst
	}
	return q.limit
}

func (q Quota) periodMicros() uint64 { return uint64(q.period / time.Microsecond) }

// Validate reports, wrapped in ErrInvalidQuota, what makes the quota
// impossible on Redis, as the Rust Quota does: a limit or burst of 0 or
// negative or past 32 bits, a period of 0, negative, not whole
// microseconds or longer than MaxSpan, more than one unit a microsecond,
// or a burst that takes longer than MaxSpan to refill.
func (q Quota) Validate() error {
	invalid := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidQuota, fmt.Sprintf(format, args...))
	}
	burst := q.effectiveBurst()
	switch {
	case q.period < 0 && q.limit == ^uint64(0):
		return invalid("the limit must be at least 1 per period, not negative")
	case q.limit == 0:
		return invalid("the limit must be at least 1 per period, not 0")
	case q.burstSet && q.burst == ^uint64(0):
		return invalid("the burst must be at least 1, not negative")
	case q.limit > 0xFFFFFFFF || burst > 0xFFFFFFFF:
		return invalid("the limit and the burst must fit in 32 bits")
	case q.period <= 0:
		return invalid("the period must be longer than zero, not %v", q.period)
	case q.period%time.Microsecond != 0:
		return invalid("the period %v is not a whole number of microseconds", q.period)
	case burst == 0:
		return invalid("the burst must be at least 1, not 0")
	case q.period > MaxSpan:
		return invalid("the period is longer than the longest supported, %d µs", uint64(MaxSpan/time.Microsecond))
	case q.limit > q.periodMicros():
		return invalid("more than one per microsecond, finer than the time resolution")
	}
	t := q.intervalMicros()
	maxTolerance := max(uint64(1)<<50, q.limit*t)
	if hi, lo := bits.Mul64(burst, t); hi != 0 || lo > maxTolerance {
		return invalid("the burst takes longer to refill than the longest supported span")
	}
	return nil
}

// intervalMicros is T = ceil(period / limit): rounds up, never faster than
// asked.
func (q Quota) intervalMicros() uint64 { return ceilDiv(q.periodMicros(), q.limit) }

// toleranceMicros is burst × T, the time an empty bucket takes to refill.
func (q Quota) toleranceMicros() uint64 { return q.effectiveBurst() * q.intervalMicros() }

// windowMicros is the window algorithms' window, ceil(period × burst /
// limit): burst per window, the buckets' capacity and long-run rate.
func (q Quota) windowMicros() uint64 {
	hi, lo := bits.Mul64(q.periodMicros(), q.effectiveBurst())
	if hi >= q.limit {
		// Past 64 bits: no valid quota gets here (its window is below 2^51).
		return ^uint64(0)
	}
	quotient, rem := bits.Div64(hi, lo, q.limit)
	if rem != 0 {
		quotient++
	}
	return quotient
}

// Interval is T = ceil(period / limit): one unit comes back every
// interval (rounded up: never faster than asked).
func (q Quota) Interval() time.Duration { return micros(q.intervalMicros()) }

// Window is the window algorithms' window, ceil(period × burst / limit):
// burst units per window, the buckets' capacity and long-run rate.
func (q Quota) Window() time.Duration { return micros(q.windowMicros()) }

func (q Quota) String() string {
	return fmt.Sprintf("%d per %v (burst %d)", q.limit, q.period, q.effectiveBurst())
}

func ceilDiv(a, b uint64) uint64 {
	return a/b + min(1, a%b)
}
