"""The local operator's MCP endpoint (§12 `/mcp/operator`): work is dispatched without a chat
bubble, the author is always `user:assistant`, and its read is a narrow public projection."""
from __future__ import annotations

import pytest

from test_groupx import FAKE, GX, TERMINAL, start


def agent(aid: str) -> dict:
    return {"id": aid, "command": ["python3", str(FAKE)]}


@pytest.fixture
def gx(home):
    d = start(home, [agent("echo"), agent("helper")])
    yield GX(d)
    d.stop()


def op(gx: GX, name: str, args: dict) -> dict:
    st, v = gx.call("POST", "/mcp/operator", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                              "params": {"name": name, "arguments": args}})
    assert st == 200, v
    return v["result"]


def test_groupx_12_the_operator_dispatches_work_without_a_chat_bubble(gx):
    st, v = gx.call("POST", "/mcp/operator", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert [t["name"] for t in v["result"]["tools"]] == ["worker_dispatch", "worker_ask", "send", "read", "cancel_turn"]
    r = op(gx, "worker_dispatch", {"to": ["agent:echo"], "content": "summarize the thread", "clientCommandId": "d1"})
    assert not r["isError"], r
    d = r["structuredContent"]
    [turn] = d["turns"]
    assert gx.wait_terminal(turn["turnId"])["type"] == "turn.completed"
    evs = gx.events()
    disp = next(e for e in evs if e["eventId"] == d["dispatchEventId"])
    assert disp["type"] == "operator.dispatch" and disp["actor"] == {"actorId": "user:assistant", "kind": "user", "displayName": "Assistant"}
    assert disp["to"] == ["agent:echo"] and disp["body"]["content"] == "summarize the thread"
    # No chat bubble by the operator; the worker's answer replies to the dispatch.
    assert not any(e["type"] == "message.created" and e["actor"]["actorId"] == "user:assistant" for e in evs)
    answer = next(e for e in evs if e["type"] == "message.created" and e["body"].get("turnId") == turn["turnId"])
    assert answer["replyToEventId"] == d["dispatchEventId"] and answer["body"]["content"] == "echo: summarize the thread"
    # A retry is the same dispatch.
    assert op(gx, "worker_dispatch", {"to": ["agent:echo"], "content": "summarize the thread", "clientCommandId": "d1"})["structuredContent"] == d


def test_groupx_12_operator_ask_send_read_cancel_and_no_sender_fields(gx):
    r = op(gx, "worker_ask", {"to": ["agent:helper"], "content": "status?", "clientCommandId": "a1", "timeoutMs": 20000})
    got = r["structuredContent"]
    assert got["state"] == "terminal" and got["results"][0]["content"] == "echo: status?"
    r = op(gx, "send", {"content": "heads up: release at 5", "clientCommandId": "s1"})
    sent = r["structuredContent"]
    msg = next(e for e in gx.events() if e["eventId"] == sent["messageEventId"])
    assert msg["type"] == "message.created" and msg["actor"]["actorId"] == "user:assistant" and msg["to"] == []
    r = op(gx, "send", {"content": "x", "clientCommandId": "s2", "actor": "agent:echo"})
    assert r["isError"] and r["structuredContent"]["errorCode"] == "SENDER_FIELD_FORBIDDEN"
    hung = op(gx, "worker_dispatch", {"to": ["agent:echo"], "content": "wait\n#hang", "clientCommandId": "d2"})
    tid = hung["structuredContent"]["turns"][0]["turnId"]
    gx.wait_type(tid, "turn.dispatched")
    assert op(gx, "cancel_turn", {"turnId": tid})["structuredContent"]["status"] == "cancelling"
    assert gx.wait_terminal(tid)["type"] == "turn.cancelled"
    # The narrow read: public semantic events only, default 20, newest last.
    read = op(gx, "read", {})["structuredContent"]["events"]
    assert 0 < len(read) <= 20
    assert {e["type"] for e in read} <= {"message.created", "operator.dispatch", "turn.completed", "turn.failed",
                                         "turn.cancelled", "turn.interrupted", "supervision.paired",
                                         "supervision.steered", "context.reset", "routing.loop_stopped"}
    assert read[-1]["type"] == "turn.cancelled"
    # The operator cannot watch or steer.
    r = op(gx, "groupx.watch", {})
    assert r["isError"]
