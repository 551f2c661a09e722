"""The parsers of what a gateway sends, fed random and mutated input (a
bounded fuzz, as the Go parsers' Fuzz* targets): they accept or refuse
with their own errors, never crash with another exception."""

from __future__ import annotations

import json
import random
import string

from scistream import client, models
from scistream._tls import parse_one_cert_pem

from test_trust import stream_answer

SEED = 20261127


def mutate(rng: random.Random, v: object) -> object:
    choices: list[object] = [None, True, -1, 2**70, 1.5, "", "x" * 300, "::", "[::1]:80", [], {}, [1, "a"], {"a": 1},
                             "2026-13-45T99:99:99Z", "\u202e", "127.0.0.1:65536"]
    if isinstance(v, dict) and v and rng.random() < 0.7:
        k = rng.choice(list(v))
        return {**v, k: mutate(rng, v[k])}
    if isinstance(v, list) and v and rng.random() < 0.7:
        i = rng.randrange(len(v))
        return v[:i] + [mutate(rng, v[i])] + v[i + 1:]
    return rng.choice(choices)


def test_stream_decoder_and_checks_never_crash() -> None:
    rng = random.Random(SEED)
    base = json.loads(json.dumps(stream_answer("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
                                               stats={"active_conns": 0, "waiting_conns": 0, "total_conns": 0,
                                                      "rejected_conns": 0, "over_cap_conns": 0, "aborted_conns": 0,
                                                      "errors": 0, "bytes_to_wan": 0, "bytes_from_wan": 0,
                                                      "rate_to_wan_Bps": 0, "rate_from_wan_Bps": 0,
                                                      "last_errors": {"app_reset": {"reason": "r", "time": "2026-11-27T00:00:00Z"}}})))
    base_client = client._Base.__new__(client._Base)
    base_client.addr = "fake:1"
    for _ in range(3000):
        doc = base
        for _ in range(rng.randint(1, 4)):
            doc = mutate(rng, doc)  # type: ignore[assignment]
        try:
            s = models.from_json(models.Stream, doc)
        except ValueError:
            continue
        try:
            base_client._check_created(s, None, "tls", True)
        except client.BadAnswer:
            pass


def test_host_port_and_pem_never_crash() -> None:
    rng = random.Random(SEED)
    alphabet = string.printable + "\u0663\u202e[]:%"
    for _ in range(5000):
        s = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        client.valid_host_port(s)
        client.valid_host(s)
        try:
            parse_one_cert_pem(f"-----BEGIN CERTIFICATE-----\n{s}\n-----END CERTIFICATE-----\n")
        except ValueError:
            pass
    assert client.valid_host_port("127.0.0.1:80") and client.valid_host_port("[::1]:5000") and client.valid_host_port("gw_1.example:443")
    for bad in ("127.0.0.1:080", "::1:80", "127.0.0.1:\u0663", "a..b:1", "fe80::1%eth0", "[fe80::1%eth0]:1", "h:1:2", "[h]:1x"):
        assert not client.valid_host_port(bad), bad
