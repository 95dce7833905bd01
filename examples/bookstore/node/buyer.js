#!/usr/bin/env node
// bookbuyer in Node.js: a proxyless gRPC client on grpc-js with grpc-js-xds
// that buys books from xds:///bookstore.default.mesh:14001.
//
// It knows nothing of osm-vm: GRPC_XDS_BOOTSTRAP points at the
// grpc-bootstrap.json osm-agent writes, and xDS channel credentials take
// mTLS from the cluster configuration the xDS server sends. Output is JSON
// lines on stdout: the demo's stats line ({app, counts, lastError}) every
// half second, or with --per-call one line per call ({ok, from | code,
// error, ms}).
'use strict';
const { parseArgs } = require('node:util');
const grpc = require('@grpc/grpc-js');
const xds = require('@grpc/grpc-js-xds');
const sv = require('./stringvalue');

const { values: args } = parseArgs({
  options: {
    target: { type: 'string', default: 'xds:///bookstore.default.mesh:14001' },
    app: { type: 'string', default: 'bookbuyer-node' },
    interval: { type: 'string', default: '0.05' },
    'per-call': { type: 'boolean', default: false },
  },
});
if (!process.env.GRPC_XDS_BOOTSTRAP) {
  console.error("buyer.js: GRPC_XDS_BOOTSTRAP is not set: point it at the osm-agent's grpc-bootstrap.json");
  process.exit(1);
}
xds.register();
const client = new grpc.Client(args.target, new xds.XdsChannelCredentials(grpc.credentials.createInsecure()));
const intervalMs = parseFloat(args.interval) * 1000;
const counts = {};
let lastError = '';
let reported = 0;
let n = 0;

function buy() {
  n++;
  const start = process.hrtime.bigint();
  client.makeUnaryRequest('/bookstore.Bookstore/BuyBook', sv.encode, sv.decode, `book-${n}`,
    { deadline: Date.now() + 2000 }, (err, seller) => {
      const rec = err ? { ok: false, code: grpc.status[err.code], error: err.details } : { ok: true, from: seller };
      rec.ms = Number(process.hrtime.bigint() - start) / 1e6;
      const key = err ? 'errors' : seller.slice(seller.lastIndexOf('-') + 1); // "bookstore-v1" counts as "v1"
      if (err) lastError = `${grpc.status[err.code]}: ${err.details}`;
      counts[key] = (counts[key] || 0) + 1;
      if (args['per-call']) {
        process.stdout.write(JSON.stringify(rec) + '\n');
      } else if (Date.now() - reported >= 500) {
        process.stdout.write(JSON.stringify({ app: args.app, counts, lastError }) + '\n');
        reported = Date.now();
      }
      setTimeout(buy, intervalMs);
    });
}
buy();
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));
