package stream

import (
	"errors"
	"log/slog"
	"net"
	"time"

	"scistream/internal/appwait"
	"scistream/internal/relay"
	"scistream/internal/wan"
)

// The acceptor's answer (internal/wan, answer.go): on a leg whose
// gateways negotiated it, the inbound side answers each application
// connection's leg once it reached the application, or refuses it with
// the reason; the outbound side is connected only once a leg was
// accepted, and a refusal is the peer's failure to reach its
// application, recorded as a failed dial with that reason.

// answer returns the hook that reads the peer's answer on w, the leg of
// an application connection, before the leg's bytes go to the
// application (relay.Hooks.BeforeBA): an accepting answer makes the
// stream connected. A leg whose acceptor sends none (an older peer, a
// plaintext TCP leg) counts as working once dialed: answer returns nil.
func (st *Stream) answer(log *slog.Logger, w net.Conn) func() error {
	if !wan.Answers(w) {
		st.legWorked()
		return nil
	}
	return func() error {
		if err := wan.ReadAnswer(w); err != nil {
			return err
		}
		if st.ends.refused.OK(time.Now()) {
			log.Info("the peer gateway accepts this stream's connections again")
		}
		st.legWorked()
		return nil
	}
}

// refuseLeg answers the leg w with a refusal of reason (if its dialer
// takes answers) and ends it: in order after the answer, so that the
// reason arrives before the end (the dialer resets its application
// itself on a refusal), then, after what the dialer still sends was
// read for a moment, with a reset.
func refuseLeg(w net.Conn, reason string) {
	if !wan.Answers(w) {
		relay.Abort(w)
		return
	}
	w.SetDeadline(time.Now().Add(refuseLinger))
	if wan.WriteAnswer(w, reason) == nil {
		if cw, ok := w.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			buf := make([]byte, 4<<10)
			for {
				if _, err := w.Read(buf); err != nil {
					break
				}
			}
		}
	}
	relay.Abort(w)
}

// refuseLinger bounds how long a refused leg is kept for its answer to
// arrive.
const refuseLinger = 2 * time.Second

// appRefusal is the reason a leg is refused when the application could
// not be reached (err from dialApp).
func appRefusal(err error) string {
	var we *appwait.Error
	if errors.As(err, &we) {
		return err.Error() // "application HOST:PORT not reachable for 30s: ..."
	}
	return "application not reachable: " + err.Error()
}
