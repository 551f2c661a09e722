package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"scistream/internal/api"
	"scistream/internal/bytesize"
	"scistream/internal/client"
)

func runRelease(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newCmdline("release", "UID [--s2cs HOST:PORT --server_cert FILE] [--owner ID]   (without --s2cs: every gateway s2uc wired for UID)", stderr)
	gw := cl.recordGateway("", "gateway")
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
	if sess != nil && sess.Released != nil && gw.s2cs == "" {
		return releasedError(uid, sess.Released)
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
			targets = append(targets, target{"outbound", endpointGateway(e)})
		}
		if e := sess.Inbound; e != nil {
			targets = append(targets, target{"inbound", endpointGateway(e)})
		}
	case gw.useDefault():
		targets = append(targets, target{"", *gw})
	default:
		return noRecord(ss, uid, "give the gateway with --s2cs HOST:PORT (and --server_cert)")
	}
	var errs []error
	var released []*api.Stream
	for _, t := range targets {
		if gw.tokenFile != "" {
			t.gw.tokenFile = gw.tokenFile
		}
		c, err := t.gw.client(cl.timeout)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		s, err := c.ReleaseOf(ctx, *owner, uid)
		c.Close()
		var ae *api.Error
		if errors.As(err, &ae) && ae.Code == api.CodeNotFound && t.side != "" {
			// Already gone on that gateway (e.g. expired and pruned).
			fmt.Fprintf(stderr, "s2uc: %s gateway %s no longer knows %s\n", t.side, t.gw.s2cs, uid)
			dropSide(sess, t.gw.s2cs)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("release on %s: %w", t.gw.s2cs, err))
			continue
		}
		released = append(released, public(s))
		dropSide(sess, t.gw.s2cs)
		if cl.output == "text" {
			line := fmt.Sprintf("released %s on %s (%s)", uid, t.gw.s2cs, printable(string(s.Role)))
			if s.Stats != nil {
				line += fmt.Sprintf(": %s to WAN, %s from WAN", bytesize.Human(s.Stats.BytesToWAN), bytesize.Human(s.Stats.BytesFromWAN))
			}
			fmt.Fprintln(stdout, line)
		}
	}
	if sess != nil && sess.Released == nil {
		if sess.Inbound == nil && sess.Outbound == nil {
			var at time.Time
			by := ""
			if len(released) > 0 {
				at, by = released[0].Updated, released[0].Reason
			}
			if err := markReleased(ss, sess, at, by); err != nil {
				errs = append(errs, err)
			}
		} else if err := ss.Save(sess); err != nil {
			errs = append(errs, err)
		}
	}
	if cl.output == "json" {
		if err := printJSON(stdout, map[string]any{"uid": uid, "released": released}); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
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
