package stream

import "scistream/internal/api"

// Wired or connected. A stream whose two gateways know each other is
// wired (an inbound stream once attached, an outbound one from its
// creation; a stream of a SciStream 1.2 client once its partner is known,
// peerca.go); it becomes connected on this gateway the first time a data
// leg works here: on an outbound stream, the WAN leg of an application
// connection completed its handshake with the peer (TLS, TCP or QUIC,
// fresh or pooled); on an inbound one, an admitted WAN leg reached the
// application. A wrong peer listener, or an application that never
// answers, so leaves the stream wired, its failed dials in its last
// errors, instead of calling it connected until data fails.
//
// The flip costs one atomic load per connection after the first (never
// one per byte), changes the record in memory at once, and tells the
// gateway (Env.Settled), which stores it apart from the data path.

// legWorked notes that a data leg worked on st: the first call moves a
// wired record to connected.
func (st *Stream) legWorked() {
	if st.dataOK.Load() || !st.dataOK.CompareAndSwap(false, true) {
		return
	}
	st.settle()
}

// settle moves st's record on as settleLocked does, and tells the
// gateway if it did.
func (st *Stream) settle() {
	st.mu.Lock()
	up := st.settleLocked()
	st.mu.Unlock()
	if up {
		st.tellSettled()
	}
}

// settleLocked moves the record on as far as what happened says, and
// reports whether it moved: a listening inbound 1.2 record whose partner
// came (partnerOK) to wired, a wired record a data leg has worked on
// (dataOK) to connected. The record is replaced by a changed copy, never
// changed in place: the record New was given may still be read by its
// caller. st.mu must be held.
func (st *Stream) settleLocked() bool {
	moved := false
	if st.rec.State == api.StateListening && st.partnerOK.Load() && partnerWires(st.rec) {
		r := *st.rec
		r.State = api.StateWired
		st.rec = &r
		moved = true
	}
	if st.rec.State == api.StateWired && st.dataOK.Load() {
		r := *st.rec
		r.State = api.StateConnected
		st.rec = &r
		moved = true
	}
	return moved
}

// tellSettled tells the gateway that st's record moved on by itself.
func (st *Stream) tellSettled() {
	if f := st.env.Settled; f != nil {
		f(st)
	}
}
