package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"scistream/internal/api"
	"scistream/internal/bytesize"
)

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newCmdline("status", "UID [--s2cs HOST:PORT --server_cert FILE] [--watch 1s]", stdout, stderr)
	gw := cl.recordGateway("every gateway s2uc wired for UID")
	watch := cl.fs.Duration("watch", 0, "repeat every interval until interrupted (e.g. 1s)")
	count := cl.fs.Int("count", 0, "with --watch, stop after this many reports (0: until interrupted)")
	owner := cl.fs.String("owner", "", ownerUsage)
	pos, err := cl.parse(args, 1, 1, "give exactly one stream UID")
	if err != nil {
		return err
	}
	if err := checkOwner(*owner, gw); err != nil {
		return err
	}
	if *watch < 0 || (*watch > 0 && *watch < 100*time.Millisecond) {
		return usagef("--watch must be at least 100ms")
	}
	uid := pos[0]
	sides := []statusSide{{gw: *gw}}
	if gw.s2cs == "" {
		ss, err := sessions()
		if err != nil {
			return err
		}
		sess, err := loadRecord(ss, uid, "give the gateway with --s2cs HOST:PORT")
		var nf *classified
		switch {
		case errors.As(err, &nf) && nf.status == exitNotFound && !errors.Is(err, errReleased) && gw.useDefault():
			sides = []statusSide{{gw: *gw}} // no record: ask the default gateway
		case err != nil:
			return err
		default:
			sides = nil
			if e := sess.Inbound; e != nil {
				sides = append(sides, statusSide{"inbound", cl.recordSide(uid, "inbound", e, "token_file", gw.tokenFile)})
			}
			if e := sess.Outbound; e != nil {
				sides = append(sides, statusSide{"outbound", cl.recordSide(uid, "outbound", e, "token_file", gw.tokenFile)})
			}
		}
	}
	for n := 1; ; n++ {
		// Every side that answers is shown; the error of each that
		// does not is returned (and said on stderr each round with
		// --watch), so that one gateway down hides nothing of the other.
		// With --output json the error of each side is in the JSON too.
		var views []*api.Stream
		var addrs []string
		var errs []error
		out := map[string]any{"uid": uid}
		for _, sd := range sides {
			c, err := sd.gw.client(cl.timeout)
			if err != nil {
				return err
			}
			s, err := c.GetOf(ctx, *owner, uid)
			c.Close()
			if sd.side != "" {
				out[sd.side] = sideStatus{Gateway: sd.gw.s2cs}
			}
			if err != nil {
				err = fmt.Errorf("status on %s: %w", sd.gw.s2cs, err)
				errs = append(errs, err)
				if sd.side != "" {
					je := jsonErrorOf(printableError{hint(err)})
					out[sd.side] = sideStatus{Gateway: sd.gw.s2cs, Error: &je}
				}
				continue
			}
			views = append(views, public(s))
			addrs = append(addrs, sd.gw.s2cs)
		}
		if cl.output == "json" {
			var err error
			switch {
			case len(sides) == 1 && len(views) == 1:
				err = printJSON(stdout, views[0])
			case len(sides) > 1:
				out["gateways"] = views
				err = printJSON(stdout, out)
			}
			if err != nil {
				return err
			}
		} else {
			for i, s := range views {
				printStatus(stdout, addrs[i], s)
			}
		}
		err := errors.Join(errs...)
		if *watch == 0 || (*count > 0 && n >= *count) {
			return err
		}
		if err != nil {
			report(stderr, args, hint(printableError{err}))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*watch):
		}
	}
}

// statusSide is a gateway status asks: side is "inbound" or "outbound"
// for one its local record names, "" for the one the command line or
// the defaults name.
type statusSide struct {
	side string
	gw   gatewayFlags
}

// sideStatus is one side of a stream of two in status --output json:
// its gateway and, if it did not answer, the error (as a JSON error of
// s2uc's: code, message, request_id, exit_code).
type sideStatus struct {
	Gateway string     `json:"gateway"`
	Error   *jsonError `json:"error,omitempty"`
}

func printStatus(w io.Writer, addr string, s *api.Stream) {
	st := s.Stats
	if st == nil {
		st = &api.Stats{}
	}
	fmt.Fprintf(w, "%s on %s: %s %s", s.UID, addr, printable(string(s.Role)), stateText(s, true))
	if s.Reason != "" {
		fmt.Fprintf(w, " (%s)", printable(s.Reason))
	}
	if st.Peer != "" {
		fmt.Fprintf(w, ", peer gateway %s", printable(st.Peer))
	}
	wanCC := ""
	if s.WANCC != "" {
		wanCC = " (" + printable(s.WANCC) + ")"
	}
	fmt.Fprintf(w, "\n  listeners %s -> targets %s, wan %s%s, engine %s", printableList(s.Listeners, ","), printableList(s.Targets, ","), printable(s.WAN), wanCC, printable(s.Engine))
	if s.AppWaitS != nil {
		fmt.Fprintf(w, ", app wait %s", time.Duration(*s.AppWaitS)*time.Second)
	}
	var waiting string
	if st.WaitingConns > 0 {
		waiting = fmt.Sprintf(", %d waiting for the application", st.WaitingConns)
	}
	over := ""
	if st.OverCapConns > 0 {
		over = fmt.Sprintf(" (%d over the cap)", st.OverCapConns)
	}
	limit := ""
	if s.MaxActiveConns > 0 {
		limit = fmt.Sprintf(" of at most %d", s.MaxActiveConns)
	}
	fmt.Fprintf(w, "\n  connections %d active%s%s, %d total, %d refused%s, %d aborted%s, %d errors\n",
		st.ActiveConns, limit, waiting, st.TotalConns, st.RejectedConns, over, st.AbortedConns, byKind(st), st.Errors)
	if !s.State.Terminal() {
		fmt.Fprintf(w, "  %s%s\n", resumeText(s), resumeCounts(st))
		if t := stripeText(s); t != "" {
			fmt.Fprintf(w, "  %s\n", t)
		}
	}
	if st.PeerFlaps > 0 {
		fmt.Fprintf(w, "  the peer gateway failed again %d times within seconds of answering (one outage in the log)\n", st.PeerFlaps)
	}
	if st.WANRedials > 0 {
		fmt.Fprintf(w, "  %d WAN dials the peer gateway reset in its handshake cap, dialled again\n", st.WANRedials)
	}
	if s.WANPool > 0 || st.LegsCreated > 0 {
		fmt.Fprintf(w, "  pooled WAN legs (%d warm per channel): %d idle, %d dialed, %d reused, %d torn down at the gateway's cap\n",
			s.WANPool, st.LegsIdle, st.LegsCreated, st.LegsReused, st.LegsTornDown)
	}
	if s.WANServerName != "" {
		fmt.Fprintf(w, "  on the shared WAN port as %s\n", printable(s.WANServerName))
	}
	if len(s.Channels) > 0 {
		fmt.Fprint(w, "  channels:")
		for _, c := range s.Channels {
			node := printable(c.Node)
			if node == "" {
				node = "no node (being taken over)"
			}
			fmt.Fprintf(w, " %d %s on %s;", c.Channel, printable(c.Listener), node)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, "  ")
	printTerms(w, s)
	if s.EngineNote != "" {
		fmt.Fprintf(w, "  engine: %s\n", printable(s.EngineNote))
	}
	for _, k := range api.EndKinds() {
		if l, ok := st.LastErrors[k]; ok {
			fmt.Fprintf(w, "  last %s %s: %s\n", endName(k), l.Time.Local().Format("2006-01-02 15:04:05"), printable(l.Reason))
		}
	}
	fmt.Fprintf(w, "  bytes %s to WAN, %s from WAN; rate %s to WAN, %s from WAN\n",
		bytesize.Human(st.BytesToWAN), bytesize.Human(st.BytesFromWAN), fmtRate(st.RateToWAN), fmtRate(st.RateFromWAN))
	printRates(w, st.Rates)
}

// stateText says s's state. A wired stream is said with what it means,
// that no data has passed on that gateway yet, and, with lastErr, the
// latest failure of a connection there, the likely reason (a wrong peer
// listener: "dial tcp ...: connection refused"). A stream whose
// connections wait for a new WAN leg is resuming, whatever its state.
func stateText(s *api.Stream, lastErr bool) string {
	if n := statsOf(s).ParkedConns; n > 0 {
		if n == 1 {
			return "resuming (1 connection waits for a new WAN leg)"
		}
		return fmt.Sprintf("resuming (%d connections wait for a new WAN leg)", n)
	}
	text := printable(string(s.State))
	if s.State != api.StateWired {
		return text
	}
	why := "no data has passed yet"
	if l, kind, ok := latestError(s.Stats); ok && lastErr {
		why += fmt.Sprintf("; last %s %s: %s", endName(kind), l.Time.Local().Format("2006-01-02 15:04:05"), printable(l.Reason))
	}
	return text + " (" + why + ")"
}

// resumeText says whether s's connections outlive a lost WAN leg, as
// its gateway says (Stats.Resume), or, before a leg said, what the
// stream's settings tell.
func resumeText(s *api.Stream) string {
	var window time.Duration
	if s.ResumeWindowS != nil {
		window = time.Duration(*s.ResumeWindowS) * time.Second
	}
	mode := statsOf(s).Resume
	if mode == "" {
		switch {
		case s.WAN == api.WANTCP:
			mode = api.ResumePlain
		case s.ResumeWindowS != nil && window == 0:
			mode = api.ResumeOff
		case s.ResumeWindowS == nil:
			return "resume not known (a gateway of an older release)"
		default:
			return fmt.Sprintf("resume up to %s if the peer gateway resumes (no WAN leg yet)", window)
		}
	}
	switch mode {
	case api.ResumeOn:
		return fmt.Sprintf("resume on (up to %s)", window)
	case api.ResumeOff:
		return "resume off (the stream's resume window is 0)"
	case api.ResumePeer:
		return "no resume: the peer gateway's release does not resume"
	case api.ResumePlain:
		return "no resume: plaintext tcp legs"
	case api.ResumePooled:
		return "no resume: the peer gateway's release does not resume on pooled legs"
	}
	return "resume " + printable(mode)
}

// stripeText says how many WAN legs at once s's connections run on, if
// its request asked for more than one: "stripe 4 legs", or what the
// peer granted instead.
func stripeText(s *api.Stream) string {
	if s.Stripe <= 1 {
		return ""
	}
	got := statsOf(s).StripeLegs
	switch {
	case got == 0:
		return fmt.Sprintf("stripe %d legs asked (no connection yet)", s.Stripe)
	case got == 1:
		return fmt.Sprintf("stripe 1 leg: %d asked, the peer gateway does not stripe (an older release, or its --max_stripe 1)", s.Stripe)
	case got < s.Stripe:
		return fmt.Sprintf("stripe %d legs: %d asked, the peer gateway's --max_stripe", got, s.Stripe)
	}
	return fmt.Sprintf("stripe %d legs", got)
}

// resumeCounts writes what st's connections did when their WAN legs
// were lost, ": 2 legs resumed, 1.0 MiB resent, 4.2s parked, 1 reset
// after the window", or nothing if none was.
func resumeCounts(st *api.Stats) string {
	var parts []string
	if st.ResumedLegs > 0 {
		parts = append(parts, fmt.Sprintf("%d %s resumed", st.ResumedLegs, plural(st.ResumedLegs, "leg", "legs")))
	}
	if st.ResentBytes > 0 {
		parts = append(parts, bytesize.Human(st.ResentBytes)+" resent")
	}
	if st.ParkedSeconds > 0 {
		parts = append(parts, time.Duration(st.ParkedSeconds*float64(time.Second)).Round(100*time.Millisecond).String()+" parked")
	}
	if st.ResumeExpired > 0 {
		parts = append(parts, fmt.Sprintf("%d %s reset after the window", st.ResumeExpired, plural(st.ResumeExpired, "connection", "connections")))
	}
	if len(parts) == 0 {
		return ""
	}
	return ": " + strings.Join(parts, ", ")
}

func plural(n int64, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// latestError returns the latest of st's last errors and its kind.
func latestError(st *api.Stats) (api.LastError, string, bool) {
	var last api.LastError
	var kind string
	if st == nil {
		return last, "", false
	}
	for _, k := range api.EndKinds() {
		if l, ok := st.LastErrors[k]; ok && (kind == "" || l.Time.After(last.Time)) {
			last, kind = l, k
		}
	}
	return last, kind, kind != ""
}

// endName says a kind of aborted connection in words.
func endName(kind string) string {
	switch kind {
	case api.EndAppReset:
		return "application reset"
	case api.EndPeerReset:
		return "peer gateway reset"
	case api.EndWANLost:
		return "WAN leg lost"
	case api.EndDialFailed:
		return "failed dial"
	case api.EndTimeout:
		return "timeout"
	case api.EndGatewayFault:
		return "gateway fault"
	}
	return kind
}

// byKind writes the aborted connections by kind, " (2 application
// reset, 1 WAN leg lost)", or nothing if none was aborted.
func byKind(st *api.Stats) string {
	var parts []string
	for _, k := range api.EndKinds() {
		if n := st.AbortedByKind[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, endName(k)))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
