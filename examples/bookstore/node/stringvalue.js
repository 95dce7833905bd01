// google.protobuf.StringValue (field 1, a string) by hand: the bookstore's
// methods take and return it, and this saves a protobuf runtime.
'use strict';

function encode(s) {
  const body = Buffer.from(s, 'utf8');
  const len = [];
  let n = body.length;
  do {
    len.push((n & 0x7f) | (n > 0x7f ? 0x80 : 0));
    n >>>= 7;
  } while (n > 0);
  return Buffer.concat([Buffer.from([0x0a, ...len]), body]);
}

function decode(buf) {
  let i = 0;
  while (i < buf.length) {
    const tag = buf[i++];
    let n = 0;
    for (let shift = 0; ; shift += 7) {
      const b = buf[i++];
      n |= (b & 0x7f) << shift;
      if (!(b & 0x80)) break;
    }
    if (tag === 0x0a) return buf.subarray(i, i + n).toString('utf8');
    if ((tag & 7) !== 2) throw new Error(`StringValue: unexpected field tag ${tag}`);
    i += n;
  }
  return '';
}

module.exports = { encode, decode };
