package store

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrUnavailable is wrapped by the errors of a store that could not be
// reached in time (etcd down, partitioned, without a leader): the request
// may succeed later, unchanged.
var ErrUnavailable = errors.New("state store unavailable")

// ErrDenied is wrapped by the errors of a store that refused the
// gateway's credentials or their rights (etcd's authentication).
var ErrDenied = errors.New("state store refused access")

// DefaultEtcdTimeout bounds each etcd operation when EtcdConfig.Timeout
// is zero: long enough for a cluster to elect a new leader (etcd's
// default election timeout is 1 s), short enough that a control request
// answers "unavailable" well before a client gives up on it.
const DefaultEtcdTimeout = 3 * time.Second

// DefaultEtcdPageSize is how many records one List request reads when
// EtcdConfig.PageSize is zero.
const DefaultEtcdPageSize = 256

// EtcdConfig says which etcd cluster holds a facility's stream records
// and how to reach it.
type EtcdConfig struct {
	// Endpoints are the cluster's client addresses, "host:port".
	// Required.
	Endpoints []string
	// Facility names the facility whose records these are: they live
	// under the key prefix /scistream/<Facility>/, so several facilities
	// can share a cluster. Required; ValidFacility says what a name may
	// hold.
	Facility string
	// TLS, if set, secures the connection to every endpoint (the
	// server's verification, and a client certificate if it holds one).
	// If nil, the connection is plaintext.
	TLS *tls.Config
	// Username and Password authenticate the gateway to etcd (whose
	// authentication must then be enabled). Both or neither.
	Username, Password string
	// Timeout bounds each operation, the wait for a connection to an
	// unreachable etcd included. If zero, DefaultEtcdTimeout.
	Timeout time.Duration
	// PageSize is how many records one request of List reads. If zero,
	// DefaultEtcdPageSize.
	PageSize int
}

// Etcd is a Store in an etcd cluster: one key per stream,
// /scistream/<facility>/streams/<owner>/<uid>, owner and UID escaped,
// holding the record's JSON. Every operation is bounded by the
// configured timeout, and fails with an error wrapping ErrUnavailable
// when etcd cannot answer within it; the client reconnects by itself
// once etcd is back. Reads are linearizable: they see every write the
// cluster acknowledged, to whichever member it went.
type Etcd struct {
	// cli is the etcd client. The key layout leaves room beside
	// streams/ for what several gateway nodes of one facility will
	// share (allocations, node leases), through this same client.
	cli      *clientv3.Client
	prefix   string // /scistream/<facility>/, ending in a slash
	where    string // the endpoints, for errors
	timeout  time.Duration
	pageSize int

	closeOnce sync.Once
	closeErr  error
}

var _ Store = (*Etcd)(nil)

// ValidFacility reports whether name may name a facility: 1 to 64 ASCII
// letters, digits, '.', '_' or '-', starting with a letter or digit.
// The name is a segment of every key, so it can hold no slash.
func ValidFacility(name string) error {
	if name == "" {
		return errors.New("is empty: name the facility whose gateways share the records, e.g. ornl-gw")
	}
	if len(name) > 64 {
		return fmt.Errorf("%.20q... is longer than 64 characters", name)
	}
	for i, c := range name {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || i > 0 && (c == '.' || c == '_' || c == '-')
		if !ok {
			return fmt.Errorf("%q: use ASCII letters, digits, '.', '_' and '-', starting with a letter or digit", name)
		}
	}
	return nil
}

// OpenEtcd connects to the cluster cfg names and reads from it once, so
// that a wrong address, TLS setting or credential shows now rather than
// at the first control request. It fails within about cfg.Timeout when
// etcd does not answer, with an error wrapping ErrUnavailable.
func OpenEtcd(cfg EtcdConfig) (*Etcd, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, errors.New("etcd: no endpoints")
	}
	if err := ValidFacility(cfg.Facility); err != nil {
		return nil, fmt.Errorf("etcd: facility %w", err)
	}
	if (cfg.Username == "") != (cfg.Password == "") {
		return nil, errors.New("etcd: give both a user name and a password, or neither")
	}
	if cfg.Timeout < 0 || cfg.PageSize < 0 {
		return nil, errors.New("etcd: negative timeout or page size")
	}
	e := &Etcd{
		prefix:   "/scistream/" + cfg.Facility + "/",
		where:    strings.Join(cfg.Endpoints, ","),
		timeout:  cfg.Timeout,
		pageSize: cfg.PageSize,
	}
	if e.timeout == 0 {
		e.timeout = DefaultEtcdTimeout
	}
	if e.pageSize == 0 {
		e.pageSize = DefaultEtcdPageSize
	}
	// The scheme tells the client whether to use cfg.TLS; a bare
	// host:port would leave it to guess.
	scheme := "http://"
	if cfg.TLS != nil {
		scheme = "https://"
	}
	eps := make([]string, len(cfg.Endpoints))
	for i, ep := range cfg.Endpoints {
		eps[i] = scheme + ep
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: eps,
		TLS:       cfg.TLS,
		Username:  cfg.Username,
		Password:  cfg.Password,
		// Bounds the authentication at start; the connection itself is
		// made in the background.
		DialTimeout: e.timeout,
		// Pings find a peer that vanished without a word (a cut link, a
		// host powered off) while a request waits on it.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: e.timeout,
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			// gRPC's default backoff between reconnections grows to two
			// minutes: after an outage the gateway would answer
			// "unavailable" that long after etcd is back. Two seconds
			// at most, and each try bounded by the operation timeout.
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: e.timeout,
		})},
		// The client's own log would go to stderr beside the gateway's;
		// what matters reaches the gateway as errors of its requests.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, e.fail("connect", err)
	}
	e.cli = cli
	ctx, cancel := e.ctx()
	defer cancel()
	if _, err := cli.Get(ctx, e.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, e.fail("read", err)
	}
	return e, nil
}

// key returns the etcd key of k. Owner and UID are path-escaped, so
// neither holds a slash and no two keys meet: an owner "a/b" with UID
// "c" is not owner "a" with UID "b/c".
func (e *Etcd) key(k Key) string {
	return e.prefix + "streams/" + url.PathEscape(k.Owner) + "/" + url.PathEscape(k.UID)
}

func (e *Etcd) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), e.timeout)
}

// fail wraps an error of operation op with ErrUnavailable or ErrDenied
// when it is one of those, and names the cluster.
func (e *Etcd) fail(op string, err error) error {
	switch {
	case unavailable(err):
		return fmt.Errorf("etcd %s at %s: %w: no answer within %s (%w)", op, e.where, ErrUnavailable, e.timeout, err)
	case denied(err):
		return fmt.Errorf("etcd %s at %s: %w: %w", op, e.where, ErrDenied, err)
	}
	return fmt.Errorf("etcd %s at %s: %w", op, e.where, err)
}

// unavailable reports whether err says etcd could not answer in time:
// a deadline, or gRPC's Unavailable (no connection, no leader, a
// server-side timeout).
func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		return ee.Code() == codes.Unavailable || ee.Code() == codes.DeadlineExceeded
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// denied reports whether err is etcd refusing the credentials or what
// they may do.
func denied(err error) bool {
	for _, d := range []error{rpctypes.ErrAuthFailed, rpctypes.ErrPermissionDenied, rpctypes.ErrUserEmpty, rpctypes.ErrInvalidAuthToken, rpctypes.ErrAuthOldRevision} {
		if errors.Is(err, d) {
			return true
		}
	}
	switch status.Code(err) {
	case codes.PermissionDenied, codes.Unauthenticated:
		return true
	}
	return false
}

// Put writes r under r.Key(), replacing any record there, with one
// exception: a live record never replaces the terminal record of the
// same stream (the same Created time), whichever node writes it, so a
// change racing the stream's end on another node cannot bring it back;
// that Put fails with ErrEnded. A terminal record also frees, in the
// same transaction, the ports and channel claims the stream held in its
// facility (facility.go).
func (e *Etcd) Put(r *Record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	k := r.Key()
	key, ended := e.key(k), e.endedKey(k)
	incarnation := r.Created.UTC().Format(time.RFC3339Nano)
	ctx, cancel := e.ctx()
	defer cancel()
	if r.State.Terminal() {
		ops := append([]clientv3.Op{clientv3.OpPut(key, string(v)), clientv3.OpPut(ended, incarnation)}, e.endOps(r)...)
		if _, err := e.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return e.fail("put", err)
		}
		return nil
	}
	put := clientv3.OpPut(key, string(v))
	tr, err := e.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(ended), "=", 0)).
		Then(put).
		Else(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(ended), "!=", incarnation)}, []clientv3.Op{put}, nil)).
		Commit()
	if err != nil {
		return e.fail("put", err)
	}
	if !tr.Succeeded && !tr.Responses[0].GetResponseTxn().Succeeded {
		return fmt.Errorf("etcd put %s: %w", k.UID, ErrEnded)
	}
	return nil
}

// ErrEnded is returned by a Put of a live record over the terminal
// record of the same stream.
var ErrEnded = errors.New("the stream has ended")

// endedKey marks the incarnation (creation time) of k's stream that
// ended.
func (e *Etcd) endedKey(k Key) string {
	return e.prefix + "ended/" + url.PathEscape(k.Owner) + "/" + url.PathEscape(k.UID)
}

// Get reads the record of k, or returns ErrNotFound.
func (e *Etcd) Get(k Key) (*Record, error) {
	ctx, cancel := e.ctx()
	defer cancel()
	resp, err := e.cli.Get(ctx, e.key(k))
	if err != nil {
		return nil, e.fail("get", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, ErrNotFound
	}
	return decode(resp.Kvs[0].Key, resp.Kvs[0].Value)
}

// Delete removes the record of k; deleting an absent one is not an error.
func (e *Etcd) Delete(k Key) error {
	ctx, cancel := e.ctx()
	defer cancel()
	if _, err := e.cli.Txn(ctx).Then(clientv3.OpDelete(e.key(k)), clientv3.OpDelete(e.endedKey(k))).Commit(); err != nil {
		return e.fail("delete", err)
	}
	return nil
}

// List returns every record of the facility, ordered by key (escaped
// owner, then escaped UID). It reads them in pages of the configured size,
// each bounded by the timeout, all at the revision of the first page: one
// consistent snapshot however many records there are and however they
// change meanwhile.
func (e *Etcd) List() ([]*Record, error) {
	var out []*Record
	prefix := e.prefix + "streams/"
	from, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	var rev int64
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(e.pageSize))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		ctx, cancel := e.ctx()
		resp, err := e.cli.Get(ctx, from, opts...)
		cancel()
		if err != nil {
			return nil, e.fail("list", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			r, err := decode(kv.Key, kv.Value)
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00" // the next key after the last one read
	}
}

func decode(k, v []byte) (*Record, error) {
	r := new(Record)
	if err := json.Unmarshal(v, r); err != nil {
		return nil, fmt.Errorf("record %q: %w", k, err)
	}
	return r, nil
}

// Close closes the client and waits for its goroutines. Idempotent.
func (e *Etcd) Close() error {
	e.closeOnce.Do(func() { e.closeErr = e.cli.Close() })
	return e.closeErr
}
