package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"scistream/internal/handoff"
	"scistream/internal/observe"
)

// observeOptions are the flags of what operators watch: the plain metrics
// listener and the sampling of the streams' rates.
type observeOptions struct {
	metricsListen            string
	rateInterval, rateWindow time.Duration
}

func (o *observeOptions) register(fs *flag.FlagSet) {
	fs.StringVar(&o.metricsListen, "metrics_listen", "", "HOST:PORT where s2cs also serves GET /metrics, and nothing else, over plain HTTP WITHOUT authentication, for a scraper inside the facility (e.g. 127.0.0.1:9464); off by default: /metrics is on the control API, authenticated; a non-loopback address logs a warning")
	fs.DurationVar(&o.rateInterval, "rate_interval", observe.DefaultRateInterval, "time between two samples of every stream's rates, 10ms to 1m")
	fs.DurationVar(&o.rateWindow, "rate_window", observe.DefaultRateWindow, "span of a stream's recent rates (their mean, standard deviation and peak, and the status page's chart); at most 3600 samples")
}

// config checks what the gateway cannot (a zero that the command line
// must not mean "the default", the listener's address) and what it
// would refuse (observe.Config.Validate), naming the flag, and returns
// the gateway's settings without the listener, which listen opens.
func (o *observeOptions) config() (observe.Config, error) {
	switch {
	case o.rateInterval <= 0:
		return observe.Config{}, fmt.Errorf("--rate_interval %s: give a positive duration, e.g. 1s", o.rateInterval)
	case o.rateWindow <= 0:
		return observe.Config{}, fmt.Errorf("--rate_window %s: give a positive duration, e.g. 1m", o.rateWindow)
	}
	if o.metricsListen != "" {
		if err := checkListen(o.metricsListen); err != nil {
			return observe.Config{}, fmt.Errorf("--metrics_listen %.80q: %v; give HOST:PORT, e.g. 127.0.0.1:9464", o.metricsListen, err)
		}
	}
	c := observe.Config{RateInterval: o.rateInterval, RateWindow: o.rateWindow}
	var ce *observe.FieldError
	if err := c.Validate(); errors.As(err, &ce) {
		flag := map[string]string{"RateInterval": "--rate_interval", "RateWindow": "--rate_window"}[ce.Field]
		return c, fmt.Errorf("%s %s", flag, ce.Problem)
	} else if err != nil {
		return c, err
	}
	return c, nil
}

// checkListen checks a HOST:PORT to listen on: an IP address (or none,
// for every address) and a port.
func checkListen(hp string) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil {
		return errors.New("not HOST:PORT")
	}
	if host != "" && net.ParseIP(host) == nil {
		return fmt.Errorf("%q is not an IP address", host)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port %q is not 0-65535", port)
	}
	return nil
}

// listen opens the plain metrics listener, if asked for, and says where
// it is on stdout (the gateway warns when it is not on loopback).
func (o *observeOptions) listen(stdout io.Writer, sockets *handoff.Sockets) (net.Listener, error) {
	if o.metricsListen == "" {
		return nil, nil
	}
	ln, err := sockets.Listen("tcp", o.metricsListen)
	if err != nil {
		return nil, fmt.Errorf("--metrics_listen: %w", err)
	}
	fmt.Fprintf(stdout, "s2cs: metrics on http://%s/metrics (plain HTTP, no authentication)\n", ln.Addr())
	return ln, nil
}
