package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"scistream/internal/pace"
)

func runInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newCmdline("info", "--s2cs HOST:PORT --server_cert FILE", stdout, stderr)
	gw := cl.gateway("", "gateway", "")
	if _, err := cl.parse(args, 0, 0, ""); err != nil {
		return err
	}
	c, err := gw.client(cl.timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	if cl.output == "json" {
		return printJSON(stdout, info)
	}
	as := printable(info.Identity)
	if len(info.Roles) > 0 {
		as += " (" + printableList(info.Roles, ", ") + ")"
	}
	fmt.Fprintf(stdout, "s2cs %s at %s as %s\n  listener_ip %s, ports %s\n  engines %s (default %s), wan %s\n  app wait %s (default), at most %s\n  resume window %s (default), at most %s\n  stripe at most %s\n  certificate sha256 %s\n",
		printable(info.Version), gw.s2cs, as, printable(info.ListenerIP), printable(info.PortRange),
		printableList(info.Engines, ","), printable(info.DefaultEngine), printableList(info.WAN, ","),
		time.Duration(info.AppWaitDefaultS)*time.Second, time.Duration(info.AppWaitMaxS)*time.Second,
		time.Duration(info.ResumeWindowDefaultS)*time.Second, time.Duration(info.ResumeWindowMaxS)*time.Second, stripeMost(info.MaxStripe), printable(info.WANCertSHA256))
	capacity := "undeclared (rates are kept to, not reserved)"
	if info.CapacityRate > 0 {
		capacity = fmt.Sprintf("%s, %s reserved", pace.Rate(info.CapacityRate), rateBound(info.ReservedRate, "nothing"))
	}
	fmt.Fprintf(stdout, "  capacity %s; streams %s, channels %s\n  quota per identity %s\n  lease %s (default), at most %s\n",
		capacity, bound(info.CapacityStreams), bound(info.CapacityConns), rateBound(info.QuotaRate, "unbounded"),
		time.Duration(info.LeaseDefaultS)*time.Second, time.Duration(info.LeaseMaxS)*time.Second)
	return nil
}

// bound writes a count that 0 leaves unbounded.
func bound(n int) string {
	if n == 0 {
		return "unbounded"
	}
	return fmt.Sprint(n)
}

// rateBound writes a rate, or zero for 0.
func rateBound(r int64, zero string) string {
	if r == 0 {
		return zero
	}
	return pace.Rate(r).String()
}

// stripeMost says a gateway's --max_stripe: "8 legs at once", or that
// it does not stripe (an older release says nothing).
func stripeMost(n int) string {
	switch n {
	case 0:
		return "1 leg (a release without striping)"
	case 1:
		return "1 leg (--max_stripe 1)"
	}
	return fmt.Sprintf("%d legs at once", n)
}
