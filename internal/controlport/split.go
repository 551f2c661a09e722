package controlport

import (
	"crypto/tls"
	"net"
	"net/http"
	"sync"
	"time"
)

// The control port with a gRPC service beside the HTTPS API: the
// SciStream 1.2 control protocol (internal/legacy12), which a 1.2 client
// reaches with the same --s2cs host:port and certificate. Without it the
// control port is as Listen describes (HTTP/1.1 only).
//
// With it, the TLS configuration offers "h2" before "http/1.1" by ALPN
// and the handshake runs here, in a goroutine of its own per connection
// under a deadline, before net/http sees the connection: an HTTP/2
// connection goes to a second http.Server (h2), which the caller gives a
// handler that sends each request to the gRPC service if its content
// type is application/grpc and to the API otherwise, with its frames
// guarded (h2guard.go); an HTTP/1.1 one goes on to the API's server
// exactly as Listen's would. Either holds its place at the gate from its
// accept to its close.

// ListenSplit returns the listener of the API's HTTP/1.1 connections on
// ln, and serves the HTTP/2 ones with h2 (set up here to take them as
// the guard hands them). It adds "h2" to cfg's protocols. timeout bounds
// a TLS handshake; maxHeaderBytes is as for Listen; both servers take
// g.ConnState and ConnContext as their hooks. The goroutines it starts
// are counted in wg; they end once the returned listener is closed,
// which closes h2 too.
func (g *Gate) ListenSplit(ln net.Listener, cfg *tls.Config, maxHeaderBytes int, timeout time.Duration, h2 *http.Server, wg *sync.WaitGroup) net.Listener {
	cfg.NextProtos = []string{"h2", "http/1.1"}
	h2.Protocols = new(http.Protocols)
	// The guard's connections have no ConnectionState: net/http takes
	// them as HTTP/2 with prior knowledge (their TLS is the guard's).
	h2.Protocols.SetUnencryptedHTTP2(true)
	h2.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 250}
	l := &splitListener{
		gate:           g,
		Listener:       ln,
		timeout:        timeout,
		cfg:            cfg,
		maxHeaderBytes: maxHeaderBytes,
		conns:          make(chan net.Conn),
		h2:             &chanListener{addr: ln.Addr(), conns: make(chan net.Conn), done: make(chan struct{})},
		h2Srv:          h2,
		done:           make(chan struct{}),
		open:           map[net.Conn]struct{}{},
		wg:             wg,
	}
	wg.Add(2)
	go l.acceptLoop()
	go func() {
		defer wg.Done()
		h2.Serve(l.h2) // until Close closes it
	}()
	return l
}

// splitListener accepts TCP connections on its Listener, runs their TLS
// handshakes, hands those that chose HTTP/2 to h2Srv (through h2) and
// the others to Accept. Close closes h2Srv too.
type splitListener struct {
	net.Listener
	gate           *Gate
	timeout        time.Duration // bounds a handshake
	cfg            *tls.Config
	maxHeaderBytes int
	conns          chan net.Conn // HTTP/1.1 connections, for Accept
	h2             *chanListener // HTTP/2 connections, for h2Srv
	h2Srv          *http.Server
	wg             *sync.WaitGroup

	closeOnce sync.Once
	done      chan struct{} // closed by Close

	mu   sync.Mutex // guards the following
	open map[net.Conn]struct{}
	shut bool
}

// acceptLoop accepts until the listener is closed.
func (l *splitListener) acceptLoop() {
	defer l.wg.Done()
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			var ne net.Error
			if errorsAsTemporary(err, &ne) {
				time.Sleep(5 * time.Millisecond) // as net/http backs off
				continue
			}
			l.Close()
			return
		}
		sl := l.gate.admit(c)
		if sl == nil {
			abort(c)
			continue
		}
		if !l.track(c) {
			sl.release()
			c.Close()
			return
		}
		l.wg.Add(1)
		go l.handshake(c, sl)
	}
}

// handshake runs the TLS handshake of raw, which holds the place sl, and
// passes it on.
func (l *splitListener) handshake(raw net.Conn, sl *slot) {
	defer l.wg.Done()
	cc := &controlConn{Conn: tls.Server(raw, l.cfg), maxHeaderBytes: l.maxHeaderBytes, slot: sl}
	if l.timeout > 0 {
		raw.SetDeadline(time.Now().Add(l.timeout))
	}
	// A Read of nothing runs the handshake, and answers a client that
	// speaks plain HTTP to the HTTPS port (controlConn.Read).
	if _, err := cc.Read(nil); err != nil {
		l.untrack(raw)
		sl.release()
		raw.Close()
		return
	}
	raw.SetDeadline(time.Time{})
	l.untrack(raw) // a server owns it from here
	var to chan net.Conn = l.conns
	var c net.Conn = cc
	if cc.ConnectionState().NegotiatedProtocol == "h2" {
		to, c = l.h2.conns, newH2Conn(cc.Conn, sl)
	}
	select {
	case to <- c:
	case <-l.done:
		sl.release()
		raw.Close()
	}
}

func (l *splitListener) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shut {
		return false
	}
	l.open[c] = struct{}{}
	return true
}

func (l *splitListener) untrack(c net.Conn) {
	l.mu.Lock()
	delete(l.open, c)
	l.mu.Unlock()
}

// Accept returns the next HTTP/1.1 connection, its handshake done.
func (l *splitListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting and closes the connections in a handshake and
// those served as HTTP/2 (the gateway is shutting down).
func (l *splitListener) Close() error {
	var err error
	l.closeOnce.Do(func() {
		close(l.done)
		err = l.Listener.Close()
		l.mu.Lock()
		l.shut = true
		for c := range l.open {
			c.Close()
		}
		l.mu.Unlock()
		l.h2Srv.Close()
	})
	return err
}

// chanListener is a listener of the connections sent on conns.
type chanListener struct {
	addr      net.Addr
	conns     chan net.Conn
	closeOnce sync.Once
	done      chan struct{}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }

// errorsAsTemporary reports whether err is a temporary accept error
// (too many open files), after which the loop goes on.
func errorsAsTemporary(err error, ne *net.Error) bool {
	e, ok := err.(net.Error)
	*ne = e
	//lint:ignore SA1019 Temporary is what net/http's own accept loop checks
	return ok && e.Temporary() //nolint:staticcheck
}
