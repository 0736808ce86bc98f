package ratelab

import (
	"strings"
	"testing"

	"github.com/ratelab/ratelab/lua/clients/go/internal/redistest"
)

// Where the server has loaded ratelab's native module, the limiter runs its
// commands (peeks on the read-only twins), and decides as the scripts do on
// the same keys; where it has not, BackendAuto runs the scripts and
// BackendModule says what is missing.
func TestTheModuleIsUsedWhereTheServerHasIt(t *testing.T) {
	s := redistest.Start(t, "--loadmodule", redistest.ModulePath(t))
	client := s.Client(t)
	for _, name := range Algorithms() {
		clock := newClock(T0)
		shared := WithPrefix("module-" + t.Name())
		module := limiterOn(t, client, name, reference, clock.option(), shared)
		scripts := limiterOn(t, client, name, reference, clock.option(), shared, WithBackend(BackendScripts))
		for i := range 30 {
			l := module
			if i%3 == 2 {
				l = scripts
			}
			p := must(t)(l.Peek(background(), "k", 1+i%3))
			c := must(t)(l.Check(background(), "k", 1+i%3))
			if c.Receipt != nil && i%4 == 0 {
				must(t)(l.Settle(background(), c.Receipt, i%3))
			}
			c.Receipt = nil
			if p != c {
				t.Fatalf("%s, step %d: peek %+v, check %+v", name, i, p, c)
			}
			clock.advance(90_000)
		}
		if st := module.Stats(); st.ModuleCalls == 0 || st.ScriptCalls != 0 {
			t.Fatalf("%s: %+v", name, st)
		}
	}
	stats := client.Info(background(), "commandstats").Val()
	if !strings.Contains(stats, "cmdstat_ratelab.gcra_ro:") || !strings.Contains(stats, "cmdstat_ratelab.sliding-log:") {
		t.Fatalf("the module's commands did not run:\n%s", stats)
	}
}

func TestWithoutTheModuleAutoRunsTheScriptsAndModuleSaysSo(t *testing.T) {
	_, client := server(t)
	auto := limiterOn(t, client, GCRA, reference)
	must(t)(auto.Check(background(), "k", 1))
	must(t)(auto.Peek(background(), "k", 1))
	if st := auto.Stats(); st.ModuleCalls != 0 || st.ScriptCalls != 2 {
		t.Fatalf("%+v", st)
	}
	forced := limiterOn(t, client, GCRA, reference, WithBackend(BackendModule), WithFailurePolicy(FailOpen))
	_, err := forced.Check(background(), "k", 1)
	mustErr(t, err, ErrData)
	if !strings.Contains(err.Error(), "the ratelab module is not loaded on this Redis") {
		t.Fatal(err)
	}
}
