// Package bytesize reads and writes byte counts the way people type them
// on a command line: "64KiB", "1.5GiB", "10 MB", "1000000".
//
// Parse and Format are exact and round-trip: Format writes the largest
// unit that divides the count, so Parse(Format(n)) == n. Human is for
// reports a person reads, rounded to one decimal in powers of 1024.
package bytesize

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

var units = []struct {
	name string
	mult int64
}{
	{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10},
	{"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3},
	{"B", 1},
}

// Parse parses a byte count: a non-negative number (decimals allowed
// when the result is a whole number of bytes) with an optional unit B,
// KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000),
// case-insensitive, e.g. "64KiB", "1.5GiB", "1000000", "10 MB". The error
// quotes s and says how to write a count; callers prefix the flag name.
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.TrimSpace(t[i:])
	bad := func(why string) error {
		return fmt.Errorf("%q: %s; write a number with an optional unit B, KiB, MiB, GiB, KB, MB or GB, e.g. 64KiB", s, why)
	}
	if num == "" {
		return 0, bad("no number")
	}
	mult := int64(-1)
	if unit == "" {
		mult = 1
	}
	for _, u := range units {
		if strings.EqualFold(unit, u.name) {
			mult = u.mult
			break
		}
	}
	if mult < 0 {
		return 0, bad("unknown unit " + strconv.Quote(unit))
	}
	r, ok := new(big.Rat).SetString(num)
	if !ok || strings.Count(num, ".") > 1 {
		return 0, bad("not a number")
	}
	r.Mul(r, new(big.Rat).SetInt64(mult))
	if !r.IsInt() {
		return 0, bad("not a whole number of bytes")
	}
	if !r.Num().IsInt64() {
		return 0, bad("too large")
	}
	return r.Num().Int64(), nil
}

// Format writes n with the unit that divides it exactly into the
// smallest number: 65536 -> "64KiB", 1000000 -> "1MB", 1023 -> "1023B".
// Parse reads it back.
func Format(n int64) string {
	best, name := n, "B"
	if n > 0 {
		for _, u := range units {
			if n%u.mult == 0 && n/u.mult < best {
				best, name = n/u.mult, u.name
			}
		}
	}
	return strconv.FormatInt(best, 10) + name
}

// Human writes n for a person to read: bytes below 1 KiB ("512 B"),
// otherwise one decimal in the largest power of 1024 that keeps the
// number below 1024 ("1.5 MiB"), up to PiB. It is rounded, so not for
// Parse.
func Human(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	f := float64(n)
	for _, u := range []string{"KiB", "MiB", "GiB", "TiB"} {
		f /= unit
		if f < unit {
			return fmt.Sprintf("%.1f %s", f, u)
		}
	}
	return fmt.Sprintf("%.1f PiB", f/unit)
}
