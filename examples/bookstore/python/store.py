#!/usr/bin/python3
"""bookstore in Python: an xDS-enabled gRPC server on gRPC C-core (Debian's
python3-grpcio, 1.51) serving bookstore.Bookstore/BuyBook.

The xDS server's listener for its address gives it mTLS and the inbound RBAC,
so the mesh policy is enforced here, in the application. GRPC_XDS_BOOTSTRAP
points at the osm-agent's grpc-bootstrap.json. It prints "serving" on stderr
once the listener arrived, and a stats line ({"app", "counts"}) on stdout
every half second.
"""
import argparse
import json
import os
import sys
import threading
import time
from concurrent import futures

import grpc
from google.protobuf import wrappers_pb2


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--addr", required=True, help="address to serve on, ip:port")
    ap.add_argument("--name", required=True, help="the name BuyBook answers with, e.g. bookstore-v1")
    args = ap.parse_args()
    if not os.environ.get("GRPC_XDS_BOOTSTRAP"):
        sys.exit("store.py: GRPC_XDS_BOOTSTRAP is not set: point it at the osm-agent's grpc-bootstrap.json")

    sold = [0]
    lock = threading.Lock()

    def buy_book(request, context):
        with lock:
            sold[0] += 1
        return wrappers_pb2.StringValue(value=args.name)

    handler = grpc.method_handlers_generic_handler("bookstore.Bookstore", {
        "BuyBook": grpc.unary_unary_rpc_method_handler(
            buy_book,
            request_deserializer=wrappers_pb2.StringValue.FromString,
            response_serializer=wrappers_pb2.StringValue.SerializeToString,
        ),
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), xds=True)
    server.add_generic_rpc_handlers((handler,))
    creds = grpc.xds_server_credentials(grpc.insecure_server_credentials())
    server.add_secure_port(args.addr, creds)
    server.start()
    print("store.py: %s serving on %s (the listener from xDS decides mTLS and RBAC)" % (args.name, args.addr), file=sys.stderr, flush=True)
    try:
        while True:
            with lock:
                n = sold[0]
            print(json.dumps({"app": args.name, "counts": {"sold": n}}), flush=True)
            time.sleep(0.5)
    except KeyboardInterrupt:
        server.stop(0)


if __name__ == "__main__":
    main()
