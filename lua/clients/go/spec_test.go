package ratelab

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ratelab/ratelab/lua/clients/go/internal/redistest"
	"github.com/ratelab/ratelab/lua/clients/go/internal/spec"
)

// vectors is lua/clients/vectors.json, read from the repository: what the
// Rust implementation computes, which this client must compute too.
type vectors struct {
	ProtocolVersion int    `json:"protocol_version"`
	MaxKeyLen       int    `json:"max_key_len"`
	MaxTTLSlackMs   uint64 `json:"max_ttl_slack_ms"`
	Algorithms      []struct {
		Algorithm string `json:"algorithm"`
		Code      string `json:"code"`
		Script    string `json:"script"`
		Quota     struct {
			Limit    int   `json:"limit"`
			PeriodUs int64 `json:"period_us"`
			Burst    int   `json:"burst"`
		} `json:"quota"`
		Params           []uint64 `json:"params"`
		Capacity         uint64   `json:"capacity"`
		MaxWaitUs        uint64   `json:"max_wait_us"`
		Debt             bool     `json:"debt"`
		FingerprintInput string   `json:"fingerprint_input"`
		KeySuffix        string   `json:"key_suffix"`
	} `json:"algorithms"`
	Keys []struct {
		Prefix      string `json:"prefix"`
		KeyHex      string `json:"key_hex"`
		Suffix      string `json:"suffix"`
		RedisKeyHex string `json:"redis_key_hex"`
	} `json:"keys"`
}

func luaDir(t *testing.T) string { return filepath.Join(redistest.RepoRoot(t), "lua") }

func readVectors(t *testing.T) vectors {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(luaDir(t), "clients", "vectors.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestTheEmbeddedCopiesAreTheFilesInLuaByteForByte(t *testing.T) {
	names, err := spec.Names()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"algorithms.json", "prologue.lua"}
	for _, name := range Algorithms() {
		a, err := NewAlgorithm(name, PerSecond(5))
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, a.ScriptFile)
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("internal/spec/files holds %v, algorithms.json names %v: run `go generate ./...` in lua/clients/go (or `just regenerate`)", names, want)
	}
	for _, name := range names {
		path := filepath.Join(luaDir(t), name)
		if name == "algorithms.json" {
			path = filepath.Join(luaDir(t), "clients", name)
		}
		original, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		copied, _ := spec.File(name)
		if !bytes.Equal(original, copied) {
			t.Errorf("internal/spec/files/%s differs from %s: run `go generate ./...` in lua/clients/go (or `just regenerate`)", name, path)
		}
	}
}

func TestTheScriptIsThePrologueThenTheAlgorithmsFile(t *testing.T) {
	prologue, _ := os.ReadFile(filepath.Join(luaDir(t), "prologue.lua"))
	for _, name := range Algorithms() {
		a, _ := NewAlgorithm(name, PerSecond(5))
		body, _ := os.ReadFile(filepath.Join(luaDir(t), a.ScriptFile))
		source, err := Script(name)
		if err != nil || source != string(prologue)+string(body) {
			t.Errorf("%s: the script is not prologue.lua followed by %s", name, a.ScriptFile)
		}
		if sha := ScriptSHA(source); len(sha) != 40 || strings.ToLower(sha) != sha {
			t.Errorf("%s: SHA %q", name, sha)
		}
	}
}

func TestVersionKeyLengthAndSlackAreTheVectors(t *testing.T) {
	v := readVectors(t)
	if ProtocolVersion() != v.ProtocolVersion || MaxKeyLen != v.MaxKeyLen {
		t.Fatalf("version %d, key length %d; the vectors say %d, %d", ProtocolVersion(), MaxKeyLen, v.ProtocolVersion, v.MaxKeyLen)
	}
	if got := uint64((MaxTTLSlack + time.Millisecond - 1) / time.Millisecond); got != v.MaxTTLSlackMs {
		t.Fatalf("MaxTTLSlack is %d ms, the vectors say %d", got, v.MaxTTLSlackMs)
	}
}

func TestParametersAndFingerprintsAreTheVectors(t *testing.T) {
	v := readVectors(t)
	covered := map[AlgorithmName]bool{}
	for _, want := range v.Algorithms {
		q := Quota{limit: uint64(want.Quota.Limit), period: time.Duration(want.Quota.PeriodUs) * time.Microsecond}.WithBurst(want.Quota.Burst)
		a, err := NewAlgorithm(AlgorithmName(want.Algorithm), q)
		if err != nil {
			t.Fatalf("%s %v: %v", want.Algorithm, q, err)
		}
		covered[a.Name] = true
		got := []any{a.Code, a.ScriptFile, a.Params, a.Capacity, a.MaxWaitMicros, a.Debt, a.FingerprintInput(), a.KeySuffix()}
		expected := []any{want.Code, want.Script, want.Params, want.Capacity, want.MaxWaitUs, want.Debt, want.FingerprintInput, want.KeySuffix}
		for i := range got {
			if !equalJSON(got[i], expected[i]) {
				t.Errorf("%s %v: field %d is %v, the vectors say %v", want.Algorithm, q, i, got[i], expected[i])
			}
		}
	}
	for _, name := range Algorithms() {
		if !covered[name] {
			t.Errorf("no vector for %s", name)
		}
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func TestKeysAreTheVectorsByteForByte(t *testing.T) {
	v := readVectors(t)
	if len(v.Keys) == 0 {
		t.Fatal("no key vectors")
	}
	for _, k := range v.Keys {
		key, _ := hex.DecodeString(k.KeyHex)
		want, _ := hex.DecodeString(k.RedisKeyHex)
		if got := RedisKey(k.Prefix, string(key), k.Suffix); got != string(want) {
			t.Errorf("prefix %q, key %x: %q, the vectors say %q", k.Prefix, key, got, want)
		}
	}
}

func TestTheAlgorithmsAreTheSpecsInRustsOrder(t *testing.T) {
	want := []AlgorithmName{FixedWindow, SlidingLog, SlidingCounter, LeakyMeter, LeakyQueue, TokenBucket, GCRA}
	if got := Algorithms(); !slices.Equal(got, want) {
		t.Fatalf("%v, want %v", got, want)
	}
}

func TestInvalidQuotasAreRefusedWithClearErrors(t *testing.T) {
	cases := []struct {
		quota   Quota
		message string
	}{
		{PerSecond(0), "limit must be at least 1"},
		{PerSecond(-3), "limit must be at least 1 per period, not negative"},
		{quotaOf(1, 0), "period must be longer than zero"},
		{quotaOf(1, -time.Second), "period must be longer than zero"},
		{quotaOf(1, 1500*time.Nanosecond), "not a whole number of microseconds"},
		{PerSecond(1).WithBurst(0), "burst must be at least 1"},
		{PerSecond(1).WithBurst(-1), "burst must be at least 1, not negative"},
		{PerSecond(2_000_000), "finer than the time resolution"},
		{quotaOf(1, time.Duration(1<<50+1)*time.Microsecond), "longer than the longest"},
		{quotaOf(1, time.Duration(1<<40)*time.Microsecond).WithBurst(2000), "takes longer to refill"},
		{PerHour(1 << 33), "fit in 32 bits"},
	}
	for _, c := range cases {
		err := c.quota.Validate()
		if !errors.Is(err, ErrInvalidQuota) || !strings.Contains(err.Error(), c.message) {
			t.Errorf("%v: %v, want ErrInvalidQuota saying %q", c.quota, err, c.message)
		}
		if _, err := NewLimiter(nil, GCRA, c.quota); err == nil {
			t.Errorf("%v: NewLimiter took it", c.quota)
		}
	}
	if _, err := NewQuota(5, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := NewQuota(5, 0); !errors.Is(err, ErrInvalidQuota) {
		t.Fatalf("NewQuota(5, 0): %v", err)
	}
}

func TestTheReferenceQuota(t *testing.T) {
	q := PerSecond(5).WithBurst(10)
	if q.intervalMicros() != 200_000 || q.toleranceMicros() != 2_000_000 || q.windowMicros() != 2_000_000 {
		t.Fatalf("T %d, tolerance %d, window %d", q.intervalMicros(), q.toleranceMicros(), q.windowMicros())
	}
	if PerMinute(10).Burst() != 10 || q.Burst() != 10 || q.Limit() != 5 || q.Period() != time.Second {
		t.Fatal("the default burst is the limit")
	}
}

func TestASlidingLogOnRedisTakesAtMostTheCap(t *testing.T) {
	if a, err := NewAlgorithm(SlidingLog, PerHour(10_000)); err != nil || a.Capacity != 10_000 {
		t.Fatalf("%v %v", a, err)
	}
	for _, q := range []Quota{PerHour(10_001), PerSecond(5).WithBurst(4_000_000_000)} {
		if _, err := NewAlgorithm(SlidingLog, q); !errors.Is(err, ErrInvalidQuota) || !strings.Contains(err.Error(), "sliding counter") {
			t.Errorf("%v: %v", q, err)
		}
	}
	if a, err := NewAlgorithm(SlidingCounter, PerHour(1_000_000)); err != nil || a.Capacity != 1_000_000 {
		t.Fatalf("%v %v", a, err)
	}
	if _, err := NewAlgorithm("leaky-bucket", PerHour(1)); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("an unknown algorithm: %v", err)
	}
}
