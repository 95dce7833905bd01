#!/usr/bin/python3
"""bookbuyer in Python: a proxyless gRPC client on gRPC C-core (Debian's
python3-grpcio, 1.51) that buys books from xds:///bookstore.default.mesh:14001.

It knows nothing of osm-vm: GRPC_XDS_BOOTSTRAP points at the grpc-bootstrap.json
osm-agent writes, and xDS channel credentials take mTLS from the cluster
configuration the xDS server sends. Output is JSON lines on stdout: the demo's
stats line ({"app", "counts", "lastError"}) every half second, or with
--per-call one line per call ({"ok", "from" | "code", "error", "ms"}).
"""
import argparse
import json
import os
import sys
import time

import grpc
import grpc.experimental
from google.protobuf import wrappers_pb2

BUY_BOOK = "/bookstore.Bookstore/BuyBook"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="xds:///bookstore.default.mesh:14001")
    ap.add_argument("--app", default="bookbuyer-python", help="name in the stats lines")
    ap.add_argument("--interval", type=float, default=0.05, help="seconds between calls")
    ap.add_argument("--per-call", action="store_true", help="one JSON line per call")
    args = ap.parse_args()
    if not os.environ.get("GRPC_XDS_BOOTSTRAP"):
        sys.exit("buyer.py: GRPC_XDS_BOOTSTRAP is not set: point it at the osm-agent's grpc-bootstrap.json")

    # The fallback (no TLS) applies only where the xDS cluster sends none.
    # grpcio 1.51 has insecure channel credentials under grpc.experimental.
    insecure = getattr(grpc, "insecure_channel_credentials", None) or grpc.experimental.insecure_channel_credentials
    creds = grpc.xds_channel_credentials(insecure())
    channel = grpc.secure_channel(args.target, creds)
    buy = channel.unary_unary(
        BUY_BOOK,
        request_serializer=wrappers_pb2.StringValue.SerializeToString,
        response_deserializer=wrappers_pb2.StringValue.FromString,
    )
    counts, last_error, reported, n = {}, "", 0.0, 0
    while True:
        n += 1
        start = time.monotonic()
        try:
            seller = buy(wrappers_pb2.StringValue(value="book-%d" % n), timeout=2).value
            rec = {"ok": True, "from": seller}
            key = seller.rsplit("-", 1)[-1]  # "bookstore-v1" counts as "v1"
        except grpc.RpcError as e:
            rec = {"ok": False, "code": e.code().name, "error": e.details()}
            key, last_error = "errors", "%s: %s" % (e.code().name, e.details())
        rec["ms"] = round((time.monotonic() - start) * 1000, 2)
        counts[key] = counts.get(key, 0) + 1
        if args.per_call:
            print(json.dumps(rec), flush=True)
        elif time.monotonic() - reported >= 0.5:
            print(json.dumps({"app": args.app, "counts": counts, "lastError": last_error}), flush=True)
            reported = time.monotonic()
        if args.interval > 0:
            time.sleep(args.interval)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
