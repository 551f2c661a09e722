package stream

import "scistream/internal/api"

// Wired or connected. A stream whose two gateways know each other is
// wired (an inbound stream once attached, an outbound one from its
// creation); it becomes connected on this gateway the first time a data
// leg works here: on an outbound stream, the WAN leg of an application
// connection completed its handshake with the peer (TLS, TCP or QUIC,
// fresh or pooled); on an inbound one, an admitted WAN leg reached the
// application. A wrong peer listener, or an application that never
// answers, so leaves the stream wired, its failed dials in its last
// errors, instead of calling it connected until data fails.
//
// The flip costs one atomic load per connection after the first (never
// one per byte), changes the record in memory at once, and tells the
// gateway (Env.Connected), which stores it apart from the data path.

// legWorked notes that a data leg worked on st: the first call moves a
// wired record to connected.
func (st *Stream) legWorked() {
	if st.dataOK.Load() || !st.dataOK.CompareAndSwap(false, true) {
		return
	}
	st.mu.Lock()
	up := st.settleLocked()
	st.mu.Unlock()
	if up {
		st.tellConnected()
	}
}

// settleLocked moves a wired record to connected if a data leg has worked
// (dataOK), and reports whether it did. The record is replaced by a
// changed copy, never changed in place: the record New was given may
// still be read by its caller. st.mu must be held.
func (st *Stream) settleLocked() bool {
	if st.rec.State != api.StateWired || !st.dataOK.Load() {
		return false
	}
	r := *st.rec
	r.State = api.StateConnected
	st.rec = &r
	return true
}

// tellConnected tells the gateway that st's record went connected.
func (st *Stream) tellConnected() {
	if f := st.env.Connected; f != nil {
		f(st)
	}
}
