package ratelab

import (
	"fmt"
	"time"
)

// MaxEnd is the latest instant a debt may end at (lua/README.md, "State"):
// 2^52 + 2^51 µs. A debt's refusals, peeks, settlements and resets may wait
// until then: settlements charge debt whatever the room, once per receipt.
const MaxEnd = 1<<52 + 1<<51

// Decision is one call's answer: the fields of the Rust Decision.
type Decision struct {
	// Allowed: the request was admitted (and charged, when its cost is
	// above 0).
	Allowed bool
	// Limit is the capacity: the burst.
	Limit int
	// Remaining is how many unit-cost requests are still admissible now.
	Remaining int
	// RetryAfter is 0 when admitted; when refused, the earliest wait after
	// which a retry of the same cost can pass.
	RetryAfter time.Duration
	// ResetAfter is the wait until the key is back to full capacity.
	ResetAfter time.Duration
	// Delay is the leaky queue's wait before the admitted request's slot
	// (0 for every other algorithm, and for every refusal).
	Delay time.Duration
	// Degraded: no script decided it; the failure policy answered for an
	// unavailable Redis.
	Degraded bool
	// Receipt is, for a check Redis admitted with a cost above 0, the
	// admission's receipt, to settle or refund once; nil for everything
	// else (nothing was charged that could be given back).
	Receipt *Receipt
}

// RetryAfterSeconds is RetryAfter in whole seconds, rounded up
// (Retry-After).
func (d Decision) RetryAfterSeconds() int64 { return ceilSeconds(d.RetryAfter) }

// ResetAfterSeconds is ResetAfter in whole seconds, rounded up.
func (d Decision) ResetAfterSeconds() int64 { return ceilSeconds(d.ResetAfter) }

func ceilSeconds(d time.Duration) int64 {
	return int64((d + time.Second - 1) / time.Second)
}

type op int

const (
	opCheck op = iota
	opPeek
	opSettle
	opReset
)

func (o op) String() string {
	return [...]string{"check", "peek", "settle", "reset"}[o]
}

// validate reads a script's reply to op of cost (at now, when the caller's
// clock was sent), trusting nothing in it: eight integers, allowed 0 or 1,
// limit the capacity, remaining at most the limit, no retry wait when
// admitted and no delay when refused; waits within the longest this quota
// produces (plus 1 s and the slack), but for a debt's refusals, peeks,
// settlements and resets (up to MaxEnd); a stamp exactly for a check
// admitted with a cost above 0 (a debt's after now and within the longest
// wait of it, when now was sent; a window's with mark 0), none otherwise.
func (l *Limiter) validate(reply any, o op, cost uint64, now *uint64) (Decision, uint64, uint64, error) {
	invalid := func(why string) error {
		return newError(ErrData, nil, "ratelab %s: invalid reply %v: %s", l.algorithm.Name, reply, why)
	}
	items, ok := reply.([]any)
	if !ok || len(items) != 8 {
		return Decision{}, 0, 0, invalid("not eight integers")
	}
	var n [8]uint64
	for i, item := range items {
		v, ok := item.(int64)
		if !ok {
			return Decision{}, 0, 0, invalid("not eight integers")
		}
		if v < 0 {
			return Decision{}, 0, 0, invalid("a negative integer")
		}
		n[i] = uint64(v)
	}
	allowed, limit, remaining, retry, reset, delay, at, mark := n[0], n[1], n[2], n[3], n[4], n[5], n[6], n[7]
	if limit != l.algorithm.Capacity {
		return Decision{}, 0, 0, invalid("limit is not this limiter's capacity")
	}
	if remaining > limit {
		return Decision{}, 0, 0, invalid("remaining above the limit")
	}
	admission := o == opCheck && cost > 0 && allowed == 1
	maxWait := l.maxWait
	if l.algorithm.Debt && !admission {
		// A settlement's debt lengthens a debt's waits, never an
		// admission's: it needed the room.
		maxWait = max(maxWait, MaxEnd)
	}
	if max(retry, reset, delay) > maxWait {
		return Decision{}, 0, 0, invalid("a wait longer than this quota can produce")
	}
	if allowed > 1 {
		return Decision{}, 0, 0, invalid("allowed is neither 0 nor 1")
	}
	if (allowed == 1 && retry != 0) || (allowed == 0 && delay != 0) {
		return Decision{}, 0, 0, invalid("a retry wait when admitted, or a delay when refused")
	}
	if admission {
		var good bool
		switch {
		case l.algorithm.Debt && now != nil:
			// Full again after the admission, at most the longest wait
			// after the instant sent.
			good = at > *now && at-*now <= l.maxWait
		case l.algorithm.Debt:
			good = at >= 1 && at <= MaxEnd
		default:
			// A window's mark counts at least the admission's own units.
			good = mark >= 1 && at <= MaxEnd
		}
		if !good || mark > maxExact {
			return Decision{}, 0, 0, invalid("a stamp out of bounds")
		}
	} else if at != 0 || mark != 0 {
		return Decision{}, 0, 0, invalid("a stamp for no admission")
	}
	return Decision{
		Allowed:    allowed == 1,
		Limit:      int(limit),
		Remaining:  int(remaining),
		RetryAfter: micros(retry),
		ResetAfter: micros(reset),
		Delay:      micros(delay),
	}, at, mark, nil
}

func micros(us uint64) time.Duration { return time.Duration(us) * time.Microsecond }

// encodeOp is ARGV[6].
func encodeOp(o op, actual, stampAt, stampMark uint64) string {
	if o == opSettle {
		return fmt.Sprintf("settle:%d:%d:%d", actual, stampAt, stampMark)
	}
	return o.String()
}
