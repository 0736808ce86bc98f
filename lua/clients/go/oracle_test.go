package ratelab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/ratelab/ratelab/lua/clients/go/internal/redistest"
)

// The oracle: the Rust client (the example protocol_client, the reference
// implementation of the protocol) runs the same script of checks, peeks,
// settlements, refunds and resets on a key of its own; Go alone, and Go and
// Rust alternating on one key, must answer the same, call for call
// (decisions and stamps). Once on the scripts, once with the native module
// loaded (both clients then run its commands).

var rustOnce = sync.OnceValues(func() (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	cargo := os.Getenv("CARGO")
	if cargo == "" {
		if cargo, err = exec.LookPath("cargo"); err != nil {
			home := os.Getenv("CARGO_HOME")
			if home == "" {
				home = filepath.Join(os.Getenv("HOME"), ".cargo")
			}
			cargo = filepath.Join(home, "bin", "cargo")
		}
	}
	// With the workspace's features (every member's examples), as just
	// test's cargo test --workspace built them: a no-op then.
	build := exec.Command(cargo, "build", "--locked", "--workspace", "--examples")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the Rust example protocol_client (cargo build --workspace --examples): %v\n%s", err, out)
	}
	target := os.Getenv("CARGO_TARGET_DIR")
	if target == "" {
		target = filepath.Join(root, "target")
	}
	return filepath.Join(target, "debug", "examples", "protocol_client"), nil
})

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	for err == nil {
		if _, serr := os.Stat(filepath.Join(dir, "lua", "clients", "algorithms.json")); serr == nil {
			return dir, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("not inside the ratelab repository")
		}
		dir = filepath.Dir(dir)
	}
	return "", err
}

// lineDriver speaks the line protocol to a process.
type lineDriver struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func startDriver(t *testing.T, path string, args ...string) *lineDriver {
	t.Helper()
	cmd := exec.Command(path, args...)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &lineDriver{cmd: cmd, in: in, out: bufio.NewReader(out)}
	t.Cleanup(func() { d.in.Close(); _ = d.cmd.Wait() })
	return d
}

func (d *lineDriver) send(t *testing.T, line string) map[string]any {
	t.Helper()
	if _, err := io.WriteString(d.in, line+"\n"); err != nil {
		t.Fatal(err)
	}
	answer, err := d.out.ReadBytes('\n')
	if err != nil {
		t.Fatalf("the driver exited on %q: %v", line, err)
	}
	var m map[string]any
	if err := json.Unmarshal(answer, &m); err != nil {
		t.Fatalf("%s: %v", answer, err)
	}
	return m
}

type step struct {
	lang, op string
	now      int64
	number   int
	index    int // a settlement's check
}

// interleaving is 72 operations on one key, 50 to 400 ms apart.
func interleaving(name AlgorithmName, seed uint64) []step {
	rng := rand.New(rand.NewPCG(seed, uint64(len(name))))
	langs := []string{"rust", "go"}
	var script []step
	var checks []int
	now := int64(T0)
	for i := range 72 {
		now += []int64{50_000, 70_000, 150_000, 400_000}[rng.IntN(4)]
		roll := rng.Float64()
		switch {
		case roll < 0.45 || len(checks) == 0:
			checks = append(checks, len(script))
			script = append(script, step{lang: langs[i%2], op: "check", now: now, number: 1 + rng.IntN(4)})
		case roll < 0.6:
			script = append(script, step{lang: langs[rng.IntN(2)], op: "peek", now: now, number: rng.IntN(4)})
		case roll < 0.94:
			k := rng.IntN(len(checks))
			index := checks[k]
			checks = append(checks[:k], checks[k+1:]...)
			cost := script[index].number
			actual := []int{0, max(0, cost-1), cost + 1, min(10, cost+3)}[rng.IntN(4)]
			op := "settle"
			if actual == 0 {
				op = "refund"
			}
			script = append(script, step{lang: script[index].lang, op: op, now: now, number: actual, index: index})
		default:
			script = append(script, step{lang: langs[rng.IntN(2)], op: "reset", now: now})
		}
	}
	return script
}

func play(t *testing.T, drivers map[string]*lineDriver, name AlgorithmName, script []step, key string, langOf func(string) string) []map[string]any {
	var answers []map[string]any
	receipts := map[int]any{}
	for i, s := range script {
		d := drivers[langOf(s.lang)]
		var answer map[string]any
		switch s.op {
		case "check", "peek":
			answer = d.send(t, fmt.Sprintf("%s %s %s %d %d", s.op, name, key, s.number, s.now))
			if r, ok := answer["receipt"]; ok {
				receipts[i] = r
			}
		case "settle", "refund":
			r, ok := receipts[s.index]
			if !ok {
				answers = append(answers, map[string]any{"skipped": "no admission to settle"})
				continue
			}
			delete(receipts, s.index)
			tail := fmt.Sprint(s.now)
			if s.op == "settle" {
				tail = fmt.Sprintf("%d %d", s.number, s.now)
			}
			answer = d.send(t, fmt.Sprintf("%s %s %v %s", s.op, name, r, tail))
		default:
			answer = d.send(t, fmt.Sprintf("reset %s %s %d", name, key, s.now))
		}
		if _, failed := answer["error"]; failed {
			t.Fatalf("%s, step %d %+v by %s: %v", name, i, s, langOf(s.lang), answer)
		}
		delete(answer, "receipt")
		answers = append(answers, answer)
	}
	return answers
}

func TestGoDecidesAsTheRustOracleCallForCall(t *testing.T) {
	rust, err := rustOnce()
	if err != nil {
		t.Fatal(err)
	}
	goDriver := buildProtocolClient(t)
	for _, backend := range []string{"scripts", "module"} {
		t.Run(backend, func(t *testing.T) {
			var s *redistest.Server
			if backend == "module" {
				s = redistest.Start(t, "--loadmodule", redistest.ModulePath(t))
			} else {
				s = redistest.Start(t)
			}
			drivers := map[string]*lineDriver{"rust": startDriver(t, rust, s.URL(), "oracle"), "go": startDriver(t, goDriver, s.URL(), "oracle")}
			for _, name := range Algorithms() {
				for seed := range uint64(2) {
					script := interleaving(name, seed)
					key := fmt.Sprintf("%s-%d", name, seed)
					oracle := play(t, drivers, name, script, key+"-rust", func(string) string { return "rust" })
					alone := play(t, drivers, name, script, key+"-go", func(string) string { return "go" })
					mixed := play(t, drivers, name, script, key+"-mixed", func(lang string) string { return lang })
					for i := range oracle {
						if !reflect.DeepEqual(alone[i], oracle[i]) || !reflect.DeepEqual(mixed[i], oracle[i]) {
							t.Fatalf("%s, script %d, step %d %+v: Rust answered %v, Go alone %v, the two alternating %v",
								name, seed, i, script[i], oracle[i], alone[i], mixed[i])
						}
					}
				}
			}
			stats := s.Client(t).Info(background(), "commandstats").Val()
			if ran := strings.Contains(stats, "cmdstat_ratelab.gcra:"); ran != (backend == "module") {
				t.Fatalf("%s: the module ran: %v", backend, ran)
			}
		})
	}
}

// buildProtocolClient builds cmd/protocol-client into the test's temp dir.
func buildProtocolClient(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "protocol-client")
	build := exec.Command("go", "build", "-o", path, "./cmd/protocol-client")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/protocol-client: %v\n%s", err, out)
	}
	return path
}
