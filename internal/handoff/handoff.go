// Package handoff carries what an old s2cs hands to its successor in a
// live upgrade (kill -USR2) over a Unix socket between the two: a list
// of items, each a kind, a name, an opaque record and at most one open
// file (a listener's or an application connection's socket, passed as
// SCM_RIGHTS), then an end; and the successor's answer, that it took
// them or why not (the old process then keeps serving: rollback).
//
// The socket is the two processes' own (a socketpair the old one made
// for its child), so a peer is trusted as far as the user it runs as;
// still, what arrives is bounded and checked (a name of at most
// MaxName bytes, a record of at most MaxRecord, one file at most per
// item, a version that must match), and a received file that is not
// handed on is closed.
package handoff

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
)

// Kinds of item.
const (
	KindListener byte = 'L' // a listening socket, named by its address
	KindConn     byte = 'C' // an application connection and its record
	KindState    byte = 'S' // a record without a file (the streams' state)
	kindEnd      byte = 'E'
)

// Limits of what one item carries.
const (
	MaxName   = 1024
	MaxRecord = 3 << 30 // two directions of carry.MaxWindow, and some
)

// Item is one thing handed over.
type Item struct {
	Kind   byte
	Name   string
	Record []byte
	// File, if not nil, is passed with the item (the receiver gets a
	// duplicate; the sender still closes its own).
	File *os.File
}

// magic starts every item's header; its last byte is the version of
// this encoding, which both processes must speak.
var magic = [4]byte{'S', '2', 'H', 1}

// headerLen: the magic, the kind, whether a file comes, the name's
// length (2 bytes) and the record's (4).
const headerLen = 4 + 1 + 1 + 2 + 4

// Send writes items, then the end, on c.
func Send(c *net.UnixConn, items []Item) error {
	for i, it := range items {
		if err := send(c, it); err != nil {
			return fmt.Errorf("hand over item %d (%c %s): %w", i, it.Kind, it.Name, err)
		}
	}
	return send(c, Item{Kind: kindEnd})
}

func send(c *net.UnixConn, it Item) error {
	if len(it.Name) > MaxName || len(it.Record) > MaxRecord {
		return fmt.Errorf("a name of %d bytes or a record of %d, past %d and %d", len(it.Name), len(it.Record), MaxName, MaxRecord)
	}
	hdr := make([]byte, 0, headerLen+len(it.Name))
	hdr = append(hdr, magic[:]...)
	hdr = append(hdr, it.Kind, 0)
	if it.File != nil {
		hdr[5] = 1
	}
	hdr = binary.BigEndian.AppendUint16(hdr, uint16(len(it.Name)))
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(it.Record)))
	hdr = append(hdr, it.Name...)
	var oob []byte
	if it.File != nil {
		oob = syscall.UnixRights(int(it.File.Fd()))
	}
	n, _, err := c.WriteMsgUnix(hdr, oob, nil)
	if err != nil {
		return err
	}
	if n < len(hdr) {
		if _, err := c.Write(hdr[n:]); err != nil {
			return err
		}
	}
	_, err = c.Write(it.Record)
	return err
}

// Receive reads items from c up to the end. On an error, the files of
// the items read so far are closed.
func Receive(c *net.UnixConn) (items []Item, err error) {
	defer func() {
		if err != nil {
			for _, it := range items {
				if it.File != nil {
					it.File.Close()
				}
			}
			items = nil
		}
	}()
	for {
		it, err := receive(c)
		if err != nil {
			if it.File != nil {
				it.File.Close()
			}
			return items, fmt.Errorf("receive item %d: %w", len(items), err)
		}
		if it.Kind == kindEnd {
			return items, nil
		}
		items = append(items, it)
	}
}

func receive(c *net.UnixConn) (it Item, err error) {
	hdr := make([]byte, headerLen)
	oob := make([]byte, syscall.CmsgSpace(4*4)) // room for more than one: more is refused, not lost
	n, oobn, _, _, err := c.ReadMsgUnix(hdr, oob)
	if err != nil {
		return it, err
	}
	if oobn > 0 {
		files, ferr := filesOf(oob[:oobn])
		if len(files) > 0 {
			it.File = files[0]
		}
		for _, f := range files[min(len(files), 1):] {
			f.Close()
		}
		switch {
		case ferr != nil:
			return it, ferr
		case len(files) > 1:
			return it, fmt.Errorf("%d files with one item", len(files))
		}
	}
	if n == 0 {
		return it, io.ErrUnexpectedEOF
	}
	if _, err := io.ReadFull(c, hdr[n:]); err != nil {
		return it, fmt.Errorf("its header: %w", err)
	}
	if [4]byte(hdr[:4]) != magic {
		if [3]byte(hdr[:3]) == [3]byte(magic[:3]) {
			return it, fmt.Errorf("the old process hands over in version %d, and this s2cs reads version %d: upgrade to a release of the same hand-over version, or restart", hdr[3], magic[3])
		}
		return it, errors.New("not a hand-over")
	}
	it.Kind = hdr[4]
	switch it.Kind {
	case KindListener, KindConn, KindState, kindEnd:
	default:
		return it, fmt.Errorf("an item of unknown kind %q", it.Kind)
	}
	withFile := hdr[5]
	if withFile > 1 || withFile == 1 && it.File == nil || withFile == 0 && it.File != nil {
		return it, fmt.Errorf("an item that says %d files and came with %v", withFile, it.File != nil)
	}
	nameLen := int(binary.BigEndian.Uint16(hdr[6:]))
	recLen := binary.BigEndian.Uint32(hdr[8:])
	if nameLen > MaxName || recLen > MaxRecord {
		return it, fmt.Errorf("a name of %d bytes or a record of %d, past %d and %d", nameLen, recLen, MaxName, MaxRecord)
	}
	name := make([]byte, nameLen)
	if _, err := io.ReadFull(c, name); err != nil {
		return it, fmt.Errorf("its name: %w", err)
	}
	it.Name = string(name)
	// The record grows as its bytes come: a header that promises more
	// than follows costs nothing.
	var rec bytes.Buffer
	if k, err := io.CopyN(&rec, c, int64(recLen)); err != nil {
		return it, fmt.Errorf("its record: %d bytes of %d: %w", k, recLen, err)
	}
	it.Record = rec.Bytes()
	if it.Kind == kindEnd && (it.File != nil || nameLen > 0 || recLen > 0) {
		return it, errors.New("an end that carries something")
	}
	return it, nil
}

// filesOf returns the files passed in oob's rights messages.
func filesOf(oob []byte) ([]*os.File, error) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := syscall.ParseUnixRights(&m)
		if err != nil {
			continue // not rights: nothing to close
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "handed-over"))
		}
	}
	return files, nil
}

// Answer writes the successor's answer on c: that it took everything
// (err nil), or why not.
func Answer(c *net.UnixConn, err error) error {
	msg := "ok"
	if err != nil {
		msg = "no: " + err.Error()
	}
	if len(msg) > MaxName {
		msg = msg[:MaxName]
	}
	b := binary.BigEndian.AppendUint16(nil, uint16(len(msg)))
	_, werr := c.Write(append(b, msg...))
	return werr
}

// ErrNoAnswer is the end of a successor that said nothing: it exited,
// or its answer did not come before c's deadline.
var ErrNoAnswer = errors.New("the new process gave no answer")

// ReadAnswer reads the successor's answer from c (under c's deadline):
// nil if it took everything, else why not.
func ReadAnswer(c *net.UnixConn) error {
	var b [2]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return fmt.Errorf("%w: %w", ErrNoAnswer, err)
	}
	msg := make([]byte, min(int(binary.BigEndian.Uint16(b[:])), MaxName))
	if _, err := io.ReadFull(c, msg); err != nil {
		return fmt.Errorf("%w: %w", ErrNoAnswer, err)
	}
	switch s := string(msg); {
	case s == "ok":
		return nil
	case len(s) > 4 && s[:4] == "no: ":
		return fmt.Errorf("the new process refused the hand-over: %s", printable(s[4:]))
	default:
		return fmt.Errorf("the new process answered %q", printable(s))
	}
}

// printable replaces the control characters of s.
func printable(s string) string {
	b := []rune(s)
	for i, r := range b {
		if r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0 || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 {
			b[i] = '?'
		}
	}
	return string(b)
}
