package ratelab

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ratelab/ratelab/lua/clients/go/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// TestMain silences go-redis's own log (every refused dial of the outage
// tests): the tests assert what the limiter reports.
func TestMain(m *testing.M) {
	redis.SetLogger(silentLogger{})
	os.Exit(m.Run())
}

type silentLogger struct{}

func (silentLogger) Printf(context.Context, string, ...any) {}

// T0 is the caller's clock of the tests that pass one, µs since the epoch.
const T0 = 1_700_000_000_000_000

const second = 1_000_000

// manualClock is a caller's clock the test sets.
type manualClock struct{ now atomic.Int64 }

func newClock(at int64) *manualClock {
	c := &manualClock{}
	c.now.Store(at)
	return c
}

func (c *manualClock) set(at int64)     { c.now.Store(at) }
func (c *manualClock) advance(by int64) { c.now.Add(by) }
func (c *manualClock) read() time.Time  { return time.UnixMicro(c.now.Load()) }
func (c *manualClock) option() Option   { return WithClock(c.read) }
func (c *manualClock) micros() int64    { return c.now.Load() }
func (c *manualClock) String() string   { return fmt.Sprint(c.now.Load()) }
func background() context.Context       { return context.Background() }
func quiet() Option                     { return WithLogger(nil) }
func generous() Option                  { return WithTimeout(5 * time.Second) }

var prefixes atomic.Int64

// prefix is a key prefix no other test uses.
func prefix(t *testing.T) Option {
	return WithPrefix(fmt.Sprintf("gotest-%d-%s", prefixes.Add(1), t.Name()))
}

// limiterOn makes a limiter on client with the tests' usual options (a
// timeout a loaded machine cannot miss, no logging) and opts.
func limiterOn(t *testing.T, client redis.UniversalClient, name AlgorithmName, q Quota, opts ...Option) *Limiter {
	t.Helper()
	l, err := NewLimiter(client, name, q, append([]Option{prefix(t), generous(), quiet()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func server(t *testing.T) (*redistest.Server, *redis.Client) {
	s := redistest.Start(t)
	return s, s.Client(t)
}

// must(t)(l.Check(...)) is the decision, or the test fails.
func must(t *testing.T) func(Decision, error) Decision {
	return func(d Decision, err error) Decision {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
}

func mustErr(t *testing.T, err error, kind error) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("%v, want %v", err, kind)
	}
}

var debts = []AlgorithmName{TokenBucket, GCRA, LeakyMeter, LeakyQueue}

// downClientNoIO is a client no test sends anything to.
func downClientNoIO() *redis.Client { return redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) }

// warm makes l's first calls (connecting, loading the script, sampling the
// clock) until one is answered: a loaded machine may time a short-timeout
// limiter's first calls out, which is not what the tests that use it test.
func warm(t *testing.T, l *Limiter, key string, cost int) Decision {
	t.Helper()
	var err error
	for range 50 {
		var d Decision
		if d, err = l.Check(background(), key, cost); err == nil {
			return d
		}
		if !errors.Is(err, ErrUnavailable) {
			break
		}
	}
	t.Fatalf("warming %s: %v", key, err)
	return Decision{}
}
