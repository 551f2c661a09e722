#!/usr/bin/env python3
"""ZeroMQ producer of seed 000's pipeline: binds, waits for its consumers,
streams samples of several sizes as fast as possible, then ends the stream.

  pub.py --bind tcp://127.0.0.1:5555 --pattern pub --sizes 4096,1048576 --bytes 256M

--pattern pub: an XPUB socket (every subscriber gets every sample). It waits
  for --peers subscriptions before sending, and never drops a sample
  (XPUB_NODROP: a full queue blocks the sender instead).
--pattern push: a PUSH socket (samples are dealt round-robin to --peers PULL
  consumers). It waits until --peers consumers have connected.

Every sample is a two-part message: a 24-byte header (kind, size index,
sequence number, CRC-32 of the payload, payload length) and the payload.
Each size ends with a STOP message; the stream ends with END, whose payload
is the SHA-256 of all payloads in order and the number of samples.
Machine-readable events go to stdout as JSON lines ({"event": "listening",
"endpoint": ...} first, {"event": "result", ...} last); a summary goes to
stderr. Exit status 0 means every sample was handed to ZeroMQ.
"""
import argparse
import hashlib
import json
import os
import struct
import sys
import time
import zlib

import zmq
from zmq.utils.monitor import recv_monitor_message

HEADER = struct.Struct("<BBHIQQ")  # kind, size index, reserved, crc32, seq, length
DATA, STOP, END = 1, 2, 3


def parse_bytes(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().removesuffix("B").removesuffix("I")
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def emit(**kv):
    print(json.dumps(kv), flush=True)


def wait_peers(sock, pattern, peers, deadline):
    """Block until `peers` consumers are attached, or fail at the deadline."""
    if pattern == "pub":
        got = 0
        while got < peers:
            left = deadline - time.monotonic()
            if left <= 0 or not sock.poll(int(left * 1000)):
                sys.exit(f"pub.py: {got} of {peers} subscribers after --wait; are the consumers and the gateways up?")
            if sock.recv()[:1] == b"\x01":  # subscribe (0x00 is unsubscribe)
                got += 1
        return None
    mon = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
    got = 0
    while got < peers:
        left = deadline - time.monotonic()
        if left <= 0 or not mon.poll(int(left * 1000)):
            sys.exit(f"pub.py: {got} of {peers} consumers after --wait; are the consumers and the gateways up?")
        ev = recv_monitor_message(mon)
        if ev["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            got += 1
        elif ev["event"] == zmq.EVENT_DISCONNECTED:
            got -= 1
    return mon


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bind", required=True, help="ZeroMQ endpoint to bind, e.g. tcp://127.0.0.1:5555 (port * = any)")
    ap.add_argument("--pattern", choices=["pub", "push"], default="pub")
    ap.add_argument("--peers", type=int, default=1, help="consumers to wait for before sending")
    ap.add_argument("--sizes", default="512,4096,65536,1048576", help="sample sizes in bytes, comma-separated")
    ap.add_argument("--bytes", default="64M",
                    help="bytes to send per size (K, M, G suffixes); one value for all sizes or one per size")
    ap.add_argument("--queue-bytes", default="64M", help="send queue (high-water mark) in bytes, per consumer")
    ap.add_argument("--wait", type=float, default=60, help="seconds to wait for consumers")
    args = ap.parse_args()
    sizes = [parse_bytes(s) for s in args.sizes.split(",")]
    per_size = [parse_bytes(s) for s in args.bytes.split(",")]
    if len(per_size) == 1:
        per_size *= len(sizes)
    if len(per_size) != len(sizes):
        sys.exit(f"pub.py: --bytes has {len(per_size)} values for {len(sizes)} sizes; give one, or one per size")
    if args.peers < 1 or min(sizes) < 1 or min(per_size) < 1:
        sys.exit("pub.py: --peers, --sizes and --bytes must be positive")

    ctx = zmq.Context()
    sock = ctx.socket(zmq.XPUB if args.pattern == "pub" else zmq.PUSH)
    hwm = max(16, parse_bytes(args.queue_bytes) // min(sizes))
    sock.setsockopt(zmq.SNDHWM, hwm)
    if args.pattern == "pub":
        sock.setsockopt(zmq.XPUB_NODROP, 1)  # block, never drop
        sock.setsockopt(zmq.XPUB_VERBOSE, 1)  # see every subscriber's subscription
    sock.setsockopt(zmq.LINGER, 60_000)  # close waits up to 60 s for queued samples
    sock.bind(args.bind)
    endpoint = sock.getsockopt(zmq.LAST_ENDPOINT).decode()
    emit(event="listening", endpoint=endpoint, pattern=args.pattern)

    mon = wait_peers(sock, args.pattern, args.peers, time.monotonic() + args.wait)
    # Distinct payload content per sample: a random pool, rotated by seq.
    pool = {s: [os.urandom(s) for _ in range(4)] for s in sizes}
    crcs = {s: [zlib.crc32(b) for b in pool[s]] for s in sizes}
    digest = hashlib.sha256()
    seq = 0
    t0 = time.perf_counter()
    total = 0
    for idx, size in enumerate(sizes):
        n = max(1, per_size[idx] // size)
        for _ in range(n):
            k = seq % 4
            payload = pool[size][k]
            sock.send(HEADER.pack(DATA, idx, 0, crcs[size][k], seq, size), zmq.SNDMORE)
            sock.send(payload, copy=size < 65536)
            digest.update(payload)
            seq += 1
            total += size
        sock.send_multipart([HEADER.pack(STOP, idx, 0, 0, seq, 0), b""])
    elapsed = time.perf_counter() - t0
    end = HEADER.pack(END, 0, 0, 0, seq, 32)
    if args.pattern == "pub":
        sock.send_multipart([end, digest.digest()])
    else:
        # PUSH deals each END to one consumer; every consumer leaves on its
        # first END, so keep dealing until all have disconnected.
        peers = args.peers
        deadline = time.monotonic() + args.wait
        while peers > 0 and time.monotonic() < deadline:
            if sock.poll(50, zmq.POLLOUT):
                sock.send_multipart([end, digest.digest()])
            if mon.poll(50):
                if recv_monitor_message(mon)["event"] == zmq.EVENT_DISCONNECTED:
                    peers -= 1
        if peers > 0:
            sys.exit(f"pub.py: {peers} consumers still connected after END; they missed the end of the stream")
        sock.disable_monitor()
        mon.close()
    sock.close()
    ctx.term()
    emit(event="result", pattern=args.pattern, samples=seq, bytes=total,
         seconds=round(elapsed, 6), sha256=digest.hexdigest())
    print(f"pub.py: sent {seq} samples, {total / 1e6:.1f} MB in {elapsed:.2f} s "
          f"({total / elapsed / 1e6:.0f} MB/s into ZeroMQ)", file=sys.stderr)


if __name__ == "__main__":
    main()
