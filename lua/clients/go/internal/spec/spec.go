// Package spec holds what the client reads of ratelab's script protocol
// (lua/README.md): algorithms.json and the scripts, as copies of the files
// in lua/ that `go generate` makes (Go embeds only files inside its
// module). spec_test.go fails when a copy differs from lua/ by one byte.
package spec

import (
	"embed"
	"encoding/json"
	"fmt"
)

//go:generate go run ../copyspec -from ../../../.. -to files

//go:embed files
var files embed.FS

// Entry is one algorithm as algorithms.json describes it.
type Entry struct {
	Name     string   `json:"name"`
	Code     string   `json:"code"`
	Script   string   `json:"script"`
	Params   []string `json:"params"`
	Capacity string   `json:"capacity"`
	MaxWait  struct {
		Of    string `json:"of"`
		Times uint64 `json:"times"`
	} `json:"max_wait"`
	Debt        bool    `json:"debt"`
	MaxBurst    *uint64 `json:"max_burst"`
	Unsupported *string `json:"unsupported"`
}

// Spec is algorithms.json.
type Spec struct {
	ProtocolVersion int     `json:"protocol_version"`
	StateFormat     string  `json:"state_format"`
	MaxSteps        uint64  `json:"max_steps"`
	Algorithms      []Entry `json:"algorithms"`
}

// Load parses the embedded algorithms.json.
func Load() (Spec, error) {
	data, err := files.ReadFile("files/algorithms.json")
	if err != nil {
		return Spec{}, err
	}
	var s Spec
	if err := json.Unmarshal(data, &s); err != nil {
		return Spec{}, fmt.Errorf("algorithms.json: %w", err)
	}
	if s.ProtocolVersion <= 0 || s.MaxSteps == 0 || len(s.Algorithms) == 0 {
		return Spec{}, fmt.Errorf("algorithms.json: no protocol version, steps or algorithms")
	}
	return s, nil
}

// File is the embedded copy of lua/<name> (algorithms.json: lua/clients/).
func File(name string) ([]byte, error) {
	return files.ReadFile("files/" + name)
}

// Names lists the embedded files.
func Names() ([]string, error) {
	entries, err := files.ReadDir("files")
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, nil
}
