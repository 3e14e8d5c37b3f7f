// Drives the GroupX web page's browser part in jsdom against a fake daemon (fetch + EventSource):
// bootstrap rendering, plain-text safety, streaming, reconnect cursor, send with retries, 4xx, cancel, reply.
// Needs jsdom: `npm install --prefix tests/js` (pinned in tests/js/package.json). Usage: node tests/js/page_dom_test.mjs
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';
import { JSDOM } from 'jsdom';

const html = readFileSync(fileURLToPath(new URL('../../crates/convene-daemon/src/groupx/page.html', import.meta.url)), 'utf8');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, cond, tries = 200) {
  for (let i = 0; i < tries; i++) { if (cond()) return; await sleep(10); }
  assert.fail('timed out waiting for ' + what);
}
const USER = { actorId: 'user:web', kind: 'user', displayName: 'You' };
const CODEX = { actorId: 'agent:codex', kind: 'agent', displayName: 'Codex' };
const env = (type, seq, body, actor = CODEX, extra = {}) => ({ schema: 'groupx.event/0.1', eventId: 'evt_' + (seq ?? type + Math.random()), seq,
  roomId: 'room:main', type, actor, to: [], replyToEventId: null, correlationId: 'c', rootCorrelationId: 'c',
  occurredAt: '2026-11-30T10:00:00.000000Z', durability: seq === null ? 'transient' : 'durable', body, ...extra });

const posts = [], sources = [];
let postPlan = [];
const BOOT = {
  room: { roomId: 'room:main', title: 'main' }, self: { actorId: 'user:web' },
  agents: [{ actorId: 'agent:codex', displayName: 'Codex', enabled: true, driver: 'acp', session: 'ready' },
    { actorId: 'agent:kimi', displayName: 'Kimi', enabled: false, driver: 'acp', session: 'idle' }],
  events: [env('message.created', 1, { content: 'please review' }, USER, { to: ['agent:codex'] }),
    env('turn.queued', 2, { turnId: 'turn_a', target: 'agent:codex', sourceEventId: 'evt_1', queuePosition: 0 })],
  turns: [{ turnId: 'turn_a', targetActorId: 'agent:codex', status: 'running', sourceEventId: 'evt_1' }],
  cursor: 2,
};

const dom = new JSDOM(html, {
  url: 'http://127.0.0.1:7390/', runScripts: 'dangerously', pretendToBeVisual: true,
  beforeParse(w) {
    w.fetch = async (url, init = {}) => {
      const json = (status, body) => ({ ok: status < 300, status, json: async () => body });
      if (url === '/api/bootstrap') return json(200, BOOT);
      if (url === '/api/assistant') return json(200, { enabled: false });
      posts.push({ url, body: init.body ? JSON.parse(init.body) : null });
      const step = postPlan.shift() || 202;
      if (step === 'neterr') throw new TypeError('NetworkError');
      if (step === 202) return json(202, { messageEventId: 'evt_x', correlationId: 'c', turns: [] });
      return json(step, { error: { code: 'UNKNOWN_TARGET', message: 'no such agent' } });
    };
    w.EventSource = class {
      constructor(url) { this.url = url; this.closed = false; sources.push(this); }
      close() { this.closed = true; }
    };
  },
});
const { window } = dom, doc = window.document;
const log = doc.getElementById('log'), text = doc.getElementById('text'), err = doc.getElementById('senderr');
const feed = (e) => sources.at(-1).onmessage({ data: JSON.stringify(e) });
let passed = 0;
const ok = (name) => { passed += 1; console.log('ok -', name); };

await until('EventSource', () => sources.length === 1);
assert.equal(sources[0].url, '/api/events?afterSeq=2');
sources[0].onopen();
assert.equal(doc.getElementById('conn').textContent, 'live');
await until('render', () => log.textContent.includes('please review'));
assert.match(log.textContent, /running/);
assert.ok([...log.querySelectorAll('button')].some((b) => b.textContent === 'Cancel'));
const roster = doc.getElementById('agents').textContent;
assert.match(roster, /Codex.*ready/);
assert.match(roster, /Kimi.*disabled/);
const chips = [...doc.querySelectorAll('#recips input')].map((i) => i.value);
assert.deepEqual(chips, ['@all', 'agent:codex'], 'disabled agents are not recipients');
ok('bootstrap renders transcript, running turn with Cancel, roster, recipient chips; SSE opens at cursor');

feed(env('message.created', 3, { content: '<img src=x onerror="alert(1)"><b>bold</b>' }, USER));
feed(env('turn.content.delta', null, { turnId: 'turn_a', chunkIndex: 1, text: ' there' }));
feed(env('turn.content.delta', null, { turnId: 'turn_a', chunkIndex: 0, text: 'Hi' }));
feed(env('tool.progress', null, { turnId: 'turn_a', toolCallId: 'k1', nativeType: 'shell', title: 'cargo test', status: 'started' }));
feed(env('turn.reasoning.delta', null, { turnId: 'turn_a', chunkIndex: 0, text: 'hmm' }));
feed(env('approval.requested', 4, { command: 'SECRET-APPROVAL' }));
await until('stream', () => log.textContent.includes('Hi there'));
const cancelBtn = () => [...log.querySelectorAll('button')].find((b) => b.textContent === 'Cancel');
cancelBtn().focus();
feed(env('turn.content.delta', null, { turnId: 'turn_a', chunkIndex: 2, text: '!' }));
await until('rebuilt', () => log.textContent.includes('Hi there!'));
assert.equal(doc.activeElement, cancelBtn(), 'a rebuilt bubble keeps keyboard focus on the same control');
assert.equal(log.querySelectorAll('img, b, script').length, 0, 'model content never becomes markup');
assert.ok(log.textContent.includes('<img src=x onerror="alert(1)"><b>bold</b>'));
assert.ok(!log.textContent.includes('SECRET-APPROVAL'));
const bubble = [...log.children].at(-1);
assert.ok(bubble.textContent.includes('cargo test · started'), 'tool line inside the agent bubble');
assert.equal(bubble.querySelectorAll('details').length, 2, 'thinking and tools are folded');
assert.ok(bubble.querySelectorAll('details').length && !bubble.querySelector('details').open);
ok('content is text only; deltas in order; tool and thinking folded in the bubble; approval hidden');

sources[0].onerror();
assert.ok(sources[0].closed);
assert.match(doc.getElementById('conn').textContent, /reconnecting/);
await until('reconnect', () => sources.length === 2);
assert.equal(sources[1].url, '/api/events?afterSeq=4', 'reconnect resumes after the highest seq seen');
sources[1].onopen();
feed(env('message.created', 3, { content: '<img src=x onerror="alert(1)"><b>bold</b>' }, USER));
feed(env('message.created', 5, { content: 'Done: all green', turnId: 'turn_a' }));
feed(env('turn.completed', 6, { turnId: 'turn_a', target: 'agent:codex', status: 'completed' }));
await until('completed', () => log.textContent.includes('Done: all green'));
assert.equal(log.children.length, 3, 'replayed seq 3 not duplicated; response replaced the live bubble');
assert.ok(!log.textContent.includes('Hi there'));
assert.ok(!log.textContent.includes('Cancel'));
assert.match([...log.children].at(-1).querySelector('.chip').textContent, /completed/);
ok('reconnect uses afterSeq, dedupes replays, response replaces streamed text, terminal chip, no Cancel');

doc.querySelector('#recips input[value="agent:codex"]').click();
text.value = 'second question';
postPlan = ['neterr', 202];
text.dispatchEvent(new window.KeyboardEvent('keydown', { key: 'Enter', ctrlKey: true, bubbles: true }));
await until('sent', () => text.value === '');
assert.equal(posts.length, 2);
assert.equal(posts[0].url, '/api/messages');
assert.equal(posts[0].body.clientCommandId, posts[1].body.clientCommandId, 'a retry keeps the clientCommandId');
assert.match(posts[0].body.clientCommandId, /^web-[0-9a-f-]{36}$/);
assert.deepEqual(posts[1].body.to, ['agent:codex']);
assert.equal(posts[1].body.content, 'second question');
assert.equal(err.textContent, '');
text.value = 'offline for a while';
postPlan = ['neterr', 'neterr', 'neterr', 'neterr'];
const before = posts.length;
doc.getElementById('send').click();
await until('gave up', () => /press Send to retry/.test(err.textContent), 600);
assert.equal(posts.length, before + 4);
assert.equal(text.value, 'offline for a while');
postPlan = [202];
doc.getElementById('send').click();
await until('sent', () => text.value === '');
assert.equal(posts.at(-1).body.clientCommandId, posts[before].body.clientCommandId, 'a manual retry is the same submission');
ok('Ctrl+Enter sends; a network error retries (auto and manual) with the same clientCommandId');

text.value = 'third';
postPlan = [404];
doc.getElementById('send').click();
await until('error shown', () => err.textContent.includes('UNKNOWN_TARGET'));
assert.equal(text.value, 'third', 'text kept after a 4xx');
assert.match(err.textContent, /no such agent/);
postPlan = [202];
doc.getElementById('send').click();
await until('sent', () => text.value === '');
assert.notEqual(posts.at(-1).body.clientCommandId, posts.at(-2).body.clientCommandId, 'after a 4xx the next try is a new command');
ok('4xx shows code and message inline and keeps the text');

feed(env('turn.queued', 7, { turnId: 'turn_b', target: 'agent:codex', sourceEventId: 'evt_5' }));
await until('turn_b', () => log.textContent.includes('queued'));
[...log.querySelectorAll('button')].find((b) => b.textContent === 'Cancel').click();
await until('cancel', () => posts.at(-1).url === '/api/turns/turn_b/cancel');
const replyBtn = [...log.querySelectorAll('button')].filter((b) => b.textContent === 'reply')[0];
replyBtn.click();
assert.equal(doc.getElementById('replybar').hidden, false);
assert.match(doc.getElementById('replytext').textContent, /reply to You: please review/);
text.value = 'replying';
doc.getElementById('send').click();
await until('reply sent', () => text.value === '');
assert.equal(posts.at(-1).body.replyToEventId, 'evt_1');
assert.equal(doc.getElementById('replybar').hidden, true);
ok('Cancel posts to the turn; reply sets replyToEventId and clears after send');

console.log(`${passed} checks passed`);
window.close();
