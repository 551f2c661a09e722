package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"scistream/internal/api"
	"scistream/internal/client"
	"scistream/internal/cliflag"
)

// loadRecord loads s2uc's local record of stream uid for a command
// that reaches the stream's gateways through it. No record is a
// not-found error that suggests the nearest UID s2uc has a record of (a
// mistyped UID), else says fix (what to give instead); a record of a
// stream s2uc released is a not-found error that says when and by whom.
func loadRecord(ss client.Sessions, uid, fix string) (*client.Session, error) {
	sess, err := ss.Load(uid)
	if errors.Is(err, os.ErrNotExist) {
		return nil, noRecord(ss, uid, fix)
	}
	if err != nil {
		return nil, err
	}
	if sess.Released != nil {
		return nil, releasedError(uid, sess.Released)
	}
	return sess, nil
}

// noRecord is the error for a UID s2uc has no record of.
func noRecord(ss client.Sessions, uid, fix string) error {
	uids, _ := ss.UIDs() // no list, no suggestion
	if near := cliflag.Nearest(uid, uids); near != "" && near != uid {
		return notFoundf("no local record of stream %s: did you mean %s? (s2uc has a record of it; otherwise %s)", uid, near, fix)
	}
	return notFoundf("no local record of stream %s: %s", uid, fix)
}

// releasedError says that stream uid was released, when and by whom.
func releasedError(uid string, r *client.Released) error {
	by := ""
	if r.By != "" {
		by = " " + printable(strings.TrimPrefix(r.By, "released "))
	}
	return &classified{exitNotFound, api.CodeNotFound, fmt.Errorf("stream %s was released at %s%s; its gateways no longer serve it%w", uid, r.At.Local().Format(time.DateTime), by, errReleased)}
}

// errReleased is matched (errors.Is) by releasedError's errors. Its
// text is empty: it marks, it does not say.
var errReleased = errors.New("")

// markReleased keeps the record of a stream whose every side s2uc
// released, without its sides, saying when and by whom (the released
// view's reason, by the gateway).
func markReleased(ss client.Sessions, sess *client.Session, at time.Time, by string) error {
	if at.IsZero() {
		at = time.Now()
	}
	sess.Released = &client.Released{At: at.UTC(), By: by}
	sess.Secret = "" // nothing left to wire with it
	if err := ss.Save(sess); err != nil {
		return fmt.Errorf("keep the record of released stream %s: %w", sess.UID, err)
	}
	return ss.PruneReleased(time.Now().Add(-releasedKept))
}

// releasedKept is how long s2uc keeps the record of a released stream.
const releasedKept = 30 * 24 * time.Hour
