package intake

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"scistream/internal/api"
	"scistream/internal/egress"
)

// What a stream may make the gateway dial (internal/egress): the
// addresses of a request are checked here when it arrives, and every
// dial checks again at connect(2) (stream.Env's Targets and Peers), so
// that a name resolving elsewhere later, or a record restored under a
// narrower policy, leads nowhere it should not.

// checkDial checks that the gateway may dial host (an address, or a
// name resolved now) at each of ports under policy p; field names the
// request's field in a refusal. A policy's refusal is permission_denied
// (the request is well formed; the gateway will not lead there) unless
// no stream may lead there at all (unspecified, broadcast, multicast:
// invalid_argument).
func (s *Checker) checkDial(ctx context.Context, p *egress.Policy, field, host string, ports []int) error {
	addrs, err := s.resolve(ctx, field, host)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		for _, port := range ports {
			err := p.Check(netip.AddrPortFrom(a, uint16(port)))
			var r *egress.Refusal
			if !errors.As(err, &r) {
				continue
			}
			what := field + " " + host
			if host != r.Addr.Addr().String() {
				what += " (" + r.Addr.Addr().String() + ")"
			}
			what += " port " + strconv.Itoa(port)
			code := api.CodePermissionDenied
			if r.Flag == "" && !strings.HasPrefix(r.Rule, "this gateway's own") {
				code = api.CodeInvalidArgument
			}
			return api.Errorf(code, "%.160s: it is %s, which this gateway does not dial%s", what, r.Rule, r.Hint())
		}
	}
	return nil
}

// checkHostPort checks a "host:port" address of field that this gateway
// will dial under p, and returns its port.
func (s *Checker) checkHostPort(ctx context.Context, p *egress.Policy, field, hp string) (int, error) {
	h, ps, err := net.SplitHostPort(hp)
	if err != nil {
		return 0, api.Errorf(api.CodeInvalidArgument, "%s: %.80q is not host:port", field, hp)
	}
	port, err := strconv.Atoi(ps)
	if err != nil || strconv.Itoa(port) != ps {
		return 0, api.Errorf(api.CodeInvalidArgument, "%s: port %.20q is not a number", field, ps)
	}
	if err := checkPort(field, port); err != nil {
		return 0, err
	}
	return port, s.checkDial(ctx, p, field+" host", h, []int{port})
}

// resolve returns the addresses of host, a field of a request: itself if
// it is an IP address, else what it resolves to now.
func (s *Checker) resolve(ctx context.Context, field, host string) ([]netip.Addr, error) {
	if err := checkHost(field, host); err != nil {
		return nil, err
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	addrs, err := s.cfg.LookupHost(ctx, host)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no addresses")
	}
	if err != nil {
		var dnsErr *net.DNSError
		why := "it does not resolve"
		if errors.As(err, &dnsErr) && (dnsErr.IsTimeout || dnsErr.IsTemporary) || errors.Is(err, context.DeadlineExceeded) {
			why = "this gateway could not resolve it now"
		}
		return nil, api.Errorf(api.CodeInvalidArgument, "%s %.80q: %s; give an IP address or a name this gateway resolves", field, host, why).WithCause(err)
	}
	return addrs, nil
}
