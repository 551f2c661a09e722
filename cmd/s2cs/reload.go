package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"scistream/internal/auth"
	"scistream/internal/gateway"
)

// On SIGHUP (systemd's ExecReload) s2cs reads again what says who may
// call it: the --tokens file, the --roles file and the identity
// providers (--oidc_issuer's keys or --jwks_file, --introspection_url
// and its secret file), with the flags it started with. The new ones
// replace the old at once (gateway.Server.SetAccess) for every request
// that arrives from then on; streams and their connections are not
// touched. A file that does not load is refused whole: the old tokens,
// roles and providers stay in force, and the log says why.

// reloader holds the authenticator in force, so that it can be closed
// when a reload replaces it or s2cs stops.
type reloader struct {
	o   *options
	srv *gateway.Server
	log *slog.Logger
	// hangup tells the SIGHUP of a closed terminal, on which s2cs stops
	// (quit), from one sent to reload (hangup.go).
	hangup hangup
	quit   func()

	mu  sync.Mutex // one reload at a time; guards cur
	cur auth.Authenticator
}

// watchReload reloads on every SIGHUP until ctx ends. The returned stop
// stops watching, waits for a reload under way and closes the
// authenticator in force.
func (r *reloader) watchReload(ctx context.Context) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				if r.hangup.terminalGone() {
					r.log.Info("SIGHUP: the terminal s2cs ran on closed: stopping (a SIGHUP sent while the terminal is open reloads)")
					r.quit()
					return
				}
				r.reload(ctx)
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		cancel()
		<-done
		r.mu.Lock()
		closeAuth(r.cur)
		r.cur = nil
		r.mu.Unlock()
	}
}

// reload reads the tokens, roles and identity providers again and puts
// them in force, or keeps the old ones if any fails to load.
func (r *reloader) reload(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log.Info("SIGHUP: reading the tokens, roles and identity providers again")
	authn, err := r.o.authenticator(ctx, r.log)
	var roles *auth.Policy
	if err == nil {
		roles, err = r.o.id.policy(r.log)
	}
	if err == nil {
		err = r.srv.SetAccess(authn, roles)
	}
	if err != nil {
		closeAuth(authn)
		r.log.Error("reload refused: the tokens, roles and identity providers in force stay so; fix the file and send SIGHUP again", "err", err)
		return
	}
	closeAuth(r.cur)
	r.cur = authn
	r.log.Info("reloaded: new tokens, roles and identity providers in force for every request from now on")
}

// closeAuth closes an authenticator that holds something open (the
// issuer's keys, refreshed in the background: idp.RemoteKeys).
func closeAuth(a auth.Authenticator) {
	if c, ok := a.(io.Closer); ok {
		c.Close()
	}
}
