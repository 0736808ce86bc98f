package ratelab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// The kinds of error a limiter returns. Test them with errors.Is; errors.As
// to *Error gives the details (RetryAfter of an open breaker, the cause).
//
// An outage (ErrUnavailable: ErrTimeout, ErrBackend, ErrExpired,
// ErrCircuitOpen) is where the failure policy applies. A data error (ErrData)
// is Redis answering something that needs repair: no policy hides it unless
// asked (WithPolicyOnDataErrors).
var (
	// ErrInvalidQuota: a quota no limiter can run (Quota.Validate).
	ErrInvalidQuota = errors.New("invalid quota")
	// ErrInvalidArgument: an unknown algorithm, an option out of range, a
	// negative cost, a malformed receipt, a nil receipt.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrCostTooHigh: a cost above the capacity: it could never pass, even
	// on a fresh key. An error, not a refusal.
	ErrCostTooHigh = errors.New("cost can never fit")
	// ErrData: Redis answered, and the answer is about the key or the call:
	// corrupt state, a key of another type, invalid arguments, another
	// protocol version, a settlement past a ceiling (out of range), a reply
	// no script could send, out of memory. Retrying does not help.
	ErrData = errors.New("data error")
	// ErrUnavailable: Redis could not decide (every outage below).
	ErrUnavailable = errors.New("rate limiter backend unavailable")
	// ErrTimeout: no answer before the caller gave up (its context, or the
	// limiter's timeout). A check that timed out is never charged (see the
	// README for the one exception: a reply lost with its connection).
	ErrTimeout = errors.New("rate limiter backend timed out")
	// ErrBackend: the connection was refused, lost or reset; the server is
	// loading, busy or read-only; a cluster slot is moving or down.
	ErrBackend = errors.New("rate limiter backend failed")
	// ErrExpired: the call reached Redis after its deadline: nothing was
	// charged. Also an ErrBackend.
	ErrExpired = errors.New("rate limiter call expired")
	// ErrCircuitOpen: Redis failed repeatedly and is not called for a while.
	ErrCircuitOpen = errors.New("rate limiter circuit open")
	// ErrReceiptSpent: a receipt settled or refunded already (or handed to
	// a settlement that failed): an admission is settled at most once.
	ErrReceiptSpent = errors.New("receipt spent")
	// ErrForeignReceipt: a receipt another limiter issued; it stays unspent.
	ErrForeignReceipt = errors.New("receipt of another limiter")
)

// Error is every error a limiter call returns: its Kind is one of the
// sentinel errors above.
type Error struct {
	// Kind is the sentinel error this is (errors.Is matches it, and
	// ErrUnavailable for every outage, ErrBackend for ErrExpired).
	Kind error
	// Message says what happened.
	Message string
	// RetryAfter is, for ErrCircuitOpen, the wait until Redis is tried
	// again (a probe).
	RetryAfter time.Duration
	// Err is the cause: go-redis's error, or the caller's context's.
	Err error
}

func (e *Error) Error() string {
	return "ratelab: " + e.Message
}

// Unwrap is the cause.
func (e *Error) Unwrap() error { return e.Err }

// Is matches the kind, and ErrUnavailable for every outage.
func (e *Error) Is(target error) bool {
	switch target {
	case e.Kind:
		return true
	case ErrUnavailable:
		return isOutage(e.Kind)
	case ErrBackend:
		return e.Kind == ErrExpired
	}
	return false
}

func isOutage(kind error) bool {
	return kind == ErrTimeout || kind == ErrBackend || kind == ErrExpired || kind == ErrCircuitOpen
}

func newError(kind error, cause error, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...), Err: cause}
}

// QuotaMismatch is what the alert hook receives when another limiter used
// the same user key and algorithm with another quota: the two count in
// different Redis keys, and each caller gets both quotas. Never returned by
// a check.
type QuotaMismatch struct {
	Key    string
	Ours   string
	Theirs string
}

func (m *QuotaMismatch) Error() string {
	return fmt.Sprintf("ratelab: quota mismatch on key %q: this limiter counts it as %s, another limiter as %s; "+
		"they use different Redis keys, so each caller gets both quotas", truncate(m.Key, 64), m.Ours, m.Theirs)
}

// outageCodes are Redis error codes (an error reply's first word) that mean
// "not now", not "never".
var outageCodes = map[string]bool{
	"BUSY": true, "LOADING": true, "MOVED": true, "ASK": true, "TRYAGAIN": true,
	"CLUSTERDOWN": true, "MASTERDOWN": true, "READONLY": true,
}

// classify tells an error from go-redis as an outage or a data error.
func classify(err error) *Error {
	var ours *Error
	if errors.As(err, &ours) {
		return ours
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return newError(ErrTimeout, err, "the rate limiter backend did not answer in time")
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		return newError(ErrTimeout, err, "the rate limiter backend did not answer in time")
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, redis.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.As(err, &netErr) {
		return newError(ErrBackend, err, "the rate limiter backend failed: %v", err)
	}
	if isErrorReply(err) {
		message := err.Error()
		if strings.HasPrefix(message, "ratelab expired") {
			return newError(ErrExpired, err, "%s", message)
		}
		code, _, _ := strings.Cut(message, " ")
		if outageCodes[code] {
			return newError(ErrBackend, err, "the rate limiter backend failed: %s", message)
		}
		return newError(ErrData, err, "%s", message)
	}
	// Anything else go-redis reports (a pool timeout, a cluster without a
	// node for the slot, a sentinel that knows no master): not now.
	if strings.HasPrefix(err.Error(), "redis: ") {
		return newError(ErrBackend, err, "the rate limiter backend failed: %v", err)
	}
	return newError(ErrData, err, "invalid reply from Redis: %v", err)
}

// isErrorReply: an error Redis sent as its reply (go-redis's proto.RedisError),
// not one of go-redis's own that happen to implement redis.Error.
func isErrorReply(err error) bool {
	var reply redis.Error
	if !errors.As(err, &reply) {
		return false
	}
	// go-redis's own sentinels (Nil, ErrClosed, pool errors) are not replies.
	return !errors.Is(err, redis.ErrClosed) && !errors.Is(err, redis.Nil)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
