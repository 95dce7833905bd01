#!/usr/bin/env node
// The resilience test rig's caller in Node.js: grpc-js with grpc-js-xds
// (the versions examples/bookstore/node/package-lock.json pins; NODE_PATH
// points at their node_modules) calling testrig.Backend/Call on an
// xds:/// target.
//
// Like examples/bookstore/node/buyer.js it knows nothing of osm-vm:
// GRPC_XDS_BOOTSTRAP points at the grpc-bootstrap.json osm-agent writes.
// It writes one JSON line per call ({ok, code, from, error, ms}; see
// internal/testrig's Result). With -n it makes one batch and exits;
// without, it reads batch lines ({id, n, concurrency, deadlineMs, headers})
// on stdin, runs each as it arrives, concurrently, and ends each with
// {batch: id, done: true}.
'use strict';
const { parseArgs } = require('node:util');
const readline = require('node:readline');
const grpc = require('@grpc/grpc-js');
const xds = require('@grpc/grpc-js-xds');

const METHOD = '/testrig.Backend/Call';
const FROM_KEY = 'x-testrig-from';

const { values: args } = parseArgs({
  options: {
    target: { type: 'string', default: 'xds:///flaky.default.mesh:14001' },
    n: { type: 'string', short: 'n', default: '0' },
    c: { type: 'string', short: 'c', default: '1' },
    'deadline-ms': { type: 'string', default: '10000' },
  },
});
if (!process.env.GRPC_XDS_BOOTSTRAP) {
  console.error("caller.js: GRPC_XDS_BOOTSTRAP is not set: point it at the osm-agent's grpc-bootstrap.json");
  process.exit(1);
}
xds.register();
const client = new grpc.Client(args.target, new xds.XdsChannelCredentials(grpc.credentials.createInsecure()));

// The request is an empty google.protobuf.StringValue (no bytes); the
// answer's field 1 is the instance's name.
const encode = () => Buffer.alloc(0);
function decode(buf) {
  let i = 0;
  while (i < buf.length) {
    const tag = buf[i++];
    let n = 0;
    for (let shift = 0; ; shift += 7) {
      const b = buf[i++];
      n += (b & 0x7f) * 2 ** shift;
      if (!(b & 0x80)) break;
    }
    if (tag === 0x0a) return buf.subarray(i, i + n).toString('utf8');
    if ((tag & 7) !== 2) throw new Error(`StringValue: unexpected field tag ${tag}`);
    i += n;
  }
  return '';
}

function emit(rec) {
  process.stdout.write(JSON.stringify(rec) + '\n');
}

// check returns what is wrong with batch b (the same limits as Batch.Check
// in Go), or null.
function check(b) {
  const whole = (v, lo, hi) => Number.isInteger(v) && v >= lo && v <= hi;
  if (!whole(b.n, 1, 1000000)) return `n ${JSON.stringify(b.n)}: want 1 to 1000000 calls`;
  if (!whole(b.concurrency ?? 0, 0, 1000)) return `concurrency ${JSON.stringify(b.concurrency)}: want 1 to 1000 (0 for 1)`;
  if (!whole(b.deadlineMs, 1, 600000)) return `deadlineMs ${JSON.stringify(b.deadlineMs)}: want 1 to 600000`;
  const h = b.headers ?? {};
  if (typeof h !== 'object' || Array.isArray(h) || !Object.values(h).every((v) => typeof v === 'string')) {
    return 'headers: want an object of strings';
  }
  return null;
}

function callOnce(b) {
  return new Promise((resolve) => {
    const md = new grpc.Metadata();
    for (const [k, v] of Object.entries(b.headers ?? {})) md.set(k.toLowerCase(), v);
    const start = process.hrtime.bigint();
    client.makeUnaryRequest(METHOD, encode, decode, null, md, { deadline: Date.now() + b.deadlineMs }, (err, from) => {
      let rec;
      if (err) {
        rec = { ok: false, code: grpc.status[err.code] ?? `CODE_${err.code}`, error: err.details ?? '' };
        const f = err.metadata?.get(FROM_KEY) ?? [];
        if (f.length > 0) rec.from = String(f[0]);
      } else {
        rec = { ok: true, code: 'OK', from };
      }
      rec.ms = Number(process.hrtime.bigint() - start) / 1e6;
      if (b.id) rec.batch = b.id;
      emit(rec);
      resolve();
    });
  });
}

async function runBatch(b) {
  let next = 0;
  const worker = async () => {
    while (next < b.n) {
      next++;
      await callOnce(b);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, b.concurrency ?? 0) }, worker));
}

async function main() {
  const n = Number(args.n);
  if (n > 0) {
    const b = { n, concurrency: Number(args.c), deadlineMs: Number(args['deadline-ms']) };
    const err = check(b);
    if (err) {
      console.error(`caller.js: ${err}`);
      process.exit(1);
    }
    await runBatch(b);
    process.exit(0);
  }
  const running = [];
  for await (const line of readline.createInterface({ input: process.stdin })) {
    if (!line.trim()) continue;
    let b;
    let err;
    try {
      b = JSON.parse(line);
      err = b !== null && typeof b === 'object' ? check(b) : 'want a JSON object';
    } catch (e) {
      b = {};
      err = e.message;
    }
    if (err) {
      emit({ batch: b?.id ?? '', done: true, ok: false, error: `batch: ${err}`, ms: 0 });
      continue;
    }
    running.push(runBatch(b).then(() => emit({ batch: b.id ?? '', done: true, ok: false, ms: 0 })));
  }
  await Promise.all(running);
  process.exit(0);
}
main();
process.on('SIGTERM', () => process.exit(0));
process.on('SIGINT', () => process.exit(0));
