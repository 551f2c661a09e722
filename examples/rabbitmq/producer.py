#!/usr/bin/env python3
"""RabbitMQ producers for streaming (seed 001 setup 2): N producers, each
on its own AMQP connection, publish M messages of a fixed size to shared
work queues, with publisher confirms.

  AMQP_URL=amqp://streamer:PASSWORD@PROXY_P_HOST:PROXY_P_PORT/ \
      producer.py --producers 8 --count 1000 --size 16384

Throughput mode (default): each producer keeps up to --window unconfirmed
messages in flight; a message counts as sent when the broker confirms it.
A nack (the queue is full: reject-publish) makes the producer publish it
again after a short pause, so no message is lost and none is doubled.

--rtt: request/reply (seed 001 sec. 6.4): each request carries a reply_to
naming the producer's own reply queue; the consumer answers there; each
producer keeps --inflight requests outstanding and times each round trip.

All producers share one event loop (pika SelectConnection), so one
process drives 64 connections. The result is a JSON line on stdout
({"event": "result", ...}); a summary goes to stderr. Exit status 0 when
every message was confirmed (and, with --rtt, answered exactly once).
"""
import argparse
import json
import os
import sys
import time
import zlib

import pika
from pika.adapters.select_connection import IOLoop

from common import HEADER, broker_url, parse_bytes, percentile, queue_arguments, queue_names


class Producer:
    def __init__(self, run, pid):
        self.run = run
        self.pid = pid
        self.queue = run.queues[pid % len(run.queues)]
        self.next_seq = 0
        self.retry = []  # sequence numbers nacked, to publish again
        self.tags = {}  # delivery tag -> seq, unconfirmed
        self.tag = 0
        self.confirmed = 0
        self.nacks = 0
        self.sent_at = {}  # seq -> send time (rtt), until the reply arrives
        self.replies = 0
        self.dup_replies = 0
        self.answered = set()
        self.reply_queue = None
        self.channel = None
        self.done = False
        self.conn = pika.SelectConnection(run.params, on_open_callback=self.on_open,
                                          on_open_error_callback=self.on_fail,
                                          on_close_callback=self.on_closed, custom_ioloop=run.loop)

    # --- setup
    def on_open(self, conn):
        conn.channel(on_open_callback=self.on_channel)

    def on_fail(self, conn, err):
        self.run.fail(f"producer {self.pid}: connect: {err}")

    def on_closed(self, conn, reason):
        if not self.done:
            self.run.fail(f"producer {self.pid}: connection closed: {reason}")

    def on_channel(self, ch):
        self.channel = ch
        ch.add_on_close_callback(lambda c, reason: self.done or self.run.fail(f"producer {self.pid}: channel closed: {reason}"))
        pending = list(self.run.queues)

        def declared(_frame, q=None):
            pending.pop()
            if not pending:
                ch.confirm_delivery(self.on_confirm, callback=lambda _f: self.after_confirm_mode())

        for q in self.run.queues:
            ch.queue_declare(q, arguments=self.run.qargs, callback=declared)

    def after_confirm_mode(self):
        if not self.run.args.rtt:
            self.run.ready(self)
            return
        # A server-named, exclusive reply queue of this producer's own.
        def declared(frame):
            self.reply_queue = frame.method.queue
            self.channel.basic_consume(self.reply_queue, self.on_reply,
                                       callback=lambda _f: self.run.ready(self))
        self.channel.queue_declare("", exclusive=True, auto_delete=True, callback=declared)

    # --- publishing
    def in_flight(self):
        return len(self.sent_at) if self.run.args.rtt else len(self.tags)

    def pump(self):
        limit = self.run.args.inflight if self.run.args.rtt else self.run.args.window
        while self.in_flight() < limit:
            if self.retry:
                seq = self.retry.pop()
            elif self.next_seq < self.run.args.count:
                seq = self.next_seq
                self.next_seq += 1
            else:
                return
            self.publish(seq)

    def publish(self, seq):
        k = seq % len(self.run.pool)
        now = time.monotonic_ns()
        body = HEADER.pack(self.pid, seq, self.run.crcs[k], now) + self.run.pool[k]
        props = pika.BasicProperties(message_id=f"{self.pid}-{seq}", delivery_mode=1,
                                     reply_to=self.reply_queue)
        self.channel.basic_publish("", self.queue, body, props)
        self.tag += 1
        self.tags[self.tag] = seq
        if self.run.args.rtt:
            self.sent_at[seq] = now

    def on_confirm(self, frame):
        m = frame.method
        tags = [t for t in self.tags if t <= m.delivery_tag] if m.multiple else [m.delivery_tag]
        nack = isinstance(m, pika.spec.Basic.Nack)
        for t in tags:
            seq = self.tags.pop(t, None)
            if seq is None:
                continue
            if nack:
                self.nacks += 1
                self.sent_at.pop(seq, None)
                self.retry.append(seq)
            else:
                self.confirmed += 1
        if nack:
            # The queue is full: give the consumers a moment, then go on.
            self.run.loop.call_later(0.02, self.pump)
        else:
            self.pump()
        self.check_done()

    def on_reply(self, ch, method, props, body):
        _, seq, _, sent = HEADER.unpack_from(body)
        ch.basic_ack(method.delivery_tag)
        if seq in self.answered:
            self.dup_replies += 1
            return
        self.answered.add(seq)
        self.sent_at.pop(seq, None)
        self.run.rtts.append((time.monotonic_ns() - sent) / 1e6)
        self.replies += 1
        self.pump()
        self.check_done()

    def check_done(self):
        count = self.run.args.count
        if self.done or self.confirmed < count or (self.run.args.rtt and self.replies < count):
            return
        self.done = True
        self.run.finished(self)


class Run:
    def __init__(self, args):
        self.args = args
        self.params = pika.URLParameters(broker_url(args.url))
        self.params.heartbeat = 0  # a stalled stream is caught by --timeout
        self.loop = IOLoop()
        self.queues = queue_names(args.queue_prefix, args.queues)
        self.qargs = queue_arguments(parse_bytes(args.queue_bytes))
        self.pool = [os.urandom(args.size) for _ in range(4)]
        self.crcs = [zlib.crc32(b) for b in self.pool]
        self.rtts = []
        self.problems = []
        self.n_ready = 0
        self.n_done = 0
        self.t0 = self.t1 = None
        self.producers = [Producer(self, i) for i in range(args.producers)]
        self.loop.call_later(args.timeout, lambda: self.fail(f"not finished within --timeout {args.timeout:.0f} s"))

    def ready(self, _p):
        self.n_ready += 1
        if self.n_ready == len(self.producers):
            # Start together, so the rate is that of all of them at once.
            self.t0 = time.monotonic()
            for p in self.producers:
                p.pump()

    def finished(self, _p):
        self.n_done += 1
        if self.n_done == len(self.producers):
            self.t1 = time.monotonic()
            self.stop()

    def fail(self, why):
        if why not in self.problems:
            self.problems.append(why)
        self.stop()

    def stop(self):
        for p in self.producers:
            p.done = True
            if p.conn.is_open:
                p.conn.close()
        self.loop.call_later(5, self.loop.stop)
        self.loop.add_callback_threadsafe(self.maybe_stop)

    def maybe_stop(self):
        if all(p.conn.is_closed for p in self.producers):
            self.loop.stop()
        else:
            self.loop.call_later(0.01, self.maybe_stop)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="amqp://USER:PASS@HOST:PORT/ (default: $AMQP_URL)")
    ap.add_argument("--producers", type=int, default=1, help="producers, one connection each")
    ap.add_argument("--count", type=int, default=1000, help="messages per producer")
    ap.add_argument("--size", type=int, default=16384, help="payload bytes per message (Dstream 16384, Lstream 1048576)")
    ap.add_argument("--queue-prefix", default="work", help="work queues are PREFIX.0, PREFIX.1, ...")
    ap.add_argument("--queues", type=int, default=2, help="shared work queues (seed 001 used 2)")
    ap.add_argument("--queue-bytes", default="256M", help="length limit of each work queue (reject-publish beyond it)")
    ap.add_argument("--window", type=int, default=64, help="unconfirmed messages per producer (throughput mode)")
    ap.add_argument("--rtt", action="store_true", help="request/reply: time each round trip")
    ap.add_argument("--inflight", type=int, default=1, help="outstanding requests per producer (--rtt)")
    ap.add_argument("--timeout", type=float, default=600, help="give up after this many seconds")
    args = ap.parse_args()
    for name in ("producers", "count", "size", "queues", "window", "inflight"):
        if getattr(args, name) < 1:
            sys.exit(f"producer.py: --{name} must be at least 1")

    run = Run(args)
    run.loop.start()
    n = args.producers * args.count
    span = (run.t1 - run.t0) if run.t0 and run.t1 else None
    rtts = sorted(run.rtts)
    confirmed = sum(p.confirmed for p in run.producers)
    replies = sum(p.replies for p in run.producers)
    dups = sum(p.dup_replies for p in run.producers)
    if confirmed != n:
        run.problems.append(f"{confirmed} of {n} messages confirmed")
    if args.rtt and replies != n:
        run.problems.append(f"{replies} of {n} requests answered")
    if dups:
        run.problems.append(f"{dups} duplicate replies: some request was consumed twice")
    result = {
        "event": "result", "ok": not run.problems, "problems": run.problems,
        "producers": args.producers, "size": args.size, "messages": n, "confirmed": confirmed,
        "nacks": sum(p.nacks for p in run.producers), "rtt_mode": args.rtt, "replies": replies,
        "seconds": round(span, 6) if span else None,
        "msgs_per_s": round(n / span, 1) if span else None,
        "MBps": round(n * args.size / span / 1e6, 1) if span else None,
    }
    if rtts:
        result.update(rtt_ms_median=round(percentile(rtts, 50), 3), rtt_ms_p90=round(percentile(rtts, 90), 3),
                      rtt_ms_p99=round(percentile(rtts, 99), 3), rtt_ms_max=round(rtts[-1], 3))
    print(json.dumps(result), flush=True)
    print(f"producer.py: {confirmed}/{n} confirmed, {result['nacks']} nacks"
          + (f", {result['msgs_per_s']} msgs/s" if span else "")
          + (f", RTT median {result['rtt_ms_median']} ms p99 {result['rtt_ms_p99']} ms" if rtts else "")
          + ("" if not run.problems else "; PROBLEMS: " + "; ".join(run.problems)), file=sys.stderr)
    sys.exit(0 if not run.problems else 1)


if __name__ == "__main__":
    main()
