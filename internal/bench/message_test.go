package bench

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"
)

// stream returns the messages of s, each in its own slice.
func messages(t *testing.T, s Spec) [][]byte {
	t.Helper()
	g, err := NewGenerator(s)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for seq := uint64(0); seq < uint64(s.Messages()); seq++ {
		out = append(out, bytes.Clone(g.Message(seq)))
	}
	return out
}

// verify feeds data to a fresh verifier of s in chunks of random sizes
// and returns the first error (from Feed or Finish).
func verify(t *testing.T, s Spec, data []byte, rng *rand.Rand) (*Verifier, error) {
	t.Helper()
	v, err := NewVerifier(s)
	if err != nil {
		t.Fatal(err)
	}
	for at := 0; len(data) > 0; at++ {
		n := min(len(data), 1+rng.IntN(3*(HeaderLen+s.Size)))
		if err := v.Feed(data[:n], 0); err != nil {
			return v, err
		}
		data = data[n:]
	}
	return v, v.Finish()
}

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, s := range []Spec{
		{Size: 1, Bytes: 5, Seed: 1, Run: 1},
		{Size: 7, Bytes: 100, Seed: 2, Run: 2},
		{Size: 8, Bytes: 64, Seed: 3, Run: 3},
		{Size: 9, Bytes: 100, Seed: 4, Run: 4},
		{Size: 1000, Bytes: 10_500, Seed: 5, Run: 5},
		{Size: 64 << 10, Bytes: 4 << 20, Seed: 6, Run: 6},
		{Size: 200 << 10, Bytes: 1<<20 + 3, Seed: 7, Run: 7},
	} {
		g, err := NewGenerator(s)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		n, err := Produce(&buf, g)
		if err != nil {
			t.Fatalf("%+v: Produce: %v", s, err)
		}
		if n != s.WireBytes() || int64(buf.Len()) != n {
			t.Fatalf("%+v: wrote %d (buffer %d), want %d", s, n, buf.Len(), s.WireBytes())
		}
		v, err := verify(t, s, buf.Bytes(), rng)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		if v.Messages() != s.Messages() || v.PayloadBytes() != s.Bytes {
			t.Fatalf("%+v: verified %d messages, %d bytes; want %d, %d", s, v.Messages(), v.PayloadBytes(), s.Messages(), s.Bytes)
		}
	}
}

func TestSpecLengths(t *testing.T) {
	s := Spec{Size: 10, Bytes: 25}
	if s.Messages() != 3 || s.PayloadLen(0) != 10 || s.PayloadLen(1) != 10 || s.PayloadLen(2) != 5 {
		t.Fatalf("messages %d, lengths %d %d %d", s.Messages(), s.PayloadLen(0), s.PayloadLen(1), s.PayloadLen(2))
	}
	if s.WireBytes() != 25+3*HeaderLen {
		t.Fatalf("wire bytes %d", s.WireBytes())
	}
	for _, bad := range []Spec{{Size: 0, Bytes: 10}, {Size: 10, Bytes: 9}, {Size: MaxSize + 1, Bytes: MaxSize + 1}} {
		if bad.Validate() == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

// Messages do not depend on the order they are generated in (the short
// last message's stamp must not leak into the others).
func TestGeneratorOrderIndependent(t *testing.T) {
	s := Spec{Size: 64, Bytes: 64*5 + 20, Seed: 9, Run: 9}
	fwd := messages(t, s)
	g, _ := NewGenerator(s)
	for i := len(fwd) - 1; i >= 0; i-- {
		if m := g.Message(uint64(i)); !bytes.Equal(m, fwd[i]) {
			t.Fatalf("message %d differs when generated in reverse", i)
		}
	}
	// Payloads of different messages differ (a duplicate is visible).
	if bytes.Equal(fwd[1][HeaderLen:], fwd[2][HeaderLen:]) {
		t.Fatal("payloads of messages 1 and 2 are equal")
	}
}

func join(ms [][]byte) []byte { return bytes.Join(ms, nil) }

func TestVerifierCatches(t *testing.T) {
	s := Spec{Size: 100, Bytes: 1000, Seed: 42, Run: 7}
	ms := messages(t, s)
	other := messages(t, Spec{Size: 100, Bytes: 1000, Seed: 42, Run: 8})
	mut := func(f func(ms [][]byte) [][]byte) []byte {
		c := make([][]byte, len(ms))
		for i := range ms {
			c[i] = bytes.Clone(ms[i])
		}
		return join(f(c))
	}
	cases := []struct {
		name    string
		data    []byte
		seq     uint64
		problem string
	}{
		{"corrupted payload byte", mut(func(m [][]byte) [][]byte { m[4][HeaderLen+50] ^= 0x01; return m }), 4, "payload corrupted"},
		{"corrupted stamp byte", mut(func(m [][]byte) [][]byte { m[4][len(m[4])-1] ^= 0x80; return m }), 4, "payload corrupted"},
		{"corrupted header checksum", mut(func(m [][]byte) [][]byte { m[2][21] ^= 0x10; return m }), 2, "header checksum"},
		{"corrupted length", mut(func(m [][]byte) [][]byte { m[2][19]++; return m }), 2, "payload length"},
		{"corrupted magic", mut(func(m [][]byte) [][]byte { m[3][0] = 'X'; return m }), 3, "bad magic"},
		{"reordered", mut(func(m [][]byte) [][]byte { m[3], m[4] = m[4], m[3]; return m }), 3, "missing or reordered"},
		{"missing", mut(func(m [][]byte) [][]byte { return append(m[:5], m[6:]...) }), 5, "missing or reordered"},
		{"missing last", mut(func(m [][]byte) [][]byte { return m[:9] }), 9, "ended after 9 of 10"},
		{"missing first", mut(func(m [][]byte) [][]byte { return m[1:] }), 0, "missing or reordered"},
		{"duplicated", mut(func(m [][]byte) [][]byte {
			return append(m[:6], append([][]byte{bytes.Clone(m[5])}, m[6:]...)...)
		}), 6, "duplicate"},
		{"duplicated last", mut(func(m [][]byte) [][]byte { return append(m, m[9]) }), 10, "unexpected bytes after the last"},
		{"stale payload under a fresh header", mut(func(m [][]byte) [][]byte {
			copy(m[5][HeaderLen:], m[4][HeaderLen:])
			return m
		}), 5, "payload corrupted"},
		{"message of another run", mut(func(m [][]byte) [][]byte { m[3] = other[3]; return m }), 3, "another run"},
		{"truncated", join(ms)[:len(join(ms))-3], 9, "ended inside a message"},
		{"truncated in header", join(ms)[:len(join(ms))-100-10], 9, "ended inside a message"},
		{"extra bytes", append(join(ms), 0), 10, "unexpected bytes"},
		{"empty", nil, 0, "ended after 0 of 10"},
	}
	for _, c := range cases {
		for _, chunked := range []bool{false, true} {
			v, err := NewVerifier(s)
			if err != nil {
				t.Fatal(err)
			}
			if chunked {
				for i := range c.data {
					if err = v.Feed(c.data[i:i+1], 0); err != nil {
						break
					}
				}
			} else {
				err = v.Feed(c.data, 0)
			}
			if err == nil {
				err = v.Finish()
			}
			ie, ok := err.(*IntegrityError)
			if !ok {
				t.Errorf("%s (byte by byte %v): got %v, want an IntegrityError", c.name, chunked, err)
				continue
			}
			if ie.Seq != c.seq || !strings.Contains(ie.Problem, c.problem) {
				t.Errorf("%s (byte by byte %v): got %v; want seq %d and %q", c.name, chunked, err, c.seq, c.problem)
			}
			// Sticky: further input reports the same error.
			if err2 := v.Feed([]byte{1}, 0); err2 != err {
				t.Errorf("%s: error not sticky: %v", c.name, err2)
			}
			if !IsIntegrity(err) {
				t.Errorf("%s: IsIntegrity false", c.name)
			}
		}
	}
}

// Every single-bit flip anywhere in the stream is caught.
func TestVerifierCatchesEveryBitFlip(t *testing.T) {
	s := Spec{Size: 20, Bytes: 50, Seed: 3, Run: 1}
	data := join(messages(t, s))
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		for bit := range 8 {
			d := bytes.Clone(data)
			d[i] ^= 1 << bit
			if _, err := verify(t, s, d, rng); !IsIntegrity(err) {
				t.Fatalf("flip of bit %d of byte %d: got %v", bit, i, err)
			}
		}
	}
}

func TestHeaderLayout(t *testing.T) {
	s := Spec{Size: 16, Bytes: 40, Seed: 5, Run: 0xdeadbeef}
	g, _ := NewGenerator(s)
	m := g.Message(2)
	if string(m[:4]) != "S2BM" || binary.BigEndian.Uint32(m[4:]) != 0xdeadbeef ||
		binary.BigEndian.Uint64(m[8:]) != 2 || binary.BigEndian.Uint32(m[16:]) != 8 || len(m) != HeaderLen+8 {
		t.Fatalf("header %x", m[:HeaderLen])
	}
}

// The verifier sees network bytes: it never panics, and it accepts
// exactly the generated stream (fixed or open-ended).
func FuzzVerifier(f *testing.F) {
	fixed := Spec{Size: 16, Bytes: 40, Seed: 1, Run: 2}
	open := Spec{Size: 16, Seed: 1, Run: 2}
	var good, goodOpen bytes.Buffer
	g, _ := NewGenerator(fixed)
	Produce(&good, g)
	g2, _ := NewGenerator(open)
	for seq := range uint64(3) {
		goodOpen.Write(g2.Message(seq))
	}
	goodOpen.Write(g2.End(3))
	f.Add(good.Bytes(), false)
	f.Add(goodOpen.Bytes(), true)
	f.Fuzz(func(t *testing.T, data []byte, isOpen bool) {
		s, want := fixed, good.Bytes()
		if isOpen {
			s, want = open, goodOpen.Bytes()
		}
		v, _ := NewVerifier(s)
		err := v.Feed(data, 0)
		if err == nil {
			err = v.Finish()
		}
		if err == nil && !isOpen && !bytes.Equal(data, want) {
			t.Fatalf("accepted a stream that is not the generated one")
		}
		if err == nil && isOpen && !v.Done() {
			t.Fatalf("accepted an open-ended stream without its end marker")
		}
	})
}
