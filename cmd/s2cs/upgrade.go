package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"scistream/internal/gateway"
	"scistream/internal/handoff"
)

// A live upgrade (kill -USR2, nginx's convention for a binary upgrade):
// s2cs starts the binary at its own path again, with its own arguments
// and a Unix socket to it (envHandoff). The new process starts as far
// as it can without the old one's ports and store, and says so; only
// then does the old one freeze its streams' framed connections, stop
// (closing its listeners and its store, its watch legs saying
// "stopping") and pass the connections over the socket
// (internal/handoff). The new one restores the streams, takes their
// connections back, serves, and confirms; the old one then exits. A
// new binary that does not start, exits, or does not say it is ready
// within upgradeTimeout is stopped, and the old process keeps serving
// as if nothing happened (rollback). Under systemd the new process
// becomes the unit's main process (MAINPID=, with NotifyAccess=all).

// envHandoff names the descriptor of the socket a new s2cs gets from
// the one it takes over from.
const envHandoff = "S2CS_HANDOFF_FD"

// upgradeTimeout bounds each step of the new process: its start, and
// the hand-over until it serves.
const upgradeTimeout = 30 * time.Second

// upgrader runs the live upgrades of a serving s2cs.
type upgrader struct {
	exe  string   // the binary's path, as it started
	args []string // its arguments
	log  *slog.Logger
	srv  *gateway.Server
	done func() // ends the serving: the gateway was handed over

	mu      sync.Mutex // one upgrade at a time
	running sync.WaitGroup
	failed  error // a hand-over the new process did not confirm
}

// wait waits for an upgrade under way, and returns why the gateway was
// handed over and not taken, if it was.
func (u *upgrader) wait() error {
	u.running.Wait()
	return u.failed
}

// watch runs an upgrade on each SIGUSR2 until ctx ends; the returned
// func stops watching and waits for an upgrade under way.
func (u *upgrader) watch(ctx context.Context) (stop func()) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR2)
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-stopped:
				return
			case <-sig:
				u.running.Add(1)
				if !u.mu.TryLock() {
					u.log.Warn("SIGUSR2: an upgrade is under way already")
					u.running.Done()
					continue
				}
				go func() {
					defer u.running.Done()
					defer u.mu.Unlock()
					u.upgrade(ctx)
				}()
			}
		}
	}()
	return func() {
		signal.Stop(sig)
		close(stopped)
		<-done
		u.running.Wait()
	}
}

// upgrade hands the gateway over to a new process of the binary at
// u.exe, or says why not and keeps serving.
func (u *upgrader) upgrade(ctx context.Context) {
	u.log.Info("SIGUSR2: starting the new s2cs to hand the gateway over to", "binary", u.exe)
	c, cmd, exited, err := u.start()
	if err != nil {
		u.log.Error("live upgrade refused: this process keeps serving", "err", err)
		return
	}
	defer c.Close()
	fail := func(msg string, err error) {
		cmd.Process.Kill()
		werr := <-exited
		u.log.Error(msg, "err", err, "new_process", werr)
	}
	c.SetDeadline(time.Now().Add(upgradeTimeout))
	if err := handoff.ReadAnswer(c); err != nil {
		fail("live upgrade refused: the new s2cs did not start (rollback: this process keeps serving)", err)
		return
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // the control requests under way
	defer cancel()
	items, err := u.srv.HandOver(sctx)
	if err != nil {
		u.log.Warn("live upgrade: not everything could be handed over", "err", err)
	}
	c.SetDeadline(time.Now().Add(upgradeTimeout))
	err = handoff.Send(c, items)
	for _, it := range items {
		if it.File != nil {
			it.File.Close()
		}
	}
	if err == nil {
		err = handoff.ReadAnswer(c)
	}
	if err != nil {
		// The gateway is stopped and its connections are the new
		// process's: there is nothing left to roll back to here.
		fail("live upgrade failed after the hand-over: the new s2cs did not confirm; this process stops (its streams' records stay, and the next start restores them)", err)
		u.failed = fmt.Errorf("live upgrade: handed over, and the new process did not take over: %w", err)
		u.done()
		return
	}
	pid := cmd.Process.Pid
	if err := newNotifier(os.Getenv("NOTIFY_SOCKET")).send("MAINPID=" + strconv.Itoa(pid)); err != nil {
		u.log.Warn("live upgrade: could not tell the service manager the new main process", "err", err)
	}
	conns := 0
	for _, it := range items {
		if it.Kind == handoff.KindConn {
			conns++
		}
	}
	u.log.Info("live upgrade: the gateway is handed over to the new s2cs; this process exits", "pid", pid, "connections", conns, "listeners", len(items)-conns)
	u.done()
}

// start starts the new process with its end of a socketpair; exited
// gets its Wait's result.
func (u *upgrader) start() (*net.UnixConn, *exec.Cmd, <-chan error, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "handoff"), os.NewFile(uintptr(fds[1]), "handoff")
	defer theirs.Close()
	nc, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		return nil, nil, nil, err
	}
	cmd := exec.Command(u.exe, u.args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{theirs} // descriptor 3
	cmd.Env = append(os.Environ(), envHandoff+"=3")
	if err := cmd.Start(); err != nil {
		nc.Close()
		return nil, nil, nil, fmt.Errorf("start %s: %w", u.exe, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	return nc.(*net.UnixConn), cmd, exited, nil
}

// successor is the new process's side of a live upgrade, nil if s2cs
// was not started by one.
type successor struct {
	c   *net.UnixConn
	log *slog.Logger
}

// takingOver returns the successor's side if s2cs was started by a live
// upgrade, or nil.
func takingOver(log *slog.Logger) (*successor, error) {
	v := os.Getenv(envHandoff)
	if v == "" {
		return nil, nil
	}
	os.Unsetenv(envHandoff) // not for a process this one starts
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return nil, fmt.Errorf("%s=%q: not a descriptor this process was given", envHandoff, v)
	}
	f := os.NewFile(uintptr(fd), "handoff")
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envHandoff, err)
	}
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		nc.Close()
		return nil, fmt.Errorf("%s: not a Unix socket", envHandoff)
	}
	return &successor{c: uc, log: log}, nil
}

// take says the new process is ready to take over, and receives what
// the old one hands over (it stopped meanwhile: its ports and its store
// are free).
func (s *successor) take() ([]handoff.Item, error) {
	if err := handoff.Answer(s.c, nil); err != nil {
		return nil, fmt.Errorf("live upgrade: answer the old process: %w", err)
	}
	s.c.SetDeadline(time.Now().Add(upgradeTimeout))
	items, err := handoff.Receive(s.c)
	if err != nil {
		return nil, fmt.Errorf("live upgrade: %w", err)
	}
	s.log.Info("live upgrade: taking the gateway over from the old process", "connections", len(items))
	return items, nil
}

// confirm tells the old process, once ready reports true, that this one
// serves, or, if stop ends first, why not (err, at the end of run).
// Call the returned func with run's error once the gateway stopped.
// The sockets handed over that nothing took by then are closed.
func (s *successor) confirm(ready func() bool, sockets *handoff.Sockets) (done func(err error)) {
	served := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		defer s.c.Close()
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for !ready() {
			select {
			case err := <-served:
				if err == nil {
					err = errors.New("it stopped before it served")
				}
				handoff.Answer(s.c, err)
				return
			case <-tick.C:
			}
		}
		if unused := sockets.CloseUnused(); len(unused) > 0 {
			s.log.Info("live upgrade: sockets handed over and not used here, closed", "sockets", unused)
		}
		if err := handoff.Answer(s.c, nil); err != nil {
			s.log.Warn("live upgrade: could not confirm to the old process", "err", err)
		}
	}()
	return func(err error) {
		served <- err
		<-finished
	}
}
