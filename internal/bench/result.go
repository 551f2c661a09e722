package bench

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"time"
)

// After verifying a whole run, the consumer sends the producer what it
// measured on that connection, then closes: a result frame
//
//	magic "S2BS"   4
//	length uint32  4   of the JSON body, at most MaxResultLen
//	body   JSON        a connResult
//	crc    uint32  4   CRC-32C of magic, length and body
//
// so a producer on another host (s2bench run) reports the consumer's
// goodput, latency and jitter next to its own round-trip times. A failed
// run sends no frame: the consumer resets the connection instead.

// MaxResultLen bounds the JSON body of a result frame.
const MaxResultLen = 4096

const resultMagic = "S2BS"

// connResult is the JSON body of a result frame. Times are nanoseconds
// since the consumer's epoch (shared by the connections it serves).
type connResult struct {
	Remote       string  `json:"remote"`
	Messages     int64   `json:"messages"`
	Bytes        int64   `json:"bytes"`
	FirstNS      int64   `json:"first_ns"`
	LastNS       int64   `json:"last_ns"`
	FirstPayload int64   `json:"first_payload"`
	GoodputBps   float64 `json:"goodput_Bps"`
	MsgsPerSec   float64 `json:"msgs_per_s"`
	LatencyUS    float64 `json:"latency_us"`
	JitterUS     float64 `json:"jitter_us"`
}

func appendResult(b []byte, r *ReceiveResult) ([]byte, error) {
	body, err := json.Marshal(connResult{
		Remote: r.Remote, Messages: r.Measure.Messages, Bytes: r.Measure.Bytes,
		FirstNS: int64(r.First), LastNS: int64(r.Last), FirstPayload: r.FirstPayload,
		GoodputBps: r.GoodputBps, MsgsPerSec: r.MsgsPerSec, LatencyUS: r.LatencyUS, JitterUS: r.JitterUS,
	})
	if err != nil || len(body) > MaxResultLen {
		return b, fmt.Errorf("result frame: %d bytes, %v", len(body), err)
	}
	start := len(b)
	b = append(b, resultMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	b = append(b, body...)
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], castagnoli)), nil
}

// readResult reads a result frame from r and returns it as the consumer's
// side of the connection.
func readResult(r io.Reader) (*ReceiveResult, error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	if string(hdr[:4]) != resultMagic {
		return nil, fmt.Errorf("result frame: bad magic %q", hdr[:4])
	}
	n := binary.BigEndian.Uint32(hdr[4:])
	if n > MaxResultLen {
		return nil, fmt.Errorf("result frame: length %d > %d", n, MaxResultLen)
	}
	rest := make([]byte, n+4)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, fmt.Errorf("result frame: %w", err)
	}
	return parseResult(append(hdr[:], rest...))
}

// parseResult decodes a complete result frame.
func parseResult(f []byte) (*ReceiveResult, error) {
	if len(f) < 12 || string(f[:4]) != resultMagic {
		return nil, errors.New("result frame: truncated or bad magic")
	}
	n := int(binary.BigEndian.Uint32(f[4:]))
	if n > MaxResultLen || len(f) != 12+n {
		return nil, fmt.Errorf("result frame: length %d does not match %d bytes", n, len(f))
	}
	if crc32.Checksum(f[:8+n], castagnoli) != binary.BigEndian.Uint32(f[8+n:]) {
		return nil, errors.New("result frame: checksum mismatch")
	}
	dec := json.NewDecoder(bytes.NewReader(f[8 : 8+n]))
	dec.DisallowUnknownFields()
	var c connResult
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("result frame: %w", err)
	}
	if c.Messages < 0 || c.Bytes < 0 || c.FirstNS < 0 || c.LastNS < c.FirstNS || c.FirstPayload < 0 {
		return nil, errors.New("result frame: inconsistent values")
	}
	return &ReceiveResult{
		Remote: c.Remote,
		Measure: Measure{Messages: c.Messages, Bytes: c.Bytes, Span: time.Duration(c.LastNS - c.FirstNS),
			GoodputBps: c.GoodputBps, MsgsPerSec: c.MsgsPerSec, LatencyUS: c.LatencyUS, JitterUS: c.JitterUS},
		First: time.Duration(c.FirstNS), Last: time.Duration(c.LastNS), FirstPayload: c.FirstPayload,
	}, nil
}
