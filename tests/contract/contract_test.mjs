#!/usr/bin/env node
// The contract test: the real daemon's answers against proto/openapi.yaml.
//
// Starts build/evictd (several times, with different flags) on ephemeral
// loopback ports, sends real requests over raw sockets (every vector of
// proto/vectors replayed, then probes of every status and error code each
// route can give), and checks each answer against the operation the
// document gives for its path and method: the status must be listed, the
// headers the response declares must be there and match, the Content-Type
// must be one of the response's media types (or absent where the response
// says `x-content-type-header: absent`), and the body must validate against
// that media type's schema. A request the daemon accepts (2xx) must also be
// valid against the operation's requestBody schema. Schemas are dereferenced
// by @apidevtools/swagger-parser and validated by Ajv (draft-04, the JSON
// Schema dialect OpenAPI 3.0 builds on, with its `nullable`). Requests that
// match no operation are checked against the components the document names
// for them (NotFound, MethodNotAllowed with the path's x-allow).
//
// Fails with the first mismatch (CONTRACT_ALL=1: goes on, and counts every
// mismatching exchange by kind). Prints one line: the exchanges validated.
// Usage: node contract_test.mjs path/to/evictd [path/to/openapi.yaml]
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import SwaggerParser from '@apidevtools/swagger-parser';
import Ajv from 'ajv-draft-04';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const DOC = process.argv[3] || path.join(root, 'proto', 'openapi.yaml');
const VECTORS = path.join(root, 'proto', 'vectors');
const BIN = process.argv[2];
if (!BIN) {
  console.error('usage: contract_test.mjs path/to/evictd [path/to/openapi.yaml]');
  process.exit(2);
}
const started = Date.now();

class Mismatch extends Error {}
function fail(what, ex, res) {
  const lines = [`contract: ${what}`];
  const target = ex && ex.target.length > 120 ? ex.target.slice(0, 100) + `... (${ex.target.length} bytes)` : ex && ex.target;
  if (ex) lines.push(`  request:  ${ex.method} ${target}` +
                     (ex.note ? `  (${ex.note})` : ''));
  if (res) {
    lines.push(`  answer:   ${res.status} ${JSON.stringify(res.headers)}`);
    lines.push(`  body:     ${res.body.toString('utf8').slice(0, 400)}`);
  }
  throw new Mismatch(lines.join('\n'));
}

// ---- the document ---------------------------------------------------------

let api;
try {
  api = await SwaggerParser.validate(DOC); // dereferenced as well
} catch (e) {
  console.error(`contract: ${DOC} is not a valid OpenAPI document: ${e.message}`);
  process.exit(1);
}

const ajv = new Ajv({ allErrors: true, strict: true, strictRequired: false, strictTypes: false });
// OpenAPI 3.0 keywords that are not JSON Schema: annotations for Ajv.
ajv.addVocabulary(['example', 'xml', 'externalDocs', 'discriminator',
                   'deprecated', 'readOnly', 'writeOnly']);
ajv.addFormat('int32', { type: 'number',
  validate: (n) => Number.isInteger(n) && n >= -(2 ** 31) && n < 2 ** 31 });
ajv.addFormat('int64', { type: 'number', validate: (n) => Number.isInteger(n) });
const compiled = new Map();
function validator(schema) {
  let v = compiled.get(schema);
  if (!v) {
    v = ajv.compile(schema);
    compiled.set(schema, v);
  }
  return v;
}
// Every schema compiles (a schema a validator cannot load fails here, used
// or not).
for (const [name, s] of Object.entries(api.components.schemas)) {
  try { validator(s); } catch (e) {
    console.error(`contract: components.schemas.${name} does not compile: ${e.message}`);
    process.exit(1);
  }
}

const METHODS = ['get', 'head', 'put', 'post', 'delete', 'patch', 'options', 'trace'];
const templates = Object.keys(api.paths).map((t) => ({
  template: t,
  item: api.paths[t],
  re: new RegExp('^' + t.replace(/[.*+?^$()|[\]\\]/g, '\\$&')
    .replace(/\\?\{[^}]+\\?\}/g, '([^/]+)') + '$'),
}));
function matchPath(p) {
  return templates.find((t) => t.re.test(p));
}
const comp = api.components.responses;

// ---- a raw HTTP/1.1 client ------------------------------------------------

class Conn {
  constructor(port) {
    this.port = port;
    this.sock = null;
  }
  close() {
    if (this.sock) this.sock.destroy();
    this.sock = null;
  }
  // Sends `bytes` and reads one answer. HEAD answers have no body.
  exchange(bytes, isHead, timeoutMs = 10000) {
    return new Promise((resolve, reject) => {
      const fresh = this.sock === null;
      if (fresh) {
        this.sock = net.connect(this.port, '127.0.0.1');
        this.sock.setNoDelay(true);
      }
      const sock = this.sock;
      let buf = Buffer.alloc(0), done = false, closed = false;
      const finish = (err, res) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        sock.off('data', onData);
        sock.off('close', onClose);
        sock.off('error', onError);
        if (err || closed || (res && res.close)) {
          sock.destroy();
          if (this.sock === sock) this.sock = null;
        }
        err ? reject(err) : resolve(res);
      };
      const timer = setTimeout(() => finish(Object.assign(
        new Error('no answer'), { code: 'TIMEOUT' })), timeoutMs);
      const tryParse = () => {
        for (;;) {
          const end = buf.indexOf('\r\n\r\n');
          if (end < 0) return;
          const head = buf.subarray(0, end).toString('latin1').split('\r\n');
          const m = /^HTTP\/1\.[01] (\d{3}) /.exec(head[0] + ' ');
          if (!m) return finish(new Error(`bad status line: ${head[0]}`));
          const status = Number(m[1]);
          const headers = {};
          for (const line of head.slice(1)) {
            const i = line.indexOf(':');
            const k = line.slice(0, i).trim().toLowerCase();
            const v = line.slice(i + 1).trim();
            if (k in headers) headers[k] += '\n' + v; // a repeated header shows
            else headers[k] = v;
          }
          if (status === 100) { // interim
            buf = buf.subarray(end + 4);
            continue;
          }
          const close = /close/i.test(headers.connection || '');
          let len;
          // A HEAD answer has no body, but one that closes the connection
          // is read to the end: what comes after the headers is checked
          // as a body (libmicrohttpd's 414 page is sent even to HEAD).
          if (isHead && close && !closed) return;
          if (isHead && close) len = buf.length - end - 4;
          else if (isHead || status === 204 || status === 304) len = 0;
          else if ('content-length' in headers) len = Number(headers['content-length']);
          else if (!closed) return; // read to the end of the stream
          else len = buf.length - end - 4;
          if (buf.length < end + 4 + len) return;
          const body = buf.subarray(end + 4, end + 4 + len);
          const extra = buf.length - (end + 4 + len);
          return finish(null, { status, headers, body, close: close || closed, extra });
        }
      };
      const onData = (d) => { buf = Buffer.concat([buf, d]); tryParse(); };
      const onClose = () => {
        closed = true;
        tryParse();
        if (!done) finish(Object.assign(new Error('connection closed without an answer'),
                                        { code: 'CLOSED', fresh }));
      };
      const onError = (e) => { if (!done && e.code !== 'EPIPE' && e.code !== 'ECONNRESET') finish(e); };
      sock.on('data', onData);
      sock.on('close', onClose);
      sock.on('error', onError);
      sock.write(bytes, () => {});
    });
  }
}

function buildRequest(ex) {
  const lines = [`${ex.method} ${ex.target} HTTP/1.1`, 'Host: evictd'];
  let body = ex.body;
  if (body !== undefined && typeof body !== 'string' && !Buffer.isBuffer(body))
    body = JSON.stringify(body);
  const h = { ...(ex.headers || {}) };
  if (body !== undefined && !ex.chunked && !('Content-Length' in h))
    h['Content-Length'] = String(Buffer.byteLength(body));
  if (ex.chunked) h['Transfer-Encoding'] = 'chunked';
  if (body !== undefined && !('Content-Type' in h) && !ex.noContentType)
    h['Content-Type'] = 'application/json';
  for (const [k, v] of Object.entries(h)) lines.push(`${k}: ${v}`);
  let bytes = Buffer.from(lines.join('\r\n') + '\r\n\r\n', 'latin1');
  if (ex.chunked) {
    const parts = [];
    const b = Buffer.from(body);
    for (let i = 0; i < b.length; i += 16384) {
      const c = b.subarray(i, i + 16384);
      parts.push(Buffer.from(c.length.toString(16) + '\r\n'), c, Buffer.from('\r\n'));
    }
    parts.push(Buffer.from('0\r\n\r\n'));
    bytes = Buffer.concat([bytes, ...parts]);
  } else if (body !== undefined && !ex.omitBody) {
    bytes = Buffer.concat([bytes, Buffer.from(body)]);
  }
  return { bytes, text: typeof body === 'string' ? body : undefined };
}

// ---- checking one exchange against the document ---------------------------

let validated = 0;
const KEEP_GOING = process.env.CONTRACT_ALL === '1';
const mismatches = [];
const seen = new Map(); // "METHOD template status" -> count
const seenCodes = new Set();

function mediaKey(ct) {
  return ct.toLowerCase().split(';').map((s) => s.trim()).join('; ');
}

function checkBody(where, response, res, ex, isHead, getResponse) {
  const content = response.content || {};
  const types = Object.keys(content);
  const ct = res.headers['content-type'];
  const absent = response['x-content-type-header'] === 'absent';
  // A HEAD answer whose response object has content does have a body (the
  // document says so: libmicrohttpd's 414 page); the others have none.
  if (isHead && !response.content) {
    if (res.body.length !== 0) fail(`${where}: a HEAD answer has a body`, ex, res);
    // "HEAD ... answers the same status and headers without a body": the
    // Content-Type is the one GET's answer of this status has.
    const g = getResponse || response;
    const gtypes = Object.keys(g.content || {});
    if (g['x-content-type-header'] === 'absent' || gtypes.length === 0) {
      if (ct !== undefined) fail(`${where}: Content-Type ${ct}, the document says none`, ex, res);
    } else if (ct === undefined || !gtypes.map(mediaKey).includes(mediaKey(ct))) {
      fail(`${where}: Content-Type ${ct} is not one of GET's ${gtypes.join(', ')}`, ex, res);
    }
    return;
  }
  if (types.length === 0) {
    if (res.body.length !== 0) fail(`${where}: a body where the document has none`, ex, res);
    if (ct !== undefined) fail(`${where}: Content-Type ${ct} on an answer without content`, ex, res);
    return;
  }
  let media;
  if (ct === undefined) {
    if (!absent || types.length !== 1)
      fail(`${where}: no Content-Type; the document lists ${types.join(', ')}`, ex, res);
    media = types[0];
  } else {
    if (absent) fail(`${where}: Content-Type ${ct}; the document says it is absent`, ex, res);
    media = types.find((t) => mediaKey(t) === mediaKey(ct));
    if (!media) fail(`${where}: Content-Type ${ct} is not one of ${types.join(', ')}`, ex, res);
  }
  const schema = content[media].schema;
  let value = res.body.toString('utf8');
  if (/[/+]json$/.test(media.split(';')[0].trim())) {
    try { value = JSON.parse(value); } catch (e) {
      fail(`${where}: the body is not JSON (${e.message})`, ex, res);
    }
  }
  if (schema) {
    const v = validator(schema);
    if (!v(value)) fail(`${where}: the body does not match the schema: ` +
                         ajv.errorsText(v.errors, { dataVar: 'body' }), ex, res);
  }
  if (value && value.error && value.error.code) seenCodes.add(`${res.status} ${value.error.code}`);
  if (value && Array.isArray(value.results))
    for (const r of value.results) if (r.error) seenCodes.add(`item ${r.error.status} ${r.error.code}`);
  return value;
}

function checkHeaders(where, response, res, ex) {
  for (const [name, h] of Object.entries(response.headers || {})) {
    const v = res.headers[name.toLowerCase()];
    if (v === undefined) {
      if (h.required) fail(`${where}: header ${name} is missing`, ex, res);
      continue;
    }
    if (h.schema) {
      const val = validator(h.schema);
      if (!val(v)) fail(`${where}: header ${name}: ${ajv.errorsText(val.errors)}`, ex, res);
    }
  }
}

// The operation (or component) the answer must match, checked. Returns the
// body as parsed.
function check(ex, res) {
  const method = ex.method.toLowerCase();
  const isHead = method === 'head';
  const p = ex.target.split('?')[0];
  const t = matchPath(p);
  const op = t && t.item[method];
  let where, response, getResponse;
  const status = String(res.status);
  // What answers a request that no operation takes: the components the
  // document's description names.
  const transport = { 413: comp.BodyTooLarge, 414: comp.UriTooLong,
                      431: comp.HeadersTooLarge, 503: comp.OutOfMemory };
  if (!op) {
    const table = { ...transport, 401: comp.Unauthorized };
    if (!t) {
      table[404] = comp.NotFound;
      where = `${ex.method} ${p} (no path)`;
    } else {
      table[405] = comp.MethodNotAllowed;
      where = `${ex.method} ${t.template} (no operation)`;
    }
    response = table[status];
    if (!response) fail(`${where}: status ${status} is not one the document allows here`, ex, res);
    // HEAD: the same answer without the body, but libmicrohttpd's 414
    // page, which it sends to HEAD too (the HEAD operations list it so).
    if (isHead && status !== '414') {
      getResponse = response;
      response = { headers: response.headers };
    }
    if (res.status === 405) {
      const allow = res.headers.allow;
      if (allow !== t.item['x-allow'])
        fail(`${where}: Allow "${allow}" is not the path's x-allow "${t.item['x-allow']}"`, ex, res);
    }
  } else {
    where = `${ex.method} ${t.template} -> ${status}`;
    response = op.responses[status] || op.responses.default;
    if (!response) fail(`${where}: the operation ${op.operationId} does not list ${status}`, ex, res);
    if (isHead) {
      const g = t.item.get;
      getResponse = g && (g.responses[status] || g.responses.default);
      if (!getResponse) fail(`${where}: GET does not list ${status} for HEAD to mirror`, ex, res);
    }
  }
  checkHeaders(where, response, res, ex);
  const value = checkBody(where, response, res, ex, isHead, getResponse);
  // What the daemon accepted, the document must accept: the request body
  // of a 2xx answer (for a batch, the items that were applied) must be
  // valid against the operation's requestBody schema.
  const rb = op && op.requestBody;
  if (rb && res.status >= 200 && res.status < 300 && ex.body !== undefined &&
      ex.body !== '' && !ex.chunked) {
    let sent;
    try { sent = typeof ex.body === 'string' ? JSON.parse(ex.body) : ex.body; } catch (e) {
      fail(`${where}: the daemon accepted a body that is not JSON`, ex, res);
    }
    if (op.operationId === 'batchStep' && value && Array.isArray(value.results))
      sent = { ...sent, steps: sent.steps.filter((_, i) => !value.results[i].error) };
    const v = validator(rb.content['application/json'].schema);
    if (!v(sent)) fail(`${where}: the daemon accepted a request body the document refuses: ` +
                       ajv.errorsText(v.errors, { dataVar: 'request' }), ex, res);
  }
  if (res.extra) fail(`${where}: ${res.extra} bytes after the answer`, ex, res);
  validated++;
  const key = `${ex.method} ${op ? t.template : t ? t.template + ' (405)' : '(no path)'} ${status}`;
  seen.set(key, (seen.get(key) || 0) + 1);
  return value;
}

// ---- daemons --------------------------------------------------------------

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'evictd-contract-'));
const daemons = [];

async function startDaemon(name, args, { wrap } = {}) {
  const argv = ['--listen', '127.0.0.1:0', ...args];
  const child = wrap
    ? spawn('/bin/sh', ['-c', wrap + '; exec "$0" "$@"', BIN, ...argv], { stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn(BIN, argv, { stdio: ['ignore', 'pipe', 'pipe'] });
  const d = { name, child, log: '', conn: null, port: 0 };
  daemons.push(d);
  child.stdout.on('data', (b) => { d.log += b; });
  child.stderr.on('data', (b) => { d.log += b; });
  const deadline = Date.now() + 10000;
  while (Date.now() < deadline) {
    const m = /listening on 127\.0\.0\.1:(\d+)/.exec(d.log);
    if (m) { d.port = Number(m[1]); break; }
    if (child.exitCode !== null) break;
    await new Promise((r) => setTimeout(r, 20));
  }
  if (!d.port) fail(`daemon ${name} (${argv.join(' ')}) did not start:\n${d.log}`);
  d.conn = new Conn(d.port);
  return d;
}

function stopAll() {
  for (const d of daemons) {
    if (d.conn) d.conn.close();
    if (d.child.exitCode === null) d.child.kill('SIGKILL');
  }
  fs.rmSync(tmp, { recursive: true, force: true });
}

// One exchange: sends, checks against the document, then against what the
// probe expects (`expect`: a status, or [status, code]). Returns the body.
async function x(d, ex) {
  ex.target = ex.target || ex.path;
  const { bytes } = buildRequest(ex);
  let res;
  try {
    res = await d.conn.exchange(bytes, ex.method === 'HEAD', ex.timeoutMs);
  } catch (e) {
    if (e.code === 'CLOSED' && !e.fresh && !ex.retried) { // an idle keep-alive closed
      ex.retried = true;
      return x(d, ex);
    }
    fail(`${d.name}: ${e.message}`, ex);
  }
  if (ex.newConn) d.conn.close();
  let value;
  try {
    value = check(ex, res);
  } catch (e) {
    // CONTRACT_ALL=1: count every mismatching exchange instead of stopping
    // at the first (to measure a document against the daemon).
    if (!(e instanceof Mismatch) || !KEEP_GOING) throw e;
    mismatches.push(e.message.split('\n')[0]);
    try { value = JSON.parse(res.body.toString('utf8')); } catch { value = undefined; }
  }
  if (ex.expect !== undefined) {
    const [st, code] = Array.isArray(ex.expect) ? ex.expect : [ex.expect];
    if (res.status !== st) fail(`${d.name}: expected ${st}, got ${res.status}`, ex, res);
    if (code && ex.method !== 'HEAD' && !(value && value.error && value.error.code === code))
      fail(`${d.name}: expected ${code}`, ex, res);
  }
  return { res, value };
}
const req = (d, method, target, body, expect, more = {}) =>
  x(d, { method, target, body, expect, ...more });

// ---- the vectors ----------------------------------------------------------

const CODE_STATUS = { invalid_position: 400, too_many_positions: 400, invalid_budget: 400,
                      stale_position: 409, tentative_pending: 409, invalid_state: 400,
                      session_exists: 409, diverged: 409 };
const REQUEST_KEYS = ['session', 'step', 'tentative', 'commit', 'evict', 'truncate', 'fork', 'check', 'error',
                      'adopt', 'expect_newest'];

function deepEqual(a, b) { return JSON.stringify(a) === JSON.stringify(b); }

// proto/vectors/*.json, then rehome/*.json (adopt and expect_newest).
async function replayVectors(d) {
  const list = (dir, pre) => fs.readdirSync(dir).filter((f) => f.endsWith('.json')).sort()
    .map((f) => pre + f);
  const files = [...list(VECTORS, ''), ...list(path.join(VECTORS, 'rehome'), 'rehome/')];
  for (const f of files) {
    const v = JSON.parse(fs.readFileSync(path.join(VECTORS, f), 'utf8'));
    const main = `v.${v.name}`;
    const idOf = (name) => (name ? `${main}.${name}` : main);
    const last = new Map(); // session id -> its last applied request
    const made = new Set([main]); // the sessions the vector has made
    await req(d, 'PUT', `/session/${main}`, { budget: v.budget, sinks: v.sinks,
      lookahead: v.lookahead ?? 1, page_size: v.page_size ?? 0 }, 201);
    for (const [i, op] of v.ops.entries()) {
      const id = idOf(op.session);
      let target, body, ok = 200;
      if ('step' in op) {
        target = `/session/${id}/step`;
        body = {};
        if (op.step.length === 1) body.pos = op.step[0];
        else if (op.step.length > 1) body.positions = op.step;
        if (op.tentative) body.tentative = true;
        if ('commit' in op) body.commit = op.commit;
      } else if ('commit' in op) {
        target = `/session/${id}/commit`;
        body = { newest: op.commit };
      } else if ('truncate' in op) {
        target = `/session/${id}/truncate`;
        body = { from: op.truncate };
      } else if ('evict' in op) {
        target = `/session/${id}/evict`;
        body = { budget: op.evict };
      } else if ('fork' in op) {
        target = `/session/${id}/fork`;
        body = { into: idOf(op.fork) };
        ok = 201;
      } else if ('adopt' in op) {
        // 201 for a name the vector has not made, else 200: a resend
        // (the view unchanged) or a replacement, which drops the replay
        // record; the answer is the view, compared without its id.
        const before = made.has(id)
          ? (await req(d, 'GET', `/session/${id}`, undefined, 200, { note: `${f} op ${i}` })).value : null;
        const expect = op.error ? [CODE_STATUS[op.error], op.error] : (before ? 200 : 201);
        const { value } = await req(d, 'POST', `/session/${id}/adopt`, op.adopt, expect,
                                    { note: `${f} op ${i}` });
        if (op.error) continue;
        const { id: got, ...view } = value;
        const want = Object.fromEntries(Object.entries(op).filter(([k]) => !REQUEST_KEYS.includes(k)));
        if (got !== id || !deepEqual(view, want))
          fail(`${f} op ${i}: adopt answered ${JSON.stringify(value)}, the vector says ${JSON.stringify(want)}`);
        if (before && !deepEqual(before, value)) last.delete(id);
        made.add(id);
        continue;
      } else if ('check' in op) {
        const { value } = await req(d, 'GET', `/session/${id}`, undefined, 200,
                                    { note: `${f} op ${i}` });
        for (const [k, want] of Object.entries(op.check)) {
          const got = value[k] ?? ((k === 'tentative' || k === 'pages') ? [] : undefined);
          if (!deepEqual(got, want)) fail(`${f} op ${i}: the view's ${k} is ${JSON.stringify(got)}, the vector says ${JSON.stringify(want)}`);
        }
        continue;
      } else {
        fail(`${f} op ${i}: unknown op ${JSON.stringify(op)}`);
      }
      if ('expect_newest' in op) body.expect_newest = op.expect_newest;
      const expect = op.error ? [CODE_STATUS[op.error], op.error] : ok;
      const { value } = await req(d, 'POST', target, body, expect, { note: `${f} op ${i}` });
      if ('fork' in op && !op.error) made.add(idOf(op.fork));
      if (!op.error && !('fork' in op)) {
        const want = Object.fromEntries(Object.entries(op).filter(([k]) => !REQUEST_KEYS.includes(k)));
        if (!deepEqual(value, want)) fail(`${f} op ${i}: answer ${JSON.stringify(value)}, the vector says ${JSON.stringify(want)}`);
        if (!('evict' in op)) last.set(id, { target, body, value });
      }
    }
    // Each session's last applied request, sent again: a replayed answer.
    for (const [, l] of last) {
      const { value } = await req(d, 'POST', l.target, l.body, 200, { note: `${f}: a retry` });
      if (!deepEqual(value, { ...l.value, replayed: true }))
        fail(`${f}: the retry of ${l.target} answered ${JSON.stringify(value)}`);
    }
    await req(d, 'DELETE', `/session/${main}`, undefined, 204);
  }
  return files.length;
}

// ---- probes ---------------------------------------------------------------

const BIG_HEADER = { 'X-Padding': 'p'.repeat(20000) };
const LONG_TARGET = (p) => p + '?' + 'q'.repeat(20000);
// One request of each method a path takes, with a valid body where one goes.
function routeRequests(id) {
  return [
    ['GET', `/session/${id}`], ['HEAD', `/session/${id}`],
    ['PUT', `/session/${id}`, {}], ['DELETE', `/session/${id}`],
    ['POST', `/session/${id}/step`, { pos: 1 }], ['POST', `/session/${id}/commit`, { newest: 0 }],
    ['POST', `/session/${id}/truncate`, { from: 5 }], ['POST', `/session/${id}/fork`, { into: `${id}.f` }],
    ['POST', `/session/${id}/evict`, {}], ['POST', '/step', { steps: [] }],
    ['POST', `/session/${id}/adopt`, { kept: [0, 3], newest: 3 }],
    ['GET', '/healthz'], ['HEAD', '/healthz'], ['GET', '/metrics'], ['HEAD', '/metrics'],
  ];
}

async function transportProbes(d, maxBody) {
  // Every route (and an unknown path): 413 declared (the body is not
  // sent: the daemon answers before reading it), 413 chunked, 414, 431.
  const routes = [...routeRequests('tp'), ['GET', '/nope'], ['POST', '/session/tp/nope']];
  for (const [method, target] of routes) {
    await req(d, method, target, 'x'.repeat(16), [413, 'body_too_large'],
              { headers: { 'Content-Length': String(maxBody + 1) }, omitBody: true, newConn: true,
                note: 'Content-Length over --max-body' });
    await req(d, method, target, ' '.repeat(maxBody + 100), [413, 'body_too_large'],
              { chunked: true, newConn: true, note: 'chunked body over --max-body' });
    await req(d, method, target, undefined, 431, { headers: BIG_HEADER, newConn: true, note: '20 KB header' });
    await req(d, method, LONG_TARGET(target), undefined, 414, { newConn: true, note: '20 KB request line' });
  }
}

// Malformed HTTP: libmicrohttpd's own 400 and 505, which no operation
// lists; the document names them HttpBadRequest and HttpVersionNotSupported.
async function framingProbes(d) {
  const cases = [
    ['GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n', 505, 'HTTP/2.0'],
    ['GET /healthz HTTP/0.9\r\nHost: x\r\n\r\n', 505, 'HTTP/0.9'],
    ['GET /healthz HTTX/1.1\r\nHost: x\r\n\r\n', 400, 'a bad version string'],
    ['POST /step HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n',
     400, 'bad chunked encoding'],
  ];
  for (const [text, status, note] of cases) {
    const ex = { method: text.split(' ')[0], target: text.split(' ')[1], note };
    const conn = new Conn(d.port);
    let res;
    try { res = await conn.exchange(Buffer.from(text, 'latin1'), false, 5000); } catch (e) {
      fail(`${e.message}`, ex);
    } finally { conn.close(); }
    const response = status === 505 ? comp.HttpVersionNotSupported : comp.HttpBadRequest;
    if (res.status !== status) fail(`expected ${status} (${note})`, ex, res);
    checkBody(`${note} -> ${status}`, response, res, ex, false);
    validated++;
  }
}

async function probes(d) {
  const s = 'p.main';
  // PUT
  await req(d, 'PUT', `/session/${s}`, { budget: 8, sinks: 2, lookahead: 4, page_size: 4 }, 201);
  await req(d, 'PUT', `/session/${s}`, { budget: 8, sinks: 2, lookahead: 4, page_size: 4 }, 200);
  await req(d, 'PUT', `/session/${s}`, { budget: 9, sinks: 2, lookahead: 4, page_size: 4 }, [409, 'session_exists']);
  await req(d, 'PUT', '/session/p.empty', undefined, 201, { note: 'no body' });
  await req(d, 'PUT', '/session/p.form', '{"budget":4}', 201,
            { headers: { 'Content-Type': 'application/x-www-form-urlencoded' }, note: 'as curl -d sends it' });
  await req(d, 'PUT', '/session/p.notype', '{"budget":4}', 201, { noContentType: true, note: 'no Content-Type' });
  await req(d, 'PUT', '/session/p.text', '{}', 201,
            { headers: { 'Content-Type': 'text/plain', 'Content-Encoding': 'gzip' } });
  for (const [body, code] of [
    ['nope', 'invalid_json'], ['[]', 'invalid_json'], ['{"budget":1,"budget":2}', 'invalid_json'],
    ['['.repeat(40) + ']'.repeat(40), 'invalid_json'], ['{"a":' + '['.repeat(33) + ']'.repeat(33) + '}', 'invalid_json'],
    [{ x: 1 }, 'invalid_field'], [{ budget: 'a' }, 'invalid_field'], [{ budget: 1.5 }, 'invalid_field'],
    [{ budget: 0 }, 'invalid_budget'], [{ budget: 1048577 }, 'invalid_budget'],
    [{ budget: 4, sinks: 4 }, 'invalid_sinks'], [{ sinks: -1 }, 'invalid_sinks'],
    [{ lookahead: 0 }, 'invalid_lookahead'], [{ page_size: 65537 }, 'invalid_page_size'],
    ['{"budget":123456789012345678901234567890}', 'invalid_budget'],
  ]) await req(d, 'PUT', '/session/p.bad', body, [400, code]);
  for (const id of ['a%2Fb', 'x'.repeat(129), 'sp ace'.replace(' ', '%20'), 'a*b'])
    await req(d, 'PUT', `/session/${id}`, {}, [400, 'invalid_session_id']);
  await req(d, 'PUT', '/session/' + 'x'.repeat(128), {}, 201, { note: 'a 128-byte id' });
  // GET, HEAD, DELETE
  await req(d, 'GET', `/session/${s}`, undefined, 200);
  await req(d, 'GET', `/session/${s}?verbose=1`, undefined, 200, { note: 'a query string' });
  await req(d, 'GET', `/session/${s}`, '{"ignored":true}', 200, { note: 'a body within --max-body' });
  await req(d, 'HEAD', `/session/${s}`, undefined, 200);
  await req(d, 'GET', '/session/p.none', undefined, [404, 'unknown_session']);
  await req(d, 'HEAD', '/session/p.none', undefined, 404);
  await req(d, 'GET', '/session/a%2Fb', undefined, [400, 'invalid_session_id']);
  await req(d, 'HEAD', '/session/a%2Fb', undefined, 400);
  await req(d, 'DELETE', '/session/p.none', undefined, [404, 'unknown_session']);
  await req(d, 'DELETE', '/session/a%2Fb', undefined, [400, 'invalid_session_id']);
  await req(d, 'DELETE', '/session/p.text', '{}', 204, { note: 'a body, ignored' });
  // step
  const st = `/session/${s}/step`;
  await req(d, 'POST', st, { pos: 1 }, 200);
  await req(d, 'POST', st, { pos: 1 }, 200, { note: 'a retry: replayed' });
  await req(d, 'POST', st, { positions: [2, 3, 4, 5, 6, 7, 8, 9], attention: null }, 200);
  await req(d, 'POST', st, { positions: [2, 3, 4, 5, 6, 7, 8, 9], attention: [0.5, 0.25] }, 200, { note: 'replayed; attention is not compared' });
  await req(d, 'POST', st, { pos: 5 }, [409, 'stale_position']);
  await req(d, 'POST', st, { positions: [10, 11, 12], tentative: true, attention: [] }, 200);
  await req(d, 'POST', st, { pos: 13 }, [409, 'tentative_pending']);
  await req(d, 'POST', st, { positions: [13, 14], tentative: true }, [400, 'too_many_positions']);
  await req(d, 'POST', st, { commit: 3 }, [400, 'invalid_position']);
  await req(d, 'POST', st, { commit: 11, positions: [12, 13], tentative: true }, 200);
  await req(d, 'POST', st, { commit: 13 }, 200, { note: 'commit only' });
  await req(d, 'POST', st, '{"pos":14}', 200, { headers: { 'Content-Type': 'application/x-www-form-urlencoded' } });
  await req(d, 'POST', st, '{"pos":15}', 200, { noContentType: true });
  for (const [body, code] of [
    ['', 'invalid_json'], ['{', 'invalid_json'], ['"pos"', 'invalid_json'], ['{"pos":1,"pos":2}', 'invalid_json'],
    [{}, 'invalid_field'], [{ pos: 20, positions: [21] }, 'invalid_field'], [{ pos: 20, x: 1 }, 'invalid_field'],
    [{ positions: 20 }, 'invalid_field'], [{ pos: 20, tentative: 'yes' }, 'invalid_field'],
    [{ pos: 20, budget: 'x' }, 'invalid_field'],
    [{ pos: -1 }, 'invalid_position'], [{ pos: 4294967296 }, 'invalid_position'], [{ pos: 'a' }, 'invalid_position'],
    [{ positions: [] }, 'invalid_position'], [{ positions: [22, 21] }, 'invalid_position'],
    ['{"pos":123456789012345678901234567890}', 'invalid_position'], [{ commit: -1 }, 'invalid_position'],
    [{ pos: 20.5 }, 'invalid_position'],
    [{ positions: Array.from({ length: 1001 }, (_, i) => 100 + i) }, 'too_many_positions'],
  ]) await req(d, 'POST', st, body, [400, code]);
  for (const [body, code] of [
    [{ pos: 1, budget: 0 }, 'invalid_budget'], [{ pos: 1, budget: 4, sinks: 4 }, 'invalid_sinks'],
    [{ pos: 1, lookahead: 65537 }, 'invalid_lookahead'], [{ pos: 1, page_size: -1 }, 'invalid_page_size'],
  ]) await req(d, 'POST', '/session/p.new/step', body, [400, code]);
  await req(d, 'POST', '/session/p.new/step', { pos: 0 }, [409, 'stale_position']);
  await req(d, 'POST', '/session/p.new/step', { pos: 1, budget: 4, sinks: 1, lookahead: 2, page_size: 2 }, 200, { note: 'creates' });
  await req(d, 'POST', '/session/a%2Fb/step', { pos: 1 }, [400, 'invalid_session_id']);
  // commit
  const cm = `/session/${s}/commit`;
  await req(d, 'POST', st, { positions: [16, 17], tentative: true }, 200);
  await req(d, 'POST', cm, { newest: 16 }, 200);
  await req(d, 'POST', cm, { newest: 16 }, 200, { note: 'replayed' });
  await req(d, 'POST', cm, { newest: 16 }, 200, { note: 'replayed again' });
  for (const [body, code] of [
    ['', 'invalid_json'], ['[1]', 'invalid_json'], [{}, 'invalid_field'], [{ newest: 20, x: 1 }, 'invalid_field'],
    [{ newest: 3 }, 'invalid_position'], [{ newest: -1 }, 'invalid_position'], [{ newest: 'a' }, 'invalid_position'],
  ]) await req(d, 'POST', cm, body, [400, code]);
  await req(d, 'POST', '/session/p.none/commit', { newest: 1 }, [404, 'unknown_session']);
  await req(d, 'POST', '/session/a%2Fb/commit', { newest: 1 }, [400, 'invalid_session_id']);
  // truncate
  const tr = `/session/${s}/truncate`;
  await req(d, 'POST', tr, { from: 15 }, 200);
  await req(d, 'POST', tr, { from: 1000 }, 200, { note: 'above the newest' });
  for (const [body, code] of [
    ['', 'invalid_json'], ['null', 'invalid_json'], [{}, 'invalid_field'], [{ from: 3, to: 4 }, 'invalid_field'],
    [{ from: 0 }, 'invalid_position'], [{ from: 4294967296 }, 'invalid_position'], [{ from: true }, 'invalid_position'],
  ]) await req(d, 'POST', tr, body, [400, code]);
  await req(d, 'POST', '/session/p.none/truncate', { from: 1 }, [404, 'unknown_session']);
  // fork
  const fk = `/session/${s}/fork`;
  await req(d, 'POST', fk, { into: 'p.child' }, 201);
  await req(d, 'POST', fk, { into: 'p.child' }, 200, { note: 'resent' });
  await req(d, 'POST', fk, { into: s }, [400, 'invalid_field'], { note: 'into itself' });
  await req(d, 'POST', fk, { into: 'p.new' }, [409, 'session_exists']);
  for (const [body, code] of [
    ['', 'invalid_json'], ['1', 'invalid_json'], [{}, 'invalid_field'], [{ into: 5 }, 'invalid_field'],
    [{ into: 'c', x: 1 }, 'invalid_field'], [{ into: 'a/b' }, 'invalid_session_id'], [{ into: '' }, 'invalid_session_id'],
  ]) await req(d, 'POST', fk, body, [400, code]);
  await req(d, 'POST', '/session/p.none/fork', { into: 'p.c2' }, [404, 'unknown_session']);
  await req(d, 'POST', '/session/a%2Fb/fork', { into: 'p.c2' }, [400, 'invalid_session_id']);
  // evict
  const ev = `/session/${s}/evict`;
  await req(d, 'POST', ev, undefined, 200, { note: 'no body' });
  await req(d, 'POST', ev, { budget: 4 }, 200);
  await req(d, 'POST', ev, { budget: 100 }, 200, { note: 'evicts nothing' });
  for (const [body, code] of [
    ['x', 'invalid_json'], [{ budget: 'a' }, 'invalid_field'], [{ b: 1 }, 'invalid_field'],
    [{ budget: 0 }, 'invalid_budget'], [{ budget: 2 }, 'invalid_budget'], [{ budget: 4294967295 }, 'invalid_budget'],
  ]) await req(d, 'POST', ev, body, [400, code]);
  await req(d, 'POST', '/session/p.none/evict', {}, [404, 'unknown_session']);
  await req(d, 'POST', '/session/a%2Fb/evict', {}, [400, 'invalid_session_id']);
  await req(d, 'POST', st, { positions: [30], tentative: true }, 200);
  await req(d, 'POST', ev, { budget: 3 }, [409, 'tentative_pending']);
  // batch
  const { value: b } = await req(d, 'POST', '/step', { steps: [
    { session: s, commit: 30 }, { session: s, pos: 31 }, { session: s, pos: 31 }, { session: s, pos: 2 },
    { session: 'p.b1', pos: 1, budget: 3 }, { session: 'p.b1', positions: [2, 3, 4] },
    { session: 'p.b1', positions: [5], tentative: true }, { session: 'p.b1', pos: 6 },
    { session: 'p.b1', positions: [6, 7], tentative: true, commit: 5 },
    5, { pos: 1 }, { session: 'a/b', pos: 1 }, { session: 'p.b2', pos: -1 }, { session: 'p.b2' },
    { session: 'p.b2', pos: 1, x: 1 }, { session: 'p.b2', pos: 1, budget: 0 }, { session: 'p.b2', pos: 0 },
  ] }, 200);
  const codes = b.results.map((r) => (r.error ? r.error.code : r.replayed ? 'replayed' : 'ok')).join(',');
  const want = 'ok,ok,replayed,stale_position,ok,ok,ok,tentative_pending,too_many_positions,' +
               'invalid_field,invalid_field,invalid_session_id,invalid_position,invalid_field,' +
               'invalid_field,invalid_budget,stale_position';
  if (codes !== want) fail(`batch results ${codes}, expected ${want}`);
  await req(d, 'POST', '/step', { steps: [] }, 200);
  await req(d, 'POST', '/step', '{"steps":[{"session":"p.b3","pos":1}]}', 200,
            { headers: { 'Content-Type': 'application/x-www-form-urlencoded' } });
  for (const [body, code] of [
    ['', 'invalid_json'], ['[]', 'invalid_json'], ['{"steps":[],"steps":[]}', 'invalid_json'],
    [{}, 'invalid_field'], [{ steps: {} }, 'invalid_field'], [{ steps: [], x: 1 }, 'invalid_field'],
    [{ steps: Array.from({ length: 65 }, () => ({ session: 'p.b4', pos: 1 })) }, 'too_many_steps'],
  ]) await req(d, 'POST', '/step', body, [400, code]);
  // healthz, metrics
  await req(d, 'GET', '/healthz', undefined, 200);
  await req(d, 'HEAD', '/healthz', undefined, 200);
  await req(d, 'GET', '/healthz?probe=1', undefined, 200);
  await req(d, 'GET', '/metrics', undefined, 200);
  await req(d, 'HEAD', '/metrics', undefined, 200);
  await req(d, 'GET', '/healthz', '{}', 200, { note: 'a body within --max-body' });
  // 404: no path
  for (const [m, p] of [['GET', '/'], ['GET', '/nope'], ['POST', '/nope'], ['HEAD', '/nope'], ['DELETE', '/step/x'],
                        ['PUT', '/session/'], ['GET', '/session/'], ['POST', '/session//step'], ['GET', '/session//'],
                        ['GET', `/session/${s}/`], ['POST', `/session/${s}/nope`], ['GET', '/session'],
                        ['GET', '/healthz/'], ['GET', '/metrics/x'], ['PATCH', '/x'],
                        ['GET', 'http://evictd/healthz']])
    await req(d, m, p, undefined, m === 'HEAD' ? 404 : [404, 'not_found']);
  // 405: a method the path does not take
  for (const [m, p] of [['POST', `/session/${s}`], ['PATCH', `/session/${s}`], ['OPTIONS', `/session/${s}`],
                        ['GET', `/session/${s}/step`], ['PUT', `/session/${s}/step`], ['HEAD', `/session/${s}/commit`],
                        ['DELETE', `/session/${s}/truncate`], ['GET', `/session/${s}/fork`], ['PUT', `/session/${s}/evict`],
                        ['GET', `/session/${s}/adopt`], ['DELETE', `/session/${s}/adopt`],
                        ['GET', '/step'], ['DELETE', '/step'], ['POST', '/healthz'], ['PUT', '/healthz'],
                        ['DELETE', '/metrics'], ['POST', '/metrics'], ['TRACE', '/metrics'], ['POST', '/session/a%2Fb']])
    await req(d, m, p, undefined, m === 'HEAD' ? 405 : [405, 'method_not_allowed']);
  await req(d, 'DELETE', `/session/${s}`, undefined, 204);
  await adoptProbes(d);
}

// Adopt (every answer and refusal) and expect_newest on every change.
async function adoptProbes(d) {
  const ad = '/session/a.x/adopt';
  const a = { budget: 4, sinks: 1, kept: [0, 5, 9, 10], newest: 12 };
  await req(d, 'POST', ad, a, 201);
  await req(d, 'POST', ad, a, 200, { note: 'resent' });
  await req(d, 'POST', ad, { ...a, slots: [0, 1, 2, 3], replace: false }, 200, { note: 'resent with its slots' });
  await req(d, 'POST', ad, { ...a, newest: 13 }, [409, 'session_exists']);
  await req(d, 'POST', ad, { budget: 6, page_size: 4, kept: [2, 3, 4, 20], newest: 20, slots: [2, 3, 4, 5],
                             pages: [0, 1, 5], replace: true }, 200, { note: 'replaced' });
  for (const [body, code] of [
    [{ kept: [0, 5, 5], newest: 5 }, 'invalid_state'], [{ kept: [0, 5, 3], newest: 5 }, 'invalid_state'],
    [{ budget: 2, kept: [0, 1, 2], newest: 2 }, 'invalid_state'], [{ sinks: 1, kept: [1, 2], newest: 2 }, 'invalid_state'],
    [{ kept: [0, 5], newest: 4 }, 'invalid_state'], [{ kept: [0, 5], newest: 4294967295 }, 'invalid_state'],
    [{ kept: [0, 5], newest: 5, slots: [0] }, 'invalid_state'], [{ kept: [0, 1, 2], newest: 2, slots: [3, 4, 5] }, 'invalid_state'],
    [{ page_size: 4, kept: [0, 5], newest: 5, pages: [0, 2] }, 'invalid_state'],
    [{ kept: [0, 5], newest: 5, pages: [0, 1] }, 'invalid_state'],
    [{ newest: 5 }, 'invalid_field'], [{ kept: [0] }, 'invalid_field'], [{ kept: '0', newest: 0 }, 'invalid_field'],
    [{ kept: [0], newest: 0, replace: 1 }, 'invalid_field'], [{ kept: [0], newest: 0, x: 1 }, 'invalid_field'],
    [{ kept: [0, 4294967296], newest: 5 }, 'invalid_position'], [{ kept: [0], newest: -1 }, 'invalid_position'],
    [{ kept: [0], newest: 0, budget: 0 }, 'invalid_budget'], [{ kept: [0], newest: 0, budget: 4, sinks: 4 }, 'invalid_sinks'],
    [{ kept: [0], newest: 0, lookahead: 0 }, 'invalid_lookahead'], [{ kept: [0], newest: 0, page_size: 65537 }, 'invalid_page_size'],
    ['', 'invalid_json'], ['[1]', 'invalid_json'],
  ]) await req(d, 'POST', '/session/a.bad/adopt', body, [400, code]);
  await req(d, 'POST', '/session/a%2Fb/adopt', { kept: [0], newest: 0 }, [400, 'invalid_session_id']);
  // expect_newest: matched, diverged on every change, missing sessions.
  const e = '/session/a.e';
  await req(d, 'PUT', e, { budget: 4 }, 201);
  await req(d, 'POST', `${e}/step`, { positions: [1, 2, 9], expect_newest: 0 }, 200);
  await req(d, 'POST', `${e}/step`, { positions: [1, 2, 9], expect_newest: 0 }, 200, { note: 'replayed' });
  await req(d, 'POST', `${e}/step`, { pos: 10, expect_newest: 5 }, [409, 'diverged']);
  await req(d, 'POST', `${e}/commit`, { newest: 9, expect_newest: 5 }, [409, 'diverged']);
  await req(d, 'POST', `${e}/truncate`, { from: 3, expect_newest: 5 }, [409, 'diverged']);
  await req(d, 'POST', `${e}/evict`, { budget: 2, expect_newest: 5 }, [409, 'diverged']);
  await req(d, 'POST', `${e}/fork`, { into: 'a.f', expect_newest: 5 }, [409, 'diverged']);
  await req(d, 'POST', `${e}/fork`, { into: 'a.f', expect_newest: 9 }, 201);
  await req(d, 'POST', `${e}/evict`, { budget: 3, expect_newest: 9 }, 200);
  await req(d, 'POST', `${e}/commit`, { newest: 9, expect_newest: 9 }, 200);
  await req(d, 'POST', `${e}/truncate`, { from: 9, expect_newest: 9 }, 200);
  await req(d, 'POST', `${e}/step`, { pos: 10, expect_newest: -1 }, [400, 'invalid_position']);
  await req(d, 'POST', `${e}/commit`, { newest: 8, expect_newest: 'x' }, [400, 'invalid_position']);
  await req(d, 'POST', `${e}/evict`, { expect_newest: 1.5 }, [400, 'invalid_position']);
  await req(d, 'POST', `${e}/fork`, { into: 'a.g', expect_newest: -2 }, [400, 'invalid_position']);
  await req(d, 'POST', '/session/a.none/step', { pos: 5, expect_newest: 4 }, [404, 'unknown_session']);
  const { value: b } = await req(d, 'POST', '/step', { steps: [
    { session: 'a.e', pos: 20, expect_newest: 3 }, { session: 'a.e', pos: 20, expect_newest: 8 },
    { session: 'a.m', pos: 1, expect_newest: 7 }, { session: 'a.k', pos: 1, expect_newest: 0 },
  ] }, 200);
  const codes = b.results.map((r) => (r.error ? r.error.code : 'ok')).join(',');
  if (codes !== 'diverged,ok,unknown_session,ok') fail(`expect_newest batch results ${codes}`);
}

async function tokenProbes(d, token) {
  const auth = { Authorization: `Bearer ${token}` };
  const wrong = { Authorization: `Bearer ${'w'.repeat(token.length)}` };
  // Every operation, and paths and methods that no operation takes: 401
  // without the token and with another one; /healthz never needs it.
  for (const [m, p, body] of [...routeRequests('t1'), ['GET', '/nope'], ['POST', '/healthz'],
                              ['GET', '/session/t1/step'], ['PUT', '/session/'], ['GET', '/session/a%2Fb']]) {
    const free = p === '/healthz';
    const e401 = m === 'HEAD' ? 401 : [401, 'unauthorized'];
    await req(d, m, p, body, free ? (m === 'POST' ? [405, 'method_not_allowed'] : 200) : e401);
    await req(d, m, p, body, free ? (m === 'POST' ? 405 : 200) : e401, { headers: wrong, note: 'another token' });
    await req(d, m, p, body, free ? undefined : e401, { headers: { Authorization: `Basic ${token}` } });
  }
  // A body over --max-body is refused before the token is looked at.
  await req(d, 'GET', '/metrics', 'x', [413, 'body_too_large'],
            { headers: { 'Content-Length': '100000000' }, omitBody: true, newConn: true });
  // With the token, answers as usual.
  const ok = [['PUT', '/session/t1', {}, 201], ['GET', '/session/t1', undefined, 200],
              ['HEAD', '/session/t1', undefined, 200], ['POST', '/session/t1/step', { pos: 1 }, 200],
              ['POST', '/session/t1/commit', { newest: 1 }, 200], ['POST', '/session/t1/truncate', { from: 9 }, 200],
              ['POST', '/session/t1/fork', { into: 't2' }, 201], ['POST', '/session/t1/evict', {}, 200],
              ['POST', '/step', { steps: [{ session: 't1', pos: 2 }] }, 200], ['GET', '/metrics', undefined, 200],
              ['POST', '/session/t3/adopt', { kept: [0, 3], newest: 3 }, 201],
              ['HEAD', '/metrics', undefined, 200], ['DELETE', '/session/t1', undefined, 204],
              ['GET', '/nope', undefined, [404, 'not_found']], ['PUT', '/step', undefined, [405, 'method_not_allowed']],
              ['GET', '/session/a%2Fb', undefined, [400, 'invalid_session_id']]];
  for (const [m, p, body, expect] of ok) await req(d, m, p, body, expect, { headers: auth });
}

async function limitProbes(d) {
  // --max-sessions 2
  await req(d, 'PUT', '/session/l1', {}, 201);
  await req(d, 'PUT', '/session/l2', {}, 201);
  await req(d, 'PUT', '/session/l3', {}, [503, 'session_limit']);
  await req(d, 'PUT', '/session/l1', {}, 200, { note: 'exists: creates nothing' });
  await req(d, 'POST', '/session/l3/step', { pos: 1 }, [503, 'session_limit']);
  await req(d, 'POST', '/session/l1/fork', { into: 'l3' }, [503, 'session_limit']);
  await req(d, 'POST', '/session/l3/adopt', { kept: [0, 2], newest: 2 }, [503, 'session_limit']);
  await req(d, 'POST', '/session/l1/adopt', { kept: [0, 2], newest: 2, replace: true }, 200,
            { note: 'a replacement creates nothing' });
  const { value } = await req(d, 'POST', '/step', { steps: [{ session: 'l1', pos: 1 }, { session: 'l3', pos: 1 }] }, 200);
  if (!(value.results[1].error && value.results[1].error.code === 'session_limit' && value.results[1].error.status === 503))
    fail(`a batch item over --max-sessions: ${JSON.stringify(value.results[1])}`);
}

async function noAutocreateProbes(d) {
  await req(d, 'POST', '/session/n1/step', { pos: 1 }, [404, 'unknown_session']);
  await req(d, 'POST', '/session/n2/adopt', { kept: [0, 2], newest: 2 }, 201, { note: 'adopt is no autocreation' });
  const { value } = await req(d, 'POST', '/step', { steps: [{ session: 'n1', pos: 1 }] }, 200);
  if (!(value.results[0].error && value.results[0].error.status === 404))
    fail(`a batch item for an unknown session with --no-autocreate: ${JSON.stringify(value.results[0])}`);
  await req(d, 'PUT', '/session/n1', {}, 201);
  await req(d, 'POST', '/session/n1/step', { pos: 1 }, 200);
}

// --replay-pool 0: every last answer that is not made of runs is let go at
// once, and its resend is 409 replay_unavailable.
async function replayPoolProbes(d) {
  const u = [409, 'replay_unavailable'];
  await req(d, 'PUT', '/session/r', { lookahead: 4 }, 201);
  await req(d, 'POST', '/session/r/step', { positions: [1, 3, 5] }, 200);
  await req(d, 'POST', '/session/r/step', { positions: [1, 3, 5] }, u, { note: 'a resend, its answer let go' });
  await req(d, 'POST', '/session/r/step', { positions: [6, 7] }, 200);
  const { value } = await req(d, 'POST', '/session/r/step', { positions: [6, 7] }, 200, { note: 'runs: kept' });
  if (value.replayed !== true) fail(`a resend of a run answered ${JSON.stringify(value)}`);
  await req(d, 'POST', '/session/r/step', { positions: [10, 12, 14], tentative: true }, 200);
  await req(d, 'POST', '/session/r/commit', { newest: 10 }, 200);
  await req(d, 'POST', '/session/r/commit', { newest: 10 }, u, { note: 'a resend, its answer let go' });
  await req(d, 'POST', '/session/r/step', { positions: [20, 22] }, 200);
  await req(d, 'POST', '/session/r/truncate', { from: 20 }, 200);
  await req(d, 'POST', '/session/r/truncate', { from: 20 }, u, { note: 'a resend, its answer let go' });
  const { value: b } = await req(d, 'POST', '/step', { steps: [
    { session: 'r', positions: [30, 33] }, { session: 'r', positions: [30, 33] }] }, 200);
  const e = b.results[1].error;
  if (!(e && e.code === 'replay_unavailable' && e.status === 409))
    fail(`a batch item resending a let-go answer: ${JSON.stringify(b.results[1])}`);
}

// Journal writes that fail: the daemon runs with a file size limit
// (RLIMIT_FSIZE, SIGXFSZ ignored) that the journal soon passes.
async function journalProbes(d) {
  const id = (i) => `j${i}.` + 'j'.repeat(100);
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  let i = 0, parked = null;
  for (; i < 100 && !parked; i++) {
    const conn = new Conn(d.port);
    const ex = { method: 'PUT', target: `/session/${id(i)}`, body: '{}' };
    const pending = conn.exchange(buildRequest(ex).bytes, false, 20000);
    let res;
    // Answered, or parked: its write failed and it waits for a retry,
    // which /healthz then says ("degraded").
    for (;;) {
      res = await Promise.race([pending, sleep(200).then(() => null)]);
      if (res) break;
      const { value } = await req(d, 'GET', '/healthz', undefined, 200);
      if (value.status === 'degraded') {
        parked = conn;
        pending.catch(() => {});
        break;
      }
    }
    if (res) {
      conn.close();
      check(ex, res);
      if (res.status !== 201) fail(`journal: PUT answered ${res.status} before the journal failed`, ex, res);
    }
  }
  if (!parked) fail('journal: writes never failed under the file size limit');
  let health;
  for (let k = 0; k < 100; k++) {
    ({ value: health } = await req(d, 'GET', '/healthz', undefined, 200));
    if (health.status === 'degraded') break;
    await new Promise((r) => setTimeout(r, 20));
  }
  if (health.status !== 'degraded') fail('journal: /healthz never said "degraded"');
  await req(d, 'HEAD', '/healthz', undefined, 200);
  await req(d, 'GET', `/session/${id(0)}`, undefined, 200, { note: 'reads go on' });
  await req(d, 'HEAD', `/session/${id(0)}`, undefined, 200);
  await req(d, 'GET', '/session/j.none', undefined, [404, 'unknown_session']);
  await req(d, 'GET', '/metrics', undefined, 200);
  const jf = [503, 'journal_failed'];
  await req(d, 'PUT', '/session/j.new', {}, jf);
  await req(d, 'PUT', `/session/${id(0)}`, {}, jf);
  await req(d, 'DELETE', `/session/${id(0)}`, undefined, jf);
  await req(d, 'POST', `/session/${id(0)}/step`, { pos: 1 }, jf);
  await req(d, 'POST', `/session/${id(0)}/commit`, { newest: 0 }, jf);
  await req(d, 'POST', `/session/${id(0)}/truncate`, { from: 1 }, jf);
  await req(d, 'POST', `/session/${id(0)}/fork`, { into: 'j.f' }, jf);
  await req(d, 'POST', `/session/${id(0)}/evict`, {}, jf);
  await req(d, 'POST', '/step', { steps: [{ session: id(0), pos: 1 }] }, jf);
  await req(d, 'POST', '/step', 'not json', jf, { note: 'refused before the body is read' });
  await req(d, 'POST', '/session/a%2Fb/step', { pos: 1 }, [400, 'invalid_session_id']);
  parked.close();
  return i - 1; // the PUTs acknowledged before a write failed
}

// ---- run ------------------------------------------------------------------

try {
  const counts = {};
  const before = () => validated;
  let n0;

  const MAX_BODY = 65536;
  const d1 = await startDaemon('main', ['--max-body', String(MAX_BODY), '--max-positions', '1000', '--max-batch', '64']);
  n0 = before();
  const files = await replayVectors(d1);
  counts.vectors = validated - n0;
  n0 = before();
  await probes(d1);
  await transportProbes(d1, MAX_BODY);
  await framingProbes(d1);
  counts.probes = validated - n0;

  const tokenFile = path.join(tmp, 'token');
  const token = 'contract-test-token-0123456789';
  fs.writeFileSync(tokenFile, token + '\n');
  const d2 = await startDaemon('token', ['--token-file', tokenFile]);
  n0 = before();
  await tokenProbes(d2, token);
  counts.token = validated - n0;

  const d3 = await startDaemon('limit', ['--max-sessions', '2']);
  const d4 = await startDaemon('no-autocreate', ['--no-autocreate']);
  const d6 = await startDaemon('replay-pool', ['--replay-pool', '0']);
  n0 = before();
  await limitProbes(d3);
  await noAutocreateProbes(d4);
  await replayPoolProbes(d6);
  counts.limits = validated - n0;

  const stateDir = path.join(tmp, 'state');
  fs.mkdirSync(stateDir);
  // dash's ulimit -f counts 512-byte blocks: the journal's header fits,
  // a few records more do not.
  const d5 = await startDaemon('journal', ['--state-dir', stateDir, '--fsync', 'always', '--conn-timeout', '5'],
                               { wrap: 'trap "" XFSZ; ulimit -f 2' });
  n0 = before();
  const acked = await journalProbes(d5);
  counts.journal = validated - n0;

  // Every status each operation lists must have been seen at least once,
  // but out_of_memory (503 on reads), which needs an allocation to fail.
  const missing = [];
  for (const t of templates) for (const m of METHODS) {
    const op = t.item[m];
    if (!op) continue;
    for (const st of Object.keys(op.responses)) {
      if (!seen.has(`${m.toUpperCase()} ${t.template} ${st}`)) missing.push(`${m.toUpperCase()} ${t.template} ${st}`);
    }
  }
  const unprobed = missing.filter((k) => !/ 503$/.test(k) ||
    !/^(GET|HEAD) /.test(k));
  if (unprobed.length) fail(`no exchange gave these listed answers: ${unprobed.join('; ')}`);
  const codes = [...seenCodes].filter((c) => !c.startsWith('item')).map((c) => c.split(' ')[1]);
  const allCodes = api.components.schemas.ErrorCode.enum;
  const notSeen = allCodes.filter((c) => !codes.includes(c));
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  console.log(`contract: ${validated} exchanges validated against ${path.relative(root, DOC)} in ${secs} s ` +
              `(${files} vectors: ${counts.vectors}; probes: ${counts.probes}; token: ${counts.token}; ` +
              `limits and replay pool: ${counts.limits}; journal failing after ${acked} acknowledged changes: ${counts.journal}); ` +
              `error codes seen: ${allCodes.length - notSeen.length}/${allCodes.length}` +
              (notSeen.length ? ` (not provoked: ${notSeen.join(', ')})` : ''));
  stopAll();
  if (mismatches.length) {
    const kinds = new Map();
    for (const m of mismatches) {
      const k = m.replace(/^contract: /, '');
      kinds.set(k, (kinds.get(k) || 0) + 1);
    }
    for (const [k, n] of kinds) console.error(`${String(n).padStart(5)}  ${k}`);
    console.error(`contract: ${mismatches.length} exchanges do not match the document`);
    process.exit(1);
  }
} catch (e) {
  stopAll();
  if (e instanceof Mismatch) {
    console.error(e.message);
  } else {
    console.error(e);
  }
  process.exit(1);
}
