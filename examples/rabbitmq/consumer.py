#!/usr/bin/env python3
"""RabbitMQ consumers for streaming (seed 001 setup 2): N consumers, each
on its own AMQP connection to the broker beside them, share the work
queues, check every message and acknowledge it after checking.

  AMQP_URL=amqp://streamer:PASSWORD@127.0.0.1:5672/ \
      consumer.py --consumers 8 --producers 8 --count 1000

Each consumer takes up to --prefetch unacknowledged messages and
acknowledges them in batches (one multiple-ack per half prefetch, and any
rest after 20 ms). A message with a reply_to (producer.py --rtt) is
answered there. The consumers know how many messages to expect
(--producers x --count) and stop when every one has arrived: each message
id counted once, duplicates and missing ones reported, the CRC-32 of each
payload checked, and the work queues confirmed empty at the end.

Messages/s is the aggregate rate of all consumers, from the first message
to the last (seed 001). The result is a JSON line on stdout ({"event":
"result", ...}, "ok": true when exactly once and intact); a summary goes
to stderr.
"""
import argparse
import json
import sys
import time
import zlib

import pika
from pika.adapters.select_connection import IOLoop

from common import HEADER, broker_url, parse_bytes, queue_arguments, queue_names


class Consumer:
    def __init__(self, run, cid):
        self.run = run
        self.cid = cid
        self.channel = None
        self.unacked = 0
        self.last_tag = 0
        self.flush_timer = None
        self.count = 0
        self.conn = pika.SelectConnection(run.params, on_open_callback=self.on_open,
                                          on_open_error_callback=lambda c, e: run.fail(f"consumer {cid}: connect: {e}"),
                                          on_close_callback=self.on_closed, custom_ioloop=run.loop)

    def on_open(self, conn):
        conn.channel(on_open_callback=self.on_channel)

    def on_closed(self, conn, reason):
        if not self.run.stopping:
            self.run.fail(f"consumer {self.cid}: connection closed: {reason}")

    def on_channel(self, ch):
        self.channel = ch
        ch.add_on_close_callback(
            lambda c, reason: self.run.stopping or self.run.fail(f"consumer {self.cid}: channel closed: {reason}"))
        pending = list(self.run.queues)

        def declared(_frame):
            pending.pop()
            if not pending:
                ch.basic_qos(prefetch_count=self.run.args.prefetch, callback=lambda _f: self.consume())

        for q in self.run.queues:
            ch.queue_declare(q, arguments=self.run.qargs, callback=declared)

    def consume(self):
        left = list(self.run.queues)

        def started(_frame):
            left.pop()
            if not left:
                self.run.ready()

        # Every consumer reads every work queue, so any number of consumers
        # drains any number of queues.
        for q in self.run.queues:
            self.channel.basic_consume(q, self.on_message, callback=started)

    def on_message(self, ch, method, props, body):
        run = self.run
        now = time.monotonic()
        if run.t_first is None:
            run.t_first = now
        run.t_last = now
        pid, seq, crc, _ = HEADER.unpack_from(body)
        payload = memoryview(body)[HEADER.size:]
        if zlib.crc32(payload) != crc or len(payload) != run.args.size:
            run.bad += 1
        run.record(pid, seq)
        self.count += 1
        if props.reply_to:
            # The reply is the header alone: the producer times the round trip.
            ch.basic_publish("", props.reply_to, body[:HEADER.size],
                             pika.BasicProperties(correlation_id=props.message_id, delivery_mode=1))
        self.unacked += 1
        self.last_tag = method.delivery_tag
        if self.unacked >= max(1, run.args.prefetch // 2):
            self.flush()
        elif self.flush_timer is None:
            self.flush_timer = run.loop.call_later(0.02, self.flush)
        run.maybe_done()

    def flush(self):
        if self.flush_timer is not None:
            self.run.loop.remove_timeout(self.flush_timer)
            self.flush_timer = None
        if self.unacked and self.channel.is_open:
            self.channel.basic_ack(self.last_tag, multiple=True)
            self.unacked = 0


class Run:
    def __init__(self, args):
        self.args = args
        self.params = pika.URLParameters(broker_url(args.url))
        self.params.heartbeat = 0
        self.loop = IOLoop()
        self.queues = queue_names(args.queue_prefix, args.queues)
        self.qargs = queue_arguments(parse_bytes(args.queue_bytes))
        self.expected = args.producers * args.count
        # seen[pid] is a bytearray: one counter per sequence number.
        self.seen = [bytearray(args.count) for _ in range(args.producers)]
        self.unique = 0
        self.dups = 0
        self.foreign = 0
        self.bad = 0
        self.t_first = self.t_last = None
        self.left_in_queues = None
        self.problems = []
        self.stopping = False
        self.n_ready = 0
        self.consumers = [Consumer(self, i) for i in range(args.consumers)]
        self.loop.call_later(args.timeout, lambda: self.fail(f"not finished within --timeout {args.timeout:.0f} s"))

    def ready(self):
        self.n_ready += 1
        if self.n_ready == len(self.consumers):
            print(json.dumps({"event": "ready", "consumers": len(self.consumers)}), flush=True)

    def record(self, pid, seq):
        if pid >= len(self.seen) or seq >= self.args.count:
            self.foreign += 1
            return
        s = self.seen[pid]
        if s[seq]:
            self.dups += 1
        else:
            self.unique += 1
        s[seq] = min(255, s[seq] + 1)

    def maybe_done(self):
        if self.unique == self.expected and not self.stopping:
            self.stopping = True
            for c in self.consumers:
                c.flush()
            # Every message acknowledged; the queues must now be empty.
            ch = self.consumers[0].channel
            counts = []

            def got(frame):
                counts.append(frame.method.message_count)
                if len(counts) == len(self.queues):
                    self.left_in_queues = sum(counts)
                    self.close()

            for q in self.queues:
                ch.queue_declare(q, passive=True, callback=got)

    def fail(self, why):
        if why not in self.problems:
            self.problems.append(why)
        self.stopping = True
        self.close()

    def close(self):
        self.stopping = True
        for c in self.consumers:
            if c.conn.is_open:
                c.conn.close()
        self.loop.call_later(5, self.loop.stop)
        self.wait_closed()

    def wait_closed(self):
        if all(c.conn.is_closed for c in self.consumers):
            self.loop.stop()
        else:
            self.loop.call_later(0.01, self.wait_closed)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", help="amqp://USER:PASS@HOST:PORT/ (default: $AMQP_URL)")
    ap.add_argument("--consumers", type=int, default=1, help="consumers, one connection each")
    ap.add_argument("--producers", type=int, default=1, help="producers to expect messages from")
    ap.add_argument("--count", type=int, default=1000, help="messages per producer to expect")
    ap.add_argument("--size", type=int, default=16384, help="payload bytes per message")
    ap.add_argument("--queue-prefix", default="work", help="work queues are PREFIX.0, PREFIX.1, ...")
    ap.add_argument("--queues", type=int, default=2, help="shared work queues (as producer.py)")
    ap.add_argument("--queue-bytes", default="256M", help="length limit of each work queue (as producer.py)")
    ap.add_argument("--prefetch", type=int, default=64, help="unacknowledged messages per consumer")
    ap.add_argument("--timeout", type=float, default=600, help="give up after this many seconds")
    args = ap.parse_args()
    for name in ("consumers", "producers", "count", "size", "queues", "prefetch"):
        if getattr(args, name) < 1:
            sys.exit(f"consumer.py: --{name} must be at least 1")

    run = Run(args)
    run.loop.start()
    missing = run.expected - run.unique
    if missing:
        run.problems.append(f"{missing} of {run.expected} messages never arrived")
    if run.dups:
        run.problems.append(f"{run.dups} messages arrived more than once")
    if run.foreign:
        run.problems.append(f"{run.foreign} messages from unknown producers or beyond --count")
    if run.bad:
        run.problems.append(f"{run.bad} messages with a wrong length or CRC-32")
    if run.left_in_queues:
        run.problems.append(f"{run.left_in_queues} messages left in the work queues")
    span = (run.t_last - run.t_first) if run.t_first is not None and run.t_last > run.t_first else None
    got = run.unique + run.dups
    result = {
        "event": "result", "ok": not run.problems, "problems": run.problems,
        "consumers": args.consumers, "size": args.size, "expected": run.expected,
        "unique": run.unique, "duplicates": run.dups, "missing": missing, "bad": run.bad,
        "left_in_queues": run.left_in_queues,
        "per_consumer": [c.count for c in run.consumers],
        "seconds": round(span, 6) if span else None,
        "msgs_per_s": round(got / span, 1) if span else None,
        "MBps": round(got * args.size / span / 1e6, 1) if span else None,
    }
    print(json.dumps(result), flush=True)
    print(f"consumer.py: {run.unique}/{run.expected} messages, {run.dups} duplicates, {missing} missing"
          + (f", {result['msgs_per_s']} msgs/s" if span else "")
          + ("" if not run.problems else "; PROBLEMS: " + "; ".join(run.problems)), file=sys.stderr)
    sys.exit(0 if not run.problems else 1)


if __name__ == "__main__":
    main()
