#!/usr/bin/env python3
"""Live 4D-STEM analysis (seed 003): connects to the detector stream,
applies a stack of virtual-detector masks to every frame as it arrives
(one matrix product of the flattened frames with the mask stack, numpy)
and builds the virtual images progressively.

  analysis.py --connect tcp://127.0.0.1:6000 --png virtual.png

or, requesting its own stream through two gateways with the scistream
Python package (pip install ./python) and printing the stream's rates while
the frames flow:

  analysis.py --detector 127.0.0.1:6000 --inbound 127.0.0.2:5000 --inbound-cert prod/s2cs.crt \
              --outbound 127.0.0.3:5000 --outbound-cert cons/s2cs.crt --rates-every 1

The detector binds, so its gateway takes the inbound request (--inbound);
the analysis connects to the listener of the outbound gateway in front of it
(--outbound). The token comes as for s2uc (--token-file, SCISTREAM_TOKEN, the
login of s2uc login); the stream is released when the analysis ends, also on
Ctrl-C.

Virtual detectors: bright field (the central disk), annular dark field
(a ring outside it), high-angle ADF (the outer ring), and the centre of
mass in x and y (a ramp mask each, divided by the total intensity). The
PNG shows the virtual images side by side; --png-every SECONDS rewrites it
while the scan runs.

Checks: each frame's CRC-32, each frame index once, and, at the end, that
the sum of each virtual image equals the mask applied to the sum of all
frames the detector sent. Prints frames/s and GB/s sustained (first frame
to last) and the compute-only rate (what the analysis could keep up with
if receiving cost nothing). JSON "result" on stdout; a summary on stderr.
"""
import argparse
import json
import struct
import sys
import threading
import time
import zlib

import numpy as np
import zmq

FRAME = struct.Struct("<4s7IIQ")  # as detector.py
NAMES = ["BF", "ADF", "HAADF", "COMx", "COMy"]
_out = threading.Lock()


def emit(event):
    """One JSON event on stdout, a whole line at once: the rates thread
    and the analysis write events side by side."""
    with _out:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()


def mask_stack(fh, fw):
    """(fh*fw, 5) float32: BF, ADF, HAADF, x ramp, y ramp."""
    py, px = np.mgrid[0:fh, 0:fw].astype(np.float32)
    cy, cx = (fh - 1) / 2, (fw - 1) / 2
    r = np.hypot(py - cy, px - cx)
    r0 = min(fh, fw) / 8
    masks = [r < r0 * 1.05, (r >= r0 * 1.2) & (r < r0 * 2.5), r >= r0 * 3, px - cx, py - cy]
    return np.stack([np.asarray(m, np.float32).ravel() for m in masks], axis=1)


def write_png(path, vimg, total):
    from PIL import Image

    panels = []
    com = [vimg[3] / np.maximum(total, 1e-9), vimg[4] / np.maximum(total, 1e-9)]
    for img in [vimg[0], vimg[1], vimg[2], com[0], com[1]]:
        lo, hi = np.nanpercentile(img, 1), np.nanpercentile(img, 99)
        g = np.clip((img - lo) / (hi - lo if hi > lo else 1), 0, 1)
        panels.append((g * 255).astype(np.uint8))
    h, w = panels[0].shape
    scale = max(1, 256 // max(h, w))
    gap = 4
    out = np.full((h * scale, len(panels) * (w * scale + gap) - gap), 255, np.uint8)
    for i, p in enumerate(panels):
        big = np.kron(p, np.ones((scale, scale), np.uint8))
        out[:, i * (w * scale + gap):i * (w * scale + gap) + w * scale] = big
    Image.fromarray(out, "L").save(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connect", help="detector endpoint (or the gateway's listener), tcp://HOST:PORT")
    ap.add_argument("--detector", help="request a stream to the detector's HOST:PORT (as its gateway reaches it) instead of --connect")
    ap.add_argument("--inbound", help="with --detector: the detector's gateway, HOST:PORT of its control API")
    ap.add_argument("--inbound-cert", help="with --detector: its certificate (PEM file or sha256:HEX)")
    ap.add_argument("--outbound", help="with --detector: the gateway in front of this analysis, HOST:PORT")
    ap.add_argument("--outbound-cert", help="with --detector: its certificate (PEM file or sha256:HEX)")
    ap.add_argument("--token-file", help="with --detector: bearer token file for both gateways (default: as s2uc)")
    ap.add_argument("--rate", help="with --detector: rate to reserve, e.g. 2G (default: best effort)")
    ap.add_argument("--rates-every", type=float, default=1.0, help="with --detector: print the stream's rates every this many seconds")
    ap.add_argument("--png", default="virtual.png", help="picture of the virtual images")
    ap.add_argument("--png-every", type=float, default=0, help="rewrite the PNG every this many seconds while running")
    ap.add_argument("--batch", type=int, default=32, help="frames per matrix product")
    ap.add_argument("--timeout", type=float, default=120, help="give up when nothing arrives for this many seconds")
    args = ap.parse_args()
    if args.batch < 1:
        sys.exit("analysis.py: --batch must be at least 1")
    if (args.connect is None) == (args.detector is None):
        sys.exit("analysis.py: give --connect tcp://HOST:PORT, or --detector HOST:PORT with --inbound and --outbound")
    if args.connect:
        sys.exit(analyse(args, args.connect))
    sys.exit(with_stream(args))


def with_stream(args):
    """Requests a stream from the detector to this analysis, prints its
    rates while the frames flow, and releases it at the end."""
    import scistream

    host, _, port = args.detector.rpartition(":")
    if not host or not port.isdigit() or not args.inbound or not args.outbound:
        sys.exit("analysis.py: --detector HOST:PORT needs --inbound HOST:PORT and --outbound HOST:PORT")
    with scistream.stream(inbound=args.inbound, outbound=args.outbound, target=(host, int(port)), num_conn=1,
                          rate=args.rate, inbound_server_cert=args.inbound_cert,
                          outbound_server_cert=args.outbound_cert, token_file=args.token_file) as s:
        emit({"event": "stream", "uid": s.uid, "listeners": s.listeners})
        done = threading.Event()

        def report():
            for r in s.rates(interval=args.rates_every):
                if done.is_set():
                    return
                # The frames go from the detector (which listens) to the
                # analysis (which connects): "to the connector".
                emit({"event": "rate", "MBps": round(r.to_connector_Bps / 1e6, 3),
                      "bytes": r.bytes_to_connector, "active_conns": r.active_conns})
                with _out:
                    print(f"analysis.py: stream {s.uid}: {r.to_connector_Bps / 1e6:.1f} MB/s, "
                          f"{r.bytes_to_connector / 1e6:.1f} MB so far", file=sys.stderr, flush=True)

        t = threading.Thread(target=report, daemon=True)
        t.start()
        try:
            return analyse(args, "tcp://" + s.listeners[0])
        finally:
            done.set()
            t.join(args.rates_every + 30)


def analyse(args, endpoint):
    """Receives and reduces the frames from endpoint; returns the exit code."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.setsockopt(zmq.RCVHWM, 64)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    emit({"event": "connecting", "endpoint": endpoint})

    problems = []
    masks = None
    vimg = None
    seen = None
    batch = None
    pos = None
    nb = 0
    frames = 0
    dups = 0
    bad = 0
    compute = 0.0
    t_first = t_last = None
    next_png = None
    end = None

    def flush():
        nonlocal nb, compute
        if nb == 0:
            return
        c = time.perf_counter()
        res = batch[:nb].astype(np.float32) @ masks  # (nb, 5): every mask on every frame
        vimg[:, pos[:nb, 1], pos[:nb, 0]] += res.T
        compute += time.perf_counter() - c
        nb = 0

    while True:
        if not sock.poll(int(args.timeout * 1000)):
            problems.append(f"nothing arrived for {args.timeout:.0f} s")
            break
        head, pix = sock.recv_multipart(copy=False)
        hb = head.bytes
        if hb[:4] == b"S2DE":
            end = (struct.unpack_from("<I", hb, 4)[0], np.frombuffer(pix.buffer, np.float64))
            break
        now = time.perf_counter()
        if t_first is None:
            t_first = now
        t_last = now
        _, idx, x, y, sw, sh, fh, fw, crc, _ = FRAME.unpack(hb)
        if masks is None:  # the first frame says the geometry
            masks = mask_stack(fh, fw)
            vimg = np.zeros((masks.shape[1], sh, sw), np.float64)
            seen = bytearray(sw * sh * 64)
            batch = np.empty((args.batch, fh * fw), np.uint16)
            pos = np.empty((args.batch, 2), np.intp)
            next_png = now + args.png_every if args.png_every else None
        buf = pix.buffer
        if len(buf) != fh * fw * 2 or zlib.crc32(buf) != crc:
            bad += 1
            continue
        if idx >= len(seen):
            seen.extend(bytearray(idx + 1 - len(seen)))
        if seen[idx]:
            dups += 1
        seen[idx] = 1
        batch[nb] = np.frombuffer(buf, np.uint16)
        pos[nb] = (x, y)
        nb += 1
        frames += 1
        if nb == args.batch:
            flush()
        if next_png is not None and now >= next_png:
            flush()
            write_png(args.png, vimg[:, :, :], vimg[0] + vimg[1] + vimg[2])
            next_png = now + args.png_every
    flush()
    sock.close()
    ctx.term()

    if end is None:
        problems.append("no end-of-series message: the stream did not finish")
    else:
        if frames != end[0]:
            problems.append(f"got {frames} frames, the detector sent {end[0]}")
        if masks is not None:
            want = end[1] @ masks  # mask stack applied to the sum of all frames
            got = vimg.sum(axis=(1, 2))
            if not np.allclose(got, want, rtol=1e-5, atol=1e-3 * np.abs(want).max()):
                problems.append(f"virtual images do not sum to the masks applied to the frame sum: {got} vs {want}")
    if dups:
        problems.append(f"{dups} frames arrived more than once")
    if bad:
        problems.append(f"{bad} frames with a wrong size or CRC-32")
    if vimg is not None:
        write_png(args.png, vimg, vimg[0] + vimg[1] + vimg[2])
    span = (t_last - t_first) if t_first is not None and t_last > t_first else None
    fbytes = frames * (batch.shape[1] * 2 if batch is not None else 0)
    res = {"event": "result", "ok": not problems, "problems": problems, "frames": frames,
           "bytes": fbytes, "seconds": round(span, 6) if span else None,
           "fps": round((frames - 1) / span, 1) if span else None,
           "GBps": round(fbytes / span / 1e9, 3) if span else None,
           "compute_fps": round(frames / compute, 1) if compute else None,
           "virtual_detectors": NAMES, "png": args.png if vimg is not None else None}
    emit(res)
    print(f"analysis.py: {frames} frames, {res['fps']} frames/s, {res['GBps']} GB/s sustained; "
          f"compute alone {res['compute_fps']} frames/s; picture in {res['png']}"
          + ("" if not problems else "; PROBLEMS: " + "; ".join(problems)), file=sys.stderr)
    return 0 if not problems else 1


if __name__ == "__main__":
    main()
