"""GroupX agents' MCP tools (§6, §12) end to end: the fake ACP agent advertises HTTP MCP, the
broker gives its session the GroupX MCP server with a binding header, and a `#mcp TOOL ARGS`
directive makes the agent call the tool mid-turn, the way a real agent's MCP client does."""
from __future__ import annotations

import json
import time

import pytest

from conftest import Daemon
from test_groupx import FAKE, GX, TERMINAL, start


def mcp_agent(aid: str) -> dict:
    return {"id": aid, "command": ["python3", str(FAKE)], "env": {"FAKE_ACP_HTTP_MCP": "1"}}


def directive(tool: str, args: dict) -> str:
    return f"#mcp {tool} {json.dumps(args, separators=(',', ':'))}"


def agent_reply(gx: GX, turn_id: str) -> dict:
    end = gx.wait_terminal(turn_id, timeout=40)
    assert end["type"] == "turn.completed", end
    msg = next(e for e in gx.events() if e["type"] == "message.created" and e["body"].get("turnId") == turn_id)
    text = msg["body"]["content"]
    assert text.startswith("mcp: "), text
    return json.loads(text[5:])


@pytest.fixture
def pair(home, tmp_path):
    log = tmp_path / "acp.log"
    d = start(home, [mcp_agent("echo"), mcp_agent("helper")], log=log)
    yield GX(d), log
    d.stop()


def test_groupx_6_1_an_agent_sends_to_another_agent_and_the_chain_is_recorded(pair):
    gx, _ = pair
    user = gx.ok_post(["agent:echo"], "delegate this\n" + directive(
        "groupx.send", {"to": ["agent:helper"], "content": "please check", "clientCommandId": "k1"}))
    echo_turn = user["turns"][0]["turnId"]
    sent = agent_reply(gx, echo_turn)
    [child] = sent["turns"]
    assert child["target"] == "agent:helper" and child["status"] == "queued"
    assert gx.wait_terminal(child["turnId"], timeout=40)["type"] == "turn.completed"
    evs = gx.events()
    msg = next(e for e in evs if e["eventId"] == sent["messageEventId"])
    # The sender is the binding's agent, never the body; the chain keeps its root (§2, §3).
    assert msg["actor"]["actorId"] == "agent:echo" and msg["body"]["content"] == "please check"
    assert msg["rootCorrelationId"] == user["correlationId"] != msg["correlationId"]
    assert msg["replyToEventId"] == user["messageEventId"]
    assert msg["causationId"] == echo_turn
    queued = next(e for e in evs if e["type"] == "turn.queued" and e["body"]["turnId"] == child["turnId"])
    assert queued["body"]["parentTurnId"] == echo_turn and queued["body"]["hopCount"] == 1
    answer = next(e for e in evs if e["type"] == "message.created" and e["body"].get("turnId") == child["turnId"])
    assert answer["actor"]["actorId"] == "agent:helper" and answer["body"]["content"] == "echo: please check"


def test_groupx_6_3_ask_waits_for_the_answer_and_returns_it(pair):
    gx, _ = pair
    user = gx.ok_post(["agent:echo"], "ask helper\n" + directive(
        "groupx.ask", {"to": ["agent:helper"], "content": "what is 2+2", "clientCommandId": "k2", "timeoutMs": 30000}))
    got = agent_reply(gx, user["turns"][0]["turnId"])
    assert got["state"] == "terminal", got
    [r] = got["results"]
    assert r["target"] == "agent:helper" and r["status"] == "completed"
    assert r["content"] == "echo: what is 2+2" and r["responseEventId"].startswith("evt_")


def test_groupx_6_6_a_synchronous_ask_back_up_the_chain_is_a_causal_cycle(pair):
    gx, _ = pair
    back = directive("groupx.ask", {"to": ["agent:echo"], "content": "and you?", "clientCommandId": "k4", "timeoutMs": 5000})
    user = gx.ok_post(["agent:echo"], "start\n" + directive(
        "groupx.ask", {"to": ["agent:helper"], "content": back, "clientCommandId": "k3", "timeoutMs": 30000}))
    got = agent_reply(gx, user["turns"][0]["turnId"])
    [r] = got["results"]
    assert r["status"] == "completed", got
    inner = json.loads(r["content"][5:])
    assert inner["errorCode"] == "CAUSAL_CYCLE", inner
    # Nothing was created for the refused ask.
    assert not any(e["type"] == "message.created" and e["body"]["content"] == "and you?" for e in gx.events())


def test_groupx_7_a_chain_past_its_hop_limit_stops_visibly(home, tmp_path):
    d = start(home, [mcp_agent("echo"), mcp_agent("helper")], limits={"maxHops": 1})
    try:
        gx = GX(d)
        loop = directive("groupx.send", {"to": ["agent:echo"], "content": "loop", "clientCommandId": "h2"})
        user = gx.ok_post(["agent:echo"], "go\n" + directive(
            "groupx.send", {"to": ["agent:helper"], "content": loop, "clientCommandId": "h1"}))
        first = agent_reply(gx, user["turns"][0]["turnId"])
        refused = agent_reply(gx, first["turns"][0]["turnId"])
        assert refused["errorCode"] == "HOP_LIMIT_REACHED", refused
        stop = gx.wait(lambda evs: next((e for e in evs if e["type"] == "routing.loop_stopped"), None))
        assert stop["body"]["errorCode"] == "HOP_LIMIT_REACHED" and stop["body"]["requestedBy"] == "agent:helper"
        assert stop["rootCorrelationId"] == user["correlationId"]
        assert not any(e["type"] == "message.created" and e["body"]["content"] == "loop" for e in gx.events())
    finally:
        d.stop()


def binding_of(log) -> tuple[str, str]:
    for line in log.read_text().splitlines():
        m = json.loads(line)
        if m.get("method") == "session/new":
            [srv] = m["params"]["mcpServers"]
            return srv["url"], srv["headers"][0]["value"]
    raise AssertionError("no session/new in the agent log")


def test_groupx_12_the_endpoint_knows_callers_only_by_their_binding(pair):
    gx, log = pair
    t = gx.ok_post(["agent:echo"], "hello")["turns"][0]["turnId"]
    gx.wait_terminal(t)
    url, binding = binding_of(log)
    assert url == f"http://127.0.0.1:{gx.port}/mcp"

    def rpc(msg, b=binding):
        h = {"X-GroupX-Binding": b} if b else {}
        return gx.call("POST", "/mcp", msg, headers=h)

    st, v = rpc({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, b=None)
    assert st == 503 and v["error"]["code"] == "MCP_UNAVAILABLE"
    st, v = rpc({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, b="bind_forged")
    assert st == 403 and v["error"]["code"] == "MCP_BINDING_MISMATCH"
    st, v = rpc({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18"}})
    assert st == 200 and v["result"]["protocolVersion"] == "2025-06-18" and "tools" in v["result"]["capabilities"]
    st, _ = rpc({"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert st == 202
    st, v = rpc({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert [x["name"] for x in v["result"]["tools"]] == ["groupx.send", "groupx.publish", "groupx.ask", "groupx.collect", "groupx.watch", "groupx.steer", "groupx.read",
        "groupx.memory.search", "groupx.memory.remember", "groupx.core_memory_remember", "groupx.identity.read", "groupx.identity.remember"]
    st, v = rpc({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "groupx.publish",
               "arguments": {"content": "status: half done", "clientCommandId": "p1", "from": "agent:helper"}}})
    assert v["result"]["isError"] is True and v["result"]["structuredContent"]["errorCode"] == "SENDER_FIELD_FORBIDDEN"
    before = gx.boot()["cursor"]
    st, v = rpc({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "groupx.publish",
               "arguments": {"content": "status: half done", "clientCommandId": "p1"}}})
    pub = v["result"]["structuredContent"]
    assert v["result"]["isError"] is False and pub["messageEventId"].startswith("evt_")
    # publish wakes nobody, and its retry is the same message.
    st, v2 = rpc({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "groupx.publish",
                "arguments": {"content": "status: half done", "clientCommandId": "p1"}}})
    assert v2["result"]["structuredContent"] == pub
    time.sleep(0.3)
    after = [e for e in gx.events() if e["seq"] > before]
    assert [(e["type"], e["actor"]["actorId"]) for e in after] == [("message.created", "agent:echo")]
    st, v = rpc({"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": "groupx.read", "arguments": {"afterSeq": before}}})
    read = v["result"]["structuredContent"]["events"]
    assert [e["eventId"] for e in read] == [pub["messageEventId"]]
    st, v = rpc({"jsonrpc": "2.0", "id": 7, "method": "nope"})
    assert v["error"]["code"] == -32601
