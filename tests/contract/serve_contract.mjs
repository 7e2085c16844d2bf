#!/usr/bin/env node
// serve's contract: evictd-llama serve's real answers against
// deploy/llama/openapi.yaml, as contract_test.mjs checks the daemon's
// against proto/openapi.yaml. Each exchange's status must be one the
// operation lists (or NotFound / MethodNotAllowed for a path or method it
// has not), the headers the response declares must be there and valid,
// the Content-Type one of its media types, and the body valid against that
// media type's schema; a stream's every event against the schema its media
// type names in x-event-schema (or Error, as its last), ending with
// x-stream-end where the document says so. A request serve accepts (2xx)
// must be valid against the operation's requestBody schema too.
//
// The servers are started by tests/llamacpp/test_openai.py (make
// e2e-llamacpp) and named in the environment: SERVE (4 sequences), BUSY
// (one sequence, a queue of one), KEYED (with --api-key-file; KEY).
// Usage: node serve_contract.mjs path/to/openapi.yaml
import SwaggerParser from '@apidevtools/swagger-parser';
import Ajv from 'ajv-draft-04';

const DOC = process.argv[2];
const { SERVE, BUSY, KEYED, KEY } = process.env;
if (!DOC || !SERVE || !BUSY || !KEYED || !KEY) {
  console.error('usage: SERVE=URL BUSY=URL KEYED=URL KEY=K node serve_contract.mjs openapi.yaml');
  process.exit(2);
}
const api = await SwaggerParser.validate(DOC); // dereferenced as well
const ajv = new Ajv({ allErrors: true, strict: true, strictRequired: false, strictTypes: false });
const compiled = new Map();
function valid(schema, value) {
  let v = compiled.get(schema);
  if (!v) {
    v = ajv.compile(schema);
    compiled.set(schema, v);
  }
  return v(value) ? null : ajv.errorsText(v.errors);
}
for (const [name, s] of Object.entries(api.components.schemas)) {
  try { ajv.compile(s); } catch (e) {
    throw new Error(`components.schemas.${name} does not compile: ${e.message}`);
  }
}

let exchanges = 0;
const codes = new Set();
const events = { count: 0 };

function fail(where, why, text) {
  throw new Error(`${where}: ${why}\n${(text || '').slice(0, 2000)}`);
}

// The response the document gives for this exchange.
function responseFor(where, method, path, status) {
  const item = api.paths[path];
  if (!item) return api.components.responses.NotFound;
  const op = item[method.toLowerCase()];
  if (!op) return api.components.responses.MethodNotAllowed;
  const r = op.responses[String(status)];
  if (!r) fail(where, `status ${status} is not listed (${Object.keys(op.responses)})`);
  return r;
}

// A stream asked with stream_options.include_usage: every event but
// [DONE] carries "usage" (null, then the counts in the last).
function checkEvents(where, media, text, withUsage) {
  const schema = media['x-event-schema'];
  const end = media['x-stream-end'];
  if (!schema) fail(where, 'a text/event-stream without x-event-schema');
  if (!text.endsWith('\n\n')) fail(where, 'the stream does not end with a blank line', text);
  const frames = text.slice(0, -2).split('\n\n');
  let ended = false;
  let errored = false;
  frames.forEach((f, i) => {
    if (ended || errored) fail(where, `event ${i} after the stream's end`, text);
    if (!f.startsWith('data: ') || f.includes('\n')) fail(where, `event ${i} is not one data line`, f);
    const data = f.slice(6);
    if (end && data === end) {
      ended = true;
      return;
    }
    const j = JSON.parse(data);
    events.count++;
    if (j.error) {
      const e = valid(api.components.schemas.Error, j);
      if (e) fail(where, `error event: ${e}`, data);
      codes.add(j.error.code);
      errored = true;
      return;
    }
    const e = valid(schema, j);
    if (e) fail(where, `event ${i}: ${e}`, data);
    if (withUsage && !('usage' in j)) fail(where, `event ${i} has no usage`, data);
  });
  if (end && !ended && !errored) fail(where, `no final data: ${end}`, text);
  return frames.length;
}

// One exchange, checked; returns { status, headers, text, json }.
async function exchange(base, method, path, body, opts = {}) {
  const where = `${method} ${path} ${opts.label || ''}`.trim();
  const headers = { ...(opts.headers || {}) };
  let raw;
  if (body !== undefined) {
    raw = typeof body === 'string' ? body : JSON.stringify(body);
    headers['Content-Type'] = 'application/json';
  }
  const res = await fetch(base + path, { method, headers, body: raw,
                                         signal: opts.signal });
  const text = await res.text();
  exchanges++;
  const r = responseFor(where, method, path, res.status);
  // Declared headers: present and valid.
  for (const [name, h] of Object.entries(r.headers || {})) {
    const v = res.headers.get(name);
    if (v === null) fail(where, `header ${name} is missing`);
    const e = valid(h.schema, v);
    if (e) fail(where, `header ${name}: ${e}`);
  }
  if (res.status === 405) {
    const allow = res.headers.get('Allow');
    const item = api.paths[path];
    const takes = Object.keys(item).filter((m) => m !== 'parameters').map((m) => m.toUpperCase());
    if (!takes.includes(allow)) fail(where, `Allow ${allow}, the path takes ${takes}`);
  }
  const type = res.headers.get('Content-Type');
  const media = (r.content || {})[type];
  if (!media) fail(where, `Content-Type ${type} is not one of ${Object.keys(r.content || {})}`, text);
  let json;
  if (type === 'application/json') {
    json = JSON.parse(text);
    const e = valid(media.schema, json);
    if (e) fail(where, `body: ${e}`, text);
    if (json.error) codes.add(json.error.code);
  } else if (type === 'text/event-stream') {
    checkEvents(where, media, text,
                Boolean(body && body.stream_options && body.stream_options.include_usage));
  }
  // What serve accepted, the document accepts.
  const op = (api.paths[path] || {})[method.toLowerCase()];
  if (res.status < 300 && op && op.requestBody && body !== undefined) {
    const e = valid(op.requestBody.content['application/json'].schema, body);
    if (e) fail(where, `serve accepted a request the document refuses: ${e}`, raw);
  }
  if (opts.want !== undefined && res.status !== opts.want) {
    fail(where, `status ${res.status}, wanted ${opts.want}`, text);
  }
  return { status: res.status, headers: res.headers, text, json };
}

const S = SERVE;
const prompt = 'Once upon a time';
const chat = [{ role: 'system', content: 'You tell stories.' },
              { role: 'user', content: [{ type: 'text', text: 'A story.' }] }];

// What works.
await exchange(S, 'GET', '/v1/models', undefined, { want: 200 });
await exchange(S, 'POST', '/v1/completions', { prompt, max_tokens: 8 }, { want: 200 });
const two = await exchange(S, 'POST', '/v1/completions',
  { prompt: [prompt], max_tokens: 12, n: 2, temperature: 0.8, top_p: 0.9, seed: 3,
    stop: ['.', 'zz'], model: 'anything', user: 'ignored' }, { want: 200 });
if (two.json.choices.length !== 2) fail('n 2', 'not two choices', two.text);
await exchange(S, 'POST', '/v1/completions',
  { prompt, max_tokens: 6, n: 2, stream: true, stream_options: { include_usage: true } },
  { want: 200, label: 'streamed, n 2, usage' });
await exchange(S, 'POST', '/v1/completions', { prompt, max_tokens: 4, stream: true },
  { want: 200, label: 'streamed' });
await exchange(S, 'POST', '/v1/chat/completions', { messages: chat, max_tokens: 8 }, { want: 200 });
await exchange(S, 'POST', '/v1/chat/completions',
  { messages: chat, max_tokens: 6, stream: true, stream_options: { include_usage: true },
    stop: 'Tom' }, { want: 200, label: 'streamed' });
await exchange(S, 'POST', '/v1/chat/completions',
  { messages: [{ role: 'user', content: 'Hi' }], max_completion_tokens: 4, n: 3, stream: true },
  { want: 200, label: 'streamed, n 3' });
await exchange(S, 'POST', '/completion', { prompt, n_predict: 8, stop: ['.'], temperature: 0 },
  { want: 200 });
await exchange(S, 'POST', '/completion', { prompt, n_predict: 5, stream: true, seed: 1 },
  { want: 200, label: 'streamed' });
await exchange(S, 'GET', '/health', undefined, { want: 200 });
await exchange(S, 'GET', '/metrics', undefined, { want: 200 });

// What does not: every error a request alone can provoke.
const bad = [
  ['/v1/completions', '{not json'], ['/v1/completions', [1, 2]],
  ['/v1/completions', {}], ['/v1/completions', { prompt: 5 }],
  ['/v1/completions', { prompt: ['a', 'b'] }],
  ['/v1/completions', { prompt, max_tokens: 0 }],
  ['/v1/completions', { prompt, max_tokens: '9' }],
  ['/v1/completions', { prompt, temperature: 3 }],
  ['/v1/completions', { prompt, top_p: -0.5 }],
  ['/v1/completions', { prompt, n: 99 }],
  ['/v1/completions', { prompt, stop: ['a', 'b', 'c', 'd', 'e'] }],
  ['/v1/completions', { prompt, stream: 'yes' }],
  ['/v1/chat/completions', { messages: [] }],
  ['/v1/chat/completions', { messages: [{ role: 'wizard', content: 'x' }] }],
  ['/v1/chat/completions', { messages: [{ role: 'user', content: 7 }] }],
  ['/completion', { prompt: 'a', n_predict: 0 }],
  ['/completion', { n_predict: 3 }],
];
for (const [path, body] of bad) {
  const r = await exchange(S, 'POST', path, body, { want: 400, label: JSON.stringify(body).slice(0, 60) });
  if (typeof body === 'object' && !Array.isArray(body) && Object.keys(body).length > 0 &&
      r.json.error.code === 'invalid_request' && r.json.error.param === null) {
    fail(path, 'a bad field not named in param', r.text);
  }
}
await exchange(S, 'POST', '/v1/completions', 'x'.repeat(2 << 20), { want: 413 });
await exchange(S, 'GET', '/nowhere', undefined, { want: 404 });
await exchange(S, 'POST', '/v1/models', {}, { want: 405 });
await exchange(S, 'GET', '/v1/completions', undefined, { want: 405 });
await exchange(S, 'GET', '/v1/chat/completions', undefined, { want: 405 });
await exchange(S, 'GET', '/completion', undefined, { want: 405 });
await exchange(S, 'POST', '/health', {}, { want: 405 });

// The key.
for (const [method, path, body] of [['GET', '/v1/models'], ['GET', '/metrics'],
                                    ['POST', '/v1/completions', { prompt, max_tokens: 2 }]]) {
  await exchange(KEYED, method, path, body, { want: 401, label: 'no key' });
  await exchange(KEYED, method, path, body,
    { want: 401, label: 'another key', headers: { Authorization: 'Bearer sk-nope' } });
  await exchange(KEYED, method, path, body,
    { want: 200, label: 'the key', headers: { Authorization: `Bearer ${KEY}` } });
}
await exchange(KEYED, 'GET', '/health', undefined, { want: 200, label: 'no key' });

// A full queue: one decoding, one waiting, the third 503 with Retry-After.
const hold = new AbortController();
const long = { prompt, max_tokens: 30000, ignore_eos: true, stream: true };
// A long stream read as it comes, until aborted; its status kept.
const statuses = [];
function holdOne() {
  return (async () => {
    try {
      const res = await fetch(BUSY + '/v1/completions',
        { method: 'POST', headers: { 'Content-Type': 'application/json' },
          body: JSON.stringify(long), signal: hold.signal });
      statuses.push(res.status);
      for await (const piece of res.body) void piece;
    } catch (e) {
      if (e.name !== 'AbortError') throw e;
    }
  })();
}
// Until BUSY's /metrics shows the gauge at v (20 s at most).
async function gauge(name, v) {
  for (let i = 0; i < 400; i++) {
    const m = await (await fetch(BUSY + '/metrics')).text();
    if (new RegExp(`^${name} ${v}$`, 'm').test(m)) return;
    await new Promise((ok) => setTimeout(ok, 50));
  }
  fail('queue full', `${name} never reached ${v} (statuses ${statuses})`);
}
// One at a time: the second sent at once could find the first still
// queued, and the queue (one) full.
const held = [holdOne()];
await gauge('evictd_llama_requests_active', 1);
held.push(holdOne());
await gauge('evictd_llama_requests_queued', 1);
await exchange(BUSY, 'POST', '/v1/completions', { prompt, max_tokens: 2 },
               { want: 503, label: 'queue full' });
hold.abort();
await Promise.all(held);

const want = ['invalid_json', 'invalid_request', 'invalid_api_key', 'not_found',
              'method_not_allowed', 'body_too_large', 'busy'];
const missing = want.filter((c) => !codes.has(c));
if (missing.length) fail('codes', `not provoked: ${missing}`);
console.log(`serve contract: ${exchanges} exchanges (${events.count} stream events) valid ` +
            `against ${DOC}; error codes seen: ${[...codes].sort().join(' ')}`);
