// Command copyspec copies what the Go client embeds from ratelab's lua/
// folder into internal/spec/files: clients/algorithms.json, prologue.lua
// and every script algorithms.json names, byte for byte, and removes any
// other file there. Go embeds only files inside its module, so the module
// ships these copies; spec_test.go fails when they differ from lua/.
//
//	go generate ./...   (from lua/clients/go; `just regenerate` runs it)
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

func main() {
	from := flag.String("from", "", "ratelab's lua/ folder")
	to := flag.String("to", "", "the folder the copies go to")
	flag.Parse()
	if err := run(*from, *to); err != nil {
		fmt.Fprintln(os.Stderr, "copyspec:", err)
		os.Exit(1)
	}
}

func run(from, to string) error {
	if from == "" || to == "" {
		return fmt.Errorf("usage: copyspec -from <lua dir> -to <dir>")
	}
	spec, err := os.ReadFile(filepath.Join(from, "clients", "algorithms.json"))
	if err != nil {
		return err
	}
	var parsed struct {
		Algorithms []struct {
			Script string `json:"script"`
		} `json:"algorithms"`
	}
	if err := json.Unmarshal(spec, &parsed); err != nil {
		return fmt.Errorf("algorithms.json: %w", err)
	}
	names := []string{"algorithms.json", "prologue.lua"}
	for _, a := range parsed.Algorithms {
		if a.Script == "" || filepath.Base(a.Script) != a.Script {
			return fmt.Errorf("algorithms.json names the script %q, not a file name", a.Script)
		}
		names = append(names, a.Script)
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	for _, name := range names {
		source := filepath.Join(from, name)
		if name == "algorithms.json" {
			source = filepath.Join(from, "clients", name)
		}
		data, err := os.ReadFile(source)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, name), data, 0o644); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(to)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !slices.Contains(names, e.Name()) {
			if err := os.Remove(filepath.Join(to, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
