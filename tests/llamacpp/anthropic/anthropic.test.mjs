// evictd-llama serve spoken to by the official Anthropic client (npm's
// `@anthropic-ai/sdk`, pinned by package-lock.json), run with node's own
// test runner by tests/llamacpp/test_anthropic.py, which starts the real
// evictd and the servers and names them here:
//   SERVE   stories260K (no chat template of its own: ChatML)
//   TOOLS   stories260K with a tool-calling chat template in its GGUF
//           (Cohere's Command R+: under tool_choice "any" the grammar makes
//           even this model call the tool)
//   KEYED   stories260K with --api-key KEY
import { test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

const env = process.env;
const client = (base, key = 'none') =>
  new Anthropic({ baseURL: base, apiKey: key, maxRetries: 0,
                  timeout: 300000 });
const main = client(env.SERVE);
const tools = client(env.TOOLS);
const ASK = [{ role: 'user', content: 'Tell me a story about a cat.' }];
const WEATHER = {
  name: 'get_weather', description: 'The weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } },
                  required: ['city'] } };

const text = (m) => m.content.filter((b) => b.type === 'text')
  .map((b) => b.text).join('');

test('a message, whole and streamed, is the same greedy text', async () => {
  const req = { model: 'any', max_tokens: 24, temperature: 0,
                system: 'You tell short stories.', messages: ASK };
  const m = await main.messages.create(req);
  assert.match(m.id, /^msg_[A-Za-z0-9]{24}$/);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.equal(m.content.length, 1);
  assert.equal(m.content[0].type, 'text');
  assert.ok(m.content[0].text.length > 0);
  assert.equal(m.stop_reason, 'max_tokens');
  assert.equal(m.stop_sequence, null);
  assert.equal(m.usage.output_tokens, 24);
  assert.ok(m.usage.input_tokens + m.usage.cache_read_input_tokens > 10);

  // messages.stream accumulates the events into the same message.
  const s = main.messages.stream(req);
  const deltas = [];
  s.on('text', (d) => deltas.push(d));
  const f = await s.finalMessage();
  assert.equal(text(f), text(m));
  assert.equal(deltas.join(''), text(m));
  assert.ok(deltas.length > 1);
  assert.equal(f.stop_reason, 'max_tokens');
  assert.equal(f.usage.output_tokens, 24);
  assert.equal(f.usage.input_tokens + f.usage.cache_read_input_tokens,
               m.usage.input_tokens + m.usage.cache_read_input_tokens);
});

test('the raw events come in Anthropic\'s order', async () => {
  const stream = await main.messages.create({
    model: 'any', max_tokens: 10, temperature: 0, messages: ASK,
    stream: true });
  const types = [];
  for await (const e of stream) types.push(e.type);
  assert.equal(types[0], 'message_start');
  assert.equal(types[1], 'content_block_start');
  assert.deepEqual(types.slice(-3), ['content_block_stop', 'message_delta',
                                     'message_stop']);
  assert.ok(types.slice(2, -3).every((t) => t === 'content_block_delta'));
});

test('a stop sequence ends the text and is named', async () => {
  const req = { model: 'any', max_tokens: 60, temperature: 0, messages: ASK };
  const full = text(await main.messages.create(req));
  // Letters from the middle of the greedy text: the text stops before
  // their first place.
  const words = [...new Set([...full.matchAll(/[a-z]{3,}/g)].map((m) => m[0]))];
  assert.ok(words.length > 2, full);
  const stop = words[Math.floor(words.length / 2)];
  for (const stream of [false, true]) {
    const r = { ...req, stop_sequences: ['\u0001never', stop] };
    const m = stream ? await main.messages.stream(r).finalMessage()
                     : await main.messages.create(r);
    assert.equal(m.stop_reason, 'stop_sequence');
    assert.equal(m.stop_sequence, stop);
    assert.equal(text(m), full.slice(0, full.indexOf(stop)));
  }
});

test('count_tokens counts the prompt a message decodes', async () => {
  const req = { model: 'any', system: 'You tell short stories.',
                messages: ASK };
  const { input_tokens } = await main.messages.countTokens(req);
  const m = await main.messages.create({ ...req, max_tokens: 1 });
  assert.equal(input_tokens,
               m.usage.input_tokens + m.usage.cache_read_input_tokens);
  const more = await main.messages.countTokens({
    ...req, messages: [...ASK, { role: 'assistant', content: 'Once' },
                       { role: 'user', content: 'Go on.' }] });
  assert.ok(more.input_tokens > input_tokens);
});

test('a tool is called, whole and streamed, and its result answered',
     async () => {
  const req = { model: 'any', max_tokens: 300, temperature: 0,
                tools: [WEATHER],
                tool_choice: { type: 'any', disable_parallel_tool_use: true },
                messages: [{ role: 'user',
                             content: 'What is the weather in Paris?' }] };
  const m = await tools.messages.create(req);
  assert.equal(m.stop_reason, 'tool_use');
  assert.equal(m.content.length, 1);
  const call = m.content[0];
  assert.equal(call.type, 'tool_use');
  assert.equal(call.name, 'get_weather');
  assert.match(call.id, /^[A-Za-z0-9_-]+$/);
  assert.equal(typeof call.input.city, 'string');

  const s = tools.messages.stream(req);
  const json = [];
  s.on('inputJson', (d) => json.push(d));
  const f = await s.finalMessage();
  assert.equal(f.stop_reason, 'tool_use');
  assert.deepEqual(f.content.map((b) => [b.type, b.name, b.input]),
                   [['tool_use', 'get_weather', call.input]]);
  assert.deepEqual(JSON.parse(json.join('')), call.input);

  // The answer goes back as the assistant's turn, the result as the user's.
  const next = await tools.messages.create({
    model: 'any', max_tokens: 8, temperature: 0, tools: [WEATHER],
    messages: [...req.messages, { role: 'assistant', content: m.content },
               { role: 'user', content: [
                 { type: 'tool_result', tool_use_id: call.id,
                   content: 'Sunny, 25 C' }] }] });
  assert.equal(next.stop_reason, 'max_tokens');
  assert.equal(next.content[0].type, 'text');
});

test('thinking is taken, and no messages, as llama-server takes them',
     async () => {
  const m = await main.messages.create({
    model: 'any', max_tokens: 3, messages: ASK,
    thinking: { type: 'enabled', budget_tokens: 1024 } });
  assert.equal(m.type, 'message');
  const e = await main.messages.create({ model: 'any', max_tokens: 3,
                                         messages: [] });
  assert.equal(e.usage.output_tokens, 3);
});

test('what serve cannot honour is a 400 in Anthropic\'s shape', async () => {
  const bad = [
    { thinking: { type: 'enabled', budget_tokens: -5 } },
    { messages: [{ role: 'user', content: [
      { type: 'image', source: { type: 'base64', media_type: 'image/png',
                                 data: 'iVBORw0KGgo=' } }] }] },
    { tools: [{ type: 'web_search_20250305', name: 'web_search' }] },
    { temperature: 1.5 },
  ];
  for (const b of bad) {
    await assert.rejects(
      main.messages.create({ model: 'any', max_tokens: 4, messages: ASK,
                             ...b }),
      (e) => {
        assert.ok(e instanceof Anthropic.BadRequestError, String(e));
        assert.equal(e.status, 400);
        assert.equal(e.error.type, 'error');
        assert.equal(e.error.error.type, 'invalid_request_error');
        assert.ok(e.error.error.message.length > 0);
        return true;
      });
  }
});

test('the API key is taken as x-api-key, and refused in Anthropic\'s shape',
     async () => {
  const m = await client(env.KEYED, env.KEY).messages.create({
    model: 'any', max_tokens: 2, messages: ASK });
  assert.equal(m.type, 'message');
  await assert.rejects(
    client(env.KEYED, 'wrong').messages.create({
      model: 'any', max_tokens: 2, messages: ASK }),
    (e) => {
      assert.ok(e instanceof Anthropic.AuthenticationError, String(e));
      assert.equal(e.error.error.type, 'authentication_error');
      return true;
    });
});
