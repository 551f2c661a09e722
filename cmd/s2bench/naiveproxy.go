package main

import (
	"context"
	"flag"
	"io"
	"net"

	"scistream/internal/api"
	"scistream/internal/exp/naive"
)

const naiveUsage = `usage: s2bench naiveproxy --role in|out --wan tcp|tls|quic --listen ADDR --to ADDR [--cert F --key F | --pin SHA256]

The naive baseline of compare --baseline, one side per process (compare starts
both): "in" accepts TCP on --listen and carries each connection over the WAN
leg to --to; "out" accepts WAN connections on --listen and connects each to
--to over TCP; io.Copy both ways. tls and quic need the out side's --cert and
--key, and the in side's --pin (the certificate's SHA-256). Prints
"naiveproxy: listening on ADDR" once ready; loopback addresses only.`

func runNaiveProxy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("naiveproxy", flag.ContinueOnError)
	role := fs.String("role", "", "in (producer side) or out (consumer side)")
	wan := fs.String("wan", "", "WAN leg: tcp, tls or quic")
	listen := fs.String("listen", "", "loopback HOST:PORT to listen on (port 0: any)")
	to := fs.String("to", "", "HOST:PORT to connect each connection to")
	certFile := fs.String("cert", "", "out side, tls and quic: PEM certificate")
	keyFile := fs.String("key", "", "out side, tls and quic: PEM private key")
	pin := fs.String("pin", "", "in side, tls and quic: SHA-256 (hex) of the out side's certificate")
	if err := parseFlags(fs, args, naiveUsage, stdout); err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(*listen)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		return usagef("--listen %q: give a loopback HOST:PORT, e.g. 127.0.0.1:0", *listen)
	}
	if _, _, err := net.SplitHostPort(*to); err != nil {
		return usagef("--to %q: give HOST:PORT", *to)
	}
	secure := *wan == api.WANTLS || *wan == api.WANQUIC
	switch {
	case *role != naive.In && *role != naive.Out:
		return usagef("--role %q: use in or out", *role)
	case *wan != api.WANTCP && !secure:
		return usagef("--wan %q: use tcp, tls or quic", *wan)
	case secure && *role == naive.Out && (*certFile == "" || *keyFile == ""):
		return usagef("--wan %s --role out needs --cert and --key", *wan)
	case secure && *role == naive.In && len(*pin) != 64:
		return usagef("--wan %s --role in needs --pin, the out side certificate's SHA-256 in hex", *wan)
	}
	return naive.Serve(ctx, naive.Config{Role: *role, WAN: *wan, Listen: *listen, To: *to, CertFile: *certFile, KeyFile: *keyFile, Pin: *pin}, stdout, stderr)
}
