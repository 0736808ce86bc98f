package ratelab

import (
	"strings"
	"testing"
)

func reply(n ...int64) []any {
	out := make([]any, len(n))
	for i, x := range n {
		out[i] = x
	}
	return out
}

func TestRepliesAreNeverTrusted(t *testing.T) {
	l, err := NewLimiter(downClientNoIO(), GCRA, reference)
	if err != nil {
		t.Fatal(err)
	}
	now := uint64(T0)
	bad := []struct {
		reply any
		why   string
	}{
		{reply(1, 10, 9, 0, 200_000, 0, 0), "not eight integers"},
		{[]any{int64(1), "10", int64(9), int64(0), int64(0), int64(0), int64(0), int64(0)}, "not eight integers"},
		{"OK", "not eight integers"},
		{reply(1, 11, 9, 0, 0, 0, 0, 0), "not this limiter's capacity"},
		{reply(1, 10, 11, 0, 0, 0, 0, 0), "remaining above the limit"},
		{reply(2, 10, 9, 0, 0, 0, 0, 0), "neither 0 nor 1"},
		{reply(1, 10, 9, 5, 0, 0, 0, 0), "a retry wait when admitted"},
		{reply(0, 10, 9, 5, 0, 5, 0, 0), "a delay when refused"},
		{reply(0, 10, 9, -1, 0, 0, 0, 0), "a negative integer"},
		{reply(0, 10, 9, MaxEnd+1, 0, 0, 0, 0), "a wait longer"},
		{reply(0, 10, 9, 5, 0, 0, 7, 1), "a stamp for no admission"},
	}
	for _, b := range bad {
		if _, _, _, err := l.validate(b.reply, opPeek, 1, &now); err == nil || !strings.Contains(err.Error(), b.why) {
			t.Errorf("%v: %v, want %q", b.reply, err, b.why)
		}
	}
	// An admission needs a stamp after now, within the longest wait.
	for _, stamp := range [][2]int64{{0, 0}, {T0, 0}, {T0 + 4_000_001 + 1, 0}} {
		if _, _, _, err := l.validate(reply(1, 10, 9, 0, 200_000, 0, stamp[0], stamp[1]), opCheck, 1, &now); err == nil {
			t.Errorf("stamp %v was taken", stamp)
		}
	}
	if _, at, _, err := l.validate(reply(1, 10, 9, 0, 200_000, 0, T0+200_000, 3), opCheck, 1, &now); err != nil || at != T0+200_000 {
		t.Fatal(err)
	}
	// A debt's peek may wait up to the protocol's ceiling (settlements charge
	// whatever the room); an admission never that long.
	if _, _, _, err := l.validate(reply(0, 10, 0, MaxEnd, MaxEnd, 0, 0, 0), opPeek, 1, &now); err != nil {
		t.Fatal(err)
	}
	if _, _, _, err := l.validate(reply(1, 10, 0, 0, MaxEnd, 0, T0+1, 0), opCheck, 1, &now); err == nil {
		t.Fatal("an admission waiting past its quota's longest was taken")
	}
}

func TestATimeReplyIsNeverTrusted(t *testing.T) {
	if us, err := parseTime([]any{"1700000000", "123456"}); err != nil || us != 1_700_000_000_123_456 {
		t.Fatal(us, err)
	}
	for _, bad := range []any{nil, []any{"1"}, []any{"1", "1000000"}, []any{"-1", "0"}, []any{"x", "0"}, []any{int64(1), int64(2)}} {
		if _, err := parseTime(bad); err == nil {
			t.Errorf("%v was taken", bad)
		}
	}
}

func TestTheDeadlineIsTheLowerBoundLessDriftAndHalfTheRoundTrip(t *testing.T) {
	var c redisClock
	if _, ok := c.deadline(0, 0); ok {
		t.Fatal("a deadline without a sample")
	}
	// Two masters: the lowest offset and the longest round trip are kept.
	_ = c.record([]timeSample{{before: 1000, redis: 50_000, after: 1100}, {before: 1000, redis: 60_000, after: 1300}})
	d, _ := c.deadline(2000, 1300)
	if want := int64(2000 + (50_000 - 1100) - 0 - 150); d != want {
		t.Fatalf("%d, want %d", d, want)
	}
	// A second later: 500 µs of drift.
	d, _ = c.deadline(2000, 1_001_300)
	if want := int64(2000 + (50_000 - 1100) - 500 - 150); d != want {
		t.Fatalf("%d, want %d", d, want)
	}
	if !c.fresh(1300) || c.fresh(1300+int64(maxSampleAge/1000)+1) {
		t.Fatal("freshness")
	}
}
