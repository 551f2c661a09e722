package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"scistream/internal/api"
	"scistream/internal/bytesize"
	"scistream/internal/client"
)

func runRelease(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newCmdline("release", "UID [--s2cs HOST:PORT --server_cert FILE] [--owner ID]   (without --s2cs: every gateway s2uc wired for UID)", stdout, stderr)
	gw := cl.recordGateway("every gateway s2uc wired for UID")
	owner := cl.fs.String("owner", "", ownerUsage)
	pos, err := cl.parse(args, 1, 1, "give exactly one stream UID to release")
	if err != nil {
		return err
	}
	if err := checkOwner(*owner, gw); err != nil {
		return err
	}
	uid := pos[0]
	ss, err := sessions()
	if err != nil {
		return err
	}
	sess, serr := ss.Load(uid)
	if serr != nil && !errors.Is(serr, os.ErrNotExist) {
		return serr
	}
	var recorded *client.Released // the record says s2uc released it
	if sess != nil {
		recorded = sess.Released
	}
	if recorded != nil && gw.s2cs == "" {
		// Released already: so it stays, and a retried cleanup succeeds.
		return printReleased(stdout, cl.output, uid, nil, &ended{at: recorded.At, reason: recorded.By, state: api.StateReleased})
	}
	type target struct {
		side string
		gw   gatewayFlags
	}
	var targets []target
	switch {
	case gw.s2cs != "":
		targets = append(targets, target{"", *gw})
	case sess != nil:
		// Outbound first: stop accepting producers before the far side goes.
		if e := sess.Outbound; e != nil {
			targets = append(targets, target{"outbound", cl.recordSide(uid, "outbound", e, "token_file", gw.tokenFile)})
		}
		if e := sess.Inbound; e != nil {
			targets = append(targets, target{"inbound", cl.recordSide(uid, "inbound", e, "token_file", gw.tokenFile)})
		}
	case gw.useDefault():
		targets = append(targets, target{"", *gw})
	default:
		return noRecord(ss, uid, "give the gateway with --s2cs HOST:PORT (and --server_cert)")
	}
	var errs []error
	var released []*api.Stream // the sides released now
	var before *ended          // how a side released before this command ended, if one was
	gone := false              // a side its gateway no longer knows
	var lines []string         // the text, once it is known whether every side was released before
	for _, t := range targets {
		c, err := t.gw.client(cl.timeout)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Asked first, so that a stream that ended before is said to
		// be (the gateway answers a release of it with its end).
		s, err := c.GetOf(ctx, *owner, uid)
		if err == nil && !s.State.Terminal() {
			s, err = c.ReleaseOf(ctx, *owner, uid)
		} else if err == nil {
			e := &ended{at: s.Updated, reason: s.Reason, state: s.State}
			before = cmp.Or(before, e)
			lines = append(lines, fmt.Sprintf("%s on %s (%s): %s", uid, t.gw.s2cs, printable(string(s.Role)), e.side()))
			dropSide(sess, t.gw.s2cs)
			c.Close()
			continue
		}
		c.Close()
		var ae *api.Error
		if errors.As(err, &ae) && ae.Code == api.CodeNotFound && (t.side != "" || recorded != nil) {
			// Already gone on that gateway (e.g. expired and pruned):
			// a side of the record, or of a stream the record says
			// s2uc released. Of any other UID, not found is the
			// answer: it may never have been the caller's.
			fmt.Fprintf(stderr, "s2uc: %s no longer knows %s\n", strings.TrimSpace(t.side+" gateway "+t.gw.s2cs), uid)
			dropSide(sess, t.gw.s2cs)
			gone = true
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("release on %s: %w", t.gw.s2cs, err))
			continue
		}
		dropSide(sess, t.gw.s2cs)
		released = append(released, public(s))
		line := fmt.Sprintf("released %s on %s (%s)", uid, t.gw.s2cs, printable(string(s.Role)))
		if s.Stats != nil {
			line += fmt.Sprintf(": %s to WAN, %s from WAN", bytesize.Human(s.Stats.BytesToWAN), bytesize.Human(s.Stats.BytesFromWAN))
		}
		lines = append(lines, line)
	}
	if before == nil && recorded != nil {
		before = &ended{at: recorded.At, reason: recorded.By, state: api.StateReleased}
	}
	if sess != nil && sess.Released == nil {
		if sess.Inbound == nil && sess.Outbound == nil {
			var at time.Time
			by := ""
			switch {
			case len(released) > 0:
				at, by = released[0].Updated, released[0].Reason
			case before != nil:
				at, by = before.at, before.reason
			}
			if err := markReleased(ss, sess, at, by); err != nil {
				errs = append(errs, err)
			}
		} else if err := ss.Save(sess); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 && len(released) == 0 && (before != nil || gone) {
		// Nothing was left to release: success, said as such.
		if before == nil {
			before = &ended{} // gone: neither when nor by whom is known
		}
		return printReleased(stdout, cl.output, uid, nil, before)
	}
	if err := printReleased(stdout, cl.output, uid, released, nil); err != nil {
		return err
	}
	if cl.output == "text" {
		for _, l := range lines {
			fmt.Fprintln(stdout, l)
		}
	}
	return errors.Join(errs...)
}

// ended is how a stream ended before this release: when, the gateway's
// reason ("released by alice") and its state; all zero when no gateway
// knows it any more.
type ended struct {
	at     time.Time
	reason string
	state  api.State
}

// by is who released it, if its reason says ("released by alice").
func (e *ended) by() string {
	if who, ok := strings.CutPrefix(e.reason, "released by "); ok {
		return who
	}
	return ""
}

// summary says how it ended, after "stream UID": "already released
// (at T by alice)", "already expired (at T: lease ended)", or "already
// released (its gateways no longer know it)".
func (e *ended) summary() string {
	if e.at.IsZero() {
		return "already released (its gateways no longer know it)"
	}
	s := fmt.Sprintf("already %s (at %s", e.stateText(), e.at.Local().Format(time.DateTime))
	switch {
	case e.by() != "":
		s += " by " + printable(e.by())
	case e.reason != "":
		s += ": " + printable(e.reason)
	}
	return s + ")"
}

// side says how it ended on one gateway: "already released at T by
// alice", "already expired at T (lease ended)".
func (e *ended) side() string {
	s := fmt.Sprintf("already %s at %s", e.stateText(), e.at.Local().Format(time.DateTime))
	switch {
	case e.by() != "":
		s += " by " + printable(e.by())
	case e.reason != "":
		s += " (" + printable(e.reason) + ")"
	}
	return s
}

func (e *ended) stateText() string {
	if e.state == "" {
		return string(api.StateReleased)
	}
	return printable(string(e.state))
}

// releasedJSON is what release --output json prints: the views of the
// sides released now and, when there was nothing left to release
// (already_released), when and by whom it was, if known.
type releasedJSON struct {
	UID             string        `json:"uid"`
	Released        []*api.Stream `json:"released"`
	AlreadyReleased bool          `json:"already_released"`
	ReleasedAt      *time.Time    `json:"released_at,omitempty"`
	ReleasedBy      string        `json:"released_by,omitempty"`
	State           api.State     `json:"state,omitempty"`
}

// printReleased prints what release did: with before (nothing was left
// to release) "stream UID already released (at T by WHO)"; else, in
// JSON, the sides released now (the text of each is the caller's).
func printReleased(w io.Writer, output, uid string, released []*api.Stream, before *ended) error {
	if released == nil {
		released = []*api.Stream{}
	}
	if output == "json" {
		j := releasedJSON{UID: uid, Released: released}
		if before != nil {
			j.AlreadyReleased, j.ReleasedBy, j.State = true, before.by(), before.state
			if !before.at.IsZero() {
				at := before.at.UTC()
				j.ReleasedAt = &at
			}
		}
		return printJSON(w, j)
	}
	if before != nil {
		_, err := fmt.Fprintf(w, "stream %s %s\n", uid, before.summary())
		return err
	}
	return nil
}

// dropSide forgets the side of sess served by addr.
func dropSide(sess *client.Session, addr string) {
	if sess == nil {
		return
	}
	if sess.Outbound != nil && sess.Outbound.S2CS == addr {
		sess.Outbound = nil
	} else if sess.Inbound != nil && sess.Inbound.S2CS == addr {
		sess.Inbound = nil
	}
}
