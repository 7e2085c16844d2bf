// evictd-llama serve spoken to by the official OpenAI client (npm's
// `openai`, pinned by package-lock.json), run with node's own test runner
// by tests/llamacpp/test_openai.py, which starts the real evictd and the
// servers and names them here:
//   SERVE   stories260K, --exact, 4 sequences, budget 64 (the main one)
//   FAST    stories260K on llama.cpp's fast settings (the defaults)
//   BUSY    --parallel 1 --queue 1 (a full queue)
//   KEYED   --api-key-file; KEY its key
//   CONV    --exact, 2 sequences, keeping conversations (the default; the
//           others run with --no-cache-prompt): the Responses API
//   EVICTD  the daemon (its /metrics: sessions, forks)
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const env = process.env;
const client = (base, key = 'none') =>
  new OpenAI({ baseURL: base + '/v1', apiKey: key, maxRetries: 0,
               timeout: 300000 });
const main = client(env.SERVE);
const STORY = 'Once upon a time';
const CHAT = [{ role: 'system', content: 'You tell short stories.' },
              { role: 'user', content: 'Tell me a story about a cat.' }];

async function metric(base, name) {
  const text = await (await fetch(base + '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  assert.ok(line, `${name} in ${base}/metrics`);
  return Number(line.split(' ')[1]);
}

async function until(what, ok, ms = 10000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await ok()) return;
    assert.ok(Date.now() < end, `waited ${ms} ms for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

const sessions = () => metric(env.EVICTD, 'evictd_sessions');

// The daemon's session count once nothing is being deleted: a request's
// session is deleted as it ends, through its lane, so a count read right
// after an answer may still hold it. Idle, a serve with --no-cache-prompt
// holds no session; CONV, sharing the daemon, holds one per conversation
// it keeps, parked in a slot or saved (whatever ran on it before: the
// contract's exchanges, these tests).
async function settled() {
  let kept;
  await until('no session left but CONV\'s conversations', async () => {
    kept = await metric(env.CONV, 'evictd_llama_conversations_parked') +
           await metric(env.CONV, 'evictd_llama_conversations_saved');
    return await sessions() === kept;
  });
  return kept;
}

// Reads a stream: the text of each choice, its finish_reason, the chunks.
async function collect(stream, field = (c) => c.text) {
  const out = { text: [], finish: [], chunks: [], usage: null };
  for await (const chunk of stream) {
    out.chunks.push(chunk);
    if (chunk.usage) out.usage = chunk.usage;
    for (const c of chunk.choices) {
      out.text[c.index] = (out.text[c.index] ?? '') + (field(c) ?? '');
      if (c.finish_reason) out.finish[c.index] = c.finish_reason;
    }
  }
  return out;
}

test('GET /v1/models names the served model', async () => {
  const list = await main.models.list();
  assert.equal(list.data.length, 1);
  assert.equal(list.data[0].id, 'stories260K.gguf');
  assert.equal(list.data[0].object, 'model');
  await assert.rejects(main.models.retrieve('other'),
                       (e) => e instanceof OpenAI.NotFoundError);
});

test('completions: plain, the text of /completion', async () => {
  const r = await main.completions.create({ model: 'any', prompt: STORY,
                                            max_tokens: 40, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.match(r.id, /^cmpl-/);
  assert.equal(typeof r.created, 'number');
  assert.equal(r.model, 'stories260K.gguf');
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].index, 0);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 40);
  assert.ok(r.usage.prompt_tokens > 1);
  assert.equal(r.usage.total_tokens,
               r.usage.prompt_tokens + r.usage.completion_tokens);
  const native = await (await fetch(env.SERVE + '/completion', {
    method: 'POST', body: JSON.stringify({ prompt: STORY, n_predict: 40,
                                     temperature: 0 }) }))
    .json();
  assert.equal(r.choices[0].text, native.content);
  assert.match(r.choices[0].text, /Lily/);
});

test('completions: streamed equals plain, ends with [DONE]', async () => {
  const plain = await main.completions.create({ prompt: STORY, max_tokens: 60,
                                                temperature: 0 });
  const s = await collect(await main.completions.create({
    prompt: STORY, max_tokens: 60, temperature: 0, stream: true,
    stream_options: { include_usage: true } }));
  assert.equal(s.text[0], plain.choices[0].text);
  assert.equal(s.finish[0], 'length');
  assert.ok(s.chunks.length > 20, 'token by token');
  assert.ok(s.chunks.every((c) => c.object === 'text_completion'));
  assert.deepEqual(s.usage, plain.usage);
  // The SDK stops at [DONE]; the raw stream says it.
  const raw = await (await fetch(env.SERVE + '/v1/completions', {
    method: 'POST', body: JSON.stringify({ prompt: STORY, max_tokens: 3,
                                           stream: true }) })).text();
  assert.ok(raw.trimEnd().endsWith('data: [DONE]'), raw);
});

test('chat: plain and streamed, through the ChatML fallback', async () => {
  const r = await main.chat.completions.create({ model: 'any', messages: CHAT,
                                                 max_tokens: 50,
                                                 temperature: 0 });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  const m = r.choices[0].message;
  assert.equal(m.role, 'assistant');
  assert.ok(m.content.length > 20, m.content);
  const s = await collect(await main.chat.completions.create({
    messages: CHAT, max_tokens: 50, temperature: 0, stream: true }),
    (c) => c.delta.content);
  assert.equal(s.text[0], m.content);
  assert.equal(s.finish[0], r.choices[0].finish_reason);
  assert.equal(s.chunks[0].object, 'chat.completion.chunk');
  assert.equal(s.chunks[0].choices[0].delta.role, 'assistant');
  // Content as a list of text parts is one message, its parts joined
  // by newlines (as llama-server joins them).
  const parts = await main.chat.completions.create({
    messages: [CHAT[0], { role: 'user', content: [
      { type: 'text', text: 'Tell me a story' },
      { type: 'text', text: 'about a cat.' }] }],
    max_tokens: 50, temperature: 0 });
  const joined = await main.chat.completions.create({
    messages: [CHAT[0], { role: 'user',
                          content: 'Tell me a story\nabout a cat.' }],
    max_tokens: 50, temperature: 0 });
  assert.equal(parts.choices[0].message.content,
               joined.choices[0].message.content);
  assert.notEqual(parts.choices[0].message.content, m.content);
});

test('n: one prompt decoded once, then forked', async () => {
  const forks = await metric(env.EVICTD, 'evictd_forks_total');
  const ask = { prompt: STORY, max_tokens: 30, n: 3, temperature: 0.9,
                seed: 11 };
  const r = await main.completions.create(ask);
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  assert.equal(await metric(env.EVICTD, 'evictd_forks_total') - forks, 2);
  const texts = r.choices.map((c) => c.text);
  assert.equal(new Set(texts).size, 3, 'each choice draws its own');
  assert.equal(r.usage.completion_tokens, 90);
  const again = await main.completions.create(ask);
  assert.deepEqual(again.choices.map((c) => c.text), texts, 'the seed');
  const s = await collect(await main.completions.create({ ...ask,
                                                          stream: true }));
  assert.deepEqual(s.text, texts);
  const chat = await main.chat.completions.create({
    messages: CHAT, max_tokens: 20, n: 2, temperature: 0.9, seed: 4 });
  assert.equal(chat.choices.length, 2);
  assert.equal(chat.usage.completion_tokens, 40);
});

test('stop: a string or a list, not returned, finish_reason stop',
     async () => {
  const plain = (await main.completions.create({
    prompt: STORY, max_tokens: 60, temperature: 0 })).choices[0].text;
  const at = plain.indexOf('Lily');
  assert.ok(at > 0, plain);
  for (const stop of ['Lily', ['zzz', 'Lily']]) {
    const r = await main.completions.create({ prompt: STORY, max_tokens: 60,
                                              temperature: 0, stop });
    assert.equal(r.choices[0].text, plain.slice(0, at));
    assert.equal(r.choices[0].finish_reason, 'stop');
    const s = await collect(await main.completions.create({
      prompt: STORY, max_tokens: 60, temperature: 0, stop, stream: true }));
    assert.equal(s.text[0], plain.slice(0, at));
    assert.equal(s.finish[0], 'stop');
  }
});

test('errors: OpenAI shape, right status', async () => {
  const bad = async (body, param) => {
    await assert.rejects(main.completions.create(body), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.equal(e.status, 400);
      assert.equal(e.param, param);
      assert.equal(e.type, 'invalid_request_error');
      return true;
    });
  };
  await bad({ prompt: STORY, max_tokens: 'x' }, 'max_tokens');
  await bad({ prompt: STORY, max_tokens: 0 }, 'max_tokens');
  await bad({ prompt: STORY, temperature: 5 }, 'temperature');
  await bad({ prompt: STORY, top_p: 2 }, 'top_p');
  await bad({ prompt: STORY, n: 100 }, 'n');
  await bad({ prompt: STORY, stop: ['a', 'b', 'c', 'd', 'e'] }, 'stop');
  await bad({ prompt: 5 }, 'prompt');
  await bad({ prompt: STORY, stream: 'yes' }, 'stream');
  await assert.rejects(main.chat.completions.create({ messages: [] }),
                       (e) => e.status === 400 && e.param === 'messages');
  await assert.rejects(main.chat.completions.create({
    messages: [{ role: 'wizard', content: 'x' }] }),
                       (e) => e.status === 400 && e.param === 'messages');
  // Fields serve does not use are accepted and ignored.
  const r = await main.completions.create({ prompt: STORY, max_tokens: 2,
                                            user: 'u', presence_penalty: 0,
                                            something_new: { a: 1 } });
  assert.equal(r.usage.completion_tokens, 2);
  // 404 and 413 in the same shape.
  let res = await fetch(env.SERVE + '/v1/nowhere');
  assert.equal(res.status, 404);
  assert.equal((await res.json()).error.type, 'not_found_error');
  res = await fetch(env.SERVE + '/v1/completions', {
    method: 'POST', body: 'x'.repeat(2 << 20) });
  assert.equal(res.status, 413);
  const e = (await res.json()).error;
  assert.ok(e.message && e.type && e.code && 'param' in e, JSON.stringify(e));
});

test('a full queue: 503 with Retry-After; cancel while queued', async () => {
  const busy = client(env.BUSY);
  const running = new AbortController(), queued = new AbortController();
  const s0 = await settled();
  const long = await busy.completions.create({
    prompt: STORY, max_tokens: 30000, ignore_eos: true, stream: true },
    { signal: running.signal });
  const it = long[Symbol.asyncIterator]();
  await it.next();
  const waiting = busy.completions.create({ prompt: STORY, max_tokens: 5 },
                                          { signal: queued.signal })
    .catch((e) => e);
  await until('one request queued',
              async () => await metric(env.BUSY, 'evictd_llama_requests_queued')
                === 1);
  const res = await fetch(env.BUSY + '/v1/completions', {
    method: 'POST', body: JSON.stringify({ prompt: STORY, max_tokens: 5 }) });
  assert.equal(res.status, 503);
  assert.equal(res.headers.get('retry-after'), '1');
  assert.equal((await res.json()).error.code, 'busy');
  await assert.rejects(busy.completions.create({ prompt: STORY }),
                       (e) => e instanceof OpenAI.InternalServerError &&
                              e.status === 503);
  // The queued request's client goes away: it leaves the queue at once,
  // having had no session.
  queued.abort();
  assert.ok((await waiting) instanceof Error);
  await until('the queue empty',
              async () => await metric(env.BUSY, 'evictd_llama_requests_queued')
                === 0);
  assert.equal(await sessions(), s0 + 1);
  running.abort();
  await until('the sessions back', async () => await sessions() === s0);
});

test('a client aborting mid-stream: its session goes at once', async () => {
  const s0 = await settled();
  const ac = new AbortController();
  const stream = await main.chat.completions.create({
    messages: CHAT, max_tokens: 20000, ignore_eos: true, stream: true },
    { signal: ac.signal });
  let n = 0, aborted = false;
  try {
    for await (const chunk of stream) {
      assert.ok(chunk.choices);
      if (++n === 30) {
        assert.equal(await sessions(), s0 + 1);
        ac.abort();
        aborted = true;
      }
    }
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIUserAbortError, String(e));
  }
  assert.ok(aborted && n < 20000, `read ${n} chunks`);
  await until('the session deleted', async () => await sessions() === s0);
});

test('16 requests at once: each the text it has alone', async () => {
  const ask = (i) => ({ prompt: `${STORY} there was a ${['cat', 'dog',
    'bird', 'fish'][i % 4]} number ${i}`, max_tokens: 25, temperature: 0 });
  const s0 = await settled();
  const alone = [];
  for (let i = 0; i < 16; i++)
    alone.push((await main.completions.create(ask(i))).choices[0].text);
  const all = await Promise.all([...Array(16).keys()].map((i) =>
    main.completions.create(ask(i))));
  assert.deepEqual(all.map((r) => r.choices[0].text), alone);
  await until('the sessions deleted', async () => await sessions() === s0);
});

test('3,000 tokens from stories260K: no context limit', async () => {
  const r = await main.completions.create({ prompt: STORY, max_tokens: 3000,
                                            temperature: 0,
                                            ignore_eos: true });
  assert.equal(r.usage.completion_tokens, 3000);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.ok(r.choices[0].text.length > 3000);
});

test('the fast settings (the defaults) serve too', async () => {
  const fast = client(env.FAST);
  const r = await fast.chat.completions.create({ messages: CHAT,
                                                 max_tokens: 30 });
  assert.ok(r.choices[0].message.content.length > 0);
});

test('--api-key: 401 in OpenAI shape without it, /health open',
     async () => {
  await assert.rejects(client(env.KEYED, 'wrong').models.list(), (e) => {
    assert.ok(e instanceof OpenAI.AuthenticationError, String(e));
    assert.equal(e.code, 'invalid_api_key');
    return true;
  });
  const r = await client(env.KEYED, env.KEY).completions.create({
    prompt: STORY, max_tokens: 3 });
  assert.equal(r.usage.completion_tokens, 3);
  assert.equal((await fetch(env.KEYED + '/health')).status, 200);
  assert.equal((await fetch(env.KEYED + '/metrics')).status, 401);
});

// ---- the Responses API and conversations, on CONV -------------------------

const conv = client(env.CONV);
const STORIES = 'You tell short stories.';

test('responses: plain, output_text, status and usage', async () => {
  const r = await conv.responses.create({ model: 'any', instructions: STORIES,
    input: 'Tell me a story about a cat.', max_output_tokens: 40,
    temperature: 0 });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.model, 'stories260K.gguf');
  assert.ok(r.output_text.length > 20, r.output_text);
  assert.equal(r.output_text, r.output[0].content[0].text);
  assert.equal(r.output[0].role, 'assistant');
  const u = r.usage;
  assert.ok(u.output_tokens >= 1 && u.output_tokens <= 40);
  if (r.status === 'incomplete') {
    assert.equal(r.incomplete_details.reason, 'max_output_tokens');
    assert.equal(u.output_tokens, 40);
  } else {
    assert.equal(r.status, 'completed');
    assert.equal(r.incomplete_details, null);
  }
  assert.ok(u.input_tokens > 1);
  assert.equal(u.input_tokens_details.cached_tokens, 0);
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  // instructions and input are the chat's system and user messages: the
  // same prompt, the same text as /v1/chat/completions (on SERVE).
  const chat = await main.chat.completions.create({ messages: [
    { role: 'system', content: STORIES },
    { role: 'user', content: 'Tell me a story about a cat.' }],
    max_tokens: 40, temperature: 0 });
  assert.equal(r.output_text, chat.choices[0].message.content);
  assert.equal(u.input_tokens, chat.usage.prompt_tokens);
  // Messages of input_text parts are the same input.
  const parts = await conv.responses.create({ instructions: STORIES,
    input: [{ role: 'user', content: [
      { type: 'input_text', text: 'Tell me a story ' },
      { type: 'input_text', text: 'about a cat.' }] }],
    max_output_tokens: 40, temperature: 0 });
  assert.equal(parts.output_text, r.output_text);
});

test('responses: streamed, the deltas join to the plain text', async () => {
  const ask = { instructions: STORIES, input: 'Tell me a story about a bird.',
                max_output_tokens: 50, temperature: 0 };
  const plain = await conv.responses.create(ask);
  const types = [];
  let text = '', done = null, last = null;
  for await (const ev of await conv.responses.create({ ...ask,
                                                       stream: true })) {
    assert.equal(ev.sequence_number, types.length);
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.output_text.done') done = ev.text;
    if (ev.type === 'response.completed' ||
        ev.type === 'response.incomplete') last = ev.response;
  }
  assert.deepEqual(types.slice(0, 4), ['response.created',
    'response.in_progress', 'response.output_item.added',
    'response.content_part.added']);
  assert.deepEqual(types.slice(-4, -1), ['response.output_text.done',
    'response.content_part.done', 'response.output_item.done']);
  assert.equal(types.at(-1), `response.${plain.status}`);
  assert.ok(types.filter((t) => t === 'response.output_text.delta').length
            > 10, 'token by token');
  assert.equal(text, done);
  assert.equal(text, plain.output_text);
  assert.equal(last.output[0].content[0].text, text);
  assert.equal(last.status, plain.status);
  // The same request again: its prompt continues from the checkpoint the
  // first kept before its last tokens, so more of it is cached.
  const { input_tokens_details: lastCached, ...lastRest } = last.usage;
  const { input_tokens_details: plainCached, ...plainRest } = plain.usage;
  assert.deepEqual(lastRest, plainRest);
  assert.ok(lastCached.cached_tokens >= plainCached.cached_tokens);
  // The SDK's own accumulation of the events (it checks their order and
  // indices) comes to the same response.
  const final = await conv.responses.stream(ask).finalResponse();
  assert.equal(final.output_text, plain.output_text);
});

test('responses: previous_response_id continues the conversation',
     async () => {
  const chain = async () => {
    const a = await conv.responses.create({
      input: 'Tell me a story about a dog.', max_output_tokens: 20,
      temperature: 0 });
    const b = await conv.responses.create({
      input: 'What did the dog do next?', previous_response_id: a.id,
      max_output_tokens: 20, temperature: 0 });
    return [a, b];
  };
  const hits = await metric(env.CONV, 'evictd_llama_conversation_hits_total');
  const [a, b] = await chain();
  assert.equal(b.previous_response_id, a.id);
  assert.ok(b.usage.input_tokens_details.cached_tokens > 0,
            JSON.stringify(b.usage));
  assert.ok(b.usage.input_tokens > a.usage.input_tokens);
  // What was kept is the first response's prompt and (nearly all) its
  // answer; only the new turn was decoded.
  assert.ok(b.usage.input_tokens_details.cached_tokens >=
            a.usage.input_tokens + a.usage.output_tokens - 1,
            JSON.stringify([a.usage, b.usage]));
  assert.ok(await metric(env.CONV, 'evictd_llama_conversation_hits_total')
            > hits);
  assert.notEqual(b.output_text, a.output_text);
  // Greedy: the same chain again, the same texts.
  const [a2, b2] = await chain();
  assert.equal(a2.output_text, a.output_text);
  assert.equal(b2.output_text, b.output_text);
  assert.deepEqual(b2.usage, b.usage);
  // a's conversation went on with b: continuing a again is a conflict,
  // plain, or as the stream's error event.
  await assert.rejects(conv.responses.create({ input: 'Again.',
    previous_response_id: a2.id, max_output_tokens: 3 }), (e) => {
    assert.ok(e instanceof OpenAI.ConflictError, String(e));
    assert.equal(e.code, 'conversation_moved_on');
    return true;
  });
  await assert.rejects(async () => {
    for await (const ev of await conv.responses.create({ input: 'Again.',
      previous_response_id: a2.id, max_output_tokens: 3, stream: true }))
      void ev;
  }, (e) => {
    assert.ok(e instanceof OpenAI.APIError, String(e));
    assert.equal(e.code, 'conversation_moved_on');
    return true;
  });
});

test('responses.retrieve: the stored response; delete; store false',
     async () => {
  const r = await conv.responses.create({ input: 'Hello.',
                                          max_output_tokens: 8 });
  const got = await conv.responses.retrieve(r.id);
  assert.deepEqual(got, r);
  assert.equal(got.output_text, r.output_text);
  const del = await conv.responses.delete(r.id);
  assert.deepEqual(del, { id: r.id, object: 'response', deleted: true });
  await assert.rejects(conv.responses.retrieve(r.id),
                       (e) => e instanceof OpenAI.NotFoundError);
  const gone = await conv.responses.create({ input: 'Hello.', store: false,
                                             max_output_tokens: 3 });
  assert.equal(gone.store, false);
  await assert.rejects(conv.responses.retrieve(gone.id),
                       (e) => e instanceof OpenAI.NotFoundError);
});

test('responses: an unknown previous_response_id is NotFoundError',
     async () => {
  for (const stream of [false, true]) {
    await assert.rejects(conv.responses.create({ input: 'Hi.', stream,
      previous_response_id: 'resp_never_made' }), (e) => {
      assert.ok(e instanceof OpenAI.NotFoundError, String(e));
      assert.equal(e.status, 404);
      assert.equal(e.code, 'previous_response_not_found');
      assert.equal(e.param, 'previous_response_id');
      return true;
    });
  }
  await assert.rejects(conv.responses.create({ input: 'x',
    tools: [{ type: 'function', name: 'f', parameters: {} }] }), (e) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.equal(e.param, 'tools');
    return true;
  });
});

test('chat: the default (cache_prompt) continues the conversation a ' +
     'second turn resends', async () => {
  const reused = () => metric(env.CONV,
                              'evictd_llama_prompt_tokens_reused_total');
  const msgs = [{ role: 'system', content: STORIES },
                { role: 'user', content: 'Tell me a story about a frog.' }];
  const first = await conv.chat.completions.create({ messages: msgs,
    max_tokens: 20, temperature: 0 });
  const turn = [...msgs, first.choices[0].message,
                { role: 'user', content: 'And then?' }];
  // cache_prompt false: decoded afresh, nothing reused.
  const r0 = await reused();
  const afresh = await conv.chat.completions.create({ messages: turn,
    max_tokens: 20, temperature: 0, cache_prompt: false });
  assert.equal(await reused(), r0);
  // The default: the first turn's conversation continued, at least its
  // prompt kept.
  const second = await conv.chat.completions.create({ messages: turn,
    max_tokens: 20, temperature: 0 });
  assert.ok(await reused() - r0 >= first.usage.prompt_tokens,
            `${await reused() - r0} tokens reused`);
  assert.equal(second.usage.prompt_tokens, afresh.usage.prompt_tokens);
  assert.ok(second.choices[0].message.content.length > 0);
});

test('previous_response_not_found names the id it did not find',
     async () => {
  await assert.rejects(conv.responses.create({ input: 'Hi.',
    previous_response_id: 'resp_never_made_either' }), (e) => {
    assert.match(e.message, /resp_never_made_either/);
    return true;
  });
});

test('a response cut at max_output_tokens is continued with all its ' +
     'tokens', async () => {
  const a = await conv.responses.create({ input: 'Tell me about a fox.',
    max_output_tokens: 12, temperature: 0 });
  assert.equal(a.status, 'incomplete');
  assert.equal(a.output[0].status, 'incomplete');
  const b = await conv.responses.create({ input: 'Go on.',
    previous_response_id: a.id, max_output_tokens: 3 });
  // Every token of a's answer is in the conversation b continues: the
  // last one, drawn and shown but never decoded, is decoded as b's first.
  assert.equal(b.usage.input_tokens_details.cached_tokens,
               a.usage.input_tokens + a.usage.output_tokens - 1);
  assert.ok(b.usage.input_tokens > a.usage.input_tokens +
            a.usage.output_tokens);
});

test('a stored response whose conversation another request took over ' +
     'is not continued on that history', async () => {
  const ask = { input: 'A story about an owl.', max_output_tokens: 10,
                temperature: 0 };
  const next = (id) => conv.responses.create({ input: 'And?',
    previous_response_id: id, max_output_tokens: 10, temperature: 0 });
  const want = (await next((await conv.responses.create(ask)).id))
    .output_text;
  const r = await conv.responses.create(ask);
  // A raw prompt that is r's prompt and other text, as long as r's
  // conversation once generated: it takes r's conversation over.
  const prompt = '<|im_start|>user\n' + ask.input +
    '<|im_end|>\n<|im_start|>assistant\nZq';
  const n = r.usage.input_tokens + r.usage.output_tokens - 1;
  const probe = await (await fetch(env.CONV + '/completion', { method: 'POST',
    body: JSON.stringify({ prompt, n_predict: 1, cache_prompt: false })
  })).json();
  const reused = await metric(env.CONV,
                              'evictd_llama_prompt_tokens_reused_total');
  await fetch(env.CONV + '/completion', { method: 'POST',
    body: JSON.stringify({ prompt, n_predict: n + 1 - probe.tokens_evaluated,
                           ignore_eos: true }) });
  assert.ok(await metric(env.CONV, 'evictd_llama_prompt_tokens_reused_total')
            - reused >= r.usage.input_tokens - 1, 'it took r\'s over');
  // A conflict or not found are honest answers; another history is not.
  let after;
  try {
    after = (await next(r.id)).output_text;
  } catch (e) {
    assert.ok(e instanceof OpenAI.ConflictError ||
              e instanceof OpenAI.NotFoundError, String(e));
    return;
  }
  assert.equal(after, want, 'continued on the other request\'s history');
});
