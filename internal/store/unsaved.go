package store

import "sync"

// Unsaved stores final records, keeping those the store refused (a full
// disk, an unreachable etcd) to store again later (Retry), and answers
// for them meanwhile (Get, List): until the write lands, the store
// holds an older record, which a restart would bring back. Its methods
// may be called concurrently.
type Unsaved struct {
	st Store

	mu   sync.Mutex // guards recs
	recs map[Key]*Record
}

// NewUnsaved returns an Unsaved that writes to st.
func NewUnsaved(st Store) *Unsaved { return &Unsaved{st: st, recs: map[Key]*Record{}} }

// Put stores rec or, if the store refuses, keeps it for Retry and
// returns the store's error. Either way rec replaces a record of its
// key kept before.
func (u *Unsaved) Put(rec *Record) error {
	err := u.st.Put(rec)
	u.mu.Lock()
	defer u.mu.Unlock()
	if err == nil {
		delete(u.recs, rec.Key())
	} else {
		u.recs[rec.Key()] = rec
	}
	return err
}

// Retry tries again to store the records kept, and returns those the
// store took now. A record Put replaced meanwhile stays kept.
func (u *Unsaved) Retry() []*Record {
	var stored []*Record
	for _, r := range u.List() {
		if u.st.Put(r) != nil {
			continue
		}
		u.mu.Lock()
		if u.recs[r.Key()] == r {
			delete(u.recs, r.Key())
			stored = append(stored, r)
		}
		u.mu.Unlock()
	}
	return stored
}

// Get returns a copy of the record of k kept, or nil.
func (u *Unsaved) Get(k Key) *Record {
	u.mu.Lock()
	defer u.mu.Unlock()
	if r := u.recs[k]; r != nil {
		c := *r
		return &c
	}
	return nil
}

// List returns the records kept.
func (u *Unsaved) List() []*Record {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]*Record, 0, len(u.recs))
	for _, r := range u.recs {
		out = append(out, r)
	}
	return out
}
