"""GroupX supervision pairs (§4.3, §6.7): a Watch Turn runs beside the worker's turn; the
supervisor (here the test, speaking MCP with the observer session's binding while its turn
hangs) watches the worker's public progress and steers it."""
from __future__ import annotations

import json

import pytest

from test_groupx import FAKE, GX, TERMINAL, start


def agent(aid: str, **env) -> dict:
    return {"id": aid, "command": ["python3", str(FAKE)], "env": {"FAKE_ACP_HTTP_MCP": "1", **env}}


@pytest.fixture
def room(home, tmp_path):
    log = tmp_path / "acp.log"
    d = start(home, [agent("worker"), agent("boss", FAKE_ACP_WATCH_DIRECTIVE="#hang"), agent("third")],
              limits={"steersPerSubjectTurn": 2}, log=log)
    yield GX(d), log
    d.stop()


def bindings(log) -> dict:
    """agent session binding by the agent whose process logged it (cwd is shared, so by order
    of session/new calls matched against the broker's session.ready events)."""
    out = []
    for line in log.read_text().splitlines():
        m = json.loads(line)
        if m.get("method") == "session/new":
            out.append(m["params"]["mcpServers"][0]["headers"][0]["value"])
    return out


def tool(gx: GX, binding: str, name: str, args: dict) -> dict:
    st, v = gx.call("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                     "params": {"name": name, "arguments": args}},
                    headers={"X-GroupX-Binding": binding})
    assert st == 200, v
    return v["result"]


def boss_binding(gx: GX, log, watch_turn: str) -> str:
    """The binding of the session running the watch turn: try each until one is in a watch turn."""
    gx.wait_type(watch_turn, "turn.dispatched")
    for b in bindings(log):
        r = tool(gx, b, "groupx.watch", {"timeoutMs": 0})
        if not r["isError"]:
            return b
    raise AssertionError("no session is in the watch turn")


def test_groupx_4_3_a_supervised_message_pairs_a_watch_turn_and_answers_both(room):
    gx, _ = room
    st, v = gx.post(["agent:worker"], "build it\n#slow 20", supervision={"observers": ["agent:boss"], "mode": "live_steer"})
    assert st == 202, v
    assert [t["target"] for t in v["turns"]] == ["agent:worker"]
    assert [t["target"] for t in v["watchTurns"]] == ["agent:boss"]
    pair = next(e for e in gx.events() if e["eventId"] == v["pairEventId"])
    assert pair["type"] == "supervision.paired"
    assert pair["body"]["workerTurnIds"] == [v["turns"][0]["turnId"]]
    assert pair["body"]["watchTurnIds"] == [v["watchTurns"][0]["turnId"]]
    assert pair["rootCorrelationId"] == v["correlationId"]
    bad = [
        {"observers": ["agent:worker"], "mode": "live_steer"},   # worker and observer at once
        {"observers": ["agent:nobody"], "mode": "live_steer"},
        {"observers": ["agent:boss"], "mode": "approve"},
        {"observers": ["agent:a", "agent:b", "agent:c", "agent:d", "agent:e"], "mode": "live_steer"},
    ]
    # The paired turns run meanwhile, so count what a refused request could have written.
    def written():
        return [e["eventId"] for e in gx.events() if e["type"] in ("message.created", "turn.queued", "supervision.paired")
                and e["actor"]["actorId"] in ("user:web", "system:groupx")]
    before = written()
    for sup in bad:
        st, e = gx.post(["agent:worker"], "x", supervision=sup)
        assert st == 400 and e["error"]["code"] == "SUPERVISION_PAIR_INVALID", (sup, e)
    assert written() == before


def test_groupx_6_7_watch_follows_the_worker_and_interrupt_reroutes_it_with_the_guidance(room):
    gx, log = room
    v = gx.ok_post(["agent:worker"], "write the report\n#slow 300",
                   supervision={"observers": ["agent:boss"], "mode": "live_steer"})
    work, watch = v["turns"][0]["turnId"], v["watchTurns"][0]["turnId"]
    b = boss_binding(gx, log, watch)
    snap = tool(gx, b, "groupx.watch", {"until": "next_milestone", "timeoutMs": 20000})["structuredContent"]
    assert snap["subjectTurnId"] == work and snap["worker"] == "agent:worker"
    assert snap["task"]["eventId"] == v["messageEventId"] and "write the report" in snap["task"]["summary"]
    snap = tool(gx, b, "groupx.watch", {"until": "next_milestone", "timeoutMs": 20000})["structuredContent"]
    assert snap["status"] == "running" and snap["deliveryCertainty"] == "delivered" and snap["liveText"].startswith("part")
    assert "reasoning" not in json.dumps(snap)
    # A watch turn may not send to the worker it watches: it steers.
    r = tool(gx, b, "groupx.send", {"to": ["agent:worker"], "content": "stop", "clientCommandId": "s0"})
    assert r["isError"] and r["structuredContent"]["errorCode"] == "SUPERVISION_STEER_REQUIRED"
    r = tool(gx, b, "groupx.steer", {"action": "interrupt", "reason": "wrong format",
                                     "content": "use a table\n#reply a table it is", "clientCommandId": "st1"})
    assert not r["isError"], r
    steer = r["structuredContent"]
    assert gx.wait_terminal(work)["type"] == "turn.cancelled"
    new = steer["newTurnId"]
    done = gx.wait_terminal(new)
    assert done["type"] == "turn.completed"
    evs = gx.events()
    rec = next(e for e in evs if e["type"] == "supervision.steered")
    assert rec["body"]["subjectTurnId"] == work and rec["body"]["action"] == "interrupt"
    assert rec["body"]["reason"] == "wrong format" and rec["body"]["observer"] == "agent:boss"
    guidance = next(e for e in evs if e["eventId"] == steer["messageEventId"])
    assert guidance["actor"]["actorId"] == "agent:boss" and "use a table" in guidance["body"]["content"]
    answer = next(e for e in evs if e["type"] == "message.created" and e["body"].get("turnId") == new)
    assert answer["body"]["content"] == "a table it is"
    # The watch now follows the re-routed turn, and ends with it.
    snap = tool(gx, b, "groupx.watch", {"until": "terminal", "timeoutMs": 20000})["structuredContent"]
    assert snap["subjectTurnId"] == new and snap["ended"] == "subject_completed"
    assert snap["response"]["content"] == "a table it is" and snap["steers"] == 0


def test_groupx_6_7_steers_are_limited_and_only_watch_turns_may_watch(room):
    gx, log = room
    v = gx.ok_post(["agent:worker"], "long job\n#slow 300",
                   supervision={"observers": ["agent:boss"], "mode": "live_steer"})
    work, watch = v["turns"][0]["turnId"], v["watchTurns"][0]["turnId"]
    b = boss_binding(gx, log, watch)
    for i in range(2):
        r = tool(gx, b, "groupx.steer", {"action": "nudge", "reason": f"r{i}", "content": f"hint {i}", "clientCommandId": f"n{i}"})
        assert not r["isError"], r
    r = tool(gx, b, "groupx.steer", {"action": "nudge", "reason": "r2", "content": "hint 2", "clientCommandId": "n2"})
    assert r["isError"] and r["structuredContent"]["errorCode"] == "STEER_LIMIT_REACHED"
    # A nudge does not stop the worker.
    assert gx.boot()["turns"] and any(t["turnId"] == work for t in gx.boot()["turns"])
    # The worker's own session is not a watch turn (its session exists once its turn is dispatched).
    gx.wait_type(work, "turn.dispatched")
    others = [x for x in bindings(log) if x != b]
    assert others
    r = tool(gx, others[0], "groupx.watch", {"timeoutMs": 0})
    assert r["isError"] and r["structuredContent"]["errorCode"] == "SUPERVISION_WATCH_REQUIRED"
    # The user cancels the worker: the watch ends with subject_cancelled, nothing is re-routed.
    gx.call("POST", f"/api/turns/{work}/cancel")
    snap = tool(gx, b, "groupx.watch", {"until": "terminal", "timeoutMs": 20000})["structuredContent"]
    assert snap["ended"] == "subject_cancelled" and snap["steers"] == 2
    queued = [e for e in gx.events() if e["type"] == "turn.queued" and e["body"]["target"] == "agent:worker"]
    assert len(queued) == 1
