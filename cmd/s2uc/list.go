package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"scistream/internal/api"
	"scistream/internal/bytesize"
)

func runList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cl := newCmdline("list", "--s2cs HOST:PORT --server_cert FILE [--all] [--owner ID | --all_owners]", stdout, stderr)
	gw := cl.gateway("", "gateway", "")
	all := cl.fs.Bool("all", false, "include ended streams")
	owner := cl.fs.String("owner", "", "list the streams of this identity instead of yours (the gateway's operators only)")
	allOwners := cl.fs.Bool("all_owners", false, "list the streams of every identity, with their owners (the gateway's operators only)")
	if _, err := cl.parse(args, 0, 0, ""); err != nil {
		return err
	}
	if *owner != "" && *allOwners {
		return usagef("give --owner or --all_owners, not both")
	}
	c, err := gw.client(cl.timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	list, err := c.ListOf(ctx, *owner, *allOwners, *all)
	if err != nil {
		return err
	}
	if cl.output == "json" {
		return printJSON(stdout, api.StreamList{Streams: list})
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	owners := *owner != "" || *allOwners
	if owners {
		fmt.Fprint(tw, "OWNER\t")
	}
	fmt.Fprintln(tw, "UID\tROLE\tSTATE\tLISTENERS\tCONNS\tTO WAN\tFROM WAN\tRATE TO/FROM WAN")
	for _, s := range list {
		if owners {
			fmt.Fprintf(tw, "%s\t", printable(s.Owner))
		}
		st := s.Stats
		if st == nil {
			st = &api.Stats{}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s / %s\n", s.UID, printable(string(s.Role)), printable(string(s.State)),
			printableList(s.Listeners, ","), st.ActiveConns, bytesize.Human(st.BytesToWAN), bytesize.Human(st.BytesFromWAN),
			fmtRate(st.RateToWAN), fmtRate(st.RateFromWAN))
	}
	return tw.Flush()
}
