#!/usr/bin/env node
// serve's contract: evictd-llama serve's real answers against
// deploy/llama/openapi.yaml, as contract_test.mjs checks the daemon's
// against proto/openapi.yaml. Each exchange's status must be one the
// operation lists (or NotFound / MethodNotAllowed for a path or method it
// has not), the headers the response declares must be there and valid,
// the Content-Type one of its media types, and the body valid against that
// media type's schema; a stream's every event against the schema its media
// type names in x-event-schema (or Error, as its last), ending with
// x-stream-end where the document says so; a typed stream (x-event-name,
// the Responses API's) frames each event as `event: NAME` + `data: JSON`,
// NAME its data's field of that name. A request serve accepts (2xx) must be
// valid against the operation's requestBody schema too.
//
// The servers are started by tests/llamacpp/test_openai.py (make
// e2e-llamacpp) and named in the environment: SERVE (4 sequences), BUSY
// (one sequence, a queue of one), KEYED (with --api-key-file; KEY), CONV
// (two sequences that keep their conversations: the Responses API).
// Usage: node serve_contract.mjs path/to/openapi.yaml
import SwaggerParser from '@apidevtools/swagger-parser';
import Ajv from 'ajv-draft-04';

const DOC = process.argv[2];
const { SERVE, BUSY, KEYED, KEY, CONV } = process.env;
if (!DOC || !SERVE || !BUSY || !KEYED || !KEY || !CONV) {
  console.error('usage: SERVE=URL BUSY=URL KEYED=URL KEY=K CONV=URL node serve_contract.mjs openapi.yaml');
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

// The path item a request's path falls under: its own, or a template's
// (`/v1/responses/{id}`: a parameter is one segment, not empty).
const templates = Object.keys(api.paths).filter((p) => p.includes('{')).map((p) =>
  [new RegExp('^' + p.replace(/\{[^}]+\}/g, '[^/]+') + '$'), api.paths[p]]);
function pathItem(path) {
  path = path.split('?')[0];
  if (api.paths[path]) return api.paths[path];
  const t = templates.find(([re]) => re.test(path));
  return t ? t[1] : undefined;
}
const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

// The response the document gives for this exchange.
function responseFor(where, method, path, status) {
  const item = pathItem(path);
  if (!item) return api.components.responses.NotFound;
  const op = item[method.toLowerCase()];
  if (!op) return api.components.responses.MethodNotAllowed;
  const r = op.responses[String(status)];
  if (!r) fail(where, `status ${status} is not listed (${Object.keys(op.responses)})`);
  return r;
}

// The schema of a typed event: the branch of x-event-schema's oneOf whose
// `name` field takes the event's value (for an error that says which
// schema failed, not that none of seven matched).
function branchOf(schema, name, value) {
  return (schema.oneOf || [schema]).find((b) =>
    ((b.properties || {})[name] || {}).enum?.includes(value));
}

// A stream's events, each validated; returns their data, parsed. A stream
// asked with stream_options.include_usage: every event but [DONE] carries
// "usage" (null, then the counts in the last).
function checkEvents(where, media, text, withUsage) {
  const schema = media['x-event-schema'];
  const end = media['x-stream-end'];
  const named = media['x-event-name'];
  if (!schema) fail(where, 'a text/event-stream without x-event-schema');
  if (!text.endsWith('\n\n')) fail(where, 'the stream does not end with a blank line', text);
  const frames = text.slice(0, -2).split('\n\n');
  const out = [];
  let ended = false;
  let errored = false;
  frames.forEach((f, i) => {
    if (ended || errored) fail(where, `event ${i} after the stream's end`, text);
    let name = null;
    if (named) {
      const m = /^event: ([^\n]+)\n/.exec(f);
      if (!m) fail(where, `event ${i} has no event: line first`, f);
      name = m[1];
      f = f.slice(m[0].length);
    }
    if (!f.startsWith('data: ') || f.includes('\n')) fail(where, `event ${i} is not one data line`, f);
    const data = f.slice(6);
    if (end && data === end) {
      ended = true;
      return;
    }
    const j = JSON.parse(data);
    events.count++;
    out.push(j);
    if (named) {
      if (j[named] !== name) fail(where, `event ${i}: event: ${name}, data.${named} ${j[named]}`, data);
      const b = branchOf(schema, named, name);
      if (!b) fail(where, `event ${i}: no event ${name} in the document`, data);
      const e = valid(b, j) || valid(schema, j);
      if (e) fail(where, `event ${i} (${name}): ${e}`, data);
      if (name === 'error') {
        codes.add(j.code);
        errored = true;
      }
      return;
    }
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
  return out;
}

// One exchange, checked; returns { status, headers, text, json, events }
// (events: a stream's data, parsed).
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
    const takes = Object.keys(pathItem(path)).filter((m) => METHODS.includes(m))
      .map((m) => m.toUpperCase()).sort().join(', ');
    if (allow.split(', ').sort().join(', ') !== takes) fail(where, `Allow ${allow}, the path takes ${takes}`);
  }
  const type = res.headers.get('Content-Type');
  const media = (r.content || {})[type];
  if (!media) fail(where, `Content-Type ${type} is not one of ${Object.keys(r.content || {})}`, text);
  let json, events;
  if (type === 'application/json') {
    json = JSON.parse(text);
    const e = valid(media.schema, json);
    if (e) fail(where, `body: ${e}`, text);
    if (json.error) codes.add(json.error.code);
  } else if (type === 'text/event-stream') {
    events = checkEvents(where, media, text,
                         Boolean(body && body.stream_options && body.stream_options.include_usage));
  }
  // What serve accepted, the document accepts.
  const op = (pathItem(path) || {})[method.toLowerCase()];
  if (res.status < 300 && op && op.requestBody && body !== undefined) {
    const e = valid(op.requestBody.content['application/json'].schema, body);
    if (e) fail(where, `serve accepted a request the document refuses: ${e}`, raw);
  }
  if (opts.want !== undefined && res.status !== opts.want) {
    fail(where, `status ${res.status}, wanted ${opts.want}`, text);
  }
  return { status: res.status, headers: res.headers, text, json, events };
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
// cache_prompt, on a server that keeps conversations: true (the default)
// and false, on the three routes.
for (const cache_prompt of [true, false]) {
  await exchange(CONV, 'POST', '/v1/completions', { prompt, max_tokens: 3, cache_prompt },
    { want: 200, label: `cache_prompt ${cache_prompt}` });
  await exchange(CONV, 'POST', '/v1/chat/completions', { messages: chat, max_tokens: 3, cache_prompt },
    { want: 200, label: `cache_prompt ${cache_prompt}` });
  await exchange(CONV, 'POST', '/completion', { prompt, n_predict: 3, cache_prompt },
    { want: 200, label: `cache_prompt ${cache_prompt}` });
}

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
  ['/v1/completions', { prompt, cache_prompt: 'yes' }],
  ['/v1/chat/completions', { messages: chat, cache_prompt: 1 }],
  ['/completion', { prompt, cache_prompt: null, n_predict: 1, stream: 'no' }],
  ['/completion', { prompt, cache_prompt: 'no' }],
  ['/v1/responses', {}],
  ['/v1/responses', { input: [] }],
  ['/v1/responses', { input: 7 }],
  ['/v1/responses', { input: [{ type: 'function_call', role: 'user', content: 'x' }] }],
  ['/v1/responses', { input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }],
  ['/v1/responses', { input: 'x', instructions: 5 }],
  ['/v1/responses', { input: 'x', max_output_tokens: 0 }],
  ['/v1/responses', { input: 'x', temperature: 3 }],
  ['/v1/responses', { input: 'x', top_p: 2 }],
  ['/v1/responses', { input: 'x', stream: 'yes' }],
  ['/v1/responses', { input: 'x', store: 'no' }],
  ['/v1/responses', { input: 'x', model: 5 }],
  ['/v1/responses', { input: 'x', previous_response_id: 5 }],
  // Refused: it would change the answer.
  ['/v1/responses', { input: 'x', tools: [{ type: 'function', name: 'f', parameters: {} }] }],
  ['/v1/responses', { input: 'x', top_logprobs: 3 }],
  ['/v1/responses', { input: 'x', include: ['message.output_text.logprobs'] }],
  ['/v1/responses', { input: 'x', background: true }],
  ['/v1/responses', { input: 'x', conversation: 'conv_1' }],
  ['/v1/responses', { input: 'x', prompt: { id: 'pmpt_1' } }],
  ['/v1/responses', { input: 'x', reasoning: { effort: 'high' } }],
  ['/v1/responses', { input: 'x', text: { format: { type: 'json_object' } } }],
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
await exchange(S, 'GET', '/v1/responses', undefined, { want: 405 });
await exchange(S, 'POST', '/v1/responses/resp_x', {}, { want: 405 });
await exchange(S, 'GET', '/v1/responses/', undefined, { want: 404, label: 'no id' });
await exchange(S, 'GET', '/v1/responses/resp_x/more', undefined, { want: 404, label: 'below an id' });

// The Responses API, on CONV (conversations kept).
const C = CONV;
const respond = (body, opts) => exchange(C, 'POST', '/v1/responses', body, opts);
const textOf = (r) => r.output[0].content[0].text;
const show = (v) => JSON.stringify(v);
// A Responses stream's events, beyond each one's schema: numbered from 0,
// in the order the document gives, about one message, the deltas joined
// being the text each later event says; returns the last event's response.
const ORDER = new RegExp('^response.created response.in_progress response.output_item.added ' +
  'response.content_part.added( response.output_text.delta)* response.output_text.done ' +
  'response.content_part.done response.output_item.done response.(completed|incomplete)$');
function checkResponseStream(where, events) {
  const types = events.map((e) => e.type);
  events.forEach((e, i) => {
    if (e.sequence_number !== i) fail(where, `event ${i} has sequence_number ${e.sequence_number}`);
  });
  if (!ORDER.test(types.join(' '))) fail(where, `events out of order: ${types}`);
  const last = events.at(-1).response;
  if (events[0].response.id !== last.id || events[1].response.id !== last.id) {
    fail(where, 'the response ids differ');
  }
  const msg = events[2].item.id;
  if (last.output[0].id !== msg || events.slice(3, -1).some((e) => (e.item_id ?? e.item.id) !== msg)) {
    fail(where, 'the message ids differ');
  }
  const text = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  const said = [events.at(-4).text, events.at(-3).part.text, events.at(-2).item.content[0].text,
                textOf(last)];
  if (said.some((t) => t !== text)) {
    fail(where, `the deltas join to ${show(text)}, the events say ${show(said)}`);
  }
  if ((last.status === 'incomplete') !== (events.at(-1).type === 'response.incomplete')) {
    fail(where, 'status and event differ');
  }
  return last;
}
// Plain: a string, instructions, fields that change nothing; then
// messages of input_text parts.
const ask = { input: 'Tell me a story.', instructions: 'You tell stories.', max_output_tokens: 12,
              temperature: 0, model: 'anything', metadata: { k: 'v' }, text: { format: { type: 'text' } },
              tool_choice: 'auto', user: 'ignored', tools: [], reasoning: null, include: [] };
const r1 = (await respond(ask, { want: 200, label: 'plain' })).json;
if (r1.metadata.k !== 'v' || r1.instructions !== ask.instructions ||
    r1.usage.input_tokens_details.cached_tokens !== 0) {
  fail('plain', 'the request not repeated, or cached tokens', show(r1));
}
await respond({ input: [{ role: 'system', content: 'Be brief.' },
                        { type: 'message', role: 'user',
                          content: [{ type: 'input_text', text: 'A story' },
                                    { type: 'input_text', text: ' about a cat.' }] }],
                max_output_tokens: 5, store: true, previous_response_id: null },
              { want: 200, label: 'messages' });
// Streamed (the text of the plain one, greedy), and its stored copy.
const s1 = await respond({ ...ask, stream: true }, { want: 200, label: 'streamed' });
const s1r = checkResponseStream('streamed', s1.events);
if (textOf(s1r) !== textOf(r1)) fail('streamed', `text ${show(textOf(s1r))}, plain ${show(textOf(r1))}`);
const got = await exchange(C, 'GET', `/v1/responses/${s1r.id}`, undefined,
                           { want: 200, label: 'stored, streamed' });
if (show(got.json) !== show(s1r)) fail('GET', 'not the response the stream ended with', got.text);
// previous_response_id: plain, then streamed, each continuing the newest.
const r2 = (await respond({ input: 'And then?', previous_response_id: r1.id, max_output_tokens: 8,
                            temperature: 0 }, { want: 200, label: 'previous_response_id' })).json;
if (!(r2.usage.input_tokens_details.cached_tokens > 0) || r2.usage.input_tokens <= r1.usage.input_tokens ||
    r2.previous_response_id !== r1.id) {
  fail('previous_response_id', 'no tokens kept, or the conversation not longer', show(r2));
}
const s2 = await respond({ input: 'What next?', previous_response_id: r2.id, max_output_tokens: 8,
                           temperature: 0, stream: true },
                         { want: 200, label: 'previous_response_id, streamed' });
const s2r = checkResponseStream('previous_response_id, streamed', s2.events);
if (!(s2r.usage.input_tokens_details.cached_tokens > r2.usage.input_tokens_details.cached_tokens)) {
  fail('previous_response_id, streamed', 'no more tokens kept than before', show(s2r));
}
// r1 and r2 are behind the conversation now: 409, plain and as a
// stream's error event.
await respond({ input: 'Again?', previous_response_id: r1.id, max_output_tokens: 4 },
              { want: 409, label: 'moved on' });
const moved = await respond({ input: 'Again?', previous_response_id: r2.id, max_output_tokens: 4,
                              stream: true }, { want: 200, label: 'moved on, streamed' });
if (moved.events.length !== 1 || moved.events[0].code !== 'conversation_moved_on') {
  fail('moved on, streamed', 'not one error event', moved.text);
}
// One request at a time: a long continuation of the newest decoding, a
// second one is 409 conversation_busy; the first, cancelled, takes its
// conversation with it (then 404).
{
  const ac = new AbortController();
  const res = await fetch(C + '/v1/responses', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, signal: ac.signal,
    body: show({ input: 'Go on.', previous_response_id: s2r.id, max_output_tokens: 30000, stream: true }) });
  if (res.status !== 200) fail('busy', `status ${res.status}`, await res.text());
  const reader = res.body.getReader();
  let seen = '';
  while (!seen.includes('response.output_text.delta')) {
    const { value, done } = await reader.read();
    if (done) fail('busy', 'the long continuation ended', seen);
    seen += new TextDecoder().decode(value);
  }
  await respond({ input: 'Me too.', previous_response_id: s2r.id, max_output_tokens: 4 },
                { want: 409, label: 'busy' });
  ac.abort();
  await reader.closed.catch(() => {});
  for (let i = 0; ; i++) {
    const r = await respond({ input: 'Later.', previous_response_id: s2r.id, max_output_tokens: 4 },
                            { label: 'its conversation gone' });
    if (r.status === 404) break;
    if (r.status !== 409 || i === 100) fail('busy', `status ${r.status} after the cancel`, r.text);
    await new Promise((ok) => setTimeout(ok, 50));
  }
}
// GET and DELETE.
const got2 = await exchange(C, 'GET', `/v1/responses/${r2.id}`, undefined, { want: 200, label: 'stored' });
if (show(got2.json) !== show(r2)) fail('GET', 'not the response answered', got2.text);
const del = await exchange(C, 'DELETE', `/v1/responses/${r2.id}`, undefined, { want: 200 });
if (del.json.id !== r2.id) fail('DELETE', 'another id', del.text);
await exchange(C, 'GET', `/v1/responses/${r2.id}`, undefined, { want: 404, label: 'deleted' });
await exchange(C, 'DELETE', `/v1/responses/${r2.id}`, undefined, { want: 404, label: 'deleted' });
await exchange(C, 'GET', '/v1/responses/resp_unknown', undefined, { want: 404, label: 'unknown' });
await respond({ input: 'x', previous_response_id: 'resp_unknown' },
              { want: 404, label: 'previous_response_id unknown' });
await respond({ input: 'x', previous_response_id: r2.id, stream: true },
              { want: 404, label: 'previous_response_id deleted, streamed' });
// store false: answered, not kept.
const r3 = (await respond({ input: 'Hi.', store: false, max_output_tokens: 3 },
                          { want: 200, label: 'store false' })).json;
if (r3.store !== false) fail('store false', 'store not repeated', show(r3));
await exchange(C, 'GET', `/v1/responses/${r3.id}`, undefined, { want: 404, label: 'store false' });
await respond({ input: 'x', previous_response_id: r3.id },
              { want: 404, label: 'previous_response_id store false' });
// On a server that keeps no conversation (--no-cache-prompt),
// previous_response_id is 400.
const once = (await exchange(S, 'POST', '/v1/responses', { input: 'Hi.', max_output_tokens: 3 },
                             { want: 200, label: '--no-cache-prompt' })).json;
await exchange(S, 'POST', '/v1/responses', { input: 'x', previous_response_id: once.id },
               { want: 400, label: 'its conversation not kept' });

// The key.
for (const [method, path, body] of [['GET', '/v1/models'], ['GET', '/metrics'],
                                    ['POST', '/v1/completions', { prompt, max_tokens: 2 }],
                                    ['POST', '/v1/responses', { input: prompt, max_output_tokens: 2 }]]) {
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
              'method_not_allowed', 'body_too_large', 'busy', 'previous_response_not_found',
              'conversation_moved_on', 'conversation_busy'];
const missing = want.filter((c) => !codes.has(c));
if (missing.length) fail('codes', `not provoked: ${missing}`);
console.log(`serve contract: ${exchanges} exchanges (${events.count} stream events) valid ` +
            `against ${DOC}; error codes seen: ${[...codes].sort().join(' ')}`);
