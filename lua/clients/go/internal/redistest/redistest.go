// Package redistest starts real redis-servers for the tests: a random
// port, no persistence, output to a log file, killed at the end of the
// test (and by the kernel if the test process dies first); a 3-master
// Redis Cluster; a primary, a replica and a sentinel; and a TCP proxy
// that can hold replies or slow connection set-up.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

const installHint = "install it (Debian/Ubuntu: sudo apt-get install redis-server redis-tools) or set RATELAB_REDIS_SERVER"

// Binary is the redis-server to run: $RATELAB_REDIS_SERVER or PATH's; the
// test fails, saying how to install it, when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	if path := os.Getenv("RATELAB_REDIS_SERVER"); path != "" {
		return path
	}
	path, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server not found: %s", installHint)
	}
	return path
}

// Server is a redis-server of a test's own.
type Server struct {
	Port int
	Dir  string
	args []string
	bin  string
	cmd  *exec.Cmd
}

// FreePort is a port nothing listens on (now).
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start starts a server with extra arguments (--loadmodule ...), killed at
// the end of the test.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	s := &Server{Dir: t.TempDir(), args: extra, bin: Binary(t)}
	for range 10 {
		s.Port = FreePort(t)
		if err := s.launch(); err == nil && s.waitReady(10*time.Second) == nil {
			t.Cleanup(s.Kill)
			return s
		}
		s.Kill()
	}
	log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	t.Fatalf("redis-server did not start; its log:\n%s", log)
	return nil
}

func (s *Server) launch() error {
	args := append([]string{"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.Dir, "--logfile", filepath.Join(s.Dir, "redis.log")}, s.args...)
	s.cmd = exec.Command(s.bin, args...)
	s.cmd.SysProcAttr = dieWithParent()
	return s.cmd.Start()
}

func (s *Server) waitReady(limit time.Duration) error {
	client := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	defer client.Close()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := client.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if s.cmd.ProcessState != nil {
			return fmt.Errorf("exited")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not ready in %v", limit)
}

// Addr is host:port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is redis://host:port/.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/" }

// Client is a client of the server, closed at the end of the test.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { c.Close() })
	return c
}

// Pause stops the server (SIGSTOP): it holds every connection and answers
// nothing; the kernel still accepts connections into its backlog.
func (s *Server) Pause() { _ = s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() { _ = s.cmd.Process.Signal(syscall.SIGCONT) }

// Kill kills the server and waits for it.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil || s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT)
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
}

// Restart kills the server and starts it again on the same port, empty.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := s.launch(); err == nil && s.waitReady(10*time.Second) == nil {
			return
		}
		s.Kill()
		if time.Now().After(deadline) {
			t.Fatalf("redis-server did not restart on port %d", s.Port)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ModulePath is ratelab's native module: $RATELAB_MODULE_PATH, else the one
// `cargo test --workspace` leaves in the target directory
// ($CARGO_TARGET_DIR or the repository's target/, debug/deps/).
func ModulePath(t testing.TB) string {
	t.Helper()
	if path := os.Getenv("RATELAB_MODULE_PATH"); path != "" {
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("$RATELAB_MODULE_PATH is %s: %v", path, err)
		}
		return path
	}
	name := "libratelab_redis_module.so"
	if runtime.GOOS == "darwin" {
		name = "libratelab_redis_module.dylib"
	}
	target := os.Getenv("CARGO_TARGET_DIR")
	if target == "" {
		target = filepath.Join(RepoRoot(t), "target")
	}
	for _, path := range []string{filepath.Join(target, "debug", "deps", name), filepath.Join(target, "debug", name)} {
		if _, err := os.Stat(path); err == nil {
			return path
		}
	}
	t.Fatalf("ratelab's native module not found in %s/debug: build it (cargo build -p ratelab-redis-module, "+
		"or just test, which sets RATELAB_MODULE_PATH) or set RATELAB_MODULE_PATH", target)
	return ""
}

// RepoRoot is the repository's root (this module is lua/clients/go).
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "lua", "clients", "algorithms.json")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("not inside the ratelab repository (no lua/clients/algorithms.json above the working directory)")
		}
		dir = parent
	}
}

// Cluster is three masters joined by redis-cli --cluster create.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts a 3-master cluster (no replicas), killed at the end.
func StartCluster(t testing.TB, extra ...string) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found: %s", installHint)
	}
	c := &Cluster{}
	addrs := []string{}
	for range 3 {
		n := Start(t, append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"}, extra...)...)
		c.Nodes = append(c.Nodes, n)
		addrs = append(addrs, n.Addr())
	}
	out, err := exec.Command(cli, append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ok := true
		for _, n := range c.Nodes {
			client := redis.NewClient(&redis.Options{Addr: n.Addr()})
			info, err := client.ClusterInfo(context.Background()).Result()
			client.Close()
			ok = ok && err == nil && strings.Contains(info, "cluster_state:ok")
		}
		if ok {
			return c
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatal("the cluster did not come up")
	return nil
}

// Addrs are the masters' addresses.
func (c *Cluster) Addrs() []string {
	var addrs []string
	for _, n := range c.Nodes {
		addrs = append(addrs, n.Addr())
	}
	return addrs
}

// Sentinel is a primary, a replica of it and one sentinel watching them
// (quorum 1, the primary judged down after 300 ms).
type Sentinel struct {
	Primary, Replica *Server
	Port             int
	Service          string
	cmd              *exec.Cmd
}

// StartSentinel starts the group, killed at the end of the test.
func StartSentinel(t testing.TB) *Sentinel {
	t.Helper()
	g := &Sentinel{Service: "ratelab-primary"}
	// The replica syncs at once, not after the default 5 s wait for more.
	g.Primary = Start(t, "--repl-diskless-sync-delay", "0")
	g.Replica = Start(t, "--replicaof", "127.0.0.1", strconv.Itoa(g.Primary.Port))
	dir := t.TempDir()
	g.Port = FreePort(t)
	config := filepath.Join(dir, "sentinel.conf")
	text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s/sentinel.log\n"+
		"sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s 300\nsentinel failover-timeout %s 2000\n",
		g.Port, dir, dir, g.Service, g.Primary.Port, g.Service, g.Service)
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	g.cmd = exec.Command(Binary(t), config, "--sentinel")
	g.cmd.SysProcAttr = dieWithParent()
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = g.cmd.Process.Kill()
		_ = g.cmd.Wait()
	})
	wait(t, 20*time.Second, "the sentinel did not see the primary", func() bool { return g.PrimaryPort() == g.Primary.Port })
	wait(t, 20*time.Second, "the replica did not sync", func() bool {
		c := redis.NewClient(&redis.Options{Addr: g.Replica.Addr()})
		defer c.Close()
		info, err := c.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	return g
}

// PrimaryPort is the primary's port as the sentinel says (0 if unknown).
func (g *Sentinel) PrimaryPort() int {
	c := redis.NewSentinelClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(g.Port)})
	defer c.Close()
	addr, err := c.GetMasterAddrByName(context.Background(), g.Service).Result()
	if err != nil || len(addr) != 2 {
		return 0
	}
	port, _ := strconv.Atoi(addr[1])
	return port
}

// Addr is the sentinel's address.
func (g *Sentinel) Addr() string { return "127.0.0.1:" + strconv.Itoa(g.Port) }

func wait(t testing.TB, limit time.Duration, what string, ready func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if ready() {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal(what)
}
