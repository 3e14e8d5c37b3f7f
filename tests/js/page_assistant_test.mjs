// The GroupX page's Assistant panel (§10.7) in jsdom against a fake daemon: the toggle only when
// GET /api/assistant says enabled, the side conversation as text, the composer posting strictly
// {clientCommandId, content} (a 202 "running" re-posts the same id), Stop, and nothing of it in
// the room's transcript. Needs jsdom: `npm install --prefix tests/js`.
// Usage: node tests/js/page_assistant_test.mjs
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';
import { JSDOM } from 'jsdom';

const html = readFileSync(fileURLToPath(new URL('../../crates/convene-daemon/src/groupx/page.html', import.meta.url)), 'utf8');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, cond, tries = 300) {
  for (let i = 0; i < tries; i++) { if (cond()) return; await sleep(10); }
  assert.fail('timed out waiting for ' + what);
}
let passed = 0;
const ok = (name) => { passed += 1; console.log('ok -', name); };

function page(status) {
  const gets = [], posts = [], postPlan = [];
  let lines = [{ messageId: 'm1', role: 'user', content: 'earlier', createdAt: '2026-11-30T10:00:00Z' },
    { messageId: 'm2', role: 'assistant', content: '<img src=x onerror=alert(1)>', createdAt: '2026-11-30T10:00:01Z' }];
  const dom = new JSDOM(html, {
    url: 'http://127.0.0.1:7390/', runScripts: 'dangerously', pretendToBeVisual: true,
    beforeParse(w) {
      w.fetch = async (url, init = {}) => {
        const json = (st, body) => ({ ok: st < 300, status: st, json: async () => body });
        if (!init.method || init.method === 'GET') {
          gets.push(url);
          if (url === '/api/bootstrap') return json(200, { room: { roomId: 'room:main' }, agents: [], events: [], turns: [], cursor: 0 });
          if (url === '/api/assistant') return json(200, status);
          if (url === '/api/assistant/messages') return json(200, { messages: lines });
          return json(404, { error: { code: 'NOT_FOUND' } });
        }
        const body = JSON.parse(init.body);
        posts.push({ url, body });
        if (url === '/api/assistant/cancel') return json(202, { cancelling: true });
        const step = postPlan.shift() || 200;
        if (step === 202) return json(202, { userMessageId: 'u', state: 'running' });
        if (step === 400) return json(400, { error: { code: 'INVALID_ENVELOPE', message: 'bad' } });
        if (step === 'cancelled') return json(200, { userMessageId: 'u', reply: null, state: 'cancelled', errorCode: null });
        lines = lines.concat([{ messageId: 'u' + posts.length, role: 'user', content: body.content, createdAt: '' },
          { messageId: 'r' + posts.length, role: 'assistant', content: 'done: ' + body.content, createdAt: '' }]);
        return json(200, { userMessageId: 'u', reply: { messageId: 'r', content: 'done: ' + body.content } });
      };
      w.EventSource = class { constructor(url) { this.url = url; } close() {} };
    },
  });
  return { dom, doc: dom.window.document, gets, posts, postPlan };
}

{
  const { doc, gets } = page({ enabled: false, name: null, driver: null, session: 'idle', running: false });
  await until('status', () => gets.includes('/api/assistant'));
  await sleep(20);
  assert.ok(doc.getElementById('assistbtn').hidden, 'no toggle when the assistant is not enabled');
  ok('disabled: no Assistant toggle');
}

const { doc, gets, posts, postPlan } = page({ enabled: true, name: 'Assistant', driver: 'acp', session: 'idle', running: false });
const btn = doc.getElementById('assistbtn'), panel = doc.getElementById('assistant'), alog = doc.getElementById('alog');
await until('toggle', () => !btn.hidden);
assert.ok(panel.hidden && !doc.getElementById('log').hidden);
assert.ok(!gets.includes('/api/assistant/messages'), 'the conversation is loaded only when opened');
btn.click();
assert.ok(!panel.hidden && doc.getElementById('log').hidden && doc.getElementById('composer').hidden);
assert.equal(btn.getAttribute('aria-expanded'), 'true');
await until('lines', () => alog.querySelectorAll('.aline').length === 2);
assert.equal(alog.querySelectorAll('img').length, 0, 'content stays text');
assert.ok(alog.textContent.includes('<img src=x onerror=alert(1)>'));
ok('enabled: the toggle opens the side conversation, content as text');

const text = doc.getElementById('atext'), send = doc.getElementById('asend'), err = doc.getElementById('aerr');
text.value = 'dispatch the tests';
postPlan.push(202);
doc.getElementById('acomposer').dispatchEvent(new doc.defaultView.Event('submit', { cancelable: true }));
await until('reply', () => alog.textContent.includes('done: dispatch the tests'), 600);
const mine = posts.filter((p) => p.url === '/api/assistant/messages');
assert.equal(mine.length, 2, '202 running: posted again');
assert.deepEqual(Object.keys(mine[0].body).sort(), ['clientCommandId', 'content']);
assert.equal(mine[0].body.clientCommandId, mine[1].body.clientCommandId, 'the same id: the daemon joins the running turn');
await until('cleared', () => text.value === '' && !send.disabled);
ok('send: strict body, 202 re-posts the same id, the reply is shown');

text.value = 'x';
postPlan.push(400);
send.click();
await until('error', () => err.textContent === 'INVALID_ENVELOPE: bad');
assert.equal(text.value, 'x', 'the text is kept on a refusal');
postPlan.push('cancelled');
send.click();
await until('note', () => alog.textContent.includes('No reply: cancelled'));
doc.getElementById('acancel').disabled = false;
doc.getElementById('acancel').click();
await until('cancel', () => posts.at(-1).url === '/api/assistant/cancel');
ok('a refusal shows CODE: message; a cancelled turn says so; Stop posts the cancel');

btn.click();
assert.ok(panel.hidden && !doc.getElementById('log').hidden);
doc.getElementById('setupbtn').click();
btn.click();
assert.ok(doc.getElementById('setup').hidden && !panel.hidden, 'the assistant panel replaces the setup view');
ok('toggling back shows the room');

console.log(`${passed} checks passed`);
