// The GroupX page's Setup view (§10.6) in jsdom against a fake daemon: the toggle, the roster
// editor loaded from GET /api/setup, detected CLIs as "add" buttons, command splitting, Save
// (POST /api/setup) with inline errors and the "restart to apply" note.
// Needs jsdom: `npm install --prefix tests/js`. Usage: node tests/js/page_setup_test.mjs
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
let passed = 0;
const ok = (name) => { passed += 1; console.log('ok -', name); };

const SETUP = {
  configPath: '/home/u/.convene/groupx.json', exists: true, running: true, restartRequired: false, serverPort: 7390,
  storagePath: '/home/u/.convene',
  drivers: [
    { driver: 'codex', id: 'codex', name: 'Codex', command: ['codex', 'app-server'], detected: false },
    { driver: 'acp', id: 'gemini', name: 'Gemini', command: ['gemini', '--experimental-acp'], detected: true, path: '/usr/bin/gemini' },
    { driver: 'acp', id: 'hermes', name: 'Hermes', command: ['hermes', '--yolo', 'acp'], detected: true, path: '/bin/hermes', mode: 'dont_ask' },
  ],
  draft: { agents: [
    { id: 'gemini', name: '<b>Gem</b>', driver: 'acp', command: ['gemini', '--experimental-acp'], enabled: true },
    { id: 'kimi', name: 'Kimi', driver: 'acp', command: ['kimi', 'acp'], enabled: false, mode: 'auto', env: { KIMI_KEY: 'k' },
      identity: 'the reviewer', cwd: '/src' },
  ] },
};
const gets = [], posts = [];
let postPlan = [];
const dom = new JSDOM(html, {
  url: 'http://127.0.0.1:7390/', runScripts: 'dangerously', pretendToBeVisual: true,
  beforeParse(w) {
    w.fetch = async (url, init = {}) => {
      const json = (status, body) => ({ ok: status < 300, status, json: async () => body });
      if (!init.method || init.method === 'GET') {
        gets.push(url);
        if (url === '/api/bootstrap') return json(200, { room: { roomId: 'room:main' }, agents: [], events: [], turns: [], cursor: 0 });
        if (url === '/api/setup') return json(200, SETUP);
        return json(404, { error: { code: 'NOT_FOUND' } });
      }
      posts.push({ url, body: JSON.parse(init.body) });
      const step = postPlan.shift() || 200;
      if (step === 'neterr') throw new TypeError('NetworkError');
      if (step === 200) return json(200, { saved: true, restartRequired: true, configPath: SETUP.configPath });
      return json(400, step);
    };
    w.EventSource = class { constructor(url) { this.url = url; } close() {} };
  },
});
const { window } = dom, doc = window.document, W = window.GX;
// The page's objects come from jsdom's realm: compare them as plain JSON values.
const plain = (f) => (...a) => JSON.parse(JSON.stringify(f(...a)));
const GX = { splitCommand: plain(W.splitCommand), formatCommand: W.formatCommand, draftAgent: plain(W.draftAgent), uniqueId: W.uniqueId };

// Pure helpers: command text <-> argv.
assert.deepEqual(GX.splitCommand('hermes --yolo acp'), ['hermes', '--yolo', 'acp']);
assert.deepEqual(GX.splitCommand('  a  "b c" \'d "e"\' f\\ g ""  '), ['a', 'b c', 'd "e"', 'f g', '']);
assert.deepEqual(GX.splitCommand('["x y", "z"]'), ['x y', 'z']);
assert.throws(() => GX.splitCommand('a "b'), /unclosed/);
assert.throws(() => GX.splitCommand('[1, 2]'), /array of strings/);
assert.throws(() => GX.splitCommand('[nope'), /JSON/);
for (const argv of [['codex', 'app-server'], ['a b', 'c'], ['it\'s', '"q"', 'back\\slash', ''], ['[x]']]) {
  assert.deepEqual(GX.splitCommand(GX.formatCommand(argv)), argv, JSON.stringify(argv));
}
assert.equal(GX.formatCommand(['codex', 'app-server']), 'codex app-server');
const kept = GX.draftAgent({ id: ' k ', name: 'K', driver: 'acp', command: 'kimi acp', cwd: '', identity: '', mode: 'auto', enabled: true },
  { id: 'k', env: { A: 'b' }, cwd: '/old', identity: 'x' });
assert.deepEqual(kept, { id: 'k', name: 'K', driver: 'acp', command: ['kimi', 'acp'], enabled: true, mode: 'auto', env: { A: 'b' } },
  'env is kept; cleared cwd/identity are dropped');
assert.equal(GX.uniqueId('gemini', ['gemini', 'gemini-2']), 'gemini-3');
ok('command split/format round-trips, JSON arrays, quote errors; draftAgent keeps env');

await until('boot', () => gets.includes('/api/bootstrap'));
const btn = doc.getElementById('setupbtn'), view = doc.getElementById('setup'), msg = doc.getElementById('setupmsg');
assert.ok(view.hidden);
assert.ok(!gets.includes('/api/setup'), 'setup is only fetched when opened');
btn.click();
assert.ok(!view.hidden && doc.getElementById('log').hidden && doc.getElementById('composer').hidden);
assert.equal(btn.getAttribute('aria-expanded'), 'true');
await until('rows', () => doc.querySelectorAll('.srow').length === 2);
const rows = () => [...doc.querySelectorAll('.srow')];
const input = (row, cls) => row.querySelector('input.' + cls);
assert.equal(input(rows()[0], 'sname').value, '<b>Gem</b>');
assert.equal(view.querySelectorAll('b, script, img').length, 0, 'values stay text');
assert.equal(input(rows()[0], 'cmd').value, 'gemini --experimental-acp');
assert.equal(input(rows()[1], 'cwd').value, '/src');
assert.equal(input(rows()[1], 'smode').value, 'auto');
assert.equal(rows()[1].querySelector('input[type=checkbox]').checked, false);
assert.equal(rows()[1].querySelector('select').value, 'acp');
assert.match(rows()[1].textContent, /env kept: KIMI_KEY/);
assert.match(doc.getElementById('setupinfo').textContent, /groupx\.json.*port 7390/);
const adds = [...doc.getElementById('setupdrivers').querySelectorAll('button')];
assert.deepEqual(adds.map((b) => [b.textContent, b.disabled]), [['+ Codex', true], ['+ Gemini', false], ['+ Hermes', false]]);
ok('Setup toggles the view, loads the draft into rows, detected CLIs are add buttons');

adds[1].click();
adds[2].click();
assert.equal(rows().length, 4);
assert.equal(input(rows()[2], 'sid').value, 'gemini-2', 'an added CLI gets a free id');
assert.equal(input(rows()[3], 'smode').value, 'dont_ask');
input(rows()[2], 'cmd').value = 'gemini --experimental-acp "--flag with space"';
rows()[0].querySelector('input[type=checkbox]').click(); // disable the first
doc.getElementById('setupsave').click();
await until('saved', () => /Saved — restart the daemon to apply/.test(msg.textContent));
assert.equal(posts.length, 1);
assert.equal(posts[0].url, '/api/setup');
assert.deepEqual(Object.keys(posts[0].body), ['agents']);
const sent = posts[0].body.agents;
assert.deepEqual(sent.map((a) => a.id), ['gemini', 'kimi', 'gemini-2', 'hermes']);
assert.equal(sent[0].enabled, false);
assert.deepEqual(sent[1], SETUP.draft.agents[1], 'an untouched row posts back exactly what it was loaded with');
assert.deepEqual(sent[2].command, ['gemini', '--experimental-acp', '--flag with space']);
assert.deepEqual(sent[3], { id: 'hermes', name: 'Hermes', driver: 'acp', command: ['hermes', '--yolo', 'acp'], enabled: true, mode: 'dont_ask' });
for (const a of sent) for (const k of ['from', 'actor', 'provenance', 'transport', 'access', 'model']) assert.ok(!(k in a), k);
ok('add buttons fill rows; Save posts the strict draft and says to restart');

input(rows()[2], 'cmd').value = 'gemini "unclosed';
doc.getElementById('setupsave').click();
await until('client error', () => /Fix the marked fields/.test(msg.textContent));
assert.equal(posts.length, 1, 'nothing posted');
assert.equal(input(rows()[2], 'cmd').getAttribute('aria-invalid'), 'true');
assert.match(rows()[2].querySelector('.rowerr').textContent, /unclosed/);
input(rows()[2], 'cmd').value = '["gemini"]';
postPlan = [{ error: { code: 'INVALID_ENVELOPE', message: 'agent id "gemini" appears twice', field: 'agents[3].id' } }];
input(rows()[3], 'sid').value = 'gemini';
doc.getElementById('setupsave').click();
await until('server error', () => /INVALID_ENVELOPE/.test(msg.textContent));
assert.equal(input(rows()[2], 'cmd').getAttribute('aria-invalid'), null, 'old marks are cleared');
assert.equal(input(rows()[3], 'sid').getAttribute('aria-invalid'), 'true');
assert.match(rows()[3].querySelector('.rowerr').textContent, /appears twice/);
assert.equal(msg.className, 'bad');
postPlan = ['neterr'];
doc.getElementById('setupsave').click();
await until('net error', () => /Network error/.test(msg.textContent));
ok('command errors inline without a request; server errors land on the row and field');

rows()[0].querySelector('button[aria-label^="Remove"]').click();
assert.equal(rows().length, 3);
btn.click();
assert.ok(view.hidden && !doc.getElementById('log').hidden && !doc.getElementById('composer').hidden);
const loads = gets.filter((u) => u === '/api/setup').length;
btn.click();
assert.equal(gets.filter((u) => u === '/api/setup').length, loads, 'unsaved edits are not reloaded away');
assert.equal(rows().length, 3);
ok('remove a row; toggling back shows the room; unsaved edits survive a toggle');

console.log(`${passed} checks passed`);
