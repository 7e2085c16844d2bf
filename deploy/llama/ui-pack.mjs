#!/usr/bin/env node
// Packs a built web UI (a folder of static files) into the one file serve
// embeds (serve/api/ui.c): a first line of JSON, the index, each asset's
// name (its path in the folder, '/' separated), ETag and place in what
// follows; then the assets' bytes, each gzip-compressed (serve sends them
// as they are, Content-Encoding: gzip, its type from the name). The ETag
// is the FNV-1a hash of those bytes, as llama-server's embedded assets
// have it.
// Usage: node ui-pack.mjs DIST_DIR OUT_FILE
import { readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join, relative, sep } from 'node:path';
import { gzipSync } from 'node:zlib';

const [dir, out] = process.argv.slice(2);
if (!dir || !out) {
  console.error('usage: ui-pack.mjs DIST_DIR OUT_FILE');
  process.exit(2);
}

function fnv1a(bytes) {
  let h = 0xcbf29ce484222325n;
  for (const b of bytes) {
    h ^= BigInt(b);
    h = (h * 0x100000001b3n) & 0xffffffffffffffffn;
  }
  return '"0x' + h.toString(16).padStart(16, '0') + '"';
}

function walk(d) {
  return readdirSync(d).flatMap((e) => {
    const p = join(d, e);
    return statSync(p).isDirectory() ? walk(p) : [p];
  });
}

const files = walk(dir).map((p) => relative(dir, p).split(sep).join('/'))
  .sort();
if (!files.includes('index.html')) {
  console.error(`ui-pack: ${dir} has no index.html: not a built UI`);
  process.exit(1);
}
const index = [];
const blobs = [];
let off = 0;
for (const name of files) {
  // mtime 0 in the header: the same files make the same pack.
  const gz = gzipSync(readFileSync(join(dir, name)), { level: 9 });
  index.push({ name, etag: fnv1a(gz), off, len: gz.length });
  blobs.push(gz);
  off += gz.length;
}
writeFileSync(out, Buffer.concat([
  Buffer.from(JSON.stringify({ assets: index }) + '\n'), ...blobs]));
console.log(`ui-pack: ${files.length} assets, ${off} bytes gzip'd, into ${out}`);
