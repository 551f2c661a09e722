#!/usr/bin/env python3
"""A fast-detector emulator for 4D-STEM (seed 003): one diffraction frame
per scan position, streamed over ZeroMQ the way detectors' stream
interfaces do (a PUSH socket that binds; the analysis PULLs).

  detector.py --bind tcp://127.0.0.1:6000 --scan 64x64 --frame 256x256 --fps 2000

The sample is synthetic: a lattice of atoms over the scan. Each frame has
a bright-field disk (dimmer over an atom, shifted a little by its field)
and diffuse scattering outside it (stronger over an atom), plus noise, as
uint16 pixels. Frames are generated before the detector is armed, so the
stream runs at --fps (0 = as fast as the consumer takes them).

Message: [header, pixels]. header = magic b"S2DF", frame index, scan x,
scan y, scan width, scan height, frame height, frame width (uint32 each),
CRC-32 of the pixels, send time (ns). The stream ends with [b"S2DE" +
frame count, the sum of all frames as float64], which the analysis uses
to check its virtual images. JSON events on stdout ("listening" first,
"result" last); a summary on stderr.
"""
import argparse
import json
import struct
import sys
import time
import zlib

import numpy as np
import zmq
from zmq.utils.monitor import recv_monitor_message

FRAME = struct.Struct("<4s7IIQ")  # magic, index, x, y, scan w, scan h, frame h, frame w, crc32, t_ns


def parse_shape(s):
    try:
        a, b = (int(v) for v in s.lower().split("x"))
    except ValueError:
        sys.exit(f"detector.py: shape {s!r} must look like 64x64")
    if a < 1 or b < 1:
        sys.exit(f"detector.py: shape {s!r} must be positive")
    return a, b


def make_frames(scan_w, scan_h, fh, fw, seed):
    """All frames of the scan, shape (scan_h, scan_w, fh, fw), uint16."""
    rng = np.random.default_rng(seed)
    # The sample: Gaussian atoms on a lattice, transmission in [0.35, 1].
    ys, xs = np.mgrid[0:scan_h, 0:scan_w].astype(np.float32)
    period = max(4.0, min(scan_w, scan_h) / 8)
    atoms = np.zeros((scan_h, scan_w), np.float32)
    for cy in np.arange(period / 2, scan_h, period):
        for cx in np.arange(period / 2, scan_w, period):
            atoms += np.exp(-((xs - cx) ** 2 + (ys - cy) ** 2) / (2 * (period / 5) ** 2))
    atoms /= atoms.max()
    trans = 1 - 0.65 * atoms
    gy, gx = np.gradient(atoms)  # the atoms' field tilts the beam
    # Detector geometry.
    py, px = np.mgrid[0:fh, 0:fw].astype(np.float32)
    cy0, cx0 = (fh - 1) / 2, (fw - 1) / 2
    r0 = min(fh, fw) / 8
    r = np.hypot(py - cy0, px - cx0)
    diffuse = (np.exp(-r / (r0 * 2)) * (r > r0 * 1.1)).astype(np.float32)
    noise = [rng.poisson(3, (fh, fw)).astype(np.float32) for _ in range(8)]
    shifts = {}
    frames = np.empty((scan_h, scan_w, fh, fw), np.uint16)
    for y in range(scan_h):
        for x in range(scan_w):
            sx, sy = int(round(gx[y, x] * 12)), int(round(gy[y, x] * 12))
            disk = shifts.get((sx, sy))
            if disk is None:
                disk = shifts[(sx, sy)] = (np.hypot(py - cy0 - sy, px - cx0 - sx) < r0).astype(np.float32)
            f = disk * (1000 * trans[y, x]) + diffuse * (2000 * (1 - trans[y, x]) + 50) + noise[(x + y * scan_w) % 8]
            frames[y, x] = f
    return frames


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bind", required=True, help="ZeroMQ endpoint to bind, e.g. tcp://127.0.0.1:6000 (port * = any)")
    ap.add_argument("--scan", default="64x64", help="scan positions, WIDTHxHEIGHT")
    ap.add_argument("--frame", default="256x256", help="detector pixels, HEIGHTxWIDTH")
    ap.add_argument("--fps", type=float, default=0, help="frames per second; 0 = as fast as the consumer takes them")
    ap.add_argument("--passes", type=int, default=1, help="scan the sample this many times (same frames, new indices)")
    ap.add_argument("--queue", type=int, default=64, help="frames queued in the detector before it blocks")
    ap.add_argument("--wait", type=float, default=60, help="seconds to wait for the analysis to connect")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    scan_w, scan_h = parse_shape(args.scan)
    fh, fw = parse_shape(args.frame)
    if args.fps < 0 or args.passes < 1 or args.queue < 1:
        sys.exit("detector.py: --fps must be >= 0, --passes and --queue >= 1")

    t = time.perf_counter()
    frames = make_frames(scan_w, scan_h, fh, fw, args.seed)
    crcs = np.empty((scan_h, scan_w), np.uint32)
    for y in range(scan_h):
        for x in range(scan_w):
            crcs[y, x] = zlib.crc32(frames[y, x])
    total = frames.sum(axis=(0, 1), dtype=np.float64) * args.passes
    print(f"detector.py: generated {scan_w}x{scan_h} frames of {fh}x{fw} uint16 "
          f"({frames.nbytes / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s", file=sys.stderr)

    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    sock.setsockopt(zmq.SNDHWM, args.queue)
    sock.setsockopt(zmq.LINGER, 60_000)
    mon = sock.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
    sock.bind(args.bind)
    print(json.dumps({"event": "listening", "endpoint": sock.getsockopt(zmq.LAST_ENDPOINT).decode()}), flush=True)
    if not mon.poll(int(args.wait * 1000)):
        sys.exit("detector.py: no analysis connected within --wait; are it and the gateways up?")
    recv_monitor_message(mon)
    sock.disable_monitor()
    mon.close()

    n = scan_w * scan_h * args.passes
    period = 1 / args.fps if args.fps else 0
    late = 0
    max_lag = 0.0
    t0 = time.perf_counter()
    i = 0
    for _ in range(args.passes):
        for y in range(scan_h):
            for x in range(scan_w):
                if period:
                    due = t0 + i * period
                    lag = time.perf_counter() - due
                    if lag < 0:
                        time.sleep(-lag)
                    elif lag > period:
                        late += 1  # a real detector would have overrun its buffer here
                    max_lag = max(max_lag, lag)
                head = FRAME.pack(b"S2DF", i, x, y, scan_w, scan_h, fh, fw, int(crcs[y, x]), time.time_ns())
                sock.send(head, zmq.SNDMORE)
                sock.send(frames[y, x], copy=False)
                i += 1
    elapsed = time.perf_counter() - t0
    sock.send_multipart([b"S2DE" + struct.pack("<I", n), total.tobytes()])
    sock.close()
    ctx.term()
    nbytes = n * fh * fw * 2
    res = {"event": "result", "frames": n, "bytes": nbytes, "seconds": round(elapsed, 6),
           "fps": round(n / elapsed, 1), "GBps": round(nbytes / elapsed / 1e9, 3),
           "target_fps": args.fps, "late_frames": late, "max_lag_ms": round(max_lag * 1e3, 3)}
    print(json.dumps(res), flush=True)
    print(f"detector.py: {n} frames in {elapsed:.2f} s = {res['fps']:.0f} frames/s, {res['GBps']:.2f} GB/s"
          + (f" (target {args.fps:.0f}; {late} frames more than one period late)" if args.fps else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
