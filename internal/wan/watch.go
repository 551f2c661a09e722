package wan

// A stream's watch leg. Data legs come and go with application
// connections, and the end of one says little about the peer gateway: a
// deliberate abort (its application reset) and the death of its process
// look the same on the wire whenever the dying process had bytes unread
// (its kernel then resets the connection instead of ending it with FIN).
// So the outbound gateway keeps one more WAN connection per stream, the
// watch leg, that carries no application bytes, only one word at its end:
//
//	'R'  the sender released its side of the stream
//	'S'  the sender is stopping; it restores the stream when it starts again
//
// and then its orderly end (close_notify on TLS, FIN on TCP). A watch leg
// that ends without a word means the peer is gone: its process died (an
// idle socket has nothing unread, so its kernel ends it with FIN, which
// on TLS arrives without close_notify), or the path broke (TCP keepalive
// notices it). It is a leg like the others
// (pinned TLS, the HMAC preface), to the listener of channel 0, and its
// preface names WatchChannel, which no data leg can. A path that breaks
// without a FIN or a reset is noticed by its TCP keepalive within about
// 20 s (watchKeepAlive).

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// WatchChannel is the channel a watch leg's preface names: no data
// channel has it (a stream has at most api.MaxChannels).
const WatchChannel = 0xFFFF

// watchKeepAlive is the TCP keepalive of a watch leg: the first probe
// after 5 s of silence, then every 5 s, three unanswered ones end it. A
// path that breaks without a FIN or a reset is noticed within about 20 s.
func watchKeepAlive() net.KeepAliveConfig {
	return net.KeepAliveConfig{Enable: true, Idle: 5 * time.Second, Interval: 5 * time.Second, Count: 3}
}

// PeerEnd says how the peer ended a watch leg.
type PeerEnd int

const (
	// PeerLost: the leg ended without a word (the peer's process died,
	// or the path broke), or Close was called on this side.
	PeerLost PeerEnd = iota
	// PeerReleased: the peer released its side of the stream.
	PeerReleased
	// PeerStopping: the peer is shutting down and restores the stream
	// when it starts again.
	PeerStopping
)

func (e PeerEnd) String() string {
	switch e {
	case PeerReleased:
		return "released"
	case PeerStopping:
		return "stopping"
	}
	return "lost"
}

// Watch is one end of a stream's watch leg.
type Watch struct {
	c     net.Conn
	close sync.Once
}

// DialWatch opens the watch leg of the stream l names to addr, the peer's
// listener of channel 0 (l.Channel is ignored).
func DialWatch(ctx context.Context, addr string, l *Leg) (*Watch, error) {
	wl := *l
	wl.Channel = WatchChannel
	c, err := Dial(ctx, addr, &wl)
	if err != nil {
		return nil, err
	}
	return NewWatch(c), nil
}

// NewWatch makes c, a leg that AcceptLeg returned as the watch leg (or
// DialWatch opened), a Watch, with the watch leg's keepalive.
func NewWatch(c net.Conn) *Watch {
	if t, ok := innermost(c).(*net.TCPConn); ok {
		t.SetKeepAliveConfig(watchKeepAlive())
	}
	return &Watch{c: c}
}

// Conn is the watch leg's connection.
func (w *Watch) Conn() net.Conn { return w.c }

// Wait blocks until the leg ends and says how. It returns PeerLost with
// the cause when the leg ended without a word, or when Close was called on
// this side.
func (w *Watch) Wait() (PeerEnd, error) {
	var b [1]byte
	n, err := io.ReadFull(w.c, b[:])
	if n == 1 {
		switch b[0] {
		case 'R':
			return PeerReleased, nil
		case 'S':
			return PeerStopping, nil
		}
		return PeerLost, fmt.Errorf("watch leg: unknown word %#x", b[0])
	}
	if err == io.EOF {
		err = fmt.Errorf("watch leg ended without a word: %w", io.ErrUnexpectedEOF)
	}
	return PeerLost, err
}

// Close ends the leg from this side, first telling the peer why when end
// is PeerReleased or PeerStopping (PeerLost: no word, as a dying process
// would). It does not wait for a peer that does not read for more than a
// second. Idempotent; it makes a Wait on this side return.
func (w *Watch) Close(end PeerEnd) {
	w.close.Do(func() {
		var word byte
		switch end {
		case PeerReleased:
			word = 'R'
		case PeerStopping:
			word = 'S'
		}
		if word != 0 {
			w.c.SetWriteDeadline(time.Now().Add(time.Second))
			w.c.Write([]byte{word})
		}
		w.c.Close()
	})
}

// innermost returns the connection under c's NetConn wrappers.
func innermost(c net.Conn) net.Conn {
	for {
		u, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			return c
		}
		c = u.NetConn()
	}
}
