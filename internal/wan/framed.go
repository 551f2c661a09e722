package wan

import (
	"crypto/hmac"
	"crypto/sha256"
	"net"

	"scistream/internal/carry"
)

// Framed legs. Two gateways of this release negotiate ALPNFramed on
// TLS legs and QUIC connections: each application connection's legs
// then carry internal/carry's positioned frames, after the preface. The
// first leg of a connection opens it (carry's open frame: the
// connection's ID, chosen by the dialer); the acceptor answers once it
// reached its application (accepted, or refused with the reason). A
// later leg of the same connection, when one broke, joins it: its
// preface proves the stream secret as every leg's does, and its join
// frame proves the connection's resume key, which only the two ends of
// the connection's first leg hold:
//
//	key   = HMAC-SHA256(stream secret, "scistream resume v1" | first leg's binding | ID)
//	proof = HMAC-SHA256(key, "scistream join v1" | this leg's binding | ID)
//
// The binding (ExportBinding) is the session's own, so a proof is good
// on one leg only: a captured join cannot be replayed on another. A
// stranger holds neither the pinned key nor the secret; another
// stream's peer holds another secret; a peer of this stream that did
// not see the first leg's session cannot derive the key.

// ALPNFramed is the application protocol of legs that carry positioned
// frames (internal/carry), preferred over ALPNAnswers.
const ALPNFramed = "scistream-wan/3"

// ALPNFramedPools is ALPNFramed, and on a pooled leg (internal/legpool)
// each session carries positioned frames too, so that a connection on a
// pooled leg also outlives it; preferred over ALPNFramed. Between a
// gateway of this release and one that offers ALPNFramed alone, pooled
// sessions carry the application's bytes as they are.
const ALPNFramedPools = "scistream-wan/4"

// Framed reports whether c, a leg of an application connection (from
// Dial, the acceptors, a QUIC stream), carries positioned frames.
func Framed(c net.Conn) bool {
	f, ok := c.(interface{ Framed() bool })
	return ok && f.Framed()
}

// TCPOf returns the TCP connection under leg c, through its wrappers
// (NetConn: TLS, a pooled session, the PROXY protocol's), or nil if c
// does not stand on one (a QUIC stream).
func TCPOf(c net.Conn) *net.TCPConn {
	for {
		if t, ok := c.(*net.TCPConn); ok {
			return t
		}
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return nil
		}
		c = u.NetConn()
	}
}

// BindingOf returns the binding of leg c (ExportBinding of its session),
// or nil for a leg without one (plaintext TCP).
func BindingOf(c net.Conn) []byte {
	if b, ok := c.(interface{ Binding() []byte }); ok {
		return b.Binding()
	}
	return nil
}

// ResumeKey is the resume key of connection id of a stream of secret,
// opened on a leg of binding.
func ResumeKey(secret, binding []byte, id carry.ID) [32]byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("scistream resume v1"))
	m.Write(binding)
	m.Write(id[:])
	var k [32]byte
	copy(k[:], m.Sum(nil))
	return k
}

// JoinProof is the proof a join of connection id on a leg of binding
// carries.
func JoinProof(key [32]byte, binding []byte, id carry.ID) [32]byte {
	m := hmac.New(sha256.New, key[:])
	m.Write([]byte("scistream join v1"))
	m.Write(binding)
	m.Write(id[:])
	var p [32]byte
	copy(p[:], m.Sum(nil))
	return p
}

// CheckJoin reports whether proof is connection id's join proof under
// key on a leg of binding (in constant time).
func CheckJoin(key [32]byte, binding []byte, id carry.ID, proof [32]byte) bool {
	want := JoinProof(key, binding, id)
	return hmac.Equal(want[:], proof[:])
}
