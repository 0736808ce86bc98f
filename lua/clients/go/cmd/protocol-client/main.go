// Command protocol-client is the Go side of the cross-language tests of the
// script protocol: the line protocol of the Rust example protocol_client
// (crates/ratelab/examples/protocol_client.rs), one command a line on
// stdin, one JSON line answered each.
//
//		protocol-client <redis-url> [prefix]
//
//	  - quota <limit> <period_us> <burst>: the quota of the calls that follow
//	    (default 5 per second, burst 10); answers {"ok":true}.
//	  - check <algorithm> <key> <cost> <now>: one check; now in µs on the
//	    caller's clock, or - for Redis TIME. Answers the decision, and for an
//	    admission of a positive cost receipt (a number naming it), stamp_at
//	    and stamp_mark.
//	  - peek <algorithm> <key> <cost> <now>: the decision.
//	  - settle <algorithm> <receipt> <actual> <now>, refund <algorithm>
//	    <receipt> <now>: settles that receipt (of this process, for this
//	    algorithm and quota) once; answers the decision after it.
//	  - reset <algorithm> <key> <now>: answers {"ok":true}.
//	  - burst <algorithm> <key> <cost> <now> <n>: n checks at once, each on a
//	    goroutine of its own; answers {"decisions":[...]} (receipts numbered).
//	  - mismatches: {"quota_mismatches":n} over this process's limiters.
//
// Anything else answers {"error":..,"kind":"Usage"}; an error of the
// client {"error":..,"kind":<its kind>}.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	ratelab "github.com/ratelab/ratelab/lua/clients/go"
	"github.com/redis/go-redis/v9"
)

type limiterID struct {
	name        string
	quota       string
	callerClock bool
}

type held struct {
	id      limiterID
	receipt *ratelab.Receipt
}

type driver struct {
	client   *redis.Client
	prefix   string
	quota    ratelab.Quota
	now      atomic.Int64
	limiters map[limiterID]*ratelab.Limiter
	mu       sync.Mutex
	receipts map[int]held
	next     int
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: protocol-client <redis-url> [prefix]")
		os.Exit(2)
	}
	options, err := redis.ParseURL(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	d := &driver{client: redis.NewClient(options), prefix: ratelab.DefaultPrefix,
		quota: ratelab.PerSecond(5).WithBurst(10), limiters: map[limiterID]*ratelab.Limiter{}, receipts: map[int]held{}, next: 1}
	if len(os.Args) > 2 {
		d.prefix = os.Args[2]
	}
	defer d.client.Close()
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		answer, _ := json.Marshal(d.answer(line))
		out.Write(append(answer, '\n'))
		out.Flush()
	}
}

func usage(line string) map[string]any {
	return map[string]any{"error": "unknown command: " + line, "kind": "Usage"}
}

func failure(err error) map[string]any {
	kind := "Error"
	for _, k := range []struct {
		err  error
		name string
	}{{ratelab.ErrCostTooHigh, "CostTooHigh"}, {ratelab.ErrData, "DataError"}, {ratelab.ErrTimeout, "Timeout"},
		{ratelab.ErrExpired, "Expired"}, {ratelab.ErrCircuitOpen, "CircuitOpen"}, {ratelab.ErrBackend, "BackendError"},
		{ratelab.ErrReceiptSpent, "ReceiptSpent"}, {ratelab.ErrForeignReceipt, "ForeignReceipt"},
		{ratelab.ErrInvalidQuota, "InvalidQuota"}, {ratelab.ErrInvalidArgument, "InvalidArgument"}} {
		if errors.Is(err, k.err) {
			kind = k.name
			break
		}
	}
	return map[string]any{"error": err.Error(), "kind": kind}
}

func (d *driver) limiter(name string, callerClock bool) (*ratelab.Limiter, limiterID, error) {
	id := limiterID{name, d.quota.String(), callerClock}
	if l, ok := d.limiters[id]; ok {
		return l, id, nil
	}
	opts := []ratelab.Option{ratelab.WithPrefix(d.prefix), ratelab.WithTimeout(5 * time.Second)}
	if callerClock {
		opts = append(opts, ratelab.WithClock(func() time.Time { return time.UnixMicro(d.now.Load()) }))
	}
	l, err := ratelab.NewLimiter(d.client, ratelab.AlgorithmName(name), d.quota, opts...)
	if err != nil {
		return nil, id, err
	}
	d.limiters[id] = l
	return l, id, nil
}

func (d *driver) answer(line string) map[string]any {
	words := strings.Fields(line)
	command, args := words[0], words[1:]
	if command == "quota" && len(args) == 3 {
		n, err := numbers(args)
		if err != nil {
			return map[string]any{"error": err.Error(), "kind": "Usage"}
		}
		q, err := ratelab.NewQuota(int(n[0]), time.Duration(n[1])*time.Microsecond)
		if err == nil {
			q = q.WithBurst(int(n[2]))
			err = q.Validate()
		}
		if err != nil {
			return failure(err)
		}
		d.quota = q
		return map[string]any{"ok": true}
	}
	if command == "mismatches" && len(args) == 0 {
		var n uint64
		for _, l := range d.limiters {
			n += l.Stats().QuotaMismatches
		}
		return map[string]any{"quota_mismatches": n}
	}
	var name, what, number, at string
	switch {
	case (command == "check" || command == "peek" || command == "settle") && len(args) == 4:
		name, what, number, at = args[0], args[1], args[2], args[3]
	case (command == "refund" || command == "reset") && len(args) == 3:
		name, what, number, at = args[0], args[1], "0", args[2]
	default:
		return usage(line)
	}
	n, err := strconv.Atoi(number)
	if err != nil {
		return map[string]any{"error": err.Error(), "kind": "Usage"}
	}
	callerClock := at != "-"
	l, id, err := d.limiter(name, callerClock)
	if err != nil {
		return failure(err)
	}
	if callerClock {
		now, err := strconv.ParseInt(at, 10, 64)
		if err != nil {
			return map[string]any{"error": err.Error(), "kind": "Usage"}
		}
		d.now.Store(now)
	}
	ctx := context.Background()
	switch command {
	case "check":
		return d.check(ctx, l, id, what, n)
	case "peek":
		decision, err := l.Peek(ctx, what, n)
		if err != nil {
			return failure(err)
		}
		return decisionJSON(decision)
	case "settle", "refund":
		number, _ := strconv.Atoi(what)
		d.mu.Lock()
		h, ok := d.receipts[number]
		if ok && h.id == id {
			delete(d.receipts, number)
		}
		d.mu.Unlock()
		if !ok || h.id != id {
			return map[string]any{"error": "no receipt " + what + " of this limiter", "kind": "Usage"}
		}
		decision, err := l.Settle(ctx, h.receipt, n)
		if err != nil {
			return failure(err)
		}
		return decisionJSON(decision)
	default:
		if err := l.Reset(ctx, what); err != nil {
			return failure(err)
		}
		return map[string]any{"ok": true}
	}
}

func (d *driver) check(ctx context.Context, l *ratelab.Limiter, id limiterID, key string, cost int) map[string]any {
	decision, err := l.Check(ctx, key, cost)
	if err != nil {
		return failure(err)
	}
	answer := decisionJSON(decision)
	if r := decision.Receipt; r != nil {
		d.mu.Lock()
		number := d.next
		d.next++
		d.receipts[number] = held{id, r}
		d.mu.Unlock()
		at, mark := r.Stamp()
		answer["receipt"], answer["stamp_at"], answer["stamp_mark"] = number, at, mark
	}
	return answer
}

func decisionJSON(d ratelab.Decision) map[string]any {
	return map[string]any{
		"allowed":            d.Allowed,
		"limit":              d.Limit,
		"remaining":          d.Remaining,
		"retry_after_micros": d.RetryAfter.Microseconds(),
		"reset_after_micros": d.ResetAfter.Microseconds(),
		"delay_micros":       d.Delay.Microseconds(),
	}
}

func numbers(words []string) ([]uint64, error) {
	out := make([]uint64, len(words))
	for i, w := range words {
		n, err := strconv.ParseUint(w, 10, 63)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", w, err)
		}
		out[i] = n
	}
	return out, nil
}
