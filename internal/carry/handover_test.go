package carry

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"scistream/internal/waitfor"
)

// handOver freezes c (the rig's side dialer or not), sends its state
// through its encoding, and thaws it into a new Conn on a new socket of
// the same application connection, as a new process would; old is the
// error channel the frozen Relay returns on, which then gets the new
// one's.
func handOver(t *testing.T, r *rig, dialer bool, cfg Config) {
	t.Helper()
	c, errc := r.acc, r.accErr
	if dialer {
		c, errc = r.dial, r.dialErr
	}
	st, f, err := c.Freeze()
	if err != nil {
		t.Fatalf("freeze: %v", err)
	}
	if err := <-errc; !errors.Is(err, ErrHandedOver) {
		t.Fatalf("the frozen Relay returned %v, not ErrHandedOver", err)
	}
	enc, err := st.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got State
	if err := got.UnmarshalBinary(enc); err != nil {
		t.Fatalf("decode the state: %v", err)
	}
	app, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	n, err := Thaw(cfg, &got)
	if err != nil {
		t.Fatalf("thaw: %v", err)
	}
	if dialer {
		r.dial = n
	} else {
		r.acc = n
	}
	go func() { errc <- n.RelayThawed(app, Counts{}) }()
	waitParked(t, n)
}

// TestHandOverMidTransfer (issue 37): under a transfer both ways, the
// dialer's side, then the acceptor's, then both at once, are frozen,
// carried through their encoding to a new Conn on a duplicate of the
// application's socket, and resumed on a new leg: every byte arrives
// once, in order, neither application is reset (their gateway ends reset
// on close, so a close of the last descriptor would show), and both
// Conns end in order.
func TestHandOverMidTransfer(t *testing.T) {
	cfg := Config{Window: 512 << 10, ResumeWindow: 10 * time.Second}
	r := newRig(t, cfg)
	sent := make(chan error, 2)
	up := send(r.prodApp, 48<<20, sent)
	down := send(r.consApp, 12<<20, sent)
	type got struct {
		sum [32]byte
		n   int64
		err error
	}
	gc, gp := make(chan got, 1), make(chan got, 1)
	var cmu sync.Mutex
	var cn int64
	counted := &countingConn{Conn: r.consApp, n: &cn, mu: &cmu}
	go func() { s, n, err := recvAll(counted); gc <- got{s, n, err} }()
	go func() { s, n, err := recvAll(r.prodApp); gp <- got{s, n, err} }()
	steps := []struct{ dialer, acceptor bool }{{true, false}, {false, true}, {true, true}, {true, false}}
	for i, s := range steps {
		want := int64(i+1) * (48 << 20) / int64(len(steps)+1)
		waitfor.Must(t, 30*time.Second, "the consumer to read more", func() bool {
			cmu.Lock()
			defer cmu.Unlock()
			return cn >= want
		})
		if s.dialer {
			handOver(t, r, true, cfg)
		}
		if s.acceptor {
			handOver(t, r, false, cfg)
		}
		// The side not handed over saw its leg end, and parked.
		waitParked(t, r.dial)
		waitParked(t, r.acc)
		if err := r.resume(); err != nil {
			t.Fatalf("resume after hand-over %d: %v", i, err)
		}
	}
	c, p := <-gc, <-gp
	if c.err != nil || c.n != 48<<20 || c.sum != up {
		t.Fatalf("consumer got %d bytes (%v), digest match %v", c.n, c.err, c.sum == up)
	}
	if p.err != nil || p.n != 12<<20 || p.sum != down {
		t.Fatalf("producer got %d bytes (%v), digest match %v", p.n, p.err, p.sum == down)
	}
	for range 2 {
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-r.dialErr; err != nil {
		t.Fatalf("dialer: %v", err)
	}
	if err := <-r.accErr; err != nil {
		t.Fatalf("acceptor: %v", err)
	}
	if s := r.dial.Stats(); s.Resumes != int64(len(steps)) {
		t.Errorf("the dialer counts %d resumes over the hand-overs, want %d (the counts travel with the state)", s.Resumes, len(steps))
	}
}

// TestHandOverParkedAndEnded: a connection parked (its leg lost) hands
// over as one running does; one that ended, or that its peer has not
// accepted, is refused and goes on as before.
func TestHandOverParkedAndEnded(t *testing.T) {
	cfg := Config{Window: 256 << 10, ResumeWindow: 10 * time.Second}
	r := newRig(t, cfg)
	r.prodApp.Write([]byte("before the cut "))
	buf := make([]byte, 64)
	r.consApp.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := r.consApp.Read(buf); err != nil || string(buf[:n]) != "before the cut " {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	r.cut()
	waitParked(t, r.dial)
	waitParked(t, r.acc)
	// Parked, and bytes written meanwhile wait in the dialer's buffer.
	r.prodApp.Write([]byte("while parked"))
	waitfor.Must(t, 10*time.Second, "the parked dialer to read its application", func() bool {
		r.dial.mu.Lock()
		defer r.dial.mu.Unlock()
		return r.dial.snd.end == uint64(len("before the cut while parked"))
	})
	handOver(t, r, true, cfg)
	if err := r.resume(); err != nil {
		t.Fatal(err)
	}
	if n, err := r.consApp.Read(buf); err != nil || string(buf[:n]) != "while parked" {
		t.Fatalf("after the hand-over read %q, %v", buf[:n], err)
	}
	// Ended: refused.
	r.prodApp.CloseWrite()
	r.consApp.CloseWrite()
	if err := <-r.dialErr; err != nil {
		t.Fatalf("dialer: %v", err)
	}
	if _, _, err := r.dial.Freeze(); err == nil || !strings.Contains(err.Error(), "ended") {
		t.Fatalf("freeze of an ended connection: %v", err)
	}
	// Not accepted yet: refused, and it goes on.
	c := New(cfg, true)
	if _, _, err := c.Freeze(); err == nil {
		t.Fatal("a connection that does not run was frozen")
	}
	prodGW, _ := tcpPair(t)
	ld, _ := tcpPair(t) // a leg on which no answer comes
	c = New(cfg, true)
	relayed := make(chan error, 1)
	go func() { relayed <- c.Relay(prodGW, ld, Counts{}) }()
	waitfor.Must(t, 10*time.Second, "the connection to run", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.app != nil
	})
	if _, _, err := c.Freeze(); err == nil || !strings.Contains(err.Error(), "not accepted") {
		t.Fatalf("freeze of a connection its peer has not accepted: %v", err)
	}
	if c.Done() {
		t.Fatal("a refused freeze ended the connection")
	}
	c.Abort(errors.New("test over"), "")
	if err := <-relayed; err == nil || errors.Is(err, ErrHandedOver) {
		t.Fatalf("the connection not handed over ended with %v", err)
	}
}

// TestStateEncoding: a state survives its encoding, and what is not a
// state of this version, or no connection could have been in, is
// refused with a reason.
func TestStateEncoding(t *testing.T) {
	st := State{Dialer: true, Acked: 100, Unacked: []byte("unacked"), Sent: 103, AppEOF: true, Limit: 1 << 20,
		Recv: 5000, Backlog: []byte("backlog"), PeerFin: true, Stats: Stats{Resumes: 3, Resent: 77, Parked: time.Second}}
	b, _ := st.MarshalBinary()
	var got State
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if got.Dialer != st.Dialer || got.Acked != st.Acked || got.Sent != st.Sent || !bytes.Equal(got.Unacked, st.Unacked) || got.AppEOF != st.AppEOF ||
		got.FinAcked || got.Limit != st.Limit || got.Recv != st.Recv || !bytes.Equal(got.Backlog, st.Backlog) ||
		got.PeerFin != st.PeerFin || got.FinDone || got.Stats != st.Stats {
		t.Fatalf("decoded %+v, encoded %+v", got, st)
	}
	other := append([]byte(nil), b...)
	other[3] = 3
	for _, c := range []struct {
		name string
		b    []byte
		want string
	}{
		{"short", b[:10], "shorter"},
		{"another version", other, "version 3"},
		{"not a state", append([]byte("HTTP"), b[4:]...), "not a handed-over"},
		{"truncated bytes", b[:len(b)-3], "left"},
		{"trailing", append(append([]byte(nil), b...), 0), "after"},
	} {
		var s State
		err := s.UnmarshalBinary(c.b)
		if err == nil || !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an ErrFrame saying %q", c.name, err, c.want)
		}
	}
	if b[3] != 1 {
		t.Errorf("a state of one leg is encoded as version %d, want 1 (what the release before striped states reads)", b[3])
	}
	// Striped: version 2, and thawed striped again.
	striped := st
	striped.Stripes = 4
	sb, _ := striped.MarshalBinary()
	if sb[3] != 2 || len(sb) != len(b)+1 {
		t.Errorf("a striped state is encoded as version %d in %d bytes, want 2 in %d", sb[3], len(sb), len(b)+1)
	}
	got = State{}
	if err := got.UnmarshalBinary(sb); err != nil || got.Stripes != 4 || !bytes.Equal(got.Backlog, st.Backlog) {
		t.Fatalf("a striped state decoded to %+v, %v", got, err)
	}
	c, err := Thaw(Config{}, &got)
	if err != nil {
		t.Fatal(err)
	}
	if granted, _ := c.Stripes(); granted != 4 {
		t.Errorf("a thawed striped connection may have %d legs at once, want 4", granted)
	}
	c.mu.Lock()
	c.snd.release()
	c.bl.release()
	c.mu.Unlock()
	for _, n := range []byte{0, 1, MaxStripes + 1} {
		bad := append([]byte(nil), sb...)
		bad[5] = n
		if err := new(State).UnmarshalBinary(bad); !errors.Is(err, ErrFrame) {
			t.Errorf("a striped state of %d legs at once: %v, want an ErrFrame", n, err)
		}
	}
	bad := st
	bad.FinAcked = true // with bytes before it unacknowledged
	b, _ = bad.MarshalBinary()
	if err := new(State).UnmarshalBinary(b); err == nil {
		t.Error("a fin acknowledged before its bytes was taken")
	}
}

// FuzzState: any bytes decode to a state that encodes back to them, or
// are refused; never a panic, never a thawed connection of a refused
// state.
func FuzzState(f *testing.F) {
	st := State{Acked: 1, Unacked: []byte("x"), Sent: 2, Limit: 9, Recv: 4, Backlog: []byte("yz")}
	b, _ := st.MarshalBinary()
	f.Add(b)
	st.Stripes = 4
	b, _ = st.MarshalBinary()
	f.Add(b)
	f.Add([]byte("SCH\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var s State
		if err := s.UnmarshalBinary(b); err != nil {
			return
		}
		again, _ := s.MarshalBinary()
		if !bytes.Equal(again, b) {
			t.Fatalf("%x decodes to %+v, which encodes to %x", b, s, again)
		}
		c, err := Thaw(Config{}, &s)
		if err != nil {
			t.Fatalf("a decoded state is refused by Thaw: %v", err)
		}
		c.mu.Lock()
		held, bl := c.snd.held(), c.bl.n
		c.snd.release()
		c.bl.release()
		c.mu.Unlock()
		if held != len(s.Unacked) || bl != len(s.Backlog) {
			t.Fatalf("thawed %d and %d bytes of %d and %d", held, bl, len(s.Unacked), len(s.Backlog))
		}
	})
}
