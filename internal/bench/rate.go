package bench

import (
	"fmt"
	"strconv"
	"strings"

	"scistream/internal/bytesize"
)

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
		return bytesize.Format(int64(r.BytesPerSec)) + "/s"
	case r.BytesPerSec > 0:
		return strconv.FormatFloat(r.BytesPerSec, 'f', -1, 64) + "B/s"
	}
	return ""
}

// ParseRate parses a target rate: "N msg/s" (messages per second, also
// "msgs/s" or "/s") or a byte count per second ("100MB/s", "1GiB/s",
// units as in bytesize.Parse). The "/s" may be left out after a unit.
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
	n, err := bytesize.Parse(t)
	if err != nil {
		return bad("not a byte count per second")
	}
	if n <= 0 {
		return bad("must be positive")
	}
	return Rate{BytesPerSec: float64(n)}, nil
}
