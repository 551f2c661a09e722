#!/usr/bin/env python3
"""The SciStream 1.2 client's control calls, as the Python s2uc of 1.2
makes them, for the e2e tests (e2e/legacy12_test.go).

The gRPC stubs are generated from the project's own .proto
(internal/legacy12/scistream.proto) into --gen by the test, with
python3 -m grpc_tools.protoc, before this runs. Each command prints one
JSON object on stdout: what the calls answered, or the gRPC error of the
one that failed ({"error": CODE, "message": ...}).

Commands (the sequences of 1.2's s2uc):
  inbound   req(uid, PROD, num_conn, rate) beside hello(uid, PROD, targets)
            sent 0.5 s later on the same channel (or first, --hello_first;
            or never, --no_hello), then update(uid, prod_listeners, PROD)
  outbound  req(uid, CONS, ...) beside hello(uid, "PROD", ...), then
            update(uid, peer listeners, CONS)
  release   release(uid)
  many      N inbound requests at once on one gateway, each with its own
            targets (--targets_json: a list of lists), then N outbound
            ones on another (--cons)
"""
import argparse
import concurrent.futures
import json
import sys
import time
import uuid

import grpc


def stubs(gen):
    sys.path.insert(0, gen)
    import scistream_pb2
    import scistream_pb2_grpc
    return scistream_pb2, scistream_pb2_grpc


def channel(addr, ca):
    with open(ca, "rb") as f:
        creds = grpc.ssl_channel_credentials(root_certificates=f.read())
    return grpc.secure_channel(addr, creds)


def fail(e):
    return {"error": e.code().name, "message": e.details()}


def inbound(pb, rpc, ch, token, uid, targets, num_conn, hello="after"):
    """1.2's inbound-request: req blocks until its hello came."""
    stub = rpc.ControlStub(ch)
    md = [("authorization", token)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
        def send_hello():
            return stub.hello(pb.Hello(uid=uid, prod_listeners=targets, role="PROD"), metadata=md, timeout=30)
        hf = None
        if hello == "first":
            try:
                send_hello()
            except grpc.RpcError as e:
                return fail(e)
        rf = ex.submit(lambda: stub.req(pb.Request(uid=uid, role="PROD", num_conn=num_conn, rate=10000), metadata=md, timeout=30))
        if hello == "after":
            time.sleep(0.5)  # as the 1.2 client does: not a synchronisation
            hf = ex.submit(send_hello)
        try:
            resp = rf.result()
            if hf is not None:
                hf.result()
        except grpc.RpcError as e:
            return fail(e)
    try:
        stub.update(pb.UpdateTargets(uid=uid, remote_listeners=list(resp.prod_listeners), role="PROD"), metadata=md, timeout=30)
    except grpc.RpcError as e:
        return fail(e)
    return {"uid": uid, "listeners": list(resp.listeners), "prod_listeners": list(resp.prod_listeners)}


def outbound(pb, rpc, ch, token, uid, peers, num_conn):
    """1.2's outbound-request UID PROD_LISTENERS."""
    stub = rpc.ControlStub(ch)
    md = [("authorization", token)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as ex:
        rf = ex.submit(lambda: stub.req(pb.Request(uid=uid, role="CONS", num_conn=num_conn, rate=10000), metadata=md, timeout=30))
        time.sleep(0.5)  # as the 1.2 client does
        hf = ex.submit(lambda: stub.hello(pb.Hello(uid=uid, prod_listeners=[], role="PROD"), metadata=md, timeout=30))
        try:
            resp = rf.result()
            hf.result()
        except grpc.RpcError as e:
            return fail(e)
    try:
        stub.update(pb.UpdateTargets(uid=uid, remote_listeners=peers, role="CONS"), metadata=md, timeout=30)
    except grpc.RpcError as e:
        return fail(e)
    return {"uid": uid, "listeners": list(resp.listeners)}


def release(pb, rpc, ch, token, uid):
    try:
        rpc.ControlStub(ch).release(pb.Release(uid=uid), metadata=[("authorization", token)], timeout=30)
    except grpc.RpcError as e:
        return fail(e)
    return {"uid": uid, "released": True}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("command", choices=["inbound", "outbound", "release", "many"])
    ap.add_argument("--gen", required=True, help="directory of the generated stubs")
    ap.add_argument("--s2cs", required=True)
    ap.add_argument("--cons", help="many: the CONS gateway")
    ap.add_argument("--server_cert", required=True)
    ap.add_argument("--token", default="INVALID_TOKEN")
    ap.add_argument("--uid", default="")
    ap.add_argument("--targets", default="", help="comma-separated host:port")
    ap.add_argument("--targets_json", default="[]")
    ap.add_argument("--num_conn", type=int, default=1)
    ap.add_argument("--hello", choices=["after", "first", "never"], default="after")
    a = ap.parse_args()
    pb, rpc = stubs(a.gen)
    uid = a.uid or str(uuid.uuid1())
    targets = [t for t in a.targets.split(",") if t]
    with channel(a.s2cs, a.server_cert) as ch:
        if a.command == "inbound":
            out = inbound(pb, rpc, ch, a.token, uid, targets, a.num_conn, a.hello)
        elif a.command == "outbound":
            out = outbound(pb, rpc, ch, a.token, uid, targets, a.num_conn)
        elif a.command == "release":
            out = release(pb, rpc, ch, a.token, uid)
        else:
            sets = json.loads(a.targets_json)
            uids = [str(uuid.uuid1()) for _ in sets]
            with channel(a.cons, a.server_cert) as cch, concurrent.futures.ThreadPoolExecutor(max_workers=len(sets)) as ex:
                ins = list(ex.map(lambda i: inbound(pb, rpc, ch, a.token, uids[i], sets[i], a.num_conn), range(len(sets))))
                def out_of(i):
                    if "error" in ins[i]:
                        return ins[i]
                    return outbound(pb, rpc, cch, a.token, uids[i], ins[i]["listeners"], a.num_conn)
                outs = list(ex.map(out_of, range(len(sets))))
            out = {"inbound": ins, "outbound": outs}
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
