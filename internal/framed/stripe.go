package framed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"

	"scistream/internal/carry"
	"scistream/internal/relay"
	"scistream/internal/wan"
)

// Striped connections (carry, stripe.go there): an outbound connection
// whose stream asks for N legs at once says so in its open; once the
// peer granted them it dials the further legs, each proved as a join is
// and sent as a stripe frame, and brings them again each time the
// connection resumed (a lost leg loses them all). A stripe the peer
// refuses, or that fails, is not tried again until the next resume:
// the connection goes on, on the legs it has.

// stripeLowat is the unsent bytes past which a striped connection's leg
// takes no more writes (TCP_NOTSENT_LOWAT): a leg whose flow is slow
// (policed, lossy) fills to it and the next frames go on the others,
// rather than waiting in its socket while the receiver waits for them.
const stripeLowat = 512 << 10

// lowat sets stripeLowat on the TCP connection under leg nc, if it has
// one of its own (a QUIC stream has not, and is never striped; a pooled
// leg's session shares its leg with the sessions after it, which are
// not all striped).
func lowat(nc net.Conn) {
	if _, pooled := nc.(interface{ LegFramed() bool }); pooled {
		return
	}
	t := wan.TCPOf(nc)
	if t == nil {
		return
	}
	if rc, err := t.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, tcpNotSentLowat, stripeLowat)
		})
	}
}

// tcpNotSentLowat is TCP_NOTSENT_LOWAT (linux/tcp.h).
const tcpNotSentLowat = 25

// bringStripes dials and adds the further legs of c, a striped
// connection just accepted or resumed, at once, until each is added,
// refused or failed, or c ended.
func bringStripes(cfg Config, c *carry.Conn, id carry.ID, key [32]byte, dial func(ctx context.Context) (net.Conn, error)) {
	granted, now := c.Stripes()
	gen := c.Gen()
	if granted <= 1 || now == 0 {
		return
	}
	ctx, cancel := untilEnded(c)
	defer cancel()
	var wg sync.WaitGroup
	for range granted - now {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := stripeOnce(ctx, c, gen, id, key, dial); err != nil && cfg.Log != nil && c.Gen() == gen && !c.Done() {
				cfg.Log.Debug("a further leg of a striped connection failed: it goes on with the legs it has", "err", err)
			}
		}()
	}
	wg.Wait()
}

// stripeOnce dials one further leg of c and adds it.
func stripeOnce(ctx context.Context, c *carry.Conn, gen int, id carry.ID, key [32]byte, dial func(ctx context.Context) (net.Conn, error)) error {
	nl, err := dial(ctx)
	if err != nil {
		return err
	}
	if !wan.Framed(nl) {
		relay.Abort(nl)
		return errUnframed
	}
	if _, _, err := join(nl, carry.AppendStripe(nil, carry.Join{ID: id, Proof: wan.JoinProof(key, wan.BindingOf(nl), id)})); err != nil {
		relay.Abort(nl)
		return err
	}
	lowat(nl)
	if err := c.AddStripe(nl, gen, nil); err != nil {
		// Ended in order: the peer, which added it, only drops it.
		endInOrder(nl)
		return err
	}
	return nil
}

// endInOrder ends leg nl in order, and what the peer still sends is read
// for a moment, so that the peer sees the end and not a reset.
func endInOrder(nl net.Conn) {
	nl.SetDeadline(time.Now().Add(2 * time.Second))
	if cw, ok := nl.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		var b [512]byte
		for {
			if _, err := nl.Read(b[:]); err != nil {
				break
			}
		}
	}
	relay.Abort(nl)
}

// Stripe gives the connection j names the further leg w (its first
// frame, of header h, was a stripe frame) once the proof holds, if the
// connection is striped and short of its legs: it answers accepted, or
// refuses (as a join is: "no such connection" for a proof that fails).
func (t *Table) Stripe(w net.Conn, h carry.Header, j carry.Join) error {
	e, err := t.proved(w, j, "stripe")
	if err != nil {
		return err
	}
	lowat(w)
	err = e.c.AddStripe(w, -1, func() error {
		w.SetWriteDeadline(time.Now().Add(wan.HandshakeTimeout))
		defer w.SetWriteDeadline(time.Time{})
		_, err := w.Write(carry.AppendHeader(nil, carry.Header{Type: carry.TypeAccepted}))
		return err
	})
	if errors.Is(err, carry.ErrNoStripe) {
		Refuse(w, err.Error())
		return fmt.Errorf("stripe of connection %s: %w", j.ID, err)
	}
	if err != nil {
		relay.Abort(w)
		return fmt.Errorf("stripe of connection %s: %w", j.ID, err)
	}
	return nil
}
