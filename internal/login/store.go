package login

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/oauth2"
	"golang.org/x/sys/unix"

	"scistream/internal/client"
	"scistream/internal/trustfile"
)

// Saved is a login as the store keeps it. Its tokens are secrets: never
// print one.
type Saved struct {
	Issuer             string    `json:"issuer"`
	ClientID           string    `json:"client_id"`
	Scopes             []string  `json:"scopes,omitempty"`
	CAFile             string    `json:"ca_file,omitempty"`
	TokenEndpoint      string    `json:"token_endpoint"`
	RevocationEndpoint string    `json:"revocation_endpoint,omitempty"`
	AccessToken        string    `json:"access_token"`
	RefreshToken       string    `json:"refresh_token,omitempty"`
	TokenType          string    `json:"token_type,omitempty"`
	Expiry             time.Time `json:"expiry,omitzero"`
}

func (s *Saved) set(tok *oauth2.Token) {
	s.AccessToken, s.TokenType, s.Expiry = tok.AccessToken, tok.TokenType, tok.Expiry
	if tok.RefreshToken != "" {
		s.RefreshToken = tok.RefreshToken
	}
}

// fresh reports whether s's access token is good for Margin more at now
// (or has no known expiry).
func (s *Saved) fresh(now time.Time) bool {
	return s.AccessToken != "" && (s.Expiry.IsZero() || now.Add(Margin).Before(s.Expiry))
}

// Store keeps one login in a file: mode 0600 in a directory of mode
// 0700, written whole (a temporary file renamed), and refused when
// anyone but its owner may read it.
type Store struct {
	// Path is the login file.
	Path string
	// Now is the clock. If nil, time.Now.
	Now func() time.Time
}

// DefaultStore is the login in s2uc's home (client.Home), next to its
// stream records.
func DefaultStore() (Store, error) {
	home, err := client.Home()
	if err != nil {
		return Store{}, err
	}
	return Store{Path: filepath.Join(home, "login.json")}, nil
}

func (st Store) now() time.Time {
	if st.Now != nil {
		return st.Now()
	}
	return time.Now()
}

// Save writes s.
func (st Store) Save(s *Saved) error {
	if err := os.MkdirAll(filepath.Dir(st.Path), 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := st.Path + ".tmp"
	os.Remove(tmp) // a stale one, perhaps of another mode: WriteFile keeps an existing file's mode
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, st.Path)
}

// ErrNoLogin: no login is stored.
var ErrNoLogin = errors.New("not logged in")

// Load reads the stored login; ErrNoLogin if there is none.
func (st Store) Load() (*Saved, error) {
	f, err := os.Open(st.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoLogin
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s can be read or written by others (mode %04o): remove it and run s2uc login again", st.Path, fi.Mode().Perm())
	}
	// It names the issuer its refresh token goes to: the user's (or
	// root's), in directories nobody else may write (internal/trustfile).
	if err := trustfile.Verify("login file", st.Path, f); err != nil {
		return nil, err
	}
	var s Saved
	if err := json.NewDecoder(f).Decode(&s); err != nil || s.AccessToken == "" || s.Issuer == "" {
		return nil, fmt.Errorf("%s is not a login s2uc saved: remove it and run s2uc login", st.Path)
	}
	return &s, nil
}

// Remove deletes the stored login, if any.
func (st Store) Remove() error {
	err := os.Remove(st.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

// Token returns the stored access token, renewed first if it expires
// within Margin. Renewal holds a lock on the login, so that two
// commands at once renew it once (an issuer that rotates refresh tokens
// takes each once). ErrNoLogin if there is none.
func (st Store) Token(ctx context.Context) (string, error) {
	s, err := st.Load()
	if err != nil {
		return "", err
	}
	if s.fresh(st.now()) {
		return s.AccessToken, nil
	}
	unlock, err := st.lock()
	if err != nil {
		return "", err
	}
	defer unlock()
	if s, err = st.Load(); err != nil { // another command may have renewed it
		return "", err
	}
	if s.fresh(st.now()) {
		return s.AccessToken, nil
	}
	if err := s.refresh(ctx); err != nil {
		return "", err
	}
	if err := st.Save(s); err != nil {
		return "", fmt.Errorf("save the renewed login: %w", err)
	}
	return s.AccessToken, nil
}

// lock takes an exclusive lock on the login's lock file, waiting for
// another holder.
func (st Store) lock() (func(), error) {
	f, err := os.OpenFile(st.Path+".lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the login: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock the login: %w", err)
	}
	return func() { unix.Flock(int(f.Fd()), unix.LOCK_UN); f.Close() }, nil
}
