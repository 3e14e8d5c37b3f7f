// Runs the pure part of the GroupX web page (crates/convene-daemon/src/groupx/page.html) in node:
// the page's inline script is evaluated without a DOM, which leaves its reducer in `GX`.
// Usage: node tests/js/page_reducer_test.mjs   (exit code 0 = all checks passed)
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import vm from 'node:vm';
import assert from 'node:assert/strict';

const pagePath = fileURLToPath(new URL('../../crates/convene-daemon/src/groupx/page.html', import.meta.url));
const html = readFileSync(pagePath, 'utf8');
const scripts = [...html.matchAll(/<script>([\s\S]*?)<\/script>/g)].map((m) => m[1]);
assert.equal(scripts.length, 1, 'exactly one inline script');
const ctx = vm.createContext({});
vm.runInContext(scripts[0], ctx, { filename: 'page.html#script' });
const GX = ctx.GX;
assert.ok(GX && typeof GX.reduce === 'function', 'page exposes GX.reduce without a DOM');

let passed = 0;
function test(name, fn) { fn(); passed += 1; console.log('ok -', name); }

let n = 0;
function env(type, seq, body, extra = {}) {
  n += 1;
  return { schema: 'groupx.event/0.1', eventId: extra.eventId || 'evt_' + (seq ?? 't' + n), seq, roomId: 'room:main', type,
    actor: extra.actor || { actorId: 'agent:codex', kind: 'agent', displayName: 'Codex' }, to: extra.to || [],
    replyToEventId: extra.replyToEventId ?? null, causationId: null, correlationId: 'corr_1', rootCorrelationId: 'corr_1',
    occurredAt: '2026-11-30T10:00:00.123456Z', durability: seq === null ? 'transient' : 'durable', body };
}
const USER = { actorId: 'user:web', kind: 'user', displayName: 'You' };
// Array.from in this realm: arrays made inside the vm context are not deepEqual to ours.
const keys = (s) => Array.from(GX.timeline(s), (i) => i.key);

function booted() {
  const s = GX.newState();
  GX.applyBootstrap(s, {
    room: { roomId: 'room:main', title: 'main' }, self: { actorId: 'user:web' },
    agents: [{ actorId: 'agent:codex', displayName: 'Codex', enabled: true, driver: 'acp', session: 'ready' },
      { actorId: 'agent:kimi', displayName: 'Kimi', enabled: false, driver: 'acp', session: 'idle' }],
    events: [
      env('message.created', 1, { content: 'please review the plan' }, { actor: USER, to: ['agent:codex'] }),
      env('turn.queued', 2, { turnId: 'turn_a', target: 'agent:codex', sourceEventId: 'evt_1', queuePosition: 0 }),
      env('session.failed', 3, { agent: 'agent:codex', errorCode: 'SPAWN_FAILED' }),
      env('turn.started', 4, { turnId: 'turn_a', attemptId: 'att_1' }),
    ],
    turns: [{ turnId: 'turn_a', targetActorId: 'agent:codex', status: 'running', sourceEventId: 'evt_1' }],
    cursor: 6,
  });
  return s;
}

test('bootstrap renders transcript, turns and roster; cursor wins over older events', () => {
  const s = booted();
  assert.equal(s.maxSeq, 6);
  assert.deepEqual(keys(s), ['m:evt_1', 't:turn_a']);
  const t = s.turns.get('turn_a');
  assert.equal(t.status, 'running');
  assert.equal(t.sourceEventId, 'evt_1');
  // The snapshot's session state (ready, as of cursor 6) is newer than session.failed at seq 3.
  assert.equal(s.agents.get('agent:codex').session, 'ready');
  assert.equal(s.agents.get('agent:codex').errorCode, '');
  assert.equal(s.agents.get('agent:kimi').enabled, false);
});

test('replayed durable events are dropped (by eventId and by seq)', () => {
  const s = booted();
  const rev = s.turns.get('turn_a').rev;
  GX.reduce(s, env('turn.started', 4, { turnId: 'turn_a', attemptId: 'att_1' }));
  GX.reduce(s, env('message.created', 1, { content: 'please review the plan' }, { actor: USER }));
  GX.reduce(s, env('message.created', 1, { content: 'same seq, other id' }, { actor: USER, eventId: 'evt_other' }));
  assert.equal(s.turns.get('turn_a').rev, rev);
  assert.equal(s.messages.size, 1);
  assert.equal(s.messages.get('evt_1').content, 'please review the plan');
});

test('content deltas join by chunkIndex and ignore duplicates', () => {
  const s = booted();
  for (const [i, text] of [[1, ' world'], [0, 'Hello'], [1, ' world'], [2, '!']]) {
    GX.reduce(s, env('turn.content.delta', null, { turnId: 'turn_a', chunkIndex: i, text }));
  }
  assert.equal(GX.joinChunks(s.turns.get('turn_a').chunks), 'Hello world!');
  const rev = s.turns.get('turn_a').rev;
  GX.reduce(s, env('turn.content.delta', null, { turnId: 'turn_a', chunkIndex: 0, text: 'Hello' }));
  assert.equal(s.turns.get('turn_a').rev, rev, 'a duplicate chunk does not even trigger a re-render');
  GX.reduce(s, env('turn.reasoning.delta', null, { turnId: 'turn_a', chunkIndex: 0, text: 'thinking…' }));
  assert.equal(GX.joinChunks(s.turns.get('turn_a').reasoning), 'thinking…');
  assert.equal(s.maxSeq, 6, 'transient events never move the cursor');
  assert.equal(s.messages.size, 1, 'deltas are not messages');
});

test('tool progress merges by turnId+toolCallId; durable records win over live updates', () => {
  const s = booted();
  const tool = (seq, status, title = 'ls -la') => env(seq === null ? 'tool.progress' : 'tool.progress.recorded', seq,
    { turnId: 'turn_a', toolCallId: 'call_1', nativeType: 'shell', title, status });
  GX.reduce(s, tool(null, 'started'));
  GX.reduce(s, tool(null, 'completed'));
  GX.reduce(s, env('tool.progress', null, { turnId: 'turn_a', toolCallId: 'call_2', nativeType: 'read', title: 'a.rs', status: 'started' }));
  const t = s.turns.get('turn_a');
  assert.equal(t.tools.size, 2);
  assert.equal(t.tools.get('call_1').status, 'completed');
  GX.reduce(s, tool(7, 'started'));
  assert.equal(t.tools.get('call_1').status, 'started', 'durable record replaces the live view');
  GX.reduce(s, tool(8, 'completed'));
  GX.reduce(s, tool(null, 'started'));
  assert.equal(t.tools.get('call_1').status, 'completed', 'a late transient does not override a durable record');
  assert.equal(t.tools.size, 2);
  assert.deepEqual(keys(s), ['m:evt_1', 't:turn_a'], 'tool records are not transcript lines');
});

test('the response replaces the streaming bubble; terminal chip is final', () => {
  const s = booted();
  GX.reduce(s, env('turn.content.delta', null, { turnId: 'turn_a', chunkIndex: 0, text: 'partial' }));
  GX.reduce(s, env('message.created', 3 + 10, { content: 'other user message' }, { actor: USER }));
  GX.reduce(s, env('turn.reasoning.recorded', 14, { turnId: 'turn_a', content: 'I thought', terminalStatus: 'completed' }));
  GX.reduce(s, env('message.created', 15, { content: 'Looks good.', turnId: 'turn_a' }, { replyToEventId: 'evt_1' }));
  GX.reduce(s, env('turn.completed', 16, { turnId: 'turn_a', target: 'agent:codex', status: 'completed', responseEventId: 'evt_15' }));
  const t = s.turns.get('turn_a');
  assert.equal(t.status, 'completed');
  assert.equal(t.responseEventId, 'evt_15');
  assert.equal(t.reasoningText, 'I thought');
  // The turn sits at its response's seq (15), after the message with seq 13; the response is not a second bubble.
  assert.deepEqual(keys(s), ['m:evt_1', 'm:evt_13', 't:turn_a']);
  GX.reduce(s, env('turn.cancelling', 17, { turnId: 'turn_a' }));
  GX.reduce(s, env('turn.started', 18, { turnId: 'turn_a' }));
  assert.equal(t.status, 'completed', 'nothing moves a terminal turn');
  assert.equal(GX.replyLine(s, 'evt_1'), '↪ reply to You: please review the plan');
  assert.equal(GX.replyLine(s, 'evt_gone'), '↪ reply to an earlier message');
});

test('failed turn keeps its errorCode; in-flight turns sort after durable items', () => {
  const s = booted();
  GX.reduce(s, env('turn.queued', 7, { turnId: 'turn_b', target: 'agent:kimi', sourceEventId: 'evt_1', queuePosition: 1 }));
  GX.reduce(s, env('turn.failed', 9, { turnId: 'turn_b', target: 'agent:kimi', status: 'failed', errorCode: 'UNEXPECTED_NATIVE_INTERACTION' }));
  GX.reduce(s, env('message.created', 10, { content: 'next' }, { actor: USER }));
  const b = s.turns.get('turn_b');
  assert.equal(b.status, 'failed');
  assert.equal(b.errorCode, 'UNEXPECTED_NATIVE_INTERACTION');
  assert.deepEqual(keys(s), ['m:evt_1', 't:turn_b', 'm:evt_10', 't:turn_a']);
  // Status never goes backwards by seq either.
  GX.reduce(s, env('turn.dispatched', 12, { turnId: 'turn_a', attemptId: 'att_1' }));
  GX.reduce(s, env('turn.queued', 11, { turnId: 'turn_a', target: 'agent:codex' }));
  assert.equal(s.turns.get('turn_a').status, 'dispatching', 'same word as the bootstrap turn status (§5)');
});

test('durable events are ordered by seq, not arrival', () => {
  const s = GX.newState();
  GX.reduce(s, env('message.created', 21, { content: 'b' }, { actor: USER }));
  GX.reduce(s, env('memory.remembered', 22, { note: 'x' }));
  GX.reduce(s, env('message.created', 20, { content: 'a' }, { actor: USER }));
  assert.deepEqual(keys(s), ['m:evt_20', 'm:evt_21', 'g:evt_22']);
  assert.equal(s.maxSeq, 22);
});

test('approval/permission/user_input are never rendered; unknown types are generic lines', () => {
  const s = GX.newState();
  GX.reduce(s, env('approval.requested', 30, { cmd: 'rm -rf /' }));
  GX.reduce(s, env('permission.asked', 31, {}));
  GX.reduce(s, env('user_input.requested', 32, {}));
  GX.reduce(s, env('user_input.delta', null, { turnId: 'turn_z' }));
  GX.reduce(s, env('routing.loop_stopped', 33, { reason: 'hops' }));
  GX.reduce(s, env('system.error', 34, { errorCode: 'DB_BUSY', message: 'busy' }));
  GX.reduce(s, env('turn.progress', null, { turnId: 'turn_z', phase: 'x' }));
  assert.deepEqual(keys(s), ['g:evt_33', 'g:evt_34']);
  assert.equal(s.maxSeq, 34, 'hidden events still advance the cursor');
  assert.equal(s.notice.type, 'turn.progress');
  assert.equal(s.turns.size, 0);
});

test('memory, identity and context.reset events are durable generic lines, never messages or turns', () => {
  const s = GX.newState();
  GX.reduce(s, env('memory.remembered', 50, { memoryId: 'mem_1', lineageId: 'mem_1', version: 1, supersedes: null,
    scope: 'room', subjectActorId: null, authorActorId: 'user:web', agentMemoryType: null, content: 'uses cargo',
    sourceEventId: null, createdAt: '2026-11-30T10:00:00Z' }, { actor: USER }));
  GX.reduce(s, env('memory.superseded', 51, { memoryId: 'mem_2', lineageId: 'mem_1', version: 2, supersedes: 'mem_1',
    content: 'uses cargo and just' }, { actor: USER }));
  GX.reduce(s, env('memory.retracted', 52, { memoryId: 'mem_2', reason: 'old' }, { actor: USER }));
  GX.reduce(s, env('identity.remembered', 53, { identityId: 'idn_1', kind: 'role', subjectActorId: 'agent:codex', content: 'reviewer' }, { actor: USER }));
  GX.reduce(s, env('context.reset', 54, { floorSeq: 53, previousFloorSeq: 0, requestedBy: 'user:web' },
    { actor: { actorId: 'system:groupx', kind: 'system', displayName: 'GroupX' } }));
  assert.deepEqual(keys(s), ['g:evt_50', 'g:evt_51', 'g:evt_52', 'g:evt_53', 'g:evt_54']);
  assert.equal(s.messages.size, 0);
  assert.equal(s.turns.size, 0);
  assert.equal(s.maxSeq, 54);
});

test('session events update the roster in seq order', () => {
  const s = booted();
  GX.reduce(s, env('session.starting', 40, { agent: 'agent:kimi' }));
  GX.reduce(s, env('session.failed', 42, { agent: 'agent:kimi', errorCode: 'NATIVE_POLICY_BLOCKED' }));
  GX.reduce(s, env('session.ready', 41, { agent: 'agent:kimi' }));
  const k = s.agents.get('agent:kimi');
  assert.equal(k.session, 'failed');
  assert.equal(k.errorCode, 'NATIVE_POLICY_BLOCKED');
  GX.reduce(s, env('session.starting', 43, { agent: 'agent:new' }));
  assert.equal(s.agents.get('agent:new').enabled, false, 'an agent not in bootstrap is never a recipient');
});

test('malformed input is ignored without throwing', () => {
  const s = GX.newState();
  for (const bad of [null, 1, 'x', {}, { type: 5 }, { type: 'message.created', seq: 1 }, { type: 'turn.started', seq: 2, body: null },
    { type: 'turn.content.delta', seq: null, body: { turnId: 't', text: 5 } }, { type: 'tool.progress', body: [] }]) {
    GX.reduce(s, bad);
  }
  GX.applyBootstrap(s, { agents: 'no', events: null, turns: [null, {}], cursor: 'x' });
  assert.equal(s.messages.size, 0);
  assert.equal(s.turns.size, 0);
});

console.log(`${passed} checks passed`);
