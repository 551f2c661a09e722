// Package carry carries an application connection's bytes between two
// gateways as positioned frames over WAN legs that may be replaced: a
// leg that breaks (a reset, a timeout, a silent path) costs the
// applications a pause, not their connections. It is the one place
// that knows positions, acknowledgements, the resend buffer and the
// windows; the stream and the leg transports (internal/wan,
// internal/wanquic) use it through Conn, and a later leg joins a
// connection through the handshake frames it defines (frame.go), whose
// authentication is wan's.
//
// Each direction of a connection is a byte stream with positions 0, 1,
// 2, ...; a data frame says where its bytes are. The receiver takes
// them in order, writes them to its application and acknowledges the
// position it received to, with the window it grants past it (the room
// left in its backlog). The sender keeps every byte from the position
// acknowledged to the last it read from its application (sendBuf), at
// most Config.Window, and sends what the peer's window takes. When a
// leg is lost the connection parks (Config.ResumeWindow): its
// application stays connected and is read until the buffer is full
// (backpressure, never a drop); a new leg's handshake tells each side
// the other's received position (join, accepted), from which each
// resends, so every byte arrives once, in order. Past the window the
// connection ends with a reset at both applications, as a lost leg did
// before.
//
// Three goroutines at most per connection, and two while it only moves
// bytes: the sender reads its application into the buffer and writes
// the frames the window takes (sendLoop, flush); the leg reader reads
// frames and writes data straight to the application's socket without
// waiting (sockio TryWrite), handing what it will not take at once to a
// writer started for as long as there is a backlog (writeApp). The leg
// reader never waits on a write, to the leg or to the application: an
// application that does not read cannot hold up the acknowledgements of
// the bytes it sends, and two gateways that both send can never wait on
// each other. What the reader wants sent (an ack, the answer to a ping)
// goes out with the sender's next frame or from a flusher started for
// it (kick). Acknowledgements ride with the data going the other way,
// and go alone past a quarter of the window or within AckDelay; a
// connection with nothing in flight holds no buffer.
//
// Liveness: a side that has bytes out unacknowledged, a fin
// unacknowledged or a ping unanswered expects a frame; silence past
// Config.LegTimeout loses the leg (a middlebox that drops everything
// without a reset). A sender whose peer's window is shut pings. The
// dialer pings a leg that carried nothing either way for
// Config.KeepAlive, and the acceptor takes a leg it heard nothing on for
// KeepAlive plus LegTimeout for lost: a side that only receives (a
// consumer's gateway) has nothing of its own in flight, so without it a
// path that went silent would hold its connections for ever, and the
// pings cost one small frame a KeepAlive on an idle leg.
//
// The ends: the application's end of stream is a fin frame, forwarded
// to the other application as a half-close once every byte before it
// is written; the connection ends in order once both fins are written
// and acknowledged. An application's reset, or a failure of this side,
// is a reset frame: the other application is reset too. A frame that
// breaks the protocol ends the connection: nothing the peer sends is
// trusted further.
package carry
