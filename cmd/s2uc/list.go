package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"scistream/internal/api"
	"scistream/internal/auth"
	"scistream/internal/bytesize"
)

func runList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("list", "--s2cs HOST:PORT --server_cert FILE [--all]", stderr)
	var (
		gw     gatewayFlags
		common commonFlags
	)
	gw.register(fs, "", "gateway")
	common.register(fs)
	all := fs.Bool("all", false, "include ended streams")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return fmt.Errorf("unexpected argument %q", pos[0])
	}
	if err := common.check(); err != nil {
		return err
	}
	c, err := gw.client(common.timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	list, err := c.List(ctx, *all)
	if err != nil {
		return err
	}
	if common.output == "json" {
		return printJSON(stdout, api.StreamList{Streams: list})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "UID\tROLE\tSTATE\tLISTENERS\tCONNS\tTO WAN\tFROM WAN\tRATE TO/FROM WAN")
	for _, s := range list {
		st := s.Stats
		if st == nil {
			st = &api.Stats{}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s / %s\n", s.UID, s.Role, s.State,
			strings.Join(s.Listeners, ","), st.ActiveConns, bytesize.Human(st.BytesToWAN), bytesize.Human(st.BytesFromWAN),
			fmtRate(st.RateToWAN), fmtRate(st.RateFromWAN))
	}
	return tw.Flush()
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("status", "UID [--s2cs HOST:PORT --server_cert FILE] [--watch 1s]", stderr)
	var (
		gw     gatewayFlags
		common commonFlags
	)
	gw.register(fs, "", "gateway (default: every gateway s2uc wired for UID)")
	common.register(fs)
	watch := fs.Duration("watch", 0, "repeat every interval until interrupted (e.g. 1s)")
	count := fs.Int("count", 0, "with --watch, stop after this many reports (0: until interrupted)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if err := common.check(); err != nil {
		return err
	}
	if len(pos) != 1 {
		return errors.New("give exactly one stream UID")
	}
	if *watch < 0 || (*watch > 0 && *watch < 100*time.Millisecond) {
		return errors.New("--watch must be at least 100ms")
	}
	uid := pos[0]
	gws := []gatewayFlags{gw}
	if gw.s2cs == "" {
		ss, err := sessions()
		if err != nil {
			return err
		}
		sess, err := ss.Load(uid)
		if err != nil {
			return fmt.Errorf("no local record of stream %s: give the gateway with --s2cs HOST:PORT", uid)
		}
		gws = nil
		if e := sess.Inbound; e != nil {
			gws = append(gws, gatewayFlags{e.S2CS, e.ServerCert, e.TokenFile})
		}
		if e := sess.Outbound; e != nil {
			gws = append(gws, gatewayFlags{e.S2CS, e.ServerCert, e.TokenFile})
		}
	}
	for n := 1; ; n++ {
		var views []*api.Stream
		for _, g := range gws {
			c, err := g.client(common.timeout)
			if err != nil {
				return err
			}
			s, err := c.Get(ctx, uid)
			c.Close()
			if err != nil {
				return fmt.Errorf("status on %s: %w", g.s2cs, err)
			}
			views = append(views, public(s))
		}
		if common.output == "json" {
			var err error
			if len(views) == 1 {
				err = printJSON(stdout, views[0])
			} else {
				err = printJSON(stdout, map[string]any{"uid": uid, "gateways": views})
			}
			if err != nil {
				return err
			}
		} else {
			for i, s := range views {
				printStatus(stdout, gws[i].s2cs, s)
			}
		}
		if *watch == 0 || (*count > 0 && n >= *count) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(*watch):
		}
	}
}

func printStatus(w io.Writer, addr string, s *api.Stream) {
	st := s.Stats
	if st == nil {
		st = &api.Stats{}
	}
	fmt.Fprintf(w, "%s on %s: %s %s", s.UID, addr, s.Role, s.State)
	if s.Reason != "" {
		fmt.Fprintf(w, " (%s)", s.Reason)
	}
	fmt.Fprintf(w, "\n  listeners %s -> targets %s, wan %s, engine %s\n", strings.Join(s.Listeners, ","), strings.Join(s.Targets, ","), s.WAN, s.Engine)
	fmt.Fprintf(w, "  connections %d active, %d total, %d refused, %d errors\n", st.ActiveConns, st.TotalConns, st.RejectedConns, st.Errors)
	fmt.Fprintf(w, "  bytes %s to WAN, %s from WAN; rate %s to WAN, %s from WAN\n",
		bytesize.Human(st.BytesToWAN), bytesize.Human(st.BytesFromWAN), fmtRate(st.RateToWAN), fmtRate(st.RateFromWAN))
}

func runInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("info", "--s2cs HOST:PORT --server_cert FILE", stderr)
	var (
		gw     gatewayFlags
		common commonFlags
	)
	gw.register(fs, "", "gateway")
	common.register(fs)
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if err := common.check(); err != nil {
		return err
	}
	c, err := gw.client(common.timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	if common.output == "json" {
		return printJSON(stdout, info)
	}
	fmt.Fprintf(stdout, "s2cs %s at %s as %s\n  listener_ip %s, ports %s\n  engines %s (default %s), wan %s\n  certificate sha256 %s\n",
		info.Version, gw.s2cs, info.Identity, info.ListenerIP, info.PortRange,
		strings.Join(info.Engines, ","), info.DefaultEngine, strings.Join(info.WAN, ","), info.WANCertSHA256)
	return nil
}

func runHashToken(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("hash-token", "--identity NAME < token", stderr)
	id := fs.String("identity", "", "identity the token stands for")
	if _, err := parse(fs, args); err != nil {
		return err
	}
	if *id == "" {
		return errors.New("missing --identity NAME")
	}
	line, err := bufio.NewReader(os.Stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	tok := strings.TrimSpace(line)
	if tok == "" {
		return errors.New("no token on stdin")
	}
	fmt.Fprintf(stdout, "%s %s\n", auth.HashToken(tok), *id)
	return nil
}
