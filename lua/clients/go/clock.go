package ratelab

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// The deadline a script gets (ARGV[5]) is the instant the caller gives up,
// on Redis's clock. This process knows that instant on its own monotonic
// clock; redisClock places it on Redis's from a measured offset.
//
// One sample: read the monotonic clock (before), send TIME, read it again
// when the reply is in (after). Redis read its clock in between, so
// redis − local lies in [redis − after, redis − before]. The lower bound is
// kept: a deadline computed from it is never later, on Redis's clock, than
// the caller's own give-up instant. The offset drifts (NTP slews a host by
// up to 500 ppm): a sample age µs old is widened by driftPPM × age, and a
// sample older than maxSampleAge is measured again (and after a failure,
// which may have reached another server). On a Redis Cluster every master
// is sampled and the lowest bound kept. The deadline sent is
// giveUp + offset − drift − rtt/2: the reply needs time to fly back.

const (
	driftPPM     = 500
	maxSampleAge = 5 * time.Second
)

// epoch anchors this process's monotonic clock: monotonicMicros is the µs
// since it (time.Since reads the monotonic clock).
var epoch = time.Now()

func monotonicMicros() int64 { return int64(time.Since(epoch) / time.Microsecond) }

func monotonicAt(t time.Time) int64 { return int64(t.Sub(epoch) / time.Microsecond) }

// timeSample is one TIME round trip: local µs before sending, Redis's µs,
// local µs after the reply.
type timeSample struct {
	before, redis, after int64
}

type redisClock struct {
	mu     sync.Mutex
	valid  bool
	offset int64 // lowest redis − local
	rtt    int64 // longest round trip
	taken  int64 // local instant of the sample
}

func (c *redisClock) fresh(now int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	age := now - c.taken
	return c.valid && age >= 0 && age <= int64(maxSampleAge/time.Microsecond)
}

func (c *redisClock) forget() {
	c.mu.Lock()
	c.valid = false
	c.mu.Unlock()
}

func (c *redisClock) record(samples []timeSample) error {
	if len(samples) == 0 {
		return errors.New("no TIME sample")
	}
	offset, rtt, taken := samples[0].redis-samples[0].after, int64(0), int64(0)
	for _, s := range samples {
		offset = min(offset, s.redis-s.after)
		rtt = max(rtt, s.after-s.before)
		taken = max(taken, s.after)
	}
	c.mu.Lock()
	c.valid, c.offset, c.rtt, c.taken = true, offset, rtt, taken
	c.mu.Unlock()
	return nil
}

// deadline is giveUp (local monotonic µs) on Redis's clock, less the
// uncertainty the sample's age adds and half its round trip.
func (c *redisClock) deadline(giveUp, now int64) (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.valid {
		return 0, false
	}
	age := max(0, now-c.taken)
	drift := (age*driftPPM + 999_999) / 1_000_000
	return max(0, giveUp+c.offset-drift-(c.rtt+1)/2), true
}

// parseTime reads TIME's reply ([seconds, microseconds]) as µs since the
// epoch; anything else is an error.
func parseTime(reply any) (int64, error) {
	parts, ok := reply.([]any)
	if !ok || len(parts) != 2 {
		return 0, fmt.Errorf("TIME answered %v, not two integers", reply)
	}
	var n [2]int64
	for i, p := range parts {
		s, ok := p.(string)
		if !ok || len(s) == 0 || len(s) > 16 {
			return 0, fmt.Errorf("TIME answered %v, not two integers", reply)
		}
		v, err := strconv.ParseUint(s, 10, 63)
		if err != nil {
			return 0, fmt.Errorf("TIME answered %v, not two integers", reply)
		}
		n[i] = int64(v)
	}
	if n[1] >= 1_000_000 {
		return 0, fmt.Errorf("TIME answered %v", reply)
	}
	return n[0]*1_000_000 + n[1], nil
}
