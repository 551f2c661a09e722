package proxyproto

import (
	"bytes"
	"errors"
	"io"
	"net/netip"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, c := range []struct{ src, dst string }{
		{"198.51.100.7:40000", "10.0.0.3:8443"},
		{"[2001:db8::7]:40000", "[2001:db8::3]:8443"},
	} {
		src, dst := netip.MustParseAddrPort(c.src), netip.MustParseAddrPort(c.dst)
		// The TLS bytes after the header must stay unread.
		r := bytes.NewReader(append(Append(nil, src, dst), "\x16\x03\x01"...))
		h, err := Read(r)
		if err != nil {
			t.Fatal(err)
		}
		if h.Local || h.Source != src || h.Dest != dst {
			t.Fatalf("%v -> %v read as %+v", src, dst, h)
		}
		if rest, _ := io.ReadAll(r); string(rest) != "\x16\x03\x01" {
			t.Fatalf("the reader took %d bytes past the header", 3-len(rest))
		}
	}
}

func TestLocalAndTLVs(t *testing.T) {
	local := []byte(signature + "\x20\x00\x00\x00")
	h, err := Read(bytes.NewReader(local))
	if err != nil || !h.Local {
		t.Fatalf("LOCAL: %+v, %v", h, err)
	}
	// TLVs after the addresses are skipped.
	b := Append(nil, netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("192.0.2.2:2"))
	b[15] += 7
	b = append(b, 0x04, 0x00, 0x04, 'n', 'o', 'o', 'p', 'X')
	r := bytes.NewReader(b)
	if h, err := Read(r); err != nil || h.Source.Port() != 1 {
		t.Fatalf("with a TLV: %+v, %v", h, err)
	}
	if rest, _ := io.ReadAll(r); string(rest) != "X" {
		t.Fatalf("rest %q", rest)
	}
}

func TestRefusals(t *testing.T) {
	good := Append(nil, netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("192.0.2.2:2"))
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for name, b := range map[string][]byte{
		"a TLS ClientHello": []byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03abcdefgh"),
		"version 1 text":    []byte("PROXY TCP4 192.0.2.1 192.0.2.2 1 2\r\n"),
		"version 3":         mod(func(b []byte) []byte { b[12] = 0x31; return b }),
		"command 2":         mod(func(b []byte) []byte { b[12] = 0x22; return b }),
		"UDP":               mod(func(b []byte) []byte { b[13] = 0x12; return b }),
		"short IPv4 block":  mod(func(b []byte) []byte { b[15] = 4; return b[:20] }),
		"huge block":        mod(func(b []byte) []byte { b[14], b[15] = 0xff, 0xff; return b }),
	} {
		_, err := Read(bytes.NewReader(b))
		if !errors.Is(err, ErrHeader) {
			t.Errorf("%s: %v, want ErrHeader", name, err)
		}
	}
	// Cut short: a read error, not ErrHeader.
	if _, err := Read(bytes.NewReader(good[:20])); err == nil || errors.Is(err, ErrHeader) {
		t.Errorf("a header cut short: %v", err)
	}
}

// FuzzRead: whatever a connection sends first, Read neither panics nor
// reads past what it says the header is.
func FuzzRead(f *testing.F) {
	f.Add(Append(nil, netip.MustParseAddrPort("192.0.2.1:1"), netip.MustParseAddrPort("192.0.2.2:2")))
	f.Add([]byte(signature + "\x20\x00\x00\x00"))
	f.Add([]byte("\x16\x03\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		_, err := Read(r)
		if err == nil {
			used := len(b) - r.Len()
			if used < 16 || used > 16+MaxHeader || used != 16+int(b[14])<<8+int(b[15]) {
				t.Fatalf("consumed %d bytes of %d", used, len(b))
			}
		}
	})
}
