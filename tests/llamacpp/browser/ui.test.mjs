// llama.cpp's web UI, as serve serves it, in Debian's chromium driven by
// npm's playwright-core (pinned by package-lock.json), run with node's own
// test runner by tests/llamacpp/test_ui.py, which starts the real evictd
// and the servers and names them here:
//   SERVE    stories260K, a window of 256 (4 of them sinks), the UI's
//            max_tokens (MAX_TOKENS) set by --ui-config: a turn's answer
//            is at most that long, less than the (256 - 4) / 2 positions
//            a new turn may go back where its tokens part from the
//            answer's (a sampled answer's tokens are not always the ones
//            its text tokenizes to), and the first message is longer
//            than it, since serve goes back over at most half of a
//            conversation: so every turn continues the conversation
//   LONG     stories260K, ignore_eos by --ui-config: answers that run on
//            until stopped
//   KEYED    --api-key KEY
//   TRAIN    the model's training context, in tokens
//   SHOTS    the folder the screenshots go to (the test's artifacts)
// The chat page is used as a person would: typing in its box, Enter, the
// Stop button, the API key splash; what the page shows is read from its
// accessible names (the assistant's messages are groups named "Assistant
// message with actions"), what serve did from its /slots and /metrics.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { chromium } from 'playwright-core';

const env = process.env;
const TRAIN = Number(env.TRAIN);
const ASSISTANT = '[aria-label="Assistant message with actions"]';
const USER = '[aria-label="User message with actions"]';
let browser;

before(async () => {
  browser = await chromium.launch({
    executablePath: env.CHROMIUM || '/usr/bin/chromium',
    // no sandbox (CI runs as root); nothing but 127.0.0.1 reached
    args: ['--no-sandbox', '--disable-background-networking',
           '--disable-component-update', '--disable-sync',
           '--disable-default-apps', '--no-first-run',
           '--disable-dev-shm-usage'],
  });
});

after(async () => {
  await browser?.close();
});

// A fresh profile (its own IndexedDB and localStorage) on a page of base,
// the page's errors and the requests it made kept for the asserts.
async function open(base) {
  const context = await browser.newContext({
    viewport: { width: 1280, height: 900 } });
  const page = await context.newPage();
  page.log = [];
  page.requests = [];
  page.on('console', (m) => page.log.push(`${m.type()}: ${m.text()}`));
  page.on('pageerror', (e) => page.log.push(`pageerror: ${e.message}`));
  page.on('request', (r) => page.requests.push(
    { method: r.method(), url: r.url(), body: r.postData() }));
  await page.goto(base + '/');
  return page;
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(env.SHOTS, name + '.png') });
}

async function slots(base, key) {
  const r = await fetch(base + '/slots',
    { headers: key ? { Authorization: 'Bearer ' + key } : {} });
  assert.equal(r.status, 200);
  return r.json();
}

async function metric(base, name) {
  const text = await (await fetch(base + '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(name + ' '));
  assert.ok(line, `${name} in ${base}/metrics`);
  return Number(line.split(' ')[1]);
}

async function until(what, ok, ms = 30000) {
  const end = Date.now() + ms;
  for (;;) {
    if (await ok()) return;
    assert.ok(Date.now() < end, `waited ${ms} ms for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const stop = (page) => page.getByRole('button', { name: 'Stop', exact: true });

// Types text in the chat box and sends it with Enter.
async function say(page, text) {
  const box = page.locator('textarea').first();
  await box.waitFor({ state: 'visible', timeout: 30000 });
  await box.fill(text);
  await box.press('Enter');
}

// Sends text and waits for the answer to end: one more assistant message,
// not empty, and the Stop button gone. The answer's text.
async function turn(page, text) {
  const before = await page.locator(ASSISTANT).count();
  await say(page, text);
  await until('the answer to "' + text + '"', async () =>
    await page.locator(ASSISTANT).count() > before &&
    await stop(page).count() === 0, 120000);
  const last = page.locator(ASSISTANT).last();
  const said = (await last.innerText()).trim();
  assert.ok(said.length > 0, 'an empty answer');
  return said;
}

// No error shown: llama-server's page shows its context error in a dialog.
async function noError(page) {
  assert.equal(await page.getByRole('alertdialog').count(), 0,
    'an error dialog:\n' + page.log.join('\n'));
  assert.equal(await page.getByRole('dialog').count(), 0,
    'a dialog:\n' + page.log.join('\n'));
}

// The sessions of the conversations serve holds in its slots.
const sessions = async (base) =>
  new Set((await slots(base)).filter((s) => s.session).map((s) => s.session));

// The one conversation serve holds for the page, the slot holding it
// (parked between turns): the one slot whose session is not one of old.
async function conversation(base, old) {
  const held = (await slots(base)).filter((s) => s.session &&
                                          !old.has(s.session));
  assert.equal(held.length, 1, JSON.stringify(held));
  return held[0];
}

// 150 tokens in the template, more than an answer's MAX_TOKENS (above).
const OPENING = 'Once upon a time, there was a little girl named Lily. ' +
  'She loved to play outside in the park with her big brown dog, Max. ' +
  'One day, Lily and Max found a shiny red ball under a tree. They ' +
  'played with the ball all day long. Tell me a story about what ' +
  'happened next.';

const hits = (base) => metric(base, 'evictd_llama_conversation_hits_total');

test('a conversation several times the training context, reloaded', async () => {
  const page = await open(env.SERVE);
  const old = await sessions(env.SERVE);
  const first = await turn(page, OPENING);
  assert.ok(first.length > 0);
  await shot(page, '1-first-answer');
  // The request the page made: streamed, with the settings --ui-config
  // gave it, and its conversation's id.
  const posts = page.requests.filter((r) => r.method === 'POST' &&
                                     r.url.endsWith('/v1/chat/completions'));
  assert.ok(posts.length >= 1);
  const body = JSON.parse(posts[0].body);
  assert.equal(body.stream, true);
  assert.equal(body.max_tokens, Number(env.MAX_TOKENS));
  const opening = await (await fetch(
    env.SERVE + '/v1/chat/completions/input_tokens',
    { method: 'POST', body: JSON.stringify({ messages: body.messages }) }))
    .json();
  assert.ok(opening.input_tokens > body.max_tokens, JSON.stringify(opening));
  assert.equal(body.timings_per_token, true);
  // Turn after turn until the conversation is three times the model's
  // training context: every one answered, no error, the window's budget
  // all serve holds of it.
  const topics = ['a dog', 'a bird', 'the sun', 'a tree', 'a boat',
                  'a ball', 'a cake', 'a fish', 'a car', 'the moon'];
  let turns = 1;
  let slot = await conversation(env.SERVE, old);
  const hit0 = await hits(env.SERVE);
  while (slot.n < 3 * TRAIN) {
    assert.ok(turns < 150, `${turns} turns, still ${slot.n} positions`);
    await turn(page, `Tell me a story about ${topics[turns % 10]}.`);
    turns++;
    await noError(page);
    slot = await conversation(env.SERVE, old);
  }
  // each turn continued the one conversation: its new tokens decoded
  assert.equal(await hits(env.SERVE) - hit0, turns - 1);
  assert.equal(await page.locator(ASSISTANT).count(), turns);
  const { window } = await (await fetch(env.SERVE + '/props')).json();
  assert.equal(slot.held, window.budget);
  assert.equal(slot.evicted, slot.n - slot.held);
  console.log(`# ${turns} turns, ${slot.n} positions ` +
              `(${(slot.n / TRAIN).toFixed(1)}x the training context), ` +
              `${slot.held} held, ${slot.evicted} evicted`);
  // The page's own account of the last turn, its context gauge: the
  // conversation's tokens, well past the context.
  await page.locator('[aria-label="Context usage"]').first().click();
  await page.getByRole('status').first().waitFor({ timeout: 10000 });
  await shot(page, '2-past-the-context');
  await page.keyboard.press('Escape');
  // Reload: the conversation comes back from the browser's storage, and
  // goes on.
  await page.reload();
  await page.locator(ASSISTANT).nth(turns - 1).waitFor({ timeout: 30000 });
  assert.equal(await page.locator(USER).count(), turns);
  await turn(page, 'Tell me one more story.');
  assert.equal(await page.locator(ASSISTANT).count(), turns + 1);
  await noError(page);
  const after = await conversation(env.SERVE, old);
  assert.ok(after.n > slot.n, `${after.n} after ${slot.n}`);
  await shot(page, '3-reloaded-and-continued');
  // The page's model dialog shows serve's window (its build_info line).
  await page.locator('form button', { hasText: 'stories260K' }).first()
    .click();
  const dialog = page.getByRole('dialog');
  await dialog.getByText('Model Information').waitFor({ timeout: 10000 });
  await dialog.getByText(`window: budget ${window.budget}, ` +
                         `sinks ${window.sinks}`).first().waitFor();
  await shot(page, '4-model-dialog');
  await page.keyboard.press('Escape');
  await page.context().close();
});

test('stop a generation from the page', async () => {
  const page = await open(env.LONG);
  await say(page, 'Tell me a very long story.');
  await stop(page).waitFor({ timeout: 30000 });
  const answer = page.locator(ASSISTANT).last();
  await until('some of the answer', async () =>
    (await answer.innerText()).length > 200, 60000);
  const predicted = 'llamacpp:tokens_predicted_total';
  await stop(page).click();
  await until('the Stop button gone', async () =>
    await stop(page).count() === 0);
  // serve stops too: no slot processing, and no token predicted after.
  await until('serve idle', async () =>
    (await slots(env.LONG)).every((s) => !s.is_processing), 10000);
  const n = await metric(env.LONG, predicted);
  const shown = await answer.innerText();
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal(await metric(env.LONG, predicted), n);
  assert.equal(await answer.innerText(), shown);
  assert.ok(n < 20000, `${n} tokens: the generation ran to its end`);
  await shot(page, '5-stopped');
  // The page goes on: another message, answered (and stopped again).
  await say(page, 'And another.');
  await until('a second answer', async () =>
    await page.locator(ASSISTANT).count() === 2 &&
    (await page.locator(ASSISTANT).last().innerText()).length > 50, 60000);
  await stop(page).click();
  await until('the Stop button gone', async () =>
    await stop(page).count() === 0);
  await page.context().close();
});

test('the API key splash when serve has --api-key', async () => {
  const page = await open(env.KEYED);
  // The page itself needs no key; /props does, so the page asks for it.
  await page.getByRole('button', { name: 'Enter API Key' })
    .click({ timeout: 30000 });
  await shot(page, '6-api-key');
  const input = page.locator('#api-key-input');
  await input.fill('not-the-key');
  await input.press('Enter');
  await page.getByText('Invalid API key').waitFor({ timeout: 10000 });
  await input.fill(env.KEY);
  await input.press('Enter');
  // Let in: the chat box, and a message answered with the key.
  const said = await turn(page, 'Tell me a story about a cat.');
  assert.ok(said.length > 0);
  const posts = page.requests.filter((r) => r.method === 'POST' &&
                                     r.url.endsWith('/v1/chat/completions'));
  assert.ok(posts.length >= 1);
  await shot(page, '7-keyed-answer');
  await page.context().close();
});
