package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"scistream/internal/api"
	"scistream/internal/client"
)

// runUpdate changes a running stream on its gateways: its rate, its
// allow-list (outbound side) or its lease, without dropping its
// connections. Without --s2cs it updates every gateway s2uc wired for
// the stream, the inbound side first; if a later side refuses a higher
// rate, the sides already raised are set back.
func runUpdate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newCmdline("update", "UID [--rate R] [--allow LIST] [--lease D] [--s2cs HOST:PORT --server_cert FILE] [--owner ID]   (without --s2cs: every gateway s2uc wired for UID)", stdout, stderr)
	gw := cl.recordGateway("every gateway s2uc wired for UID")
	owner := cl.fs.String("owner", "", ownerUsage)
	rateF := cl.fs.String("rate", "", "new reserved rate in bits per second (e.g. 800M, 10Gbit/s, 100MB/s), 0 for best effort; a higher rate is admitted by each gateway or refused")
	allowF := cl.fs.String("allow", "", "new allow-list of the outbound side: comma-separated addresses or CIDR prefixes; connections open now stay")
	leaseF := cl.fs.String("lease", "", "renew the lease: the stream now lives this long from now, e.g. 2h")
	pos, err := cl.parse(args, 1, 1, "give exactly one stream UID to update")
	if err != nil {
		return err
	}
	uid := pos[0]
	if err := checkOwner(*owner, gw); err != nil {
		return err
	}
	var req api.UpdateRequest
	if *rateF != "" {
		r, err := parseRateFlag("rate", *rateF)
		if err != nil {
			return err
		}
		rate := int64(r)
		req.Rate = &rate
	}
	if *allowF != "" {
		a := splitList(*allowF)
		req.Allow = &a
	}
	if *leaseF != "" {
		l, err := parseLease(*leaseF)
		if err != nil {
			return err
		}
		req.LeaseS = &l
	}
	if req.Rate == nil && req.Allow == nil && req.LeaseS == nil {
		return usagef("nothing to update: give --rate, --allow or --lease")
	}
	type side struct {
		role api.Role
		gw   gatewayFlags
	}
	var sides []side
	ss, err := sessions()
	if err != nil {
		return err
	}
	sess, serr := ss.Load(uid) // also kept up to date below when it exists
	if serr != nil && !errors.Is(serr, os.ErrNotExist) {
		return serr
	}
	switch {
	case gw.s2cs != "":
		sides = append(sides, side{"", *gw})
	case sess != nil && sess.Released != nil:
		return releasedError(uid, sess.Released)
	case sess != nil:
		if e := sess.Inbound; e != nil {
			sides = append(sides, side{api.RoleInbound, cl.recordSide(uid, "inbound", e, "token_file", gw.tokenFile)})
		}
		if e := sess.Outbound; e != nil {
			sides = append(sides, side{api.RoleOutbound, cl.recordSide(uid, "outbound", e, "token_file", gw.tokenFile)})
		}
	case gw.useDefault():
		sides = append(sides, side{"", *gw})
	default:
		return noRecord(ss, uid, "give the gateway with --s2cs HOST:PORT (and --server_cert)")
	}
	type done struct {
		c   *client.Client
		old int64 // its rate before
	}
	var raised []done
	var updated []*api.Stream
	for _, sd := range sides {
		c, err := sd.gw.client(cl.timeout)
		if err != nil {
			return err
		}
		defer c.Close()
		r := req
		if sd.role == api.RoleInbound {
			r.Allow = nil // the inbound side has none: its legs are authenticated by certificate
			if r.Rate == nil && r.LeaseS == nil {
				continue
			}
		}
		before, err := c.GetOf(ctx, *owner, uid)
		if err != nil {
			return fmt.Errorf("update on %s: %w", sd.gw.s2cs, err)
		}
		s, err := c.UpdateOf(ctx, *owner, uid, &r)
		if err != nil {
			err = fmt.Errorf("update on %s: %w", sd.gw.s2cs, err)
			for _, d := range raised { // set back what was raised, so both sides agree
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				if _, rerr := d.c.UpdateOf(rctx, *owner, uid, &api.UpdateRequest{Rate: &d.old}); rerr != nil {
					err = errors.Join(err, fmt.Errorf("set the rate back on %s: %w", d.c.Addr(), rerr))
				}
				cancel()
			}
			return err
		}
		if r.Rate != nil && *r.Rate > before.Rate {
			raised = append(raised, done{c, before.Rate})
		}
		updated = append(updated, public(s))
		if sess != nil && *owner == "" && s.Role == api.RoleInbound && sess.Inbound != nil && sess.Inbound.S2CS == sd.gw.s2cs {
			// What outbound-request will ask for (client.Settle).
			sess.Rate, sess.MinRate, sess.LeaseS = s.Rate, s.MinRate, s.LeaseS
			if err := ss.Save(sess); err != nil {
				fmt.Fprintf(stderr, "s2uc: warning: could not update the local record of %s: %v\n", uid, err)
			}
		}
		if cl.output == "text" {
			fmt.Fprintf(stdout, "updated %s on %s (%s): ", uid, sd.gw.s2cs, printable(string(s.Role)))
			printTerms(stdout, s)
		}
	}
	if len(updated) == 0 {
		return fmt.Errorf("stream %s has no outbound side in the local record: --allow changes the outbound side; give its gateway with --s2cs", uid)
	}
	if cl.output == "json" {
		return printJSON(stdout, map[string]any{"uid": uid, "updated": updated})
	}
	return nil
}
