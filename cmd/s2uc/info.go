package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
)

func runInfo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newCmdline("info", "--s2cs HOST:PORT --server_cert FILE", stderr)
	gw := cl.gateway("", "gateway")
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
	as := info.Identity
	if len(info.Roles) > 0 {
		as += " (" + strings.Join(info.Roles, ", ") + ")"
	}
	fmt.Fprintf(stdout, "s2cs %s at %s as %s\n  listener_ip %s, ports %s\n  engines %s (default %s), wan %s\n  app wait %s (default), at most %s\n  certificate sha256 %s\n",
		info.Version, gw.s2cs, as, info.ListenerIP, info.PortRange,
		strings.Join(info.Engines, ","), info.DefaultEngine, strings.Join(info.WAN, ","),
		time.Duration(info.AppWaitDefaultS)*time.Second, time.Duration(info.AppWaitMaxS)*time.Second, info.WANCertSHA256)
	return nil
}
