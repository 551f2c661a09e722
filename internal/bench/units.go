package bench

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

// ParseBytes parses a byte count: a non-negative number (decimals allowed
// when the result is a whole number of bytes) with an optional unit B,
// KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000),
// case-insensitive, e.g. "64KiB", "1.5GiB", "1000000", "10 MB".
func ParseBytes(s string) (int64, error) {
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

// FormatBytes writes n with the unit that divides it exactly into the
// smallest number: 65536 -> "64KiB", 1000000 -> "1MB", 1023 -> "1023B".
func FormatBytes(n int64) string {
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

// Rate is a target send rate: messages per second or bytes per second
// (exactly one is positive), or neither (as fast as possible).
type Rate struct {
	MsgsPerSec  float64
	BytesPerSec float64
}

// PerSecond returns the message rate r means for messages of size bytes.
func (r Rate) PerSecond(size int) float64 {
	if r.BytesPerSec > 0 {
		return r.BytesPerSec / float64(size)
	}
	return r.MsgsPerSec
}

// String writes r as ParseRate reads it ("" for as fast as possible).
func (r Rate) String() string {
	switch {
	case r.MsgsPerSec > 0:
		return strconv.FormatFloat(r.MsgsPerSec, 'f', -1, 64) + "msg/s"
	case r.BytesPerSec > 0 && r.BytesPerSec == float64(int64(r.BytesPerSec)):
		return FormatBytes(int64(r.BytesPerSec)) + "/s"
	case r.BytesPerSec > 0:
		return strconv.FormatFloat(r.BytesPerSec, 'f', -1, 64) + "B/s"
	}
	return ""
}

// ParseRate parses a target rate: "N msg/s" (messages per second, also
// "msgs/s" or "/s") or a byte count per second ("100MB/s", "1GiB/s",
// units as in ParseBytes). The "/s" may be left out after a unit.
func ParseRate(s string) (Rate, error) {
	bad := func(why string) (Rate, error) {
		return Rate{}, fmt.Errorf("%q: %s; write messages per second (e.g. 5000msg/s) or bytes per second (e.g. 100MB/s)", s, why)
	}
	t := strings.TrimSpace(s)
	perS := strings.HasSuffix(t, "/s")
	t = strings.TrimSpace(strings.TrimSuffix(t, "/s"))
	num, isMsgs := t, false
	for _, u := range []string{"msgs", "msg"} {
		if len(t) >= len(u) && strings.EqualFold(t[len(t)-len(u):], u) {
			num, isMsgs = strings.TrimSpace(t[:len(t)-len(u)]), true
			break
		}
	}
	pure := num != "" && strings.Trim(num, "0123456789.") == ""
	switch {
	case isMsgs && !pure:
		return bad("not a number")
	case !isMsgs && pure && !perS:
		return bad("a bare number is ambiguous")
	case isMsgs || pure:
		v, err := strconv.ParseFloat(num, 64)
		if err != nil || v <= 0 || v > 1e9 {
			return bad("messages per second must be a number in (0, 1e9]")
		}
		return Rate{MsgsPerSec: v}, nil
	}
	n, err := ParseBytes(t)
	if err != nil {
		return bad("not a byte count per second")
	}
	if n <= 0 {
		return bad("must be positive")
	}
	return Rate{BytesPerSec: float64(n)}, nil
}
