package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"scistream/internal/api"
	"scistream/internal/trustfile"
)

// Connect completes a stream whose inbound side exists: it creates the
// outbound side (relaying the inbound gateway's certificate and the
// stream secret) and then attaches the outbound gateway's certificate to
// the inbound side, settling the inbound side's rate on what the
// outbound gateway granted (req.Rate should be what the inbound one
// granted, so the outbound grant is never more). If attaching fails, the
// outbound side is released again, so a failure leaves nothing
// half-wired. It returns both sides as they are once wired: the inbound
// side as the attach left it (connected, with the outbound gateway's pin
// and the settled rate), and the outbound side.
func Connect(ctx context.Context, in, out *Client, req *api.OutboundRequest) (inS, outS *api.Stream, err error) {
	outS, err = out.Outbound(ctx, req)
	if err != nil {
		return nil, nil, fmt.Errorf("outbound request to %s: %w", out.Addr(), err)
	}
	inS, err = in.Attach(ctx, req.UID, &api.AttachRequest{PeerCert: outS.WANCert, Rate: outS.Rate})
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, rerr := out.Release(rctx, req.UID); rerr != nil {
			err = errors.Join(err, fmt.Errorf("roll back outbound side on %s: %w", out.Addr(), rerr))
		}
		return nil, nil, fmt.Errorf("attach outbound gateway to inbound side on %s: %w", in.Addr(), err)
	}
	return inS, outS, nil
}

// Wire requests both sides of a stream for a third party that reaches
// both gateways. peerListeners, if non-empty, overrides the inbound
// listeners the outbound gateway dials (for NAT between the gateways).
// On failure every side already created is released. It returns both
// sides as they are once wired (the inbound side connected, with the
// pin of the outbound gateway), the inbound side with the stream secret
// and its WAN certificate, which only its creation returns.
func Wire(ctx context.Context, in, out *Client, inReq *api.InboundRequest, outReq api.OutboundRequest, peerListeners []string) (inS, outS *api.Stream, err error) {
	created, err := in.Inbound(ctx, inReq)
	if err != nil {
		return nil, nil, fmt.Errorf("inbound request to %s: %w", in.Addr(), err)
	}

	outReq.UID = created.UID
	outReq.Secret = created.Secret
	outReq.PeerCert = created.WANCert
	outReq.WAN = created.WAN
	outReq.PeerListeners = created.Listeners
	outReq.PeerServerName = created.WANServerName
	if len(outReq.PeerNodes) == 0 {
		outReq.PeerNodes = created.Nodes
	}
	Settle(&outReq, created)
	if len(peerListeners) > 0 {
		outReq.PeerListeners = peerListeners
	}
	inS, outS, err = Connect(ctx, in, out, &outReq)
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if _, rerr := in.Release(rctx, created.UID); rerr != nil {
			err = errors.Join(err, fmt.Errorf("roll back inbound side on %s: %w", in.Addr(), rerr))
		}
		return nil, nil, err
	}
	inS.Secret, inS.WANCert = created.Secret, created.WANCert
	return inS, outS, nil
}

// Settle makes an outbound request ask for what the inbound side in
// granted: its rate (no more than outReq asks, if it asks), the least
// rate the inbound request accepted, and its lease, unless outReq gives
// its own. The two gateways then settle on the lower grant (Connect).
func Settle(outReq *api.OutboundRequest, in *api.Stream) {
	if in.Rate > 0 && (outReq.Rate == 0 || outReq.Rate > in.Rate) {
		outReq.Rate = in.Rate
	}
	if outReq.Rate > 0 && outReq.MinRate == 0 {
		outReq.MinRate = min(in.MinRate, outReq.Rate)
	}
	if outReq.LeaseS == 0 {
		outReq.LeaseS = in.LeaseS
	}
}

// Endpoint records how s2uc reached one gateway of a stream.
type Endpoint struct {
	S2CS       string   `json:"s2cs"`
	ServerCert string   `json:"server_cert,omitempty"`
	TokenFile  string   `json:"token_file,omitempty"`
	Listeners  []string `json:"listeners"`
	WANCert    string   `json:"wan_cert,omitempty"`
	// ServerName names an inbound side on its gateway's shared WAN port.
	ServerName string `json:"server_name,omitempty"`
	// Nodes are the hosts of the gateway's facility nodes, if it is one
	// of several (api.Stream.Nodes).
	Nodes []string `json:"nodes,omitempty"`
}

// Session is s2uc's local memory of a stream it requested, so that the
// user never copies a secret or certificate between the two requests. It
// holds the stream secret and lives in a 0600 file; it never holds a token.
type Session struct {
	UID    string `json:"uid"`
	WAN    string `json:"wan"`
	Secret string `json:"secret"`
	// Rate is what the inbound side granted (bits per second), MinRate
	// the least its request accepted, LeaseS its lease: the outbound
	// request asks for the same (Settle).
	Rate     int64     `json:"rate,omitempty"`
	MinRate  int64     `json:"min_rate,omitempty"`
	LeaseS   int       `json:"lease_s,omitempty"`
	Inbound  *Endpoint `json:"inbound,omitempty"`
	Outbound *Endpoint `json:"outbound,omitempty"`
	// Released is set once s2uc released every side it wired: the
	// record then stays, without its sides, so that the UID given again
	// is answered "released at T by X", not "unknown".
	Released *Released `json:"released,omitempty"`
}

// Released says when a stream was released, and by whom, as its
// gateway told it.
type Released struct {
	At time.Time `json:"at"`
	// By is the gateway's reason, e.g. "released by alice".
	By string `json:"by,omitempty"`
}

// Sessions stores Session files in a directory.
type Sessions struct{ Dir string }

// DefaultSessions returns the store under Home()/streams.
func DefaultSessions() (Sessions, error) {
	home, err := Home()
	if err != nil {
		return Sessions{}, err
	}
	return Sessions{Dir: filepath.Join(home, "streams")}, nil
}

// Home is where s2uc keeps its files: $SCISTREAM_HOME, or ~/.scistream.
func Home() (string, error) {
	if home := os.Getenv("SCISTREAM_HOME"); home != "" {
		return home, nil
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory; set SCISTREAM_HOME: %w", err)
	}
	return filepath.Join(h, ".scistream"), nil
}

// path is the file of the record of uid. A uid that is not a stream UID
// (api.ValidUID) names no file, so that neither a gateway's answer nor a
// command-line argument reaches one outside Dir.
func (s Sessions) path(uid string) (string, bool) {
	if !api.ValidUID(uid) {
		return "", false
	}
	return filepath.Join(s.Dir, uid+".json"), true
}

// Check creates the store's directory (mode 0700) if it is missing,
// and refuses it if others could put a record of their own in it
// (trustfile.CheckDir: the directory and those on the way to it owned by
// the user or root, writable by nobody else): a record names the
// gateways s2uc sends the user's token to. A command checks before it
// creates a stream whose record it must keep.
func (s Sessions) Check() error {
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return err
	}
	return trustfile.CheckDir("records directory", s.Dir)
}

// Save writes sess (mode 0600), into a directory Check accepts. It
// refuses a session whose UID is not a stream UID.
func (s Sessions) Save(sess *Session) error {
	p, ok := s.path(sess.UID)
	if !ok {
		return fmt.Errorf("no record of uid %.80q: not a stream UID", sess.UID)
	}
	if err := s.Check(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(sess, "", "  ")
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// Load reads the session of uid; os.ErrNotExist if there is none, as
// there is none of a uid that is not a stream UID. A record others
// could have written, or put in place (internal/trustfile), is refused:
// it names the gateways s2uc sends the user's token to.
func (s Sessions) Load(uid string) (*Session, error) {
	p, ok := s.path(uid)
	if !ok {
		return nil, fmt.Errorf("no record of %.80q, which is not a stream UID: %w", uid, os.ErrNotExist)
	}
	b, err := trustfile.ReadFile("stream record", p)
	if err != nil {
		return nil, err
	}
	var sess Session
	if err := json.Unmarshal(b, &sess); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &sess, nil
}

// Remove deletes the session of uid, if any.
func (s Sessions) Remove(uid string) error {
	p, ok := s.path(uid)
	if !ok {
		return nil // there is none
	}
	err := os.Remove(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// UIDs returns the UIDs of the records in the store (released ones
// too), to suggest the nearest to a mistyped one. A store that does
// not exist yet holds none.
func (s Sessions) UIDs() ([]string, error) {
	ents, err := os.ReadDir(s.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var uids []string
	for _, e := range ents {
		if uid, ok := strings.CutSuffix(e.Name(), ".json"); ok && api.ValidUID(uid) && e.Type().IsRegular() {
			uids = append(uids, uid)
		}
	}
	return uids, nil
}

// PruneReleased removes the records of streams released before
// before: a released record only answers a UID given again, and would
// otherwise stay for good. A record that cannot be read is left alone.
func (s Sessions) PruneReleased(before time.Time) error {
	uids, err := s.UIDs()
	if err != nil {
		return err
	}
	var errs []error
	for _, uid := range uids {
		sess, err := s.Load(uid)
		if err != nil || sess.Released == nil || !sess.Released.At.Before(before) {
			continue
		}
		if err := s.Remove(uid); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
