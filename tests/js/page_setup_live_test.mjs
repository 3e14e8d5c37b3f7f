// The page's Setup view in jsdom against a REAL daemon (its URL is argv[2]): open Setup, add the
// detected Gemini CLI, save. The Python side (tests/python/test_groupx_setup.py) checks the file.
// Usage: node tests/js/page_setup_live_test.mjs http://127.0.0.1:PORT/   (needs `npm install --prefix tests/js`)
import assert from 'node:assert/strict';
import { JSDOM } from 'jsdom';

const base = process.argv[2];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, cond, ms = 20000) {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(25)) { if (cond()) return; }
  assert.fail('timed out waiting for ' + what);
}

const page = await (await fetch(base)).text();
const dom = new JSDOM(page, {
  url: base, runScripts: 'dangerously', pretendToBeVisual: true,
  beforeParse(w) {
    w.fetch = (u, init) => fetch(new URL(u, base), init);
    w.EventSource = class { constructor() {} close() {} };
  },
});
const doc = dom.window.document;
doc.getElementById('setupbtn').click();
await until('the draft rows', () => doc.querySelectorAll('.srow').length > 0);
const add = [...doc.querySelectorAll('#setupdrivers button')].find((b) => b.textContent === '+ Gemini');
assert.ok(add && !add.disabled, 'the fake gemini on the daemon PATH is detected');
add.click();
doc.getElementById('setupsave').click();
const msg = doc.getElementById('setupmsg');
await until('the save', () => msg.textContent !== '');
assert.match(msg.textContent, /Saved — restart the daemon to apply/, msg.textContent);
console.log('ok - the page adds a detected CLI and saves');
dom.window.close();
process.exit(0);
