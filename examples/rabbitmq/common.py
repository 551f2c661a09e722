"""What producer.py and consumer.py share: the message header, the queue
declaration (both sides declare the same queues with the same arguments,
so either may start first) and the broker URL."""
import os
import struct
import sys

# producer id, sequence number, CRC-32 of the payload, send time (ns,
# producer's monotonic clock; only the producer reads it back).
HEADER = struct.Struct("<IQIQ")


def queue_names(prefix, n):
    return [f"{prefix}.{i}" for i in range(n)]


def queue_arguments(queue_bytes):
    # A length limit in bytes with reject-publish: a full queue refuses new
    # messages (the publisher gets a nack and publishes again later) instead
    # of dropping the oldest (the default, drop-head) or growing until the
    # broker's memory alarm blocks every publisher.
    return {"x-max-length-bytes": queue_bytes, "x-overflow": "reject-publish"}


def broker_url(flag):
    """--url, or $AMQP_URL (keeps the password off the command line)."""
    url = flag or os.environ.get("AMQP_URL")
    if not url:
        sys.exit("set --url or AMQP_URL, e.g. AMQP_URL=amqp://streamer:PASSWORD@127.0.0.1:5672/")
    return url


def parse_bytes(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().removesuffix("B").removesuffix("I")
    if s and s[-1] in mult:
        return int(float(s[:-1]) * mult[s[-1]])
    return int(s)


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    i = min(len(sorted_values) - 1, max(0, round(q / 100 * (len(sorted_values) - 1))))
    return sorted_values[i]
