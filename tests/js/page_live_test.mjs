// Drives the GroupX web page in jsdom against a REAL daemon (its URL is argv[2]): the page's
// bootstrap, its stream, and its composer, with fetch and a small fetch-based EventSource.
// Usage: node tests/js/page_live_test.mjs http://127.0.0.1:PORT/   (needs `npm install --prefix tests/js`)
import assert from 'node:assert/strict';
import { JSDOM } from 'jsdom';

const base = process.argv[2];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, cond, ms = 20000) {
  for (const end = Date.now() + ms; Date.now() < end; await sleep(25)) { if (cond()) return; }
  assert.fail('timed out waiting for ' + what);
}

// EventSource over fetch streaming: what the page uses (onopen, onmessage, onerror, close).
class FetchEventSource {
  constructor(url) {
    this.ctl = new AbortController();
    this.run(new URL(url, base)).catch(() => {});
  }
  async run(url) {
    const res = await fetch(url, { signal: this.ctl.signal, headers: { Accept: 'text/event-stream' } });
    if (!res.ok) { this.onerror?.(); return; }
    this.onopen?.();
    const dec = new TextDecoder();
    let buf = '';
    for await (const part of res.body) {
      buf += dec.decode(part, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const frame = buf.slice(0, i); buf = buf.slice(i + 2);
        const data = frame.split('\n').filter((l) => l.startsWith('data: ')).map((l) => l.slice(6)).join('\n');
        if (data) this.onmessage?.({ data });
      }
    }
    this.onerror?.();
  }
  close() { this.ctl.abort(); }
}

const page = await (await fetch(base)).text();
const dom = new JSDOM(page, {
  url: base, runScripts: 'dangerously', pretendToBeVisual: true,
  beforeParse(w) {
    w.fetch = (u, init) => fetch(new URL(u, base), init);
    w.EventSource = FetchEventSource;
  },
});
const doc = dom.window.document;
const log = doc.getElementById('log');

await until('the roster', () => doc.getElementById('agents').textContent.includes('Echo'));
await until('the live stream', () => doc.getElementById('conn').textContent === 'live');
console.log('ok - bootstrap and stream');

function sendText(text, to) {
  for (const box of doc.querySelectorAll('#recips input[type=checkbox]')) {
    if (box.checked !== (box.value === to)) { box.checked = box.value === to; box.dispatchEvent(new dom.window.Event('change')); }
  }
  doc.getElementById('text').value = text;
  doc.getElementById('composer').dispatchEvent(new dom.window.Event('submit', { cancelable: true }));
}

sendText('hello from the page', 'agent:echo');
await until('the agent reply', () => log.textContent.includes('echo: hello from the page'));
await until('the completed chip', () => [...log.querySelectorAll('.chip')].some((c) => c.textContent.startsWith('completed')));
assert.equal(doc.getElementById('text').value, '');
console.log('ok - a message sent from the composer comes back answered');

const evil = '<img src=x onerror="window.pwned=1">';
sendText(evil, 'agent:echo');
await until('the echoed markup as text', () => log.textContent.includes('echo: ' + evil));
assert.equal(log.querySelectorAll('img').length, 0);
assert.equal(dom.window.pwned, undefined);
console.log('ok - model and user text stay text');
dom.window.close();
process.exit(0);
