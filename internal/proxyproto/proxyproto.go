// Package proxyproto reads the header of the PROXY protocol, version 2
// (the binary form HAProxy sends with send-proxy-v2), which a TCP router
// puts before a connection's first byte to say where the connection came
// from. The gateway's shared WAN port reads it when it sits behind such a
// router (s2cs --wan_proxy_protocol), so that its caps, trust and logs
// see each peer's own address rather than the router's.
//
// Only version 2 is read; a connection that does not start with its
// signature is refused. The reader takes exactly the header's bytes from
// the connection, never more, so the TLS handshake that follows is
// untouched.
package proxyproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
)

// signature opens every version 2 header.
const signature = "\r\n\r\n\x00\r\nQUIT\n"

// MaxHeader bounds the address block (with its TLVs) this reader accepts;
// HAProxy sends far less. A longer one is refused rather than read.
const MaxHeader = 512

// ErrHeader is wrapped by every error about a header that arrived and is
// not a valid version 2 header.
var ErrHeader = errors.New("not a PROXY protocol v2 header")

// Header is what a router said about a connection.
type Header struct {
	// Local is true for the LOCAL command: the router's own connection
	// (a health check), with no addresses.
	Local bool
	// Source and Dest are the original connection's ends (PROXY command,
	// TCP over IPv4 or IPv6); zero for LOCAL or an unspecified family.
	Source, Dest netip.AddrPort
}

// Read reads one header from r, exactly its bytes.
func Read(r io.Reader) (*Header, error) {
	var fixed [16]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return nil, fmt.Errorf("read PROXY header: %w", err)
	}
	return parse(fixed, r)
}

func parse(fixed [16]byte, r io.Reader) (*Header, error) {
	if string(fixed[:12]) != signature {
		return nil, fmt.Errorf("%w: no signature", ErrHeader)
	}
	if v := fixed[12] >> 4; v != 2 {
		return nil, fmt.Errorf("%w: version %d", ErrHeader, v)
	}
	cmd, fam := fixed[12]&0x0f, fixed[13]
	n := int(binary.BigEndian.Uint16(fixed[14:]))
	if n > MaxHeader {
		return nil, fmt.Errorf("%w: %d bytes of addresses, more than %d", ErrHeader, n, MaxHeader)
	}
	block := make([]byte, n)
	if _, err := io.ReadFull(r, block); err != nil {
		return nil, fmt.Errorf("read PROXY header: %w", err)
	}
	h := &Header{}
	switch cmd {
	case 0: // LOCAL: the addresses, if any, are to be ignored
		h.Local = true
		return h, nil
	case 1: // PROXY
	default:
		return nil, fmt.Errorf("%w: command %d", ErrHeader, cmd)
	}
	switch fam {
	case 0x11: // TCP over IPv4
		if n < 12 {
			return nil, fmt.Errorf("%w: %d bytes for IPv4 addresses", ErrHeader, n)
		}
		src := netip.AddrFrom4([4]byte(block[0:4]))
		dst := netip.AddrFrom4([4]byte(block[4:8]))
		h.Source = netip.AddrPortFrom(src, binary.BigEndian.Uint16(block[8:]))
		h.Dest = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(block[10:]))
	case 0x21: // TCP over IPv6
		if n < 36 {
			return nil, fmt.Errorf("%w: %d bytes for IPv6 addresses", ErrHeader, n)
		}
		src := netip.AddrFrom16([16]byte(block[0:16])).Unmap()
		dst := netip.AddrFrom16([16]byte(block[16:32])).Unmap()
		h.Source = netip.AddrPortFrom(src, binary.BigEndian.Uint16(block[32:]))
		h.Dest = netip.AddrPortFrom(dst, binary.BigEndian.Uint16(block[34:]))
	case 0x00: // UNSPEC: the router knows no addresses
	default:
		return nil, fmt.Errorf("%w: family %#x is not TCP", ErrHeader, fam)
	}
	return h, nil
}

// Append encodes a PROXY command header for a TCP connection from src to
// dst (both IPv4 or both IPv6), as a router sends it; for tests and
// tools.
func Append(b []byte, src, dst netip.AddrPort) []byte {
	b = append(b, signature...)
	b = append(b, 0x21)
	if src.Addr().Is4() && dst.Addr().Is4() {
		b = append(b, 0x11, 0, 12)
		s, d := src.Addr().As4(), dst.Addr().As4()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
	} else {
		b = append(b, 0x21, 0, 36)
		s, d := src.Addr().As16(), dst.Addr().As16()
		b = append(b, s[:]...)
		b = append(b, d[:]...)
	}
	b = binary.BigEndian.AppendUint16(b, src.Port())
	return binary.BigEndian.AppendUint16(b, dst.Port())
}
