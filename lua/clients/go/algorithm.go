package ratelab

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/ratelab/ratelab/lua/clients/go/internal/spec"
)

// AlgorithmName names an algorithm of the protocol: one of Algorithms().
// The constants are the seven ratelab ships; any name algorithms.json
// lists works.
type AlgorithmName string

// The algorithms of the script protocol (lua/README.md, "The scripts").
const (
	FixedWindow    AlgorithmName = "fixed-window"
	SlidingLog     AlgorithmName = "sliding-log"
	SlidingCounter AlgorithmName = "sliding-counter"
	LeakyMeter     AlgorithmName = "leaky-meter"
	LeakyQueue     AlgorithmName = "leaky-queue"
	TokenBucket    AlgorithmName = "token-bucket"
	GCRA           AlgorithmName = "gcra"
)

// Algorithm is one algorithm on one quota, as the scripts see it: computed
// from algorithms.json, so that a new algorithm needs no change here.
type Algorithm struct {
	// Name is the algorithm's name (gcra, token-bucket, ...).
	Name AlgorithmName
	// Code is its key code (gcra, tb, ...).
	Code string
	// ScriptFile is its script's file in lua/.
	ScriptFile string
	// Params are ARGV[7...].
	Params []uint64
	// Capacity is the limit of every decision: the burst.
	Capacity uint64
	// MaxWaitMicros is the longest wait its state can produce from checks.
	MaxWaitMicros uint64
	// Debt: a settlement above the cost charges whatever the room, so its
	// waits outside an admission may run up to MaxEnd.
	Debt bool
}

// FingerprintInput is "<state format>:<code>:<params joined by commas>",
// the state format being algorithms.json's ("v3").
func (a Algorithm) FingerprintInput() string {
	parts := make([]string, len(a.Params))
	for i, p := range a.Params {
		parts[i] = strconv.FormatUint(p, 10)
	}
	return mustProtocol().spec.StateFormat + ":" + a.Code + ":" + strings.Join(parts, ",")
}

// KeySuffix is "<code>:<first 8 hex digits of the SHA-1 of the fingerprint
// input>".
func (a Algorithm) KeySuffix() string {
	sum := sha1.Sum([]byte(a.FingerprintInput()))
	return a.Code + ":" + hex.EncodeToString(sum[:])[:8]
}

// ModuleCommand is the native module's command, RATELAB.<NAME>.
func (a Algorithm) ModuleCommand() string {
	return "RATELAB." + strings.ToUpper(string(a.Name))
}

// quantities computes each of a quota's quantities algorithms.json names
// parameters by.
var quantities = map[string]func(q Quota, steps uint64) uint64{
	"burst":     func(q Quota, _ uint64) uint64 { return q.effectiveBurst() },
	"interval":  func(q Quota, _ uint64) uint64 { return q.intervalMicros() },
	"tolerance": func(q Quota, _ uint64) uint64 { return q.toleranceMicros() },
	"window":    func(q Quota, _ uint64) uint64 { return q.windowMicros() },
	"window_step": func(q Quota, steps uint64) uint64 {
		return ceilDiv(q.windowMicros(), steps)
	},
	"window_steps": func(q Quota, steps uint64) uint64 {
		w := q.windowMicros()
		return ceilDiv(w, ceilDiv(w, steps))
	},
}

// protocol is algorithms.json and the scripts, read once.
type protocol struct {
	spec    spec.Spec
	byName  map[AlgorithmName]spec.Entry
	sources map[AlgorithmName]string
}

// speaks is the protocol version this client's code implements (its
// arguments, replies and their checks): algorithms.json must be of it.
const speaks = 5

var loadProtocol = sync.OnceValues(func() (*protocol, error) {
	s, err := spec.Load()
	if err != nil {
		return nil, err
	}
	if s.ProtocolVersion != speaks || s.StateFormat == "" {
		return nil, fmt.Errorf("algorithms.json is of protocol version %d (state format %q), this client %d", s.ProtocolVersion, s.StateFormat, speaks)
	}
	prologue, err := spec.File("prologue.lua")
	if err != nil {
		return nil, err
	}
	p := &protocol{spec: s, byName: map[AlgorithmName]spec.Entry{}, sources: map[AlgorithmName]string{}}
	for _, e := range s.Algorithms {
		for _, of := range append(append([]string{}, e.Params...), e.MaxWait.Of, e.Capacity) {
			if quantities[of] == nil {
				return nil, fmt.Errorf("algorithms.json: %s needs the quantity %q, which this client does not compute: add it to algorithm.go", e.Name, of)
			}
		}
		body, err := spec.File(e.Script)
		if err != nil {
			return nil, fmt.Errorf("the script of %s: %w", e.Name, err)
		}
		// The prologue's bytes, then the algorithm's: no separator.
		p.byName[AlgorithmName(e.Name)] = e
		p.sources[AlgorithmName(e.Name)] = string(prologue) + string(body)
	}
	return p, nil
})

func mustProtocol() *protocol {
	p, err := loadProtocol()
	if err != nil {
		// The embedded files are part of the build: a broken copy is a
		// build defect that spec_test.go catches.
		panic("ratelab: the embedded protocol files are broken: " + err.Error())
	}
	return p
}

// ProtocolVersion is the protocol version this client speaks, as its
// algorithms.json says: the first argument of every call.
func ProtocolVersion() int { return mustProtocol().spec.ProtocolVersion }

// Algorithms lists every algorithm's name, in the order Rust lists them.
func Algorithms() []AlgorithmName {
	p := mustProtocol()
	names := make([]AlgorithmName, len(p.spec.Algorithms))
	for i, e := range p.spec.Algorithms {
		names[i] = AlgorithmName(e.Name)
	}
	return names
}

// Script is the script sent to Redis for an algorithm: the prologue's bytes
// followed by its file's.
func Script(name AlgorithmName) (string, error) {
	source, ok := mustProtocol().sources[name]
	if !ok {
		return "", unknownAlgorithm(name)
	}
	return source, nil
}

// ScriptSHA is the lowercase hex SHA-1 EVALSHA names a script by.
func ScriptSHA(source string) string {
	sum := sha1.Sum([]byte(source))
	return hex.EncodeToString(sum[:])
}

func unknownAlgorithm(name AlgorithmName) error {
	return fmt.Errorf("%w: unknown algorithm %q: one of %v", ErrInvalidArgument, name, Algorithms())
}

// NewAlgorithm maps quota onto algorithm name's parameters, as
// algorithms.json says, or says what is wrong (ErrInvalidQuota).
func NewAlgorithm(name AlgorithmName, quota Quota) (Algorithm, error) {
	p := mustProtocol()
	e, ok := p.byName[name]
	if !ok {
		return Algorithm{}, unknownAlgorithm(name)
	}
	if err := quota.Validate(); err != nil {
		return Algorithm{}, err
	}
	if e.MaxBurst != nil && quota.effectiveBurst() > *e.MaxBurst {
		why := ""
		if e.Unsupported != nil {
			why = *e.Unsupported
		}
		return Algorithm{}, fmt.Errorf("%w: %s of %d units: %s (at most %d)", ErrInvalidQuota, name, quota.effectiveBurst(), why, *e.MaxBurst)
	}
	steps := p.spec.MaxSteps
	quantity := func(of string) uint64 { return quantities[of](quota, steps) }
	params := make([]uint64, len(e.Params))
	for i, of := range e.Params {
		params[i] = quantity(of)
	}
	return Algorithm{
		Name:          name,
		Code:          e.Code,
		ScriptFile:    e.Script,
		Params:        params,
		Capacity:      quantity(e.Capacity),
		MaxWaitMicros: e.MaxWait.Times * quantity(e.MaxWait.Of),
		Debt:          e.Debt,
	}, nil
}
