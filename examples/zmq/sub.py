#!/usr/bin/env python3
"""ZeroMQ consumer of seed 000's pipeline: connects, receives samples until
the producer's END, checks every one, and reports goodput, latency and
jitter per sample size the way seed 000 does.

  sub.py --connect tcp://127.0.0.1:5555 --pattern sub

--pattern sub: a SUB socket subscribed to everything; every sample must
  arrive, in order, intact.
--pattern pull: a PULL socket, one of several consumers sharing the
  stream; the samples it gets must arrive in increasing order, intact;
  --seqs-out FILE writes their sequence numbers (little-endian uint64) so
  a test can check that the consumers together got each sample once.

Per size: goodput = bytes / (t_stop - t_first) where t_first is the arrival
of the first sample of that size and t_stop the arrival of its STOP
message; latency = mean inter-arrival time, jitter = its standard
deviation. The result is a JSON line on stdout ({"event": "result", ...},
"ok": true when the stream was complete and intact); a table goes to
stderr. Exit status 0 only if ok.
"""
import argparse
import array
import hashlib
import json
import math
import struct
import sys
import time
import zlib

import zmq

HEADER = struct.Struct("<BBHIQQ")  # kind, size index, reserved, crc32, seq, length
DATA, STOP, END = 1, 2, 3


class Phase:
    def __init__(self, size):
        self.size = size
        self.n = 0
        self.first = None
        self.last = None
        self.stop = None
        # Welford's running mean and variance of inter-arrival times.
        self.k = 0
        self.mean = 0.0
        self.m2 = 0.0

    def arrive(self, t):
        if self.first is None:
            self.first = t
        else:
            d = t - self.last
            self.k += 1
            delta = d - self.mean
            self.mean += delta / self.k
            self.m2 += delta * (d - self.mean)
        self.last = t
        self.n += 1

    def report(self):
        end = self.stop if self.stop is not None else self.last
        span = (end - self.first) if self.first is not None and end is not None else 0.0
        nbytes = self.n * self.size
        jitter = math.sqrt(self.m2 / (self.k - 1)) if self.k > 1 else 0.0
        return {
            "size": self.size,
            "samples": self.n,
            "bytes": nbytes,
            "seconds": round(span, 6),
            "goodput_MBps": round(nbytes / span / 1e6, 1) if span > 0 else None,
            "latency_us": round(self.mean * 1e6, 2),
            "jitter_us": round(jitter * 1e6, 2),
        }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connect", required=True, help="ZeroMQ endpoint to connect to, e.g. tcp://127.0.0.1:5555")
    ap.add_argument("--pattern", choices=["sub", "pull"], default="sub")
    ap.add_argument("--queue", type=int, default=1000, help="receive high-water mark in messages")
    ap.add_argument("--timeout", type=float, default=120, help="give up when nothing arrives for this many seconds")
    ap.add_argument("--seqs-out", help="write received sequence numbers here (pull)")
    args = ap.parse_args()

    ctx = zmq.Context()
    sock = ctx.socket(zmq.SUB if args.pattern == "sub" else zmq.PULL)
    sock.setsockopt(zmq.RCVHWM, args.queue)
    sock.setsockopt(zmq.LINGER, 0)
    if args.pattern == "sub":
        sock.setsockopt(zmq.SUBSCRIBE, b"")
    sock.connect(args.connect)
    print(json.dumps({"event": "connecting", "endpoint": args.connect}), flush=True)

    phases = {}
    digest = hashlib.sha256()
    seqs = array.array("Q")
    expect = 0  # next sequence number (sub: every one; pull: greater than the last)
    problems = []
    bad_crc = 0
    out_of_order = 0
    end = None
    clock = time.perf_counter
    timeout_ms = int(args.timeout * 1000)
    while True:
        if not sock.poll(timeout_ms):
            problems.append(f"nothing arrived for {args.timeout:.0f} s")
            break
        head, payload = sock.recv_multipart(copy=False)
        t = clock()
        kind, idx, _, crc, seq, length = HEADER.unpack(head.bytes)
        if kind == DATA:
            buf = payload.buffer
            if len(buf) != length or zlib.crc32(buf) != crc:
                bad_crc += 1
            if args.pattern == "sub":
                if seq != expect:
                    out_of_order += 1
                digest.update(buf)
            elif seq < expect:
                out_of_order += 1
            expect = seq + 1
            if args.seqs_out:
                seqs.append(seq)
            ph = phases.get(idx)
            if ph is None:
                ph = phases[idx] = Phase(length)
            ph.arrive(t)
        elif kind == STOP:
            if idx in phases:
                phases[idx].stop = t
        elif kind == END:
            end = (seq, payload.bytes)
            break
    sock.close()
    ctx.term()

    samples = sum(p.n for p in phases.values())
    nbytes = sum(p.n * p.size for p in phases.values())
    if end is None:
        problems.append("no END message: the stream did not finish")
    if bad_crc:
        problems.append(f"{bad_crc} samples with a wrong length or CRC-32")
    if out_of_order:
        problems.append(f"{out_of_order} samples out of order or missing")
    if args.pattern == "sub" and end is not None:
        if samples != end[0]:
            problems.append(f"got {samples} samples, the producer sent {end[0]}")
        if digest.digest() != end[1]:
            problems.append("SHA-256 of the stream differs from the producer's")
    if args.seqs_out:
        with open(args.seqs_out, "wb") as f:
            seqs.tofile(f)
    result = {
        "event": "result",
        "pattern": args.pattern,
        "ok": not problems,
        "problems": problems,
        "samples": samples,
        "bytes": nbytes,
        "sent": end[0] if end else None,
        "phases": [phases[k].report() for k in sorted(phases)],
    }
    print(json.dumps(result), flush=True)
    print(f"{'size':>9} {'samples':>8} {'MB/s':>8} {'latency us':>11} {'jitter us':>10}", file=sys.stderr)
    for r in result["phases"]:
        print(f"{r['size']:>9} {r['samples']:>8} {r['goodput_MBps'] or 0:>8.0f} {r['latency_us']:>11.1f} {r['jitter_us']:>10.1f}",
              file=sys.stderr)
    print("sub.py: " + ("stream complete and intact" if not problems else "; ".join(problems)), file=sys.stderr)
    sys.exit(0 if not problems else 1)


if __name__ == "__main__":
    main()
