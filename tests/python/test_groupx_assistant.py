"""The room assistant's side conversation (§10.7): the user talks to a private assistant beside
the room; the assistant (here the fake ACP agent, its only MCP server the operator endpoint)
acts on the room only through `/mcp/operator`. The side conversation is durable, in its own
ledger group, and never in the room's transcript or stream."""
from __future__ import annotations

import http.client
import json
import threading
import time
import uuid

import pytest

from conftest import Daemon
from test_groupx import FAKE, GX, SSE


def card(**kw) -> dict:
    return {"driver": "acp", "command": ["python3", str(FAKE)], "enabled": True,
            "env": {"FAKE_ACP_HTTP_MCP": "1"}, **kw}


def start(home, assistant: dict | None = card(), extra: dict | None = None) -> Daemon:
    cfg = {"agents": [{"id": "echo", "command": ["python3", str(FAKE)]}], **(extra or {})}
    if assistant is not None:
        cfg["assistant"] = assistant
    (home / "groupx.json").write_text(json.dumps(cfg))
    return Daemon(home, ["--groupx", "127.0.0.1:0"]).start()


@pytest.fixture
def gx(home):
    d = start(home)
    g = GX(d)
    yield g
    d.stop()


def call(gx: GX, method: str, path: str, body=None, timeout: float = 150):
    c = http.client.HTTPConnection(gx.host, gx.port, timeout=timeout)
    data = None if body is None else (body if isinstance(body, (str, bytes)) else json.dumps(body))
    c.request(method, path, body=data, headers={"Content-Type": "application/json"} if data is not None else {})
    r = c.getresponse()
    raw = r.read()
    c.close()
    return r.status, (json.loads(raw) if raw else None)


def say(gx: GX, content: str, cid: str | None = None):
    return call(gx, "POST", "/api/assistant/messages", {"clientCommandId": cid or f"a-{uuid.uuid4()}", "content": content})


def lines(gx: GX) -> list[dict]:
    st, v = call(gx, "GET", "/api/assistant/messages")
    assert st == 200, v
    return v["messages"]


def wait(pred, what: str, timeout: float = 20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_groupx_10_7_a_side_line_gets_a_reply_outside_the_room(gx):
    st, v = call(gx, "GET", "/api/assistant")
    assert st == 200 and v == {"enabled": True, "name": "Assistant", "driver": "acp", "session": "idle", "running": False}
    sse = SSE(gx, after=gx.boot()["cursor"])
    before = gx.boot()
    st, v = say(gx, "hello assistant", "c1")
    assert st == 200, v
    assert v["reply"]["content"] == "echo: hello assistant" and v["userMessageId"]
    got = lines(gx)
    assert [(m["role"], m["content"]) for m in got] == [("user", "hello assistant"), ("assistant", "echo: hello assistant")]
    assert got[0]["messageId"] == v["userMessageId"] and got[1]["messageId"] == v["reply"]["messageId"]
    assert all(m["createdAt"] for m in got)
    assert call(gx, "GET", "/api/assistant")[1]["session"] == "ready"
    # Nothing of it in the room: bootstrap, its cursor and the stream are unchanged.
    after = gx.boot()
    assert after["cursor"] == before["cursor"] and after["events"] == before["events"]
    assert [a["actorId"] for a in after["agents"]] == ["agent:echo"]
    ping = gx.ok_post(["agent:echo"], "room line")
    gx.wait_terminal(ping["turns"][0]["turnId"])
    sse.wait(lambda fr: any(f["type"] == "turn.completed" for _, f in fr))
    texts = json.dumps([f for _, f in sse.frames])
    assert "hello assistant" not in texts
    sse.close()
    # The second turn sees the first exchange (indented), the current line last.
    st, v = say(gx, "#reply second", "c2")
    assert st == 200 and v["reply"]["content"] == "second"


def test_groupx_10_7_the_assistant_dispatches_work_through_the_operator_endpoint(gx):
    args = json.dumps({"to": ["agent:echo"], "content": "summarize please", "clientCommandId": "d1"})
    st, v = say(gx, f"ask echo to summarize\n#mcp worker_dispatch {args}", "c1")
    assert st == 200, v
    res = json.loads(v["reply"]["content"].removeprefix("mcp: "))
    [turn] = res["turns"]
    assert gx.wait_terminal(turn["turnId"])["type"] == "turn.completed"
    evs = gx.events()
    disp = next(e for e in evs if e["eventId"] == res["dispatchEventId"])
    assert disp["type"] == "operator.dispatch" and disp["actor"]["actorId"] == "user:assistant"
    answer = next(e for e in evs if e["type"] == "message.created" and e["body"].get("turnId") == turn["turnId"])
    assert answer["body"]["content"] == "echo: summarize please"
    # The user's side line is not in the room.
    assert "ask echo" not in json.dumps(evs)
    # The assistant is no member: it cannot be targeted, and @all does not wake it.
    st, e = gx.post(["agent:assistant"], "hi")
    assert st == 404 and e["error"]["code"] == "UNKNOWN_TARGET"
    st, e = gx.post(["agent:__assistant__"], "hi")
    assert st == 404 and e["error"]["code"] == "UNKNOWN_TARGET"
    v = gx.ok_post(["@all"], "everyone")
    assert [t["target"] for t in v["turns"]] == ["agent:echo"]


def test_groupx_10_7_retries_join_or_replay_and_the_body_is_strict(gx):
    out = []
    ts = [threading.Thread(target=lambda: out.append(say(gx, "#slow 10", "same"))) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert [s for s, _ in out] == [200, 200] and out[0][1] == out[1][1], out
    assert out[0][1]["reply"]["content"].startswith("part0 ")
    assert say(gx, "#slow 10", "same") == (200, out[0][1])
    st, e = say(gx, "other text", "same")
    assert st == 409 and e["error"]["code"] == "CLIENT_COMMAND_CONFLICT"
    assert len([m for m in lines(gx) if m["role"] == "user"]) == 1
    n = len(lines(gx))
    for body, code, status in [
        ({"clientCommandId": "x", "content": "a", "from": "user:web"}, "SENDER_FIELD_FORBIDDEN", 400),
        ({"clientCommandId": "x", "content": "a", "actor": "x"}, "SENDER_FIELD_FORBIDDEN", 400),
        ({"clientCommandId": "x", "content": "a", "provenance": {}}, "SENDER_FIELD_FORBIDDEN", 400),
        ({"clientCommandId": "x", "content": "a", "to": ["@all"]}, "INVALID_ENVELOPE", 400),
        ({"clientCommandId": "x", "content": "a", "supervision": {"observers": ["agent:echo"]}}, "INVALID_ENVELOPE", 400),
        ({"clientCommandId": "x", "content": "a", "extra": 1}, "INVALID_ENVELOPE", 400),
        ({"content": "a"}, "INVALID_ENVELOPE", 400),
        ({"clientCommandId": "x", "content": "  "}, "INVALID_ENVELOPE", 400),
        ({"clientCommandId": "x", "content": "a" * 70000}, "MESSAGE_TOO_LARGE", 413),
        ("not json", "INVALID_ENVELOPE", 400),
    ]:
        st, e = call(gx, "POST", "/api/assistant/messages", body)
        assert (st, e["error"]["code"]) == (status, code), body
    assert len(lines(gx)) == n, "a refused request appends nothing"
    st, e = call(gx, "DELETE", "/api/assistant/messages")
    assert st == 405


def test_groupx_10_7_cancel_stops_the_running_turn_and_writes_no_reply(gx):
    assert call(gx, "POST", "/api/assistant/cancel", {}) == (202, {"cancelling": False})
    out = []
    t = threading.Thread(target=lambda: out.append(say(gx, "wait for me\n#hang", "h1")))
    t.start()
    wait(lambda: call(gx, "GET", "/api/assistant")[1]["running"], "the running assistant turn")
    st, v = call(gx, "POST", "/api/assistant/cancel", {})
    assert (st, v) == (202, {"cancelling": True})
    t.join(30)
    [(st, v)] = out
    assert st == 200 and v["reply"] is None and v["state"] == "cancelled", v
    assert [m["role"] for m in lines(gx)] == ["user"]
    # The session lives on: the next line is answered.
    st, v = say(gx, "still there?", "h2")
    assert st == 200 and v["reply"]["content"] == "echo: still there?"
    # An interaction request is refused like an agent's (§9); no reply line.
    st, v = say(gx, "#permission", "p1")
    assert st == 200 and v["reply"] is None and v["errorCode"] == "UNEXPECTED_NATIVE_INTERACTION", v


def test_groupx_10_7_restart_keeps_the_side_conversation_and_reruns_an_unanswered_line(home):
    d = start(home)
    gx = GX(d)
    st, v = say(gx, "remember me", "r1")
    assert st == 200
    def slow():
        try:
            call(gx, "POST", "/api/assistant/messages", {"clientCommandId": "r2", "content": "#slow 40"})
        except OSError:
            pass  # the daemon is killed mid-turn

    threading.Thread(target=slow, daemon=True).start()
    wait(lambda: len(lines(gx)) == 3, "the second user line")
    d.kill9()
    d = start(home)
    try:
        gx = GX(d)
        got = lines(gx)
        assert [(m["role"], m["content"]) for m in got] == [
            ("user", "remember me"), ("assistant", "echo: remember me"), ("user", "#slow 40")]
        # The same command again: the assistant runs again, without a second user line.
        st, v = say(gx, "#slow 40", "r2")
        assert st == 200 and v["userMessageId"] == got[2]["messageId"] and v["reply"]["content"].startswith("part0 ")
        assert [m["role"] for m in lines(gx)] == ["user", "assistant", "user", "assistant"]
        # A written reply is replayed from the ledger after the restart.
        st, v1 = say(gx, "remember me", "r1")
        assert st == 200 and v1["reply"]["messageId"] == got[1]["messageId"]
        assert not any("remember me" in json.dumps(e) for e in gx.events())
    finally:
        d.stop()


def test_groupx_10_7_the_session_gets_only_the_operator_endpoint_and_the_product_prompt(home):
    log = home / "assistant.log"
    d = start(home, assistant=card(extraInstructions="Prefer agent:echo.",
                                   env={"FAKE_ACP_HTTP_MCP": "1", "FAKE_ACP_LOG": str(log)}))
    try:
        gx = GX(d)
        assert say(gx, "first line", "p1")[0] == 200
        assert say(gx, "second line", "p2")[0] == 200
        msgs = [json.loads(x) for x in log.read_text().splitlines()]
        [new] = [m for m in msgs if m.get("method") == "session/new"]
        assert new["params"]["mcpServers"] == [{"type": "http", "name": "groupx-operator", "headers": [],
                                                "url": f"http://{gx.host}:{gx.port}/mcp/operator"}]
        prompts = [m["params"]["prompt"][0]["text"] for m in msgs if m.get("method") == "session/prompt"]
        assert len(prompts) == 2
        p = prompts[1]
        assert p.index("worker_dispatch") < p.index("Prefer agent:echo.") < p.index("  user: first line") \
            < p.index("  assistant: echo: first line") < p.index("second line")
        assert p.endswith("\nsecond line")
    finally:
        d.stop()


def test_groupx_10_7_without_a_card_the_assistant_is_off(home):
    d = start(home, assistant=None)
    try:
        gx = GX(d)
        st, v = call(gx, "GET", "/api/assistant")
        assert st == 200 and v["enabled"] is False and v["name"] is None
        st, e = say(gx, "hi")
        assert st == 404 and e["error"]["code"] == "NOT_FOUND"
    finally:
        d.stop()


def test_groupx_10_6_the_assistant_card_is_validated_and_edited_by_setup(home):
    d = start(home, assistant=card(name="Helper", extraInstructions="be brief"))
    try:
        gx = GX(d)
        st, v = call(gx, "GET", "/api/setup")
        a = v["draft"]["assistant"]
        assert a["name"] == "Helper" and a["extraInstructions"] == "be brief" and a["enabled"] is True
        agents = v["draft"]["agents"]
        for bad, field in [
            ({**a, "driver": "direct"}, "assistant.driver"),
            ({**a, "command": []}, "assistant.command"),
            ({**a, "id": "x"}, "assistant.id"),
            ({**a, "model": "m"}, "assistant.model"),
            ({**a, "enabled": "yes"}, "assistant.enabled"),
        ]:
            st, e = call(gx, "POST", "/api/setup", {"agents": agents, "assistant": bad})
            assert st == 400 and e["error"]["field"] == field, (bad, e)
        st, e = call(gx, "POST", "/api/setup", {"agents": agents, "assistant": {**a, "actor": "x"}})
        assert st == 400 and e["error"]["code"] == "SENDER_FIELD_FORBIDDEN"
        # Without the key the card is kept; null removes it.
        st, v = call(gx, "POST", "/api/setup", {"agents": agents})
        assert st == 200 and json.loads((home / "groupx.json").read_text())["assistant"]["name"] == "Helper"
        st, v = call(gx, "POST", "/api/setup", {"agents": agents, "assistant": {**a, "enabled": False}})
        assert st == 200 and json.loads((home / "groupx.json").read_text())["assistant"]["enabled"] is False
        st, v = call(gx, "POST", "/api/setup", {"agents": agents, "assistant": None})
        assert st == 200 and "assistant" not in json.loads((home / "groupx.json").read_text())
    finally:
        d.stop()
