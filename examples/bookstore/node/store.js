#!/usr/bin/env node
// bookstore in Node.js: an xDS-enabled gRPC server on grpc-js with
// grpc-js-xds serving bookstore.Bookstore/BuyBook.
//
// The xDS server's listener for its address gives it mTLS and the inbound
// RBAC, so the mesh policy is enforced here, in the application. grpc-js
// refuses the RBAC filter unless GRPC_XDS_EXPERIMENTAL_RBAC=true, so this
// refuses to start without it. GRPC_XDS_BOOTSTRAP points at the osm-agent's
// grpc-bootstrap.json. It prints "serving" on stderr once the listener
// arrived, and a stats line ({app, counts}) on stdout every half second.
'use strict';
const net = require('node:net');
const { parseArgs } = require('node:util');
const grpc = require('@grpc/grpc-js');
const xds = require('@grpc/grpc-js-xds');
const sv = require('./stringvalue');

const { values: args } = parseArgs({
  options: { addr: { type: 'string' }, name: { type: 'string' } },
});
if (!args.addr || !args.name) {
  console.error('store.js: --addr ip:port and --name (e.g. bookstore-v2) are required');
  process.exit(2);
}
if (!process.env.GRPC_XDS_BOOTSTRAP) {
  console.error("store.js: GRPC_XDS_BOOTSTRAP is not set: point it at the osm-agent's grpc-bootstrap.json");
  process.exit(1);
}
if (process.env.GRPC_XDS_EXPERIMENTAL_RBAC !== 'true') {
  console.error('store.js: set GRPC_XDS_EXPERIMENTAL_RBAC=true: without it grpc-js refuses the mesh\'s RBAC filter and never serves');
  process.exit(1);
}
// grpc-js-xds 1.14.1's xDS server listens on the port alone, on every
// address of the host (server.js passes only the port to net.Server.listen),
// so two servers of one port cannot share a host. Bind the address given.
const [host, port] = [args.addr.slice(0, args.addr.lastIndexOf(':')), Number(args.addr.slice(args.addr.lastIndexOf(':') + 1))];
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...a) {
  if (a[0] === port && typeof a[1] === 'function') return listen.call(this, port, host.replace(/^\[|\]$/g, ''), a[1]);
  return listen.apply(this, a);
};

xds.register(); // the xDS filters (router, RBAC) and credentials, for the server too
let sold = 0;
const server = new xds.XdsServer();
server.addService({
  BuyBook: {
    path: '/bookstore.Bookstore/BuyBook', requestStream: false, responseStream: false,
    requestSerialize: sv.encode, requestDeserialize: sv.decode,
    responseSerialize: sv.encode, responseDeserialize: sv.decode,
  },
}, {
  BuyBook: (call, callback) => { sold++; callback(null, args.name); },
});
server.bindAsync(args.addr, new xds.XdsServerCredentials(grpc.ServerCredentials.createInsecure()), (err) => {
  if (err) {
    console.error(`store.js: bind ${args.addr}: ${err.message}`);
    process.exit(1);
  }
});
server.addServingStateListener(args.addr, (st) => {
  if (st.code === grpc.status.OK) {
    console.error(`store.js: ${args.name} serving on ${args.addr} (the listener from xDS decides mTLS and RBAC)`);
  } else {
    console.error(`store.js: ${args.name} not serving on ${args.addr}: ${st.details}`);
  }
});
setInterval(() => process.stdout.write(JSON.stringify({ app: args.name, counts: { sold } }) + '\n'), 500);
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));
