package ratelab

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
)

// DefaultPrefix is the default key prefix.
const DefaultPrefix = "ratelab"

// MaxKeyLen is the longest user key, in bytes, used as is in a Redis key;
// a longer one is replaced by %H and the hex SHA-1 of its bytes.
const MaxKeyLen = 128

var escaper = strings.NewReplacer("%", "%25", "{", "%7B", "}", "%7D")

// RedisKey is the Redis key of user key under prefix, for an algorithm's
// key suffix: escape(prefix) ":{" tag "}:" suffix (lua/README.md, "Keys").
// A Go string holds any bytes: binary keys are kept as they are.
func RedisKey(prefix, key, suffix string) string {
	var tag string
	switch {
	case len(key) == 0:
		tag = "%"
	case len(key) > MaxKeyLen:
		sum := sha1.Sum([]byte(key))
		tag = "%H" + hex.EncodeToString(sum[:])
	default:
		tag = escaper.Replace(key)
	}
	return escaper.Replace(prefix) + ":{" + tag + "}:" + suffix
}
