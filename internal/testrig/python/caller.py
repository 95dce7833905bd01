#!/usr/bin/python3
"""The resilience test rig's caller in Python: gRPC C-core (Debian's
python3-grpcio, 1.51) calling testrig.Backend/Call on an xds:/// target.

Like examples/bookstore/python/buyer.py it knows nothing of osm-vm:
GRPC_XDS_BOOTSTRAP points at the grpc-bootstrap.json osm-agent writes. It
writes one JSON line per call ({"ok", "code", "from", "error", "ms"}; see
internal/testrig's Result). With -n it makes one batch and exits; without,
it reads batch lines ({"id", "n", "concurrency", "deadlineMs", "headers"})
on stdin, runs each as it arrives, concurrently, and ends each with
{"batch": id, "done": true}.
"""
import argparse
import json
import os
import sys
import threading
import time
from concurrent import futures

import grpc
import grpc.experimental
from google.protobuf import wrappers_pb2

METHOD = "/testrig.Backend/Call"
FROM_KEY = "x-testrig-from"

_out = threading.Lock()


def emit(rec):
    line = json.dumps(rec) + "\n"
    with _out:
        sys.stdout.write(line)
        sys.stdout.flush()


def check(b):
    """Returns what is wrong with batch b (the same limits as Batch.Check in Go), or None."""
    def whole(v):
        return isinstance(v, int) and not isinstance(v, bool)
    n, c, d = b.get("n"), b.get("concurrency", 0), b.get("deadlineMs")
    if not whole(n) or not 1 <= n <= 1000000:
        return "n %r: want 1 to 1000000 calls" % (n,)
    if not whole(c) or not 0 <= c <= 1000:
        return "concurrency %r: want 1 to 1000 (0 for 1)" % (c,)
    if not whole(d) or not 1 <= d <= 600000:
        return "deadlineMs %r: want 1 to 600000" % (d,)
    h = b.get("headers") or {}
    if not isinstance(h, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in h.items()):
        return "headers: want an object of strings"
    return None


def run_batch(call, b):
    bid = b.get("id", "")
    deadline = b["deadlineMs"] / 1000.0
    md = tuple((k.lower(), v) for k, v in (b.get("headers") or {}).items()) or None

    def one(i):
        start = time.monotonic()
        try:
            resp = call(wrappers_pb2.StringValue(value=str(i)), timeout=deadline, metadata=md)
            rec = {"ok": True, "code": "OK", "from": resp.value}
        except grpc.RpcError as e:
            rec = {"ok": False, "code": e.code().name, "error": e.details() or ""}
            for key, value in (e.trailing_metadata() or ()):
                if key == FROM_KEY:
                    rec["from"] = value
        rec["ms"] = round((time.monotonic() - start) * 1000, 2)
        if bid:
            rec["batch"] = bid
        emit(rec)

    with futures.ThreadPoolExecutor(max_workers=max(1, b.get("concurrency", 0))) as ex:
        for f in [ex.submit(one, i) for i in range(b["n"])]:
            f.result()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="xds:///flaky.default.mesh:14001")
    ap.add_argument("-n", type=int, default=0, help="make this many calls and exit (0: read batches on stdin)")
    ap.add_argument("-c", type=int, default=1, help="calls at once")
    ap.add_argument("--deadline-ms", type=int, default=10000, help="each call's deadline")
    args = ap.parse_args()
    if not os.environ.get("GRPC_XDS_BOOTSTRAP"):
        sys.exit("caller.py: GRPC_XDS_BOOTSTRAP is not set: point it at the osm-agent's grpc-bootstrap.json")

    insecure = getattr(grpc, "insecure_channel_credentials", None) or grpc.experimental.insecure_channel_credentials
    channel = grpc.secure_channel(args.target, grpc.xds_channel_credentials(insecure()))
    call = channel.unary_unary(
        METHOD,
        request_serializer=wrappers_pb2.StringValue.SerializeToString,
        response_deserializer=wrappers_pb2.StringValue.FromString,
    )
    if args.n:
        b = {"n": args.n, "concurrency": args.c, "deadlineMs": args.deadline_ms}
        err = check(b)
        if err:
            sys.exit("caller.py: " + err)
        run_batch(call, b)
        return

    running = []
    for line in iter(sys.stdin.readline, ""):
        if not line.strip():
            continue
        try:
            b = json.loads(line)
            err = check(b) if isinstance(b, dict) else "want a JSON object"
        except ValueError as e:
            b, err = {}, str(e)
        if err:
            bid = b.get("id", "") if isinstance(b, dict) else ""
            emit({"batch": bid, "done": True, "ok": False, "error": "batch: " + err, "ms": 0})
            continue

        def batch(b=b):
            run_batch(call, b)
            emit({"batch": b.get("id", ""), "done": True, "ok": False, "ms": 0})

        t = threading.Thread(target=batch, daemon=True)
        t.start()
        running.append(t)
    for t in running:
        t.join()


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
