package ratelab

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/lua/clients/go/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// A 3-master Redis Cluster through go-redis's ClusterClient: keys on every
// master, one TIME sample of each, the script loaded on every master, and
// with the module loaded, its commands routed by key.
func TestAClusterDecidesOnEveryMaster(t *testing.T) {
	for _, backend := range []string{"scripts", "module"} {
		t.Run(backend, func(t *testing.T) {
			var extra []string
			if backend == "module" {
				extra = []string{"--loadmodule", redistest.ModulePath(t)}
			}
			cluster := redistest.StartCluster(t, extra...)
			client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
			t.Cleanup(func() { client.Close() })
			l := limiterOn(t, client, GCRA, reference)
			masters := map[string]bool{}
			for i := range 30 {
				key := fmt.Sprintf("user-%d", i)
				for want := 9; want >= 8; want-- {
					if d := must(t)(l.Check(background(), key, 1)); d.Remaining != want {
						t.Fatalf("%s: %+v", key, d)
					}
				}
				node, err := client.MasterForKey(background(), l.RedisKey(key))
				if err != nil {
					t.Fatal(err)
				}
				masters[node.Options().Addr] = true
			}
			if len(masters) != 3 {
				t.Fatalf("the keys reached %d masters", len(masters))
			}
			st := l.Stats()
			// Without the module, the first call tries it (a cluster's keyless
			// probe would reach a random node), then the scripts run.
			want := [2]uint64{1, 60}
			if backend == "module" {
				want = [2]uint64{60, 0}
			}
			if st.ClockSamples != 1 || [2]uint64{st.ModuleCalls, st.ScriptCalls} != want {
				t.Fatalf("%+v", st)
			}
			if backend == "scripts" {
				// Loaded on every master: a flush anywhere costs one reload.
				client.ForEachMaster(background(), func(ctx context.Context, c *redis.Client) error { return c.ScriptFlush(ctx).Err() })
				must(t)(l.Check(background(), "user-0", 1))
				if l.Stats().Reloads != st.Reloads+1 {
					t.Fatalf("%+v", l.Stats())
				}
			}
		})
	}
}

func TestAPausedMasterTimesACheckOutUncharged(t *testing.T) {
	cluster := redistest.StartCluster(t)
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cluster.Addrs()})
	t.Cleanup(func() { client.Close() })
	l := limiterOn(t, client, GCRA, reference, WithTimeout(200*time.Millisecond), WithBreaker(0, 0))
	warm(t, l, "k", 0)
	node, _ := client.MasterForKey(background(), l.RedisKey("k"))
	var paused *redistest.Server
	for _, n := range cluster.Nodes {
		if n.Addr() == node.Options().Addr {
			paused = n
		}
	}
	paused.Pause()
	_, err := l.Check(background(), "k", 1)
	mustErr(t, err, ErrTimeout)
	paused.Resume()
	settled(t, l)
	if d := must(t)(l.Peek(background(), "k", 0)); d.Remaining != 10 {
		t.Fatalf("%+v", d)
	}
}

// Through a Sentinel-managed client (go-redis's NewFailoverClient): the
// primary is killed, the sentinel promotes the replica, and the limiter
// carries on against it with the state the replica holds. In between,
// checks fail as outages, never as data errors.
func TestAFailoverThroughTheSentinelKeepsTheReplicatedState(t *testing.T) {
	group := redistest.StartSentinel(t)
	client := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: group.Service, SentinelAddrs: []string{group.Addr()},
		DialTimeout: 500 * time.Millisecond, ReadTimeout: 500 * time.Millisecond, DialerRetries: 1})
	t.Cleanup(func() { client.Close() })
	l := limiterOn(t, client, GCRA, PerHour(10), WithTimeout(time.Second), WithBreaker(0, 0))
	for want := 9; want >= 7; want-- {
		if d := must(t)(l.Check(background(), "k", 1)); d.Remaining != want {
			t.Fatalf("%+v", d)
		}
	}
	// Every admission on the replica before the primary goes. The replica's
	// offset reaching the primary's is the event (WAIT from a connection that
	// wrote nothing counts only the replicas that acknowledged lately, which a
	// loaded machine may not).
	offset := func(c *redis.Client, field string) int64 {
		for _, line := range strings.Split(c.Info(background(), "replication").Val(), "\r\n") {
			if v, ok := strings.CutPrefix(line, field+":"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return -1
	}
	primary, replica := group.Primary.Client(t), group.Replica.Client(t)
	target := offset(primary, "master_repl_offset")
	caughtUp := time.Now().Add(30 * time.Second)
	for offset(replica, "slave_repl_offset") < target {
		if time.Now().After(caughtUp) {
			t.Fatalf("the replica did not catch up in 30 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	group.Primary.Kill()
	outages := 0
	deadline := time.Now().Add(30 * time.Second)
	var d Decision
	for {
		var err error
		d, err = l.Check(background(), "k", 1)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("a failover answered %v, not an outage", err)
		}
		outages++
		if time.Now().After(deadline) {
			t.Fatalf("no new primary within 30 s (%d outages)", outages)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A check that timed out during the failover but ran is given back when
	// its reply comes: once every reply is in, the replica's three and this
	// one are all the key holds.
	settled(t, l)
	if left := must(t)(l.Peek(background(), "k", 0)).Remaining; group.PrimaryPort() != group.Replica.Port || left != 6 {
		t.Fatalf("primary %d, %d left (%+v)", group.PrimaryPort(), left, d)
	}
	t.Logf("%d checks failed as outages during the failover, then served", outages)
}
