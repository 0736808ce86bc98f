package httplimit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	ratelab "github.com/ratelab/ratelab/lua/clients/go"
)

// QuotaExceeded is the problem type of a refusal
// (draft-ietf-httpapi-ratelimit-headers).
const QuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

type state int

const (
	pending state = iota
	decided
	// givenBack: admitted, then refunded (another policy refused the
	// request, or the response did not count).
	givenBack
	never
	failedOpen
	failedClosed
)

// Report is one applicable policy's part of a verdict.
type Report struct {
	policy   *Policy
	key      string
	cost     int
	state    state
	decision *ratelab.Decision
	err      error
	// retryAfter is a failed-closed policy's hint.
	retryAfter time.Duration
	deadline   time.Time
	// receipt is what the admission took, while something may give it
	// back: another policy's refusal, or the response.
	receipt *ratelab.Receipt
	// next is t when a peek said it (the sliding log and counter), µs; -1
	// when unknown.
	next int64
}

func (r *Report) set(s state, d *ratelab.Decision) {
	r.state, r.decision, r.next = s, d, -1
}

func (r *Report) violated() bool {
	return (r.state == decided && r.decision != nil && !r.decision.Allowed) || r.state == never
}

func (r *Report) admitted() bool {
	return r.state == decided && r.decision != nil && r.decision.Allowed
}

// Decision is the policy's decision (nil when its limiter failed).
func (r *Report) Decision() *ratelab.Decision { return r.decision }

// Policy is the report's policy.
func (r *Report) Policy() *Policy { return r.policy }

// nextAfter is t: µs until more quota is available than remaining.
func (r *Report) nextAfter() (int64, bool) {
	d := r.decision
	if d == nil {
		return 0, false
	}
	if r.next >= 0 {
		return r.next, true
	}
	if d.Remaining >= d.Limit {
		return 0, true
	}
	if !d.Allowed && r.cost == 1 && d.RetryAfter > 0 {
		return d.RetryAfter.Microseconds(), true
	}
	return waitFor(d, r.policy.interval, d.Remaining+1), true
}

// wanted: the units to peek for when t needs the limiter (the sliding log
// and counter): remaining + 1.
func (r *Report) wanted() (int, bool) {
	d := r.decision
	if !r.policy.sliding || r.next >= 0 || d == nil || d.Remaining >= d.Limit ||
		(!d.Allowed && r.cost == 1 && d.RetryAfter > 0) {
		return 0, false
	}
	return d.Remaining + 1, true
}

// waitFor is µs until units are available: exact for a steady refill, else
// until full.
func waitFor(d *ratelab.Decision, interval int64, units int) int64 {
	if d.Remaining >= units {
		return 0
	}
	reset := d.ResetAfter.Microseconds()
	if interval > 0 {
		return max(0, reset-int64(max(0, d.Limit-units))*interval)
	}
	return reset
}

func (r *Report) waitsForResponse() bool {
	return r.policy.afterResponse() && r.cost != 0 && r.admitted() && r.receipt != nil
}

// Failure is a limiter that could not decide, and what its policy did.
type Failure struct {
	Policy string
	Client Client
	Err    error
	// Open: the request passed unchecked; else it was refused (503).
	Open bool
}

// Outcome is what happens to a request.
type Outcome int

const (
	// Pass: the request goes on to the handler.
	Pass Outcome = iota
	// Refuse: 429.
	Refuse
	// Unavailable: 503 (a policy that fails closed could not decide).
	Unavailable
)

// Verdict is what the policies decided for one request.
type Verdict struct {
	Reports  []*Report
	Outcome  Outcome
	Client   Client
	Failures []Failure
	// Delay is a queueing policy's (the leaky queue's) wait before the
	// request's slot.
	Delay time.Duration
}

func (v *Verdict) pending() bool {
	for _, r := range v.Reports {
		if r.waitsForResponse() {
			return true
		}
	}
	return false
}

// RetryAfterSeconds is Retry-After, whole seconds rounded up, at least 1;
// false when no wait helps (a cost over a policy's burst) or for a pass.
func (v *Verdict) RetryAfterSeconds() (int64, bool) {
	switch v.Outcome {
	case Refuse:
		var wait time.Duration
		for _, r := range v.Reports {
			if !r.violated() {
				continue
			}
			if r.decision == nil {
				return 0, false
			}
			wait = max(wait, r.decision.RetryAfter)
		}
		return max(1, int64((wait+time.Second-1)/time.Second)), true
	case Unavailable:
		var hint time.Duration
		for _, r := range v.Reports {
			if r.state == failedClosed {
				hint = max(hint, r.retryAfter)
			}
		}
		return max(1, int64((hint+time.Second-1)/time.Second)), true
	}
	return 0, false
}

// Fields are RateLimit-Policy (every policy that applied) and RateLimit
// (every one that decided), as draft-ietf-httpapi-ratelimit-headers and
// ratelab-http write them.
func (v *Verdict) Fields() [][2]string {
	var out [][2]string
	if len(v.Reports) == 0 {
		return out
	}
	items := make([]string, len(v.Reports))
	for i, r := range v.Reports {
		items[i] = r.policy.item
	}
	out = append(out, [2]string{"RateLimit-Policy", strings.Join(items, ", ")})
	var limits []string
	for _, r := range v.Reports {
		t, ok := r.nextAfter()
		if !ok {
			continue
		}
		secs := (t + 999_999) / 1_000_000
		limits = append(limits, fmt.Sprintf("%q;r=%d;t=%d", r.policy.name, min(int64(r.decision.Remaining), IntegerMax), min(secs, IntegerMax)))
	}
	if len(limits) > 0 {
		out = append(out, [2]string{"RateLimit", strings.Join(limits, ", ")})
	}
	return out
}

type refusalProblem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Detail   string   `json:"detail"`
	Violated []string `json:"violated-policies"`
}

type unavailableProblem struct {
	Type        string   `json:"type"`
	Title       string   `json:"title"`
	Status      int      `json:"status"`
	Detail      string   `json:"detail"`
	Unavailable []string `json:"unavailable-policies"`
}

// Problem is the status and RFC 9457 body (members in ratelab-http's order)
// of a refusal or a 503.
func (v *Verdict) Problem() (int, []byte) {
	if v.Outcome == Unavailable {
		names := []string{}
		for _, r := range v.Reports {
			if r.state == failedClosed {
				names = append(names, r.policy.name)
			}
		}
		return 503, encode(unavailableProblem{Type: "about:blank", Title: "Service Unavailable", Status: 503,
			Detail: "The rate limiter could not decide whether this request is within its quota, " +
				"and refuses it rather than let it pass unchecked. Try again later.", Unavailable: names})
	}
	var reasons, names []string
	for _, r := range v.Reports {
		if !r.violated() {
			continue
		}
		names = append(names, r.policy.name)
		if r.state == never {
			reasons = append(reasons, fmt.Sprintf("a request costing %d can never pass policy %q, which admits at most %d at once",
				r.cost, r.policy.name, r.policy.q))
		} else {
			reasons = append(reasons, fmt.Sprintf("policy %q allows %d per %d s", r.policy.name, r.policy.q, r.policy.w))
		}
	}
	detail := strings.Join(reasons, "; ")
	if retry, ok := v.RetryAfterSeconds(); ok {
		detail += fmt.Sprintf("; retry in %d s.", retry)
	} else {
		detail += "."
	}
	return 429, encode(refusalProblem{Type: QuotaExceeded, Title: "Request cannot be satisfied as assigned quota has been exceeded",
		Status: 429, Detail: detail, Violated: names})
}

func encode(body any) []byte {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	_ = e.Encode(body)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// match is the reports of every policy that applies to the request.
func match(policies []*Policy, apply func(*Policy) (string, int, bool)) []*Report {
	var reports []*Report
	for _, p := range policies {
		if key, cost, ok := apply(p); ok {
			reports = append(reports, &Report{policy: p, key: key, cost: cost, next: -1})
		}
	}
	return reports
}

// decide decides one request against every policy that applies, as
// ratelab-http's guide says ("Several policies on one request"): each
// policy is asked once, with its cost, all at once; with several, each
// takes its cost with a receipt, and a request refused (or failed closed)
// anywhere gives every receipt back before it is answered, so that it
// leaves every policy as if it never came. A policy that decides from the
// response takes its cost with a receipt even alone, and keeps it for the
// response.
func decide(ctx context.Context, reports []*Report, client Client, logf func(string, ...any)) *Verdict {
	v := &Verdict{Reports: reports, Client: client}
	if len(reports) == 0 {
		return v
	}
	started := time.Now()
	several := len(reports) > 1
	var wg sync.WaitGroup
	for _, r := range reports {
		r.deadline = started.Add(r.policy.timeout)
		receipted := r.cost > 0 && (several || r.policy.afterResponse())
		wg.Add(1)
		go func() {
			defer wg.Done()
			callCtx, cancel := context.WithDeadline(ctx, r.deadline)
			defer cancel()
			d, err := r.policy.limiter.Check(callCtx, r.key, r.cost)
			record(r, d, err, receipted)
		}()
	}
	wg.Wait()
	for _, r := range reports {
		if r.err != nil && r.state != never {
			v.Failures = append(v.Failures, Failure{Policy: r.policy.name, Client: client, Err: r.err, Open: r.state == failedOpen})
		}
	}
	v.Outcome = Pass
	for _, r := range reports {
		if r.violated() {
			v.Outcome = Refuse
			break
		}
		if r.state == failedClosed {
			v.Outcome = Unavailable
		}
	}
	if v.Outcome == Pass {
		for _, r := range reports {
			// Nothing will give these back: the charge stands.
			if !r.policy.afterResponse() {
				r.receipt = nil
			}
			if r.state == decided && r.decision != nil {
				v.Delay = max(v.Delay, r.decision.Delay)
			}
		}
	} else {
		giveBack(ctx, reports, logf)
	}
	completeNext(ctx, reports)
	return v
}

func record(r *Report, d ratelab.Decision, err error, receipted bool) {
	if err == nil && !d.Degraded {
		r.set(decided, &d)
		if receipted && d.Allowed {
			r.receipt = d.Receipt
		}
		return
	}
	if d.Receipt != nil && !receipted {
		d.Receipt = nil
	}
	r.set(r.state, nil)
	var hint time.Duration
	switch {
	case err == nil:
		// The limiter's own failure policy answered: to the middleware that
		// is an outage, and the policy's mode wins.
		verb := "refused"
		if d.Allowed {
			verb = "admitted"
		}
		err = fmt.Errorf("%w: the limiter's backend is failing: its failure policy %s the request", ratelab.ErrUnavailable, verb)
		hint = d.RetryAfter
	case errors.Is(err, ratelab.ErrCostTooHigh):
		r.state = never
		return
	default:
		var e *ratelab.Error
		if errors.As(err, &e) {
			hint = e.RetryAfter
		}
	}
	r.err = err
	// Data errors fail closed whatever the mode: nothing repairs them by
	// waiting.
	if r.policy.options.Failure == FailClosed || errors.Is(err, ratelab.ErrData) {
		r.state, r.retryAfter = failedClosed, hint
	} else {
		r.state = failedOpen
	}
}

// giveBack refunds, at once, every receipt held: the request is not
// served. Each refund's answer (the key as it left it) becomes its report's
// decision; a refund that fails keeps its units taken.
func giveBack(ctx context.Context, reports []*Report, logf func(string, ...any)) {
	var wg sync.WaitGroup
	for _, r := range reports {
		if r.receipt == nil {
			continue
		}
		receipt := r.receipt
		r.receipt = nil
		wg.Add(1)
		go func() {
			defer wg.Done()
			callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.policy.timeout)
			defer cancel()
			d, err := r.policy.limiter.Refund(callCtx, receipt)
			switch {
			case err != nil:
				logf("rate limiter of policy %s failed to give back the units of a refused request: they stay taken: %v", r.policy.name, err)
			case !d.Degraded && r.admitted():
				r.set(givenBack, &d)
			}
		}()
	}
	wg.Wait()
}

// completeNext asks t of the policies whose decision does not say it (the
// sliding log and counter): a peek of remaining + 1 units, whose RetryAfter
// is when more than remaining is available. A peek that fails leaves t the
// wait until full: late, never early.
func completeNext(ctx context.Context, reports []*Report) {
	var wg sync.WaitGroup
	for _, r := range reports {
		units, ok := r.wanted()
		if !ok {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.policy.timeout)
			defer cancel()
			if d, err := r.policy.limiter.Peek(callCtx, r.key, units); err == nil && !d.Degraded {
				// Units came back since the decision (another request's
				// refund): none to wait for.
				r.next = 0
				if !d.Allowed {
					r.next = d.RetryAfter.Microseconds()
				}
			}
		}()
	}
	wg.Wait()
}

// settleAfterResponse: once the response head is known, each policy that
// counts only failures or successes and admitted the request refunds its
// receipt if the response does not count; the refund's answer becomes the
// policy's decision, so that the response's fields show the key as the
// refund left it. A refund that fails keeps the charge.
func settleAfterResponse(ctx context.Context, v *Verdict, status int, logf func(string, ...any)) {
	var wg sync.WaitGroup
	for _, r := range v.Reports {
		if !r.waitsForResponse() {
			continue
		}
		receipt := r.receipt
		r.receipt = nil
		if r.policy.counts(status) {
			continue // The charge stands.
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.policy.timeout)
			defer cancel()
			d, err := r.policy.limiter.Refund(callCtx, receipt)
			switch {
			case err != nil:
				logf("rate limiter of policy %s failed after the response: the request's refund is lost: %v", r.policy.name, err)
			case !d.Degraded:
				r.set(decided, &d)
			}
		}()
	}
	wg.Wait()
	completeNext(ctx, v.Reports)
}
