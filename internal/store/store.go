// Package store persists stream records so that a restarted s2cs restores
// its streams. The Store interface is a small key-value model (one record
// per stream, keyed by its owner and UID) with two implementations: Bolt,
// an embedded bbolt file, the default for a gateway of one node; and Etcd,
// records in an etcd cluster under a facility's key prefix, for state that
// outlives a node (etcd.go).
//
// Every operation of Etcd is bounded by a timeout, and one that could not
// reach etcd in time fails with an error wrapping ErrUnavailable: a
// control request then answers "unavailable" instead of hanging. Nothing
// on the data path reads the store, so streams keep flowing meanwhile.
package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"scistream/internal/api"
)

// Record is everything a gateway must remember about one stream to serve
// it again after a restart. It holds the stream secret: the database file
// is created with mode 0600 and must stay private to the gateway.
type Record struct {
	UID     string    `json:"uid"`
	Role    api.Role  `json:"role"`
	State   api.State `json:"state"`
	Owner   string    `json:"owner"`
	Reason  string    `json:"reason,omitempty"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`

	// Ports are the local listener ports, one per channel.
	Ports []int `json:"ports"`
	// Targets are where channel i leads: the application ("ip:port") on an
	// inbound stream, the peer gateway's WAN listener on an outbound one.
	Targets []string `json:"targets"`
	NumConn int      `json:"num_conn"`
	WAN     string   `json:"wan"`
	Engine  string   `json:"engine"`
	Allow   []string `json:"allow,omitempty"`
	// AppWaitS is how long, in seconds, an inbound stream holds a WAN
	// connection whose application cannot be reached
	// (api.InboundRequest.AppWaitS), resolved when the stream was
	// created. nil on an outbound stream, and in records written before
	// the field existed: those take the gateway's default.
	AppWaitS *int `json:"app_wait_s,omitempty"`
	// ResumeWindowS is how long, in seconds, an application connection
	// over framed legs waits for a new leg when one is lost
	// (api.InboundRequest.ResumeWindowS and OutboundRequest's), as the
	// request gave it; nil for the gateway's default, 0 for none.
	ResumeWindowS *int `json:"resume_window_s,omitempty"`
	// Stripe is the WAN legs at once an outbound stream carries each
	// application connection on (api.OutboundRequest.Stripe); 0 or 1:
	// one.
	Stripe int `json:"stripe,omitempty"`
	// MaxActiveConns caps the connections relayed at once (0: the
	// gateway's cap).
	MaxActiveConns int `json:"max_active_conns,omitempty"`

	// Secret is the per-stream WAN binding secret (32 random bytes).
	Secret []byte `json:"secret"`
	// PeerCertSHA256 pins the peer gateway's WAN certificate.
	PeerCertSHA256 string `json:"peer_cert_sha256,omitempty"`
	// ServerName names an inbound stream on the gateway's shared WAN port
	// (it then holds no ports of its own); empty for one with its own.
	ServerName string `json:"server_name,omitempty"`
	// WANPool is an outbound stream's idle pooled legs per channel.
	WANPool int `json:"wan_pool,omitempty"`
	// PeerServerName is the TLS server name an outbound stream sends.
	PeerServerName string `json:"peer_server_name,omitempty"`
	// Rate is the rate reserved for the stream, in bits per second (0:
	// best effort); RateRequested and MinRate are what its request
	// asked for. A restarted gateway holds the reservation again.
	Rate          int64 `json:"rate,omitempty"`
	RateRequested int64 `json:"rate_requested,omitempty"`
	MinRate       int64 `json:"min_rate,omitempty"`
	// LeaseS is the lease last granted, in seconds, and Expires when it
	// runs out. Zero in records written before leases existed: a
	// restarted gateway gives those its default lease from then.
	LeaseS  int       `json:"lease_s,omitempty"`
	Expires time.Time `json:"expires,omitzero"`
	// Nodes name, in a facility of several gateway nodes, the node each
	// channel was placed on when the stream was created (the one that
	// serves it unless it died: Member's channel claims say who does).
	// Empty on a gateway of one node.
	Nodes []string `json:"nodes,omitempty"`
	// PeerNodes are the hosts of the peer facility's nodes, where an
	// outbound stream looks for a channel whose listener stopped
	// answering (api.OutboundRequest.PeerNodes).
	PeerNodes []string `json:"peer_nodes,omitempty"`
	// Carried is what the stream carried before: in the runs of the
	// gateway before a restart, while it lives (a stopping gateway
	// stores it), and in all, once it ended. nil if nothing was stored
	// (a new stream; a gateway killed, or one node of a facility, which
	// keeps its own counters).
	Carried *Carried `json:"carried,omitempty"`
	// PeerCA says the stream's WAN legs are verified against the
	// gateway's peer CA bundle (s2cs --peer_ca) instead of a pin, and
	// bound to it by a secret derived from its owner and UID
	// (wan.CASecret): a stream of a SciStream 1.2 client, which carries
	// neither. An outbound one has no Targets until the client's update
	// gives them. false: pinned, with a random secret.
	PeerCA bool `json:"peer_ca,omitempty"`
}

// Carried counts what a stream carried.
type Carried struct {
	BytesToWAN   int64 `json:"bytes_to_wan"`
	BytesFromWAN int64 `json:"bytes_from_wan"`
	Conns        int64 `json:"conns"`
}

// Shared reports whether r is an inbound stream on the shared WAN port.
func (r *Record) Shared() bool { return r.ServerName != "" }

// PortsHeld is how many ports of the gateway's range r holds, or will
// hold once created.
func (r *Record) PortsHeld() int {
	if r.Shared() {
		return 0
	}
	return r.NumConn
}

// ErrNotFound is returned by Get for an unknown key.
var ErrNotFound = errors.New("no such stream record")

// Key names one stream on one gateway. A UID is unique per owner, not per
// gateway: two identities may hold the same UID, so that no identity can
// learn of another's stream, or take its UID first, by asking for it.
type Key struct {
	Owner, UID string
}

// Key returns the key of r.
func (r *Record) Key() Key { return Key{Owner: r.Owner, UID: r.UID} }

// Store keeps stream records. Implementations are safe for concurrent use.
type Store interface {
	// Put writes r under r.Key(), replacing any record there.
	Put(r *Record) error
	// Get reads the record of k, or returns ErrNotFound.
	Get(k Key) (*Record, error)
	// Delete removes the record of k; an absent one is not an error.
	Delete(k Key) error
	// List returns every record.
	List() ([]*Record, error)
	Close() error
}

var bucket = []byte("streams")

// Bolt is a Store in a bbolt database file.
type Bolt struct {
	db *bolt.DB
}

// OpenBolt opens (creating if needed) the database at path. It fails fast
// if another process holds the file.
func OpenBolt(path string) (*Bolt, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second})
	if err != nil {
		if errors.Is(err, bolterrors.ErrTimeout) {
			return nil, fmt.Errorf("open %s: the state database is locked by another s2cs; give each gateway its own --state_dir", path)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		return rekey(b)
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init %s: %w", path, err)
	}
	return &Bolt{db: db}, nil
}

// boltKey is the database key of k: the owner, a NUL, the UID. Neither
// an owner nor a UID holds a NUL, so no two keys meet.
func boltKey(k Key) []byte { return []byte(k.Owner + "\x00" + k.UID) }

// rekey moves records written by versions that keyed them by UID alone
// to their owner's key.
func rekey(b *bolt.Bucket) error {
	var old [][]byte
	b.ForEach(func(k, _ []byte) error {
		if !bytes.Contains(k, []byte{0}) {
			old = append(old, bytes.Clone(k))
		}
		return nil
	})
	for _, k := range old {
		v := b.Get(k)
		var r Record
		if err := json.Unmarshal(v, &r); err != nil {
			return fmt.Errorf("record %q: %w", k, err)
		}
		if err := b.Put(boltKey(r.Key()), bytes.Clone(v)); err != nil {
			return err
		}
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Put writes r under r.Key(), replacing any record there.
func (b *Bolt) Put(r *Record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return b.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put(boltKey(r.Key()), v)
	})
}

// Get reads the record of k.
func (b *Bolt) Get(k Key) (*Record, error) {
	var r *Record
	err := b.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucket).Get(boltKey(k))
		if v == nil {
			return ErrNotFound
		}
		r = new(Record)
		return json.Unmarshal(v, r)
	})
	return r, err
}

// Delete removes the record of k; deleting an absent one is not an error.
func (b *Bolt) Delete(k Key) error {
	return b.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Delete(boltKey(k))
	})
}

// List returns every record, ordered by owner, then UID.
func (b *Bolt) List() ([]*Record, error) {
	var out []*Record
	err := b.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).ForEach(func(k, v []byte) error {
			r := new(Record)
			if err := json.Unmarshal(v, r); err != nil {
				return fmt.Errorf("record %q: %w", k, err)
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
}

// Close closes the database.
func (b *Bolt) Close() error { return b.db.Close() }
