// Package sockmap moves the bytes of a TCP connection from one socket to
// another inside the kernel: an eBPF SOCKHASH holds the ingress sockets,
// and an SK_SKB stream verdict program attached to it redirects every
// received skb to the send path of the peer socket (bpf_sk_redirect_hash
// without BPF_F_INGRESS). The program is written with cilium/ebpf's asm
// package (no clang at build time) and reads three fields of struct
// tcp_sock whose offsets come from the running kernel's BTF.
//
// A Redirector owns the program and its maps for a whole process;
// (*Redirector).Copy runs one direction and relay's sockmap engine makes it an
// Engine. Loading needs CAP_BPF and CAP_NET_ADMIN (root) and a kernel with
// SOCKHASH, stream verdicts without a parser and BTF (Linux 6.x); New
// returns ErrUnavailable otherwise and the gateway uses splice.
//
// # The three known faults of a naive redirect, and what this one does
//
// A naive redirect has no backpressure (the kernel takes the bytes off the
// ingress socket, acknowledges them, and queues them without limit on the
// egress psock when the egress socket is full: over 1 GB in a 2 GB
// transfer), no end of stream (a FIN is not redirected) and millisecond
// stalls (the egress worker retries a full socket after a jiffy).
//
// Per direction the program keeps, in a hash map written only by itself,
// seen (bytes of every skb it decided on), redirected (bytes it redirected)
// and a sticky passing flag; user space writes, in another map whose
// elements it replaces whole, the peer's key, a credit limit, a resume
// point, and the baseline for the in-kernel credit.
//
// Backpressure. Let sent be what the egress socket has taken since it was
// created: bytes_acked + SIOCOUTQ from user space, bytes_acked +
// (write_seq - snd_una) in the program (the same quantity). The bytes
// queued in the kernel ahead of the egress socket are
// queued = base + userWritten + redirected - sent. The program redirects
// an skb only if queued stays <= Window after it (checked against the
// credit user space last granted, and, when that is spent, against the
// egress socket's fields directly, so a lagging user space costs nothing).
// Otherwise it passes the skb to the ingress socket's own psock queue and
// keeps passing (ordering) until user space has caught up. Passed skbs are
// charged to the ingress socket's receive memory, so TCP's window closes
// and the producer stops. Memory per direction is therefore bounded by
//
//	Window (redirected, not yet taken by the egress socket)
//	+ the ingress socket's receive buffer (passed, not yet read)
//	+ 256 KiB (Copy's user-space buffer)
//
// on top of the two sockets' ordinary TCP buffers. Default Window: 4 MiB.
// TestMemoryBoundedWhenConsumerStalls stalls the consumer and checks the
// bytes held between the relay's two sockets against this bound.
//
// Ordering when passing. User space reads passed bytes (recvmsg on a psock
// socket returns the psock's queue), waits until sent shows that every
// redirected byte has entered the egress socket (redirected is frozen
// while passing), writes the passed bytes behind them, and sets resume to
// redirected + userRead. The program leaves passing mode only on an skb
// arriving when seen == resume, that is when every passed byte has been
// read by user space and written behind the redirected ones; otherwise it
// keeps passing and user space reads again. So the egress socket receives
// every byte in the ingress order. Under a producer that outruns the
// consumer for long, the direction stays in this mode (a user-space copy
// with bounded memory) until the producer pauses.
//
// End of stream. A bare FIN skb (length 0) is dropped by the program: it
// carries no byte, and the socket already has RCV_SHUTDOWN, so user
// space's read returns EOF once the psock queue is empty and every
// earlier skb has been decided (the kernel runs the verdict over a
// non-empty receive queue before reading). Copy then takes the socket out
// of the map (nothing can arrive after the FIN), checks
// userRead == seen - redirected, waits until sent == base + redirected +
// userWritten exactly (an exact reading of two monotonic counters, not
// "the send queue looks empty"), copies with splice(2) anything TCP's own
// receive queue might still hold (tcp_bpf's recvmsg reports EOF by the
// psock queue alone), and returns; only then does relay.Relay shut the
// egress socket's write half. Redirected bytes that never reach the egress
// socket (its psock torn down) stop the wait after 5 s of no progress with
// an empty send queue, and the connection is aborted, never ended cleanly.
//
// Stalls. Redirected skbs reach the egress socket through the psock's
// work item, a kernel worker thread; when the egress socket is full the
// worker gives up and retries a jiffy later (4 ms at HZ=250), even if
// room appears at once: its write-space callback cannot advance a retry
// already scheduled. The program therefore redirects an skb only if the
// egress socket can take it together with every byte still queued ahead
// of it (sk_wmem_queued + 9/8 of the queued bytes, for skb overhead, <=
// sk_sndbuf; the fields come from BTF like the others); otherwise it
// passes, and user space waits for room in the runtime's poller, which
// wakes on the socket's own write-space event. Stats.KernelQueued shows
// what waits ahead of egress sockets; TestMemoryBoundedWhenConsumerStalls
// checks it is zero while a stalled consumer keeps the egress socket full
// (without the check, 0.75 MB sat there). The price: while the egress
// socket is full (a slow consumer, or a WAN leg that is the bottleneck)
// the direction copies in user space rather than redirect; the kernel
// grows the socket's send buffer from those writes as usual (autotuning
// needs a writer that met a full buffer), and redirecting resumes when
// the producer pauses. Still left: every redirect
// waits for the worker thread to be scheduled, which shows in the tail
// latency on a loaded machine (BenchmarkRequestReply16KiB reports p50/p99
// next to direct and splice); only sending inline in the kernel would
// remove that.
//
// # Kernel behaviours this relies on (Linux 6.18; see the tests)
//
//   - TCP queues a segment that overlaps bytes already received (a
//     retransmission collapsed from segments the receiver partly had:
//     common under load on loopback, where spurious retransmissions are)
//     whole, with seq < rcv_nxt; its readers skip the old part by
//     sequence number, but tcp_read_skb hands the verdict program the
//     whole skb. Redirected or passed as is, the old bytes would be
//     delivered twice (s2bench saw "payload corrupted" about once per
//     ten 1 GiB runs). The program therefore tracks the next sequence
//     number per direction (TCP_SKB_CB's seq and end_seq, which the
//     __sk_buff cb words of an SK_SKB program map to; starting from the
//     ingress socket's copied_seq) and pulls the repeated head off the
//     skb with bpf_skb_adjust_room before deciding on it; if that fails
//     it drops everything and user space aborts the connection
//     (TestRetransmittedOverlapNotDuplicated injects such a segment).
//   - The program takes whole skbs from the receive queue, ignoring a part
//     already read by user space: a partly read skb would be duplicated.
//     Before the socket enters the map, Copy requires either that user
//     space never read from it (bytes_received == SIOCINQ) or an empty
//     receive queue, copying queued bytes itself until one holds
//     (TestPartlyReadQueueBeforeStart: a WAN preface read).
//   - Once a socket has a psock (in any sockmap) SIOCINQ reports the psock
//     queue, not TCP's. The two directions of a relay therefore meet at a
//     gate: neither puts the other's ingress socket in a map before the
//     other has checked it.
//   - Taking a socket out of the verdict map while skbs arrive drops those
//     skbs (the psock's program is cleared before data_ready is restored).
//     Copy never does that under traffic: only after EOF, or to abort.
//     TestChainedRelays caught it.
//   - A socket enters a sockmap only while ESTABLISHED: a stream whose FIN
//     arrived before the redirect was set up is copied with splice.
//
// # Counters
//
// count receives what entered the egress socket (sent deltas), polled every
// 250 us to 50 ms (shorter while bytes flow), in chunks of at most 1 MiB;
// live rates lag by at most one poll, and the total is exact when Copy
// returns.
package sockmap
