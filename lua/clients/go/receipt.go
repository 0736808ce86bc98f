package ratelab

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync/atomic"
)

// ReceiptFormat is the version of a receipt's JSON form.
const ReceiptFormat = 1

// maxExact is the largest integer the scripts send and take exactly.
const maxExact = 1<<53 - 1

// Receipt is what one admission took, handed back by the check that made
// it (Decision.Receipt), so that a settlement or a refund gives back only
// what the limiter can prove that admission still holds (lua/README.md,
// "Receipts and settlements"). Settle it once with the limiter that issued
// it, or drop it: the admission then counts as charged.
//
// A receipt is usable once: Settle and Refund spend it, and a second use
// returns ErrReceiptSpent. Its JSON form (json.Marshal) carries it to
// another process (a job queue's worker), whose limiter of the same prefix,
// algorithm and quota loads it with ReceiptFromJSON; each load is a receipt
// of its own, and the scripts bound what a replayed or forged stamp can do
// (never above the capacity, at most what a reset of that key would do).
type Receipt struct {
	issuer    *Limiter
	key       string
	cost      uint64
	stampAt   uint64
	stampMark uint64
	spent     atomic.Bool
}

// Key is the user key the admission was charged to.
func (r *Receipt) Key() string { return r.key }

// Cost is the cost the admission was charged.
func (r *Receipt) Cost() int { return int(r.cost) }

// Stamp is what the script wrote at the admission: for a debt, the instant
// the key was full again right after it (µs) and the ledger's total then;
// for a window, the window's index or the instant the units were logged
// at, and 0.
func (r *Receipt) Stamp() (at, mark uint64) { return r.stampAt, r.stampMark }

// Spent reports whether it was settled or refunded already (or handed to a
// settlement that failed).
func (r *Receipt) Spent() bool { return r.spent.Load() }

func (r *Receipt) String() string {
	return fmt.Sprintf("Receipt(key=%q, cost=%d, stamp=(%d, %d), spent=%v)",
		truncate(r.key, 64), r.cost, r.stampAt, r.stampMark, r.Spent())
}

type receiptJSON struct {
	Format      int    `json:"ratelab_receipt"`
	Prefix      string `json:"prefix"`
	Fingerprint string `json:"fingerprint"`
	KeyHex      string `json:"key_hex"`
	Cost        uint64 `json:"cost"`
	StampAt     uint64 `json:"stamp_at"`
	StampMark   uint64 `json:"stamp_mark"`
}

// MarshalJSON is the receipt's JSON form, the one the Python and Node
// clients write and read. Marshalling does not spend it.
func (r *Receipt) MarshalJSON() ([]byte, error) {
	return json.Marshal(receiptJSON{
		Format:      ReceiptFormat,
		Prefix:      r.issuer.prefix,
		Fingerprint: r.issuer.algorithm.FingerprintInput(),
		KeyHex:      hex.EncodeToString([]byte(r.key)),
		Cost:        r.cost,
		StampAt:     r.stampAt,
		StampMark:   r.stampMark,
	})
}

// parseReceipt checks a receipt's JSON for shape; whose it is is the
// limiter's to check.
func parseReceipt(data []byte) (receiptJSON, string, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return receiptJSON{}, "", fmt.Errorf("not a receipt: invalid JSON (%v)", err)
	}
	var r receiptJSON
	decoder := json.NewDecoder(bytes.NewReader(data))
	decoder.DisallowUnknownFields()
	decoder.UseNumber()
	if err := decoder.Decode(&r); err != nil || r.Format != ReceiptFormat {
		return receiptJSON{}, "", fmt.Errorf("not a receipt of format %d: %s", ReceiptFormat, truncate(string(data), 200))
	}
	for _, name := range []string{"prefix", "fingerprint", "key_hex", "cost", "stamp_at", "stamp_mark"} {
		if _, ok := fields[name]; !ok {
			return receiptJSON{}, "", fmt.Errorf("not a receipt: %s is missing", name)
		}
	}
	key, err := hex.DecodeString(r.KeyHex)
	if err != nil {
		return receiptJSON{}, "", fmt.Errorf("not a receipt: key_hex is not hexadecimal")
	}
	switch {
	case r.Cost == 0:
		return receiptJSON{}, "", fmt.Errorf("not a receipt: a cost of 0 takes nothing, and has no receipt")
	case r.Cost > 0xFFFFFFFF:
		return receiptJSON{}, "", fmt.Errorf("not a receipt: cost must be an integer from 0 to %d", uint64(0xFFFFFFFF))
	case r.StampAt > maxExact || r.StampMark > maxExact:
		return receiptJSON{}, "", fmt.Errorf("not a receipt: a stamp must be an integer from 0 to %d", uint64(maxExact))
	}
	return r, string(key), nil
}
