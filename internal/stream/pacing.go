package stream

import (
	"context"
	"sync/atomic"

	"scistream/internal/pace"
	"scistream/internal/relay"
)

// Pacing on the data path: each direction of a stream with a rate has a
// token bucket (pace.Grant) that every one of its connections waits on
// after each chunk it writes. Best-effort streams share two buckets
// (pace.BestEffort) filled with what reservations leave of the gateway's
// capacity, but only while something is reserved. The
// sockmap engine moves bytes in the kernel, where nothing can wait: a
// connection that must be paced runs on splice instead, and the stream's
// view says so (api.Stream.EngineNote).

// The directions of a stream's bytes, as its buckets are indexed.
const (
	DirToWAN   = 0
	DirFromWAN = 1
)

// Bucket returns the bucket that paces direction d (DirToWAN,
// DirFromWAN) of st now: its own, best effort's, or nil.
func (st *Stream) Bucket(d int) *pace.Bucket {
	if b := st.Pace.Bucket(d); b != nil {
		return b
	}
	return st.env.BestEffort.Bucket(d)
}

// paced reports whether st's connections are paced now.
func (st *Stream) paced() bool { return st.Bucket(DirToWAN) != nil }

// counter returns the count function of direction d of one connection
// for relay.Relay: it counts the bytes written and waits until they fit
// the stream's pace, or until ctx (the connection's) ends.
func (st *Stream) counter(ctx context.Context, d int, n *atomic.Int64) func(int64) {
	return func(k int64) {
		n.Add(k)
		if b := st.Bucket(d); b != nil {
			b.Wait(ctx, k)
		}
	}
}

// EngineFor returns the engine a new connection of st runs on: the
// stream's, unless it is sockmap and the connection must be paced.
func (st *Stream) EngineFor() relay.Engine {
	if st.engine.Name() == "sockmap" && st.paced() {
		return st.env.Paceable
	}
	return st.engine
}

// EngineNote says why st's new connections run on another engine than
// the one it asked for, or "".
func (st *Stream) EngineNote() string {
	if st.engine.Name() == "sockmap" && st.paced() {
		return "sockmap cannot pace a rate (the kernel moves the bytes): this stream's connections run on splice while it is paced"
	}
	return ""
}

// Refusals counts a stream's refused connections by the reasons the
// metrics tell apart (over_cap is stream.overCap).
type Refusals struct {
	Allow        atomic.Int64 // sources outside the allow-list
	HandshakeCap atomic.Int64 // over a cap of WAN connections in their handshake
	WANAuth      atomic.Int64 // WAN connections that failed authentication
}
