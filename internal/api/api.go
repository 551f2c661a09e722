// Package api defines the SciStream control API's wire types: the JSON
// bodies exchanged between s2uc (or any HTTP client) and s2cs under /v1,
// the stable error codes, and the OpenAPI document that describes them.
//
// Everything here is shared by the server (internal/gateway) and the client
// (internal/client), so the two can never disagree about a field name.
package api

import (
	_ "embed"
	"fmt"
	"time"
)

// OpenAPI is the OpenAPI 3 document of the control API, served by s2cs at
// GET /v1/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Role says which side of a stream a gateway plays.
type Role string

const (
	// RoleInbound is the gateway in front of the application that accepts
	// connections (usually the consumer). It listens on the WAN and dials
	// the application.
	RoleInbound Role = "inbound"
	// RoleOutbound is the gateway in front of the application that
	// connects. It listens on the LAN and dials the inbound gateway.
	RoleOutbound Role = "outbound"
)

// State is a stream's lifecycle state. The transitions are:
//
//	requested -> listening -> wired -> connected -> released | expired | failed
//
// requested: a request being admitted, before its listeners are bound;
// records are stored only once they are, so a stored record found in this
// state (written by an older or interrupted gateway) is restored as failed.
// listening: listeners are bound; an inbound stream waits for its peer
// gateway to be attached (a stream of a SciStream 1.2 client, either
// side, for its partner to be known). wired: both gateways know each
// other (an inbound stream is attached, an outbound one is created wired)
// but no data leg has worked on this gateway yet: a wrong peer listener
// or an application that does not answer shows here, and in the
// stream's last errors.
// connected: a data leg has worked on this gateway at least once (on an
// outbound stream, a WAN leg to the peer completed its handshake; on an
// inbound one, an admitted WAN leg reached the application); a stream
// never goes back to wired. The last three are terminal: their ports are
// free again.
type State string

const (
	StateRequested State = "requested"
	StateListening State = "listening"
	StateWired     State = "wired"
	StateConnected State = "connected"
	StateReleased  State = "released"
	StateExpired   State = "expired"
	StateFailed    State = "failed"
)

// Terminal reports whether s is a final state.
func (s State) Terminal() bool {
	return s == StateReleased || s == StateExpired || s == StateFailed
}

// Attached reports whether s is a state in which both gateways know each
// other: wired or connected.
func (s State) Attached() bool {
	return s == StateWired || s == StateConnected
}

// LiveStates returns the states of a stream that has not ended, in the
// order of the machine.
func LiveStates() []State {
	return []State{StateRequested, StateListening, StateWired, StateConnected}
}

// WAN transports between the two gateways.
const (
	WANTLS = "tls" // mutual TLS 1.3, pinned per stream (default)
	WANTCP = "tcp" // plaintext, for trusted circuits; still bound by the stream secret
	// WANQUIC carries each application connection as a QUIC stream of one
	// QUIC connection per channel (UDP on the listener's port), with the
	// same pinned mutual TLS 1.3 and stream secret as WANTLS.
	WANQUIC = "quic"
)

// Where an inbound stream's WAN legs arrive (InboundRequest.WANListener).
const (
	// WANListenerShared: the gateway's shared WAN port (s2cs --wan_port),
	// the stream told apart by its TLS server name; tls and quic only.
	WANListenerShared = "shared"
	// WANListenerPorts: num_conn ports of the stream's own from the
	// gateway's port range.
	WANListenerPorts = "ports"
)

// WANPinned reports whether WAN transport w authenticates the peer gateway
// by its pinned certificate (so requests must carry peer_cert).
func WANPinned(w string) bool { return w == WANTLS || w == WANQUIC }

// ValidUID reports whether uid is a stream UID as gateways make and
// accept them: a lower-case UUID of 36 characters, such as
// 0f8e3c5a-4b1d-4c2e-9a7f-1d2e3f4a5b6c. Such a UID is safe as a file
// name and a URL path segment; a client checks a UID a gateway answers
// with before it uses it as either.
func ValidUID(uid string) bool {
	if len(uid) != 36 {
		return false
	}
	for i := 0; i < len(uid); i++ {
		switch c := uid[i]; {
		case i == 8 || i == 13 || i == 18 || i == 23:
			if c != '-' {
				return false
			}
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f':
		default:
			return false
		}
	}
	return true
}

// InboundRequest asks the gateway in front of the listening application to
// open num_conn WAN listeners that lead to remote_ip:receiver_ports.
type InboundRequest struct {
	// UID optionally fixes the stream's identifier (a lower-case UUID).
	// If empty, the gateway chooses one.
	UID string `json:"uid,omitempty"`
	// RemoteIP is the address of the listening application, as the
	// gateway reaches it on its LAN.
	RemoteIP string `json:"remote_ip"`
	// ReceiverPorts are the application's ports. Channel i leads to
	// ReceiverPorts[i % len(ReceiverPorts)].
	ReceiverPorts []int `json:"receiver_ports"`
	// NumConn is the number of channels (listeners), 1..MaxChannels.
	NumConn int `json:"num_conn"`
	// WAN is the transport between the gateways: "tls" (default), "quic"
	// or "tcp".
	WAN string `json:"wan,omitempty"`
	// Engine selects the data-plane engine; empty means the gateway's default.
	Engine string `json:"engine,omitempty"`
	// WANListener says where the WAN legs arrive: WANListenerShared or
	// WANListenerPorts. Empty means the shared port when the gateway has
	// one and the transport is tls or quic, else ports of the stream's own.
	WANListener string `json:"wan_listener,omitempty"`
	// AppWaitS is how long, in whole seconds, the gateway holds a WAN
	// connection whose application it cannot reach (refused, unreachable,
	// timed out), dialing it again with backoff, before it resets the
	// connection: an application that starts listening late loses no
	// byte. nil (absent) means the gateway's default (Info.AppWaitDefaultS);
	// 0 means do not wait: one dial, and a failure resets the connection
	// at once. At most the gateway's maximum, Info.AppWaitMaxS.
	AppWaitS *int `json:"app_wait_s,omitempty"`
	// ResumeWindowS is how long, in whole seconds, an application
	// connection over framed WAN legs (both gateways of this release,
	// tls or quic) waits, parked, for a new leg when its leg is lost,
	// its applications seeing a pause, before both are reset. nil
	// (absent) means the gateway's default (Info.ResumeWindowDefaultS);
	// 0 means do not wait: a lost leg resets the connection at once. At
	// most the gateway's maximum, Info.ResumeWindowMaxS. Each side
	// waits as its own request said; s2uc gives both the same.
	ResumeWindowS *int `json:"resume_window_s,omitempty"`
	// MaxActiveConns caps the application connections this side of the
	// stream relays at once; one more is reset at once and counted
	// (Stats.OverCapConns). 0 (or omitted) means the gateway's own cap
	// (s2cs --max_active_conns); more than that is refused.
	MaxActiveConns int `json:"max_active_conns,omitempty"`
	// Rate is the rate the stream wants reserved, in bits per second:
	// the gateway admits it against its capacity and quotas (Info), and
	// keeps the stream's bytes to what it grants, in each direction.
	// 0 (absent): best effort, sharing what reservations leave.
	Rate int64 `json:"rate,omitempty"`
	// MinRate is the least reserved rate the caller accepts: a gateway
	// that cannot reserve Rate grants what it has down to MinRate and
	// refuses below it (no_resources, naming the limit). 0 (absent):
	// Rate, all or nothing.
	MinRate int64 `json:"min_rate,omitempty"`
	// LeaseS is the stream's lifetime, in seconds: when it runs out the
	// gateway releases the stream (state expired) unless it was renewed
	// (PATCH lease_s). 0 (absent): the gateway's default
	// (Info.LeaseDefaultS); at most Info.LeaseMaxS.
	LeaseS int `json:"lease_s,omitempty"`
}

// OutboundRequest asks the gateway in front of the connecting application
// to open num_conn LAN listeners, listener i leading to PeerListeners[i].
type OutboundRequest struct {
	// UID is the stream's identifier, as returned by the inbound request.
	UID string `json:"uid"`
	// PeerListeners are the inbound gateway's WAN listeners ("host:port"),
	// as this gateway reaches them (they may differ from what the inbound
	// gateway advertised when NAT sits between them).
	PeerListeners []string `json:"peer_listeners"`
	// NumConn is the number of channels; listener i leads to
	// PeerListeners[i % len(PeerListeners)].
	NumConn int `json:"num_conn"`
	// PeerCert is the inbound gateway's WAN certificate (PEM). Required
	// when WAN is "tls" or "quic": this gateway accepts no other for this
	// stream.
	PeerCert string `json:"peer_cert,omitempty"`
	// Secret binds WAN connections to the stream (base64, 32 bytes), as
	// returned by the inbound request.
	Secret string `json:"secret"`
	// WANPool asks for pooled WAN legs (tls only): this many idle legs per
	// channel are kept dialed ahead of need, so an application
	// connection starts without a handshake, and a leg whose connection
	// ended cleanly carries the next one. 0 (absent): a leg per
	// application connection. At most the gateway's maximum.
	WANPool int `json:"wan_pool,omitempty"`
	// PeerServerName is the TLS server name to send to the peer
	// listeners: the inbound side's wan_server_name when it listens on a
	// shared WAN port (tls and quic only). Empty for a stream's own ports.
	PeerServerName string `json:"peer_server_name,omitempty"`
	// PeerNodes are the hosts of the inbound facility's gateway nodes
	// (its Stream.Nodes): when a peer listener does not answer (its node
	// died), this gateway dials the same port on these hosts, where
	// another node serves the channel once it took it over. Empty: the
	// inbound side is one node.
	PeerNodes []string `json:"peer_nodes,omitempty"`
	// Allow lists the CIDRs (or single addresses) whose applications may
	// connect to the LAN listeners. Empty means the listener's own subnet.
	Allow []string `json:"allow,omitempty"`
	// WAN must match the inbound side's transport: "tls" (default),
	// "quic" or "tcp".
	WAN string `json:"wan,omitempty"`
	// Engine selects the data-plane engine; empty means the gateway's default.
	Engine string `json:"engine,omitempty"`
	// ResumeWindowS is how long, in whole seconds, an application
	// connection over framed WAN legs (both gateways of this release,
	// tls or quic) waits, parked, for a new leg when its leg is lost,
	// its applications seeing a pause, before both are reset. nil
	// (absent) means the gateway's default (Info.ResumeWindowDefaultS);
	// 0 means do not wait: a lost leg resets the connection at once. At
	// most the gateway's maximum, Info.ResumeWindowMaxS. Each side
	// waits as its own request said; s2uc gives both the same.
	ResumeWindowS *int `json:"resume_window_s,omitempty"`
	// Stripe is how many WAN legs at once each application connection
	// is carried on (striping: one connection is not held to what one
	// TCP flow gets on the WAN). 0 (or omitted) or 1: one leg. At most
	// the gateway's maximum (Info.MaxStripe); TLS legs and pooled legs
	// (each further leg a leg of its own), not QUIC (its streams share
	// one flow) or plaintext TCP. The peer grants it or not
	// (Stats.StripeLegs): a peer without striping keeps one leg.
	Stripe int `json:"stripe,omitempty"`
	// MaxActiveConns caps the application connections this side of the
	// stream relays at once; one more is reset at once and counted
	// (Stats.OverCapConns). 0 (or omitted) means the gateway's own cap
	// (s2cs --max_active_conns); more than that is refused.
	MaxActiveConns int `json:"max_active_conns,omitempty"`
	// Rate is the rate the stream wants reserved, in bits per second:
	// the gateway admits it against its capacity and quotas (Info), and
	// keeps the stream's bytes to what it grants, in each direction.
	// 0 (absent): best effort, sharing what reservations leave.
	Rate int64 `json:"rate,omitempty"`
	// MinRate is the least reserved rate the caller accepts: a gateway
	// that cannot reserve Rate grants what it has down to MinRate and
	// refuses below it (no_resources, naming the limit). 0 (absent):
	// Rate, all or nothing.
	MinRate int64 `json:"min_rate,omitempty"`
	// LeaseS is the stream's lifetime, in seconds: when it runs out the
	// gateway releases the stream (state expired) unless it was renewed
	// (PATCH lease_s). 0 (absent): the gateway's default
	// (Info.LeaseDefaultS); at most Info.LeaseMaxS.
	LeaseS int `json:"lease_s,omitempty"`
}

// AttachRequest completes an inbound stream: it tells the inbound gateway
// which certificate the outbound gateway will present.
type AttachRequest struct {
	PeerCert string `json:"peer_cert,omitempty"`
	// Rate settles the inbound side's reservation on what the outbound
	// gateway granted (bits per second): it may only lower the grant,
	// and not below the request's min_rate. 0 (absent): keep it.
	Rate int64 `json:"rate,omitempty"`
}

// UpdateRequest changes a running stream (PATCH /v1/streams/{uid})
// without dropping its connections or touching other streams. Absent
// fields stay as they are.
type UpdateRequest struct {
	// Rate is the new reserved rate in bits per second; 0 makes the
	// stream best effort. An increase is admitted against the gateway's
	// capacity and quotas, whole or not at all.
	Rate *int64 `json:"rate,omitempty"`
	// Allow replaces an outbound stream's allow-list: connections from
	// then on are checked against it; open ones stay.
	Allow *[]string `json:"allow,omitempty"`
	// LeaseS renews the lease: the stream now expires LeaseS seconds
	// from now (at most Info.LeaseMaxS).
	LeaseS *int `json:"lease_s,omitempty"`
}

// Stream is the public view of one stream on one gateway.
type Stream struct {
	UID       string    `json:"uid"`
	Role      Role      `json:"role"`
	State     State     `json:"state"`
	Owner     string    `json:"owner"`
	Listeners []string  `json:"listeners"`
	Targets   []string  `json:"targets"`
	NumConn   int       `json:"num_conn"`
	WAN       string    `json:"wan"`
	Engine    string    `json:"engine"`
	Allow     []string  `json:"allow,omitempty"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`

	// MaxActiveConns is the stream's cap on connections at once, as
	// requested (0: the gateway's).
	MaxActiveConns int `json:"max_active_conns,omitempty"`
	// Reason says why a stream reached a terminal state.
	Reason string `json:"reason,omitempty"`
	// Rate is the rate reserved for the stream on this gateway and kept
	// to, in bits per second; absent: best effort. RateRequested and
	// MinRate are what its request asked for.
	Rate          int64 `json:"rate,omitempty"`
	RateRequested int64 `json:"rate_requested,omitempty"`
	MinRate       int64 `json:"min_rate,omitempty"`
	// LeaseS is the stream's lease as last granted or renewed, and
	// Expires when it runs out: the gateway then releases the stream.
	LeaseS  int       `json:"lease_s,omitempty"`
	Expires time.Time `json:"expires,omitzero"`
	// EngineNote says why the stream's connections run on another
	// engine than Engine (sockmap cannot pace a rate).
	EngineNote string `json:"engine_note,omitempty"`
	// WANServerName is the TLS server name that names an inbound stream on
	// the gateway's shared WAN port (Listeners then holds that port's
	// address, once); the outbound side sends it (peer_server_name).
	WANServerName string `json:"wan_server_name,omitempty"`
	// WANPool is an outbound stream's idle pooled legs per channel.
	WANPool int `json:"wan_pool,omitempty"`
	// WANCC is the congestion control this gateway's ends of the
	// stream's WAN legs run (s2cs --wan_cc; Info.WANCC), for TCP legs
	// (tls, tcp); absent for QUIC legs and from older gateways.
	WANCC string `json:"wan_cc,omitempty"`
	// PeerServerName is the server name an outbound stream sends.
	PeerServerName string `json:"peer_server_name,omitempty"`
	// WANCert is this gateway's WAN certificate (PEM), for the peer to pin.
	WANCert string `json:"wan_cert,omitempty"`
	// WANCertSHA256 is the hex SHA-256 fingerprint of WANCert.
	WANCertSHA256 string `json:"wan_cert_sha256,omitempty"`
	// PeerCertSHA256 is the fingerprint of the pinned peer certificate.
	PeerCertSHA256 string `json:"peer_cert_sha256,omitempty"`
	// AppWaitS is how long, in seconds, an inbound stream holds a WAN
	// connection whose application cannot be reached (InboundRequest),
	// as it applies now; absent on an outbound stream.
	AppWaitS *int `json:"app_wait_s,omitempty"`
	// ResumeWindowS is how long, in seconds, a connection of this side
	// waits for a new WAN leg when its leg is lost: the request's
	// resume_window_s, or the gateway's default, capped by the gateway's
	// current maximum. Whether the connections resume at all is
	// Stats.Resume.
	ResumeWindowS *int `json:"resume_window_s,omitempty"`
	// Stripe is the WAN legs at once an outbound stream's request asked
	// for each connection (absent: one); what the peer granted is
	// Stats.StripeLegs.
	Stripe int `json:"stripe,omitempty"`
	// Nodes are the hosts of the gateway's facility nodes, when it is
	// one of several (s2cs --node): an outbound request passes them on
	// as peer_nodes. Absent for a gateway of one node.
	Nodes []string `json:"nodes,omitempty"`
	// Channels say which node serves each channel now, and where
	// (Listeners[i] is Channels[i].Listener); absent for a gateway of
	// one node.
	Channels []Channel `json:"channels,omitempty"`
	// Secret is returned once, by the inbound request, to its owner only.
	Secret string `json:"secret,omitempty"`
	Stats  *Stats `json:"stats,omitempty"`
}

// Channel is where one channel of a stream is served in a facility of
// several gateway nodes.
type Channel struct {
	Channel int `json:"channel"`
	// Node names the node that serves it; empty while no node does (its
	// node died and no other took it over yet).
	Node string `json:"node,omitempty"`
	// Listener is its address: the node's host and the channel's port,
	// which stays the same when another node takes the channel over.
	Listener string `json:"listener"`
}

// Stats are a stream's live counters on one gateway. "to_wan" is the
// direction from this gateway's LAN application towards the peer gateway.
type Stats struct {
	// ActiveConns counts the connections being relayed now (both legs
	// up).
	ActiveConns int64 `json:"active_conns"`
	// WaitingConns counts the WAN connections an inbound gateway holds,
	// unread, while it cannot reach the application (Stream.AppWaitS);
	// they are not in ActiveConns until the application answers.
	WaitingConns int64 `json:"waiting_conns"`
	// TotalConns counts the connections relayed (both legs up).
	TotalConns int64 `json:"total_conns"`
	// RejectedConns counts the connections refused: sources outside the
	// allow-list, WAN connections that failed authentication, and those
	// over a cap of connections at once (OverCapConns).
	RejectedConns int64 `json:"rejected_conns"`
	// OverCapConns counts the application connections reset on arrival
	// because the stream's max_active_conns, or the gateway's cap, was
	// reached (on an inbound stream: authenticated WAN legs).
	OverCapConns int64 `json:"over_cap_conns"`
	// AbortedConns counts the connections that ended other than in order,
	// whatever the reason (AbortedByKind has them by kind): the
	// applications saw a reset.
	AbortedConns int64 `json:"aborted_conns"`
	// AbortedByKind counts the aborted connections by the kind of their
	// end (the End* constants); kinds not seen are left out.
	AbortedByKind map[string]int64 `json:"aborted_by_kind,omitempty"`
	// Errors counts the aborted connections whose end is an error of the
	// gateways or the WAN (IsErrorKind): not an application's or the peer
	// gateway's deliberate reset.
	Errors int64 `json:"errors"`
	// LegsCreated, LegsReused and LegsTornDown count an outbound stream's
	// pooled WAN legs (wan_pool): dialed, taken from the pool for an
	// application connection, and torn down at the gateway's cap of legs
	// per peer to make room (by its policy, Info.PoolPolicy).
	LegsCreated  int64 `json:"legs_created,omitempty"`
	LegsReused   int64 `json:"legs_reused,omitempty"`
	LegsTornDown int64 `json:"legs_torn_down,omitempty"`
	// LegsIdle is how many of the stream's pooled legs are idle now,
	// ready for the next application connection. A connection's leg
	// becomes idle again just after the connection stops counting in
	// ActiveConns.
	LegsIdle int64 `json:"legs_idle,omitempty"`
	// WANRedials counts an outbound stream's WAN dials that the peer
	// gateway reset before it answered (over its cap of
	// connections in their handshake, which the peer counts in its
	// RejectedConns) and that were dialled again; the application
	// connection waited meanwhile. Steadily rising, it means strangers
	// hold the peer's slots.
	WANRedials int64 `json:"wan_redials,omitempty"`
	// PeerFlaps counts the times the peer gateway failed again after it
	// had answered, within one outage: an outage ends only once WAN legs
	// have worked for a few seconds with no failure, so a peer that
	// answers and fails by turns (a starved or overloaded path) is one
	// outage in the log, and these are its turns.
	PeerFlaps int64 `json:"peer_flaps,omitempty"`
	// Resume says whether this side's application connections outlive
	// a lost WAN leg (ResumeOn: the gateways negotiated positioned
	// frames), or why not; empty until a leg said.
	Resume string `json:"resume,omitempty"`
	// ParkedConns counts the application connections waiting, parked,
	// for a new WAN leg now (their applications see a pause); while
	// any is, the stream is resuming.
	ParkedConns int64 `json:"parked_conns,omitempty"`
	// ResumedLegs counts the WAN legs that replaced a lost one under a
	// connection, ResentBytes the bytes sent again on them, and
	// ParkedSeconds the time connections spent waiting for them.
	ResumedLegs   int64   `json:"resumed_legs,omitempty"`
	ResentBytes   int64   `json:"resent_bytes,omitempty"`
	ParkedSeconds float64 `json:"parked_seconds,omitempty"`
	// ResumeExpired counts the connections reset because no new leg
	// came within the resume window (also among AbortedByKind's
	// wan_lost).
	ResumeExpired int64 `json:"resume_expired,omitempty"`
	// StripeLegs is the WAN legs at once the stream's latest
	// application connection was granted (the lesser of the request's
	// stripe and the inbound gateway's maximum; 1: one leg, as from a
	// peer without striping); absent until one was.
	StripeLegs int `json:"stripe_legs,omitempty"`
	// Peer is what this gateway knows of its peer gateway, from the
	// stream's watch leg: PeerUp, PeerDown, PeerReleased, PeerStopping,
	// or empty when it does not know (no data leg has worked yet, or a
	// QUIC stream, whose QUIC connection says the same).
	Peer string `json:"peer,omitempty"`
	// LastErrors holds the most recent end of each kind seen.
	LastErrors   map[string]LastError `json:"last_errors,omitempty"`
	BytesToWAN   int64                `json:"bytes_to_wan"`
	BytesFromWAN int64                `json:"bytes_from_wan"`
	// Rates are bytes per second over the last sample interval
	// (Rates.IntervalS, a second by default).
	RateToWAN   float64 `json:"rate_to_wan_Bps"`
	RateFromWAN float64 `json:"rate_from_wan_Bps"`
	// Rates are the sampled rates' mean, standard deviation and peak
	// over the stream's life, the last minute and its steady state.
	Rates *Rates `json:"rates,omitempty"`
}

// The kinds of end of a relayed connection other than the orderly one
// (both directions finished), the keys of Stats.AbortedByKind and
// Stats.LastErrors. Each is said from the gateway that counts it.
const (
	// EndAppReset: this gateway's application reset or broke its
	// connection; the application's doing, not an error.
	EndAppReset = "app_reset"
	// EndPeerReset: the peer gateway reset the WAN leg, because its
	// application reset or its side of the stream was released; not an
	// error of this gateway.
	EndPeerReset = "peer_reset"
	// EndWANLost: the WAN leg ended with neither an orderly end nor a
	// reset: the peer gateway died or restarted, or the path broke.
	EndWANLost = "wan_lost"
	// EndDialFailed: this gateway could not connect to its application
	// (inbound side: within the stream's wait, InboundRequest.AppWaitS)
	// or to the peer gateway (outbound side).
	EndDialFailed = "dial_failed"
	// EndTimeout: a dial, a handshake or a socket timed out.
	EndTimeout = "timeout"
	// EndGatewayFault: anything else, a fault of this gateway; its log
	// says more.
	EndGatewayFault = "gateway_fault"
)

// Whether a stream's connections outlive a lost WAN leg (Stats.Resume).
const (
	// ResumeOn: the legs carry positioned frames; a lost one is
	// replaced within the resume window.
	ResumeOn = "on"
	// ResumeOff: the stream asked for no resume window (0).
	ResumeOff = "off"
	// ResumePeer: the peer gateway does not offer it (an older
	// release): a lost leg resets the connection.
	ResumePeer = "peer_without"
	// ResumePlain: plaintext TCP legs, which the splice engine keeps
	// raw: a lost leg resets the connection.
	ResumePlain = "plaintext"
	// ResumePooled: pooled legs (wan_pool) to a peer gateway of an
	// earlier release, whose sessions carry no positions: a lost leg
	// resets the connection.
	ResumePooled = "pooled"
)

// What a gateway knows of its peer (Stats.Peer).
const (
	PeerUp       = "up"       // the watch leg is open
	PeerDown     = "down"     // the peer was lost, or cannot be reached
	PeerReleased = "released" // the peer released its side of the stream
	PeerStopping = "stopping" // the peer shuts down; it restores the stream when it starts
)

// EndKinds lists the kinds of end, in the order a status shows them.
func EndKinds() []string {
	return []string{EndAppReset, EndPeerReset, EndWANLost, EndDialFailed, EndTimeout, EndGatewayFault}
}

// IsErrorKind reports whether an end of kind k is an error of the
// gateways or the WAN, rather than an application's or the peer's reset.
func IsErrorKind(k string) bool { return k != EndAppReset && k != EndPeerReset }

// LastError is the most recent end of one kind on one stream.
type LastError struct {
	Reason string    `json:"reason"`
	Time   time.Time `json:"time"`
}

// StreamList is the body of GET /v1/streams.
type StreamList struct {
	Streams []Stream `json:"streams"`
}

// Info describes a gateway: GET /v1/info.
type Info struct {
	Version       string   `json:"version"`
	ListenerIP    string   `json:"listener_ip"`
	PortRange     string   `json:"port_range"`
	Engines       []string `json:"engines"`
	DefaultEngine string   `json:"default_engine"`
	WAN           []string `json:"wan"`
	WANCertSHA256 string   `json:"wan_cert_sha256"`
	// WANCC is the congestion control of the gateway's TCP WAN legs
	// (s2cs --wan_cc), and WANCCSet whether the gateway sets it on each
	// leg (else it is the host's default). The LAN legs run the host's.
	WANCC    string `json:"wan_cc,omitempty"`
	WANCCSet bool   `json:"wan_cc_set,omitempty"`
	// MaxStripe is the most WAN legs at once the gateway carries one
	// application connection on (s2cs --max_stripe): an outbound
	// request's stripe at most, and what an inbound side grants.
	MaxStripe int `json:"max_stripe,omitempty"`
	// WANPort is the shared WAN port's advertised address, if the gateway
	// has one, and WANDomain the domain of its streams' server names.
	WANPort   string `json:"wan_port,omitempty"`
	WANDomain string `json:"wan_domain,omitempty"`
	// PoolPolicy picks the idle pooled leg torn down at PoolMaxPerPeer
	// ("lru" or "lrum"); PoolMaxWarm bounds a request's wan_pool.
	PoolPolicy     string `json:"pool_policy"`
	PoolMaxPerPeer int    `json:"pool_max_per_peer"`
	PoolMaxWarm    int    `json:"pool_max_warm"`
	Identity       string `json:"identity"`
	// Roles are the caller's roles on this gateway (user, operator,
	// reader), as its roles file gives them.
	Roles []string `json:"roles,omitempty"`
	// AppWaitDefaultS is the app_wait_s of an inbound request that gives
	// none, and AppWaitMaxS the most one may give, in seconds.
	AppWaitDefaultS int `json:"app_wait_default_s"`
	AppWaitMaxS     int `json:"app_wait_max_s"`
	// ResumeWindowDefaultS is the resume_window_s of a request that
	// gives none, and ResumeWindowMaxS the most one may give, in seconds
	// (s2cs --resume_window, --resume_window_max).
	ResumeWindowDefaultS int `json:"resume_window_default_s"`
	ResumeWindowMaxS     int `json:"resume_window_max_s"`
	// CapacityRate is the rate the gateway reserves for streams in all,
	// per direction, in bits per second (0: undeclared: every rate asked
	// is granted and kept to, and best effort is not paced);
	// ReservedRate is what live streams hold of it now.
	CapacityRate int64 `json:"capacity_rate"`
	ReservedRate int64 `json:"reserved_rate"`
	// CapacityStreams and CapacityConns bound the live streams and their
	// channels (num_conn) on the gateway (0: no bound but its ports).
	CapacityStreams int `json:"capacity_streams"`
	CapacityConns   int `json:"capacity_conns"`
	// QuotaRate is the most one identity may have reserved at once (0:
	// the capacity's bound only).
	QuotaRate int64 `json:"quota_rate"`
	// LeaseDefaultS is the lease of a request that gives none, and
	// LeaseMaxS the longest a request or a renewal may ask for, in
	// seconds.
	LeaseDefaultS int `json:"lease_default_s"`
	LeaseMaxS     int `json:"lease_max_s"`
	// Facility and Node name the facility and this node when the
	// gateway is one node of several (s2cs --node); Nodes are the live
	// nodes. Absent for a gateway of one node.
	Facility string     `json:"facility,omitempty"`
	Node     string     `json:"node,omitempty"`
	Nodes    []NodeInfo `json:"nodes,omitempty"`
}

// NodeInfo is one live node of a facility.
type NodeInfo struct {
	Name string `json:"name"`
	Host string `json:"host"`
}

// Limits enforced on requests.
const (
	MaxChannels      = 256 // num_conn upper bound per stream
	MaxReceiverPorts = 64  // receiver_ports / peer_listeners length bound
	MaxAllow         = 64  // allow-list length bound
	MaxPeerNodes     = 64  // peer_nodes length bound
	MaxBodyBytes     = 1 << 20
	// MaxAppWaitS bounds a gateway's maximum app_wait_s (one day): a
	// connection held longer is better reset and dialed again.
	MaxAppWaitS = 24 * 60 * 60
	// MaxResumeWindowS bounds a gateway's maximum resume_window_s (one
	// day): a connection parked longer holds its buffers for nothing.
	MaxResumeWindowS = 24 * 60 * 60
)

// StripeField is the stripe field of a request asking for n legs at
// once: absent (0) for one, so that a gateway of a release without
// striping, which refuses a field it does not know, takes the request.
func StripeField(n int) int {
	if n <= 1 {
		return 0
	}
	return n
}

// Code is a stable, machine-readable error code.
type Code string

const (
	CodeInvalidArgument  Code = "invalid_argument"
	CodeUnauthenticated  Code = "unauthenticated"
	CodePermissionDenied Code = "permission_denied"
	CodeNotFound         Code = "not_found"
	CodeNoResources      Code = "no_resources"
	CodeConflict         Code = "conflict"
	CodeUnavailable      Code = "unavailable"
	CodeInternal         Code = "internal"
)

// HTTPStatus maps a code to its HTTP status.
func (c Code) HTTPStatus() int {
	switch c {
	case CodeInvalidArgument:
		return 400
	case CodeUnauthenticated:
		return 401
	case CodePermissionDenied:
		return 403
	case CodeNotFound:
		return 404
	case CodeConflict:
		return 409
	case CodeNoResources:
		return 507
	case CodeUnavailable:
		return 503
	default:
		return 500
	}
}

// ErrorBody is the JSON body of every error response.
type ErrorBody struct {
	Error Error `json:"error"`
}

// RequestIDHeader names a request's id: the caller's own in a request
// (kept by the gateway if short and safe), the one the gateway logged
// the request under in every answer.
const RequestIDHeader = "X-Request-Id"

// Error is an API error: a stable code and a public message. The internal
// cause, if any, is only logged by the server and never sent.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// RequestID is the id of the request that got this error, from the
	// answer's X-Request-Id header (set by the client, not sent in the
	// body): the gateway's log line of the request carries it, so the
	// operator finds the request a caller reports.
	RequestID string `json:"-"`
	cause     error
}

// Errorf returns an API error with a public message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithCause attaches an internal cause (logged, never sent).
func (e *Error) WithCause(err error) *Error {
	c := *e
	c.cause = err
	return &c
}

// Cause returns the internal cause, if any.
func (e *Error) Cause() error { return e.cause }

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Unwrap exposes the internal cause to errors.Is / errors.As.
func (e *Error) Unwrap() error { return e.cause }
