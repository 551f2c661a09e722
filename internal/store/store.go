// Package store persists stream records so that a restarted s2cs restores
// its streams. The Store interface is a small key-value model (one record
// per stream UID) so an etcd-backed implementation can sit beside the
// embedded bbolt one.
package store

import (
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

	// Secret is the per-stream WAN binding secret (32 random bytes).
	Secret []byte `json:"secret"`
	// PeerCertSHA256 pins the peer gateway's WAN certificate.
	PeerCertSHA256 string `json:"peer_cert_sha256,omitempty"`
}

// ErrNotFound is returned by Get for an unknown UID.
var ErrNotFound = errors.New("no such stream record")

// Store keeps stream records. Implementations are safe for concurrent use.
type Store interface {
	Put(r *Record) error
	Get(uid string) (*Record, error)
	Delete(uid string) error
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
		_, err := tx.CreateBucketIfNotExists(bucket)
		return err
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("init %s: %w", path, err)
	}
	return &Bolt{db: db}, nil
}

// Put writes r, replacing any record with the same UID.
func (b *Bolt) Put(r *Record) error {
	v, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return b.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Put([]byte(r.UID), v)
	})
}

// Get reads one record.
func (b *Bolt) Get(uid string) (*Record, error) {
	var r *Record
	err := b.db.View(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucket).Get([]byte(uid))
		if v == nil {
			return ErrNotFound
		}
		r = new(Record)
		return json.Unmarshal(v, r)
	})
	return r, err
}

// Delete removes a record; deleting an absent one is not an error.
func (b *Bolt) Delete(uid string) error {
	return b.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucket).Delete([]byte(uid))
	})
}

// List returns every record, ordered by UID.
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
