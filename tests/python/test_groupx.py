"""The GroupX face end to end: a real daemon on loopback HTTP, turns driven over ACP on real
child processes (tests/fixtures/fake_acp_agent.py, a faithful ACP agent whose behaviour is
chosen by a `#directive` line in the message), clients speaking plain HTTP and SSE."""
from __future__ import annotations

import http.client
import json
import threading
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, Daemon

FAKE = ROOT / "tests" / "fixtures" / "fake_acp_agent.py"
TERMINAL = {"turn.completed", "turn.failed", "turn.cancelled", "turn.interrupted"}


def agent(aid: str, **kw) -> dict:
    return {"id": aid, "command": ["python3", str(FAKE)], **kw}


class GX:
    """A GroupX client: REST over http.client, state through /api/bootstrap."""

    def __init__(self, d: Daemon):
        self.d = d
        addr = json.loads((d.home / "daemon" / "groupx.addr.json").read_text())["http"]
        self.host, port = addr.rsplit(":", 1)
        self.port = int(port)

    def conn(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection(self.host, self.port, timeout=10)

    def call(self, method: str, path: str, body=None, headers: dict | None = None):
        c = self.conn()
        h = {"Content-Type": "application/json"} if body is not None else {}
        h.update(headers or {})
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        raw = r.read()
        c.close()
        ctype = r.getheader("Content-Type", "")
        return r.status, (json.loads(raw) if raw and "json" in ctype else raw.decode())

    def post(self, to, content, cid: str | None = None, **extra):
        body = {"clientCommandId": cid or f"t-{uuid.uuid4()}", "to": to, "content": content, **extra}
        return self.call("POST", "/api/messages", body)

    def ok_post(self, to, content, **kw) -> dict:
        st, v = self.post(to, content, **kw)
        assert st == 202, v
        return v

    def boot(self) -> dict:
        st, v = self.call("GET", "/api/bootstrap")
        assert st == 200, v
        return v

    def events(self) -> list[dict]:
        return self.boot()["events"]

    def turn_events(self, turn_id: str) -> list[dict]:
        return [e for e in self.events() if e["body"].get("turnId") == turn_id]

    def wait(self, pred, timeout: float = 20.0, what: str = "condition"):
        deadline = time.time() + timeout
        while time.time() < deadline:
            evs = self.events()
            got = pred(evs)
            if got:
                return got
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}: {[(e['seq'], e['type']) for e in self.events()]}")

    def wait_terminal(self, turn_id: str, timeout: float = 20.0) -> dict:
        return self.wait(lambda evs: next((e for e in evs if e["type"] in TERMINAL and e["body"].get("turnId") == turn_id), None),
                         timeout, f"terminal of {turn_id}")

    def wait_type(self, turn_id: str, ty: str, timeout: float = 20.0) -> dict:
        return self.wait(lambda evs: next((e for e in evs if e["type"] == ty and e["body"].get("turnId") == turn_id), None),
                         timeout, f"{ty} of {turn_id}")


class SSE:
    """Reads /api/events on a thread; keeps every frame (id or not) in order."""

    def __init__(self, gx: GX, after: int | None = None, headers: dict | None = None):
        self.frames: list[tuple[str | None, dict]] = []
        self.status = None
        self.c = gx.conn()
        path = "/api/events" + (f"?afterSeq={after}" if after is not None else "")
        self.c.request("GET", path, headers=headers or {})
        self.r = self.c.getresponse()
        self.status = self.r.status
        self.t = threading.Thread(target=self._read, daemon=True)
        if self.status == 200:
            self.t.start()

    def _read(self):
        cur_id, data = None, []
        try:
            while True:
                line = self.r.fp.readline()
                if not line:
                    return
                line = line.decode().rstrip("\n")
                if line == "":
                    if data:
                        self.frames.append((cur_id, json.loads("\n".join(data))))
                    cur_id, data = None, []
                elif line.startswith("id: "):
                    cur_id = line[4:]
                elif line.startswith("data: "):
                    data.append(line[6:])
        except (OSError, ValueError):
            return

    def wait(self, pred, timeout: float = 20.0):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if pred(self.frames):
                return
            time.sleep(0.05)
        raise AssertionError(f"SSE: timed out; frames: {[(i, f['type']) for i, f in self.frames]}")

    def close(self):
        try:
            self.c.sock.shutdown(2)
        except OSError:
            pass
        self.c.close()


def start(home: Path, agents: list[dict], limits: dict | None = None, log: Path | None = None) -> Daemon:
    cfg = {"agents": agents}
    if limits:
        cfg["limits"] = limits
    (home / "groupx.json").write_text(json.dumps(cfg))
    import os
    d = Daemon(home, ["--groupx", "127.0.0.1:0"])
    # The daemon's agents inherit its environment, read once at spawn.
    if log:
        os.environ["FAKE_ACP_LOG"] = str(log)
    try:
        return d.start()
    finally:
        os.environ.pop("FAKE_ACP_LOG", None)


@pytest.fixture
def gx(home):
    d = start(home, [agent("echo", name="Echo"), agent("helper"), agent("off", enabled=False)])
    yield GX(d)
    d.stop()


def test_a_message_runs_a_turn_whose_reply_lands_in_the_room_after_durable_dispatch_evidence(gx):
    v = gx.ok_post(["agent:echo"], "hello there")
    [t] = v["turns"]
    assert t["target"] == "agent:echo" and t["status"] == "queued" and t["transport"] == "structured"
    done = gx.wait_terminal(t["turnId"])
    assert done["type"] == "turn.completed", done
    evs = gx.events()
    seq = {e["type"]: e["seq"] for e in evs if e["body"].get("turnId") == t["turnId"]}
    reply = next(e for e in evs if e["type"] == "message.created" and e["body"].get("turnId") == t["turnId"])
    # §2.1: prompt_invoked + unknown is durable before the agent could act; then started;
    # the response and the terminal event come last, the response first (§2.2).
    assert seq["turn.queued"] < seq["turn.dispatched"] < seq["turn.started"] < reply["seq"] < seq["turn.completed"]
    disp = next(e for e in evs if e["type"] == "turn.dispatched")
    assert disp["body"]["dispatchPhase"] == "prompt_invoked" and disp["body"]["deliveryCertainty"] == "unknown"
    assert reply["actor"] == {"actorId": "agent:echo", "kind": "agent", "displayName": "Echo"}
    assert reply["body"]["content"] == "echo: hello there"
    assert reply["replyToEventId"] == v["messageEventId"]
    assert reply["correlationId"] == v["correlationId"] == done["correlationId"]
    assert done["body"]["responseEventId"] == reply["eventId"]
    msg = next(e for e in evs if e["eventId"] == v["messageEventId"])
    assert msg["actor"]["actorId"] == "user:web" and msg["to"] == ["agent:echo"]
    assert [e["type"] for e in evs if e["type"] in TERMINAL] == ["turn.completed"]
    assert gx.boot()["turns"] == []


@pytest.mark.parametrize("field", ["from", "actor", "provenance"])
def test_groupx_3_2_a_request_naming_its_sender_is_refused_and_appends_nothing(gx, field):
    before = gx.boot()["cursor"]
    st, v = gx.post(["agent:echo"], "hi", **{field: "agent:echo"})
    assert st == 400 and v["error"]["code"] == "SENDER_FIELD_FORBIDDEN", v
    assert gx.boot()["cursor"] == before


def test_bad_requests_get_structured_errors_with_their_statuses_and_append_nothing(gx):
    before = gx.boot()["cursor"]
    cases = [
        ({"clientCommandId": "a", "to": ["agent:nobody"], "content": "x"}, 404, "UNKNOWN_TARGET"),
        ({"clientCommandId": "a", "to": ["agent:off"], "content": "x"}, 404, "UNKNOWN_TARGET"),
        ({"clientCommandId": "a", "to": ["agent:echo"], "content": "x", "transport": "direct"}, 400, "INVALID_ENVELOPE"),
        ({"clientCommandId": "a", "to": ["agent:echo"], "content": "x", "access": "restricted"}, 400, "INVALID_ENVELOPE"),
        ({"clientCommandId": "a", "to": ["agent:echo"]}, 400, "INVALID_ENVELOPE"),
        ({"to": ["agent:echo"], "content": "x"}, 400, "INVALID_ENVELOPE"),
        ({"clientCommandId": "a", "to": ["agent:echo"], "content": "x", "replyToEventId": "evt_missing"}, 400, "INVALID_ENVELOPE"),
        ({"clientCommandId": "a", "to": ["agent:echo"], "content": "x" * (64 * 1024 + 1)}, 413, "MESSAGE_TOO_LARGE"),
    ]
    for body, status, code in cases:
        st, v = gx.call("POST", "/api/messages", body)
        assert (st, v["error"]["code"]) == (status, code), (body.get("to"), v)
        assert v["error"]["message"]
    st, v = gx.call("POST", "/api/messages", b"{not json")
    assert st == 400 and v["error"]["code"] == "INVALID_ENVELOPE"
    st, v = gx.call("POST", "/api/messages", b"x" * (300 * 1024))
    assert st == 413 and v["error"]["code"] == "MESSAGE_TOO_LARGE"
    st, v = gx.call("GET", "/api/nowhere")
    assert st == 404 and v["error"]["code"] == "NOT_FOUND"
    st, v = gx.call("DELETE", "/api/messages")
    assert st == 405
    assert gx.boot()["cursor"] == before


def test_groupx_8_1_a_retried_command_answers_the_first_result_and_another_payload_conflicts(gx, home):
    first = gx.ok_post(["agent:echo"], "once", cid="web-1")
    again = gx.ok_post(["agent:echo"], "once", cid="web-1")
    assert again == first
    st, v = gx.post(["agent:echo"], "other text", cid="web-1")
    assert st == 409 and v["error"]["code"] == "CLIENT_COMMAND_CONFLICT"
    gx.wait_terminal(first["turns"][0]["turnId"])
    # Across a restart the key is still known (it is folded from the ledger, not a cache).
    gx.d.stop()
    d = Daemon(home, ["--groupx", "127.0.0.1:0"]).start()
    try:
        g2 = GX(d)
        assert g2.ok_post(["agent:echo"], "once", cid="web-1")["messageEventId"] == first["messageEventId"]
        evs = g2.events()
        assert sum(1 for e in evs if e["type"] == "message.created" and e["actor"]["actorId"] == "user:web") == 1
        assert sum(1 for e in evs if e["type"] == "turn.queued") == 1
    finally:
        d.stop()


def test_groupx_4_1_at_all_wakes_every_enabled_agent_with_its_own_turn(gx):
    v = gx.ok_post(["@all"], "roll call")
    assert sorted(t["target"] for t in v["turns"]) == ["agent:echo", "agent:helper"]
    for t in v["turns"]:
        assert gx.wait_terminal(t["turnId"])["type"] == "turn.completed"
    replies = [e for e in gx.events() if e["type"] == "message.created" and e["actor"]["kind"] == "agent"]
    assert sorted(e["actor"]["actorId"] for e in replies) == ["agent:echo", "agent:helper"]


def test_groupx_11_the_stream_replays_after_the_cursor_then_follows_with_deltas_and_no_gap(gx):
    first = gx.ok_post(["agent:echo"], "one")
    gx.wait_terminal(first["turns"][0]["turnId"])
    cut = gx.boot()["cursor"]
    s = SSE(gx, after=0)
    try:
        assert s.status == 200
        s.wait(lambda fr: any(i is not None and int(i) == cut for i, _ in fr))
        second = gx.ok_post(["agent:echo"], "two\n#slow 5")
        tid = second["turns"][0]["turnId"]
        s.wait(lambda fr: any(f["type"] == "turn.completed" and f["body"]["turnId"] == tid for _, f in fr))
        durable = [(int(i), f) for i, f in s.frames if i is not None]
        seqs = [i for i, _ in durable]
        assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
        assert all(f["seq"] == i and f["durability"] == "durable" for i, f in durable)
        # Everything the room holds arrived once, replay and live alike.
        assert [e["seq"] for e in gx.events()] == seqs
        deltas = [f for i, f in s.frames if i is None and f["type"] == "turn.content.delta"]
        assert deltas and all(f["seq"] is None and f["durability"] == "transient" for f in deltas)
        mine = [f for f in deltas if f["body"]["turnId"] == tid]
        assert "".join(f["body"]["text"] for f in mine) == next(
            f["body"]["content"] for _, f in durable if f["type"] == "message.created" and f["body"].get("turnId") == tid)
    finally:
        s.close()
    # Last-Event-ID alone is a cursor; beside afterSeq it must agree (§11).
    s = SSE(gx, headers={"Last-Event-ID": str(cut)})
    try:
        s.wait(lambda fr: fr and int(fr[0][0]) == cut + 1)
    finally:
        s.close()
    bad = SSE(gx, after=1, headers={"Last-Event-ID": "2"})
    assert bad.status == 400
    assert json.loads(bad.r.read())["error"]["code"] == "INVALID_ENVELOPE"
    bad.close()


def test_groupx_10_3_cancel_stops_a_running_turn_and_settles_a_queued_one_at_once(home, tmp_path):
    log = tmp_path / "acp.log"
    d = start(home, [agent("echo")], log=log)
    try:
        gx = GX(d)
        running = gx.ok_post(["agent:echo"], "work\n#hang")["turns"][0]["turnId"]
        gx.wait_type(running, "turn.dispatched")
        queued = gx.ok_post(["agent:echo"], "later")["turns"][0]
        assert queued["queuePosition"] == 1 and queued["activeTurnId"] == running
        st, v = gx.call("POST", f"/api/turns/{queued['turnId']}/cancel", {})
        assert st == 202 and v["status"] == "cancelled", v
        st, v = gx.call("POST", f"/api/turns/{running}/cancel", {"transport": "direct"})
        assert st == 400 and v["error"]["code"] == "INVALID_ENVELOPE"
        st, v = gx.call("POST", f"/api/turns/{running}/cancel")
        assert st == 202 and v["status"] == "cancelling", v
        assert gx.wait_terminal(running)["type"] == "turn.cancelled"
        assert gx.wait_terminal(queued["turnId"])["type"] == "turn.cancelled"
        # The queued one never reached the agent.
        assert [e["type"] for e in gx.turn_events(queued["turnId"])] == ["turn.queued", "turn.cancelled"]
        methods = [json.loads(l).get("method") for l in log.read_text().splitlines()]
        assert "session/cancel" in methods
        st, v = gx.call("POST", f"/api/turns/{running}/cancel")
        assert st == 202 and v["status"] == "cancelled"
        st, v = gx.call("POST", "/api/turns/turn_nope/cancel")
        assert st == 404 and v["error"]["code"] == "UNKNOWN_TURN"
        # The lane goes on.
        nxt = gx.ok_post(["agent:echo"], "after")["turns"][0]["turnId"]
        assert gx.wait_terminal(nxt)["type"] == "turn.completed"
    finally:
        d.stop()


def test_groupx_9_a_permission_request_fails_the_turn_once_with_unexpected_native_interaction(home, tmp_path):
    log = tmp_path / "acp.log"
    d = start(home, [agent("echo")], log=log)
    try:
        gx = GX(d)
        tid = gx.ok_post(["agent:echo"], "do it\n#permission")["turns"][0]["turnId"]
        end = gx.wait_terminal(tid)
        assert end["type"] == "turn.failed" and end["body"]["errorCode"] == "UNEXPECTED_NATIVE_INTERACTION", end
        evs = gx.events()
        assert [e["type"] for e in evs if e["body"].get("turnId") == tid and e["type"] in TERMINAL] == ["turn.failed"]
        assert not any(e["type"].startswith(("approval.", "permission.", "user_input.")) for e in evs)
        lines = [json.loads(l) for l in log.read_text().splitlines()]
        answered = [l for l in lines if "result" in l or l.get("answer")]
        assert any("cancelled" in json.dumps(l) for l in answered), lines
    finally:
        d.stop()


def test_an_agent_that_dies_fails_its_turn_and_the_next_turn_gets_a_new_session(gx):
    dead = gx.ok_post(["agent:echo"], "boom\n#crash")["turns"][0]["turnId"]
    end = gx.wait_terminal(dead)
    assert end["type"] == "turn.failed" and end["body"]["errorCode"] == "AGENT_EXITED", end
    nxt = gx.ok_post(["agent:echo"], "again")["turns"][0]["turnId"]
    assert gx.wait_terminal(nxt)["type"] == "turn.completed"
    kinds = [e["type"] for e in gx.events() if e["type"].startswith("session.") and e["body"].get("agent") == "agent:echo"]
    assert kinds == ["session.starting", "session.ready", "session.stopped", "session.starting", "session.ready"], kinds


def test_garbage_from_the_agent_is_protocol_invalid_message(gx):
    tid = gx.ok_post(["agent:echo"], "x\n#garbage")["turns"][0]["turnId"]
    end = gx.wait_terminal(tid)
    assert end["type"] == "turn.failed" and end["body"]["errorCode"] == "PROTOCOL_INVALID_MESSAGE", end


def test_groupx_2_2_reasoning_and_tool_records_commit_with_the_response_in_order(gx):
    tid = gx.ok_post(["agent:echo"], "look\n#tool")["turns"][0]["turnId"]
    gx.wait_terminal(tid)
    think = gx.ok_post(["agent:echo"], "ponder\n#think")["turns"][0]["turnId"]
    gx.wait_terminal(think)
    evs = gx.turn_events(tid)
    types = [e["type"] for e in evs]
    assert types[-3:] == ["tool.progress.recorded", "message.created", "turn.completed"], types
    tool = evs[-3]["body"]
    assert (tool["toolCallId"], tool["status"], tool["nativeType"]) == ("call_1", "completed", "read")
    types = [e["type"] for e in gx.turn_events(think)]
    assert types[-3:] == ["turn.reasoning.recorded", "message.created", "turn.completed"], types
    rec = next(e for e in gx.turn_events(think) if e["type"] == "turn.reasoning.recorded")
    assert rec["body"]["content"] and rec["body"]["terminalStatus"] == "completed"


def test_groupx_5_a_restart_interrupts_the_dispatched_turn_and_runs_the_queued_one(home):
    d = start(home, [agent("echo")])
    gx = GX(d)
    hung = gx.ok_post(["agent:echo"], "long\n#slow 300")["turns"][0]["turnId"]
    waiting = gx.ok_post(["agent:echo"], "next one")["turns"][0]["turnId"]
    gx.wait_type(hung, "turn.started")
    d.kill9()
    d = Daemon(home, ["--groupx", "127.0.0.1:0"]).start()
    try:
        gx = GX(d)
        end = gx.wait_terminal(hung)
        assert end["type"] == "turn.interrupted" and end["body"]["errorCode"] == "INTERRUPTED_BY_RESTART", end
        assert gx.wait_terminal(waiting)["type"] == "turn.completed"
        # Never a second native run of what may have reached the agent.
        assert [e["type"] for e in gx.turn_events(hung)].count("turn.dispatched") == 1
        assert [e["type"] for e in gx.turn_events(waiting)].count("turn.dispatched") == 1
    finally:
        d.stop()


def test_groupx_7_a_full_lane_refuses_more_work_visibly_and_appends_nothing(home):
    d = start(home, [agent("echo")], limits={"queuePerAgent": 2})
    try:
        gx = GX(d)
        gx.ok_post(["agent:echo"], "a\n#hang")
        gx.ok_post(["agent:echo"], "b")
        before = gx.boot()["cursor"]
        st, v = gx.post(["agent:echo"], "c")
        assert st == 429 and v["error"]["code"] == "QUEUE_CAPACITY_REACHED", v
        time.sleep(0.3)
        assert not any(e["type"] == "message.created" and e["body"]["content"] == "c" for e in gx.events())
        assert gx.boot()["cursor"] >= before
    finally:
        d.stop()


def test_requests_from_other_origins_or_hosts_are_refused(gx):
    st, v = gx.call("POST", "/api/messages", {"clientCommandId": "x", "to": ["agent:echo"], "content": "csrf"},
                    headers={"Origin": "http://evil.example"})
    assert st == 403, v
    st, _ = gx.call("GET", "/api/bootstrap", headers={"Host": "evil.example"})
    assert st == 403
    st, _ = gx.call("GET", "/api/bootstrap", headers={"Origin": f"http://127.0.0.1:{gx.port}"})
    assert st == 200
    assert not any(e["type"] == "message.created" for e in gx.events())


def test_the_page_health_and_the_other_faces_see_the_same_messages(gx):
    st, page = gx.call("GET", "/")
    assert st == 200 and "<html" in page.lower() and "EventSource" in page
    st, h = gx.call("GET", "/api/health")
    assert st == 200 and h["service"] == "groupx" and h["protocol"] == "groupx.runtime/1"
    assert len(h["runtimeKey"]) == 64 and len(h["runtimeScopeKey"]) == 64
    v = gx.ok_post(["agent:echo"], "seen by cccc too")
    gx.wait_terminal(v["turns"][0]["turnId"])
    groups = gx.d.raw({"v": 1, "op": "groups", "args": {}})["result"]["groups"]
    gid = next(g["group_id"] for g in groups if g["title"] == "groupx main")
    tail = gx.d.raw({"v": 1, "op": "ledger_tail", "args": {"group_id": gid, "limit": 50}})
    msgs = [e for e in tail["result"]["events"] if e["kind"] == "chat.message"]
    assert [(m["by"], m["data"]["text"]) for m in msgs] == [("user", "seen by cccc too"), ("echo", "echo: seen by cccc too")]
    assert msgs[0]["id"] == v["messageEventId"]


def test_the_web_page_sends_and_renders_against_the_real_daemon(gx):
    """The page itself (tests/js/page_live_test.mjs in jsdom) against this daemon: bootstrap,
    stream, composer, the agent's reply rendered as text."""
    import shutil
    import subprocess
    node = shutil.which("node")
    if not node or not (ROOT / "tests" / "js" / "node_modules" / "jsdom").exists():
        pytest.skip("node and jsdom (npm install --prefix tests/js) are needed")
    r = subprocess.run([node, str(ROOT / "tests" / "js" / "page_live_test.mjs"), f"http://127.0.0.1:{gx.port}/"],
                       capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("ok - ") == 3, r.stdout


def test_a_message_from_another_face_wakes_the_agents_it_names_once(gx, home):
    """North star: one room for every face. A CCCC client's send into the GroupX room names
    `echo`: echo gets one turn, answers in the room, and the CCCC side sees the reply."""
    groups = gx.d.raw({"v": 1, "op": "groups", "args": {}})["result"]["groups"]
    gid = next(g["group_id"] for g in groups if g["title"] == "groupx main")
    r = gx.d.raw({"v": 1, "op": "send", "args": {"group_id": gid, "by": "user", "text": "hello from cccc",
                                                  "to": ["echo"], "message_mode": "request_reply"}})
    assert r["ok"] is True, r
    src = r["result"]["event"]["id"]
    turn = gx.wait(lambda evs: next((e for e in evs if e["type"] == "turn.queued" and e["body"]["sourceEventId"] == src), None))
    assert turn["body"]["target"] == "agent:echo" and turn["body"]["commandType"] == "face.message"
    assert gx.wait_terminal(turn["body"]["turnId"])["type"] == "turn.completed"
    tail = gx.d.raw({"v": 1, "op": "ledger_tail", "args": {"group_id": gid, "limit": 50}})["result"]["events"]
    answer = next(e for e in tail if e["kind"] == "chat.message" and e["by"] == "echo")
    assert answer["data"]["text"] == "echo: hello from cccc" and answer["data"]["reply_to"] == src
    # A message naming nobody the broker drives wakes nobody; a restart makes no second turn.
    gx.d.raw({"v": 1, "op": "send", "args": {"group_id": gid, "by": "user", "text": "note to self", "to": ["user"]}})
    gx.d.stop()
    d = Daemon(home, ["--groupx", "127.0.0.1:0"]).start()
    try:
        g2 = GX(d)
        time.sleep(0.5)
        queued = [e for e in g2.events() if e["type"] == "turn.queued"]
        assert [e["body"]["sourceEventId"] for e in queued] == [src]
    finally:
        d.stop()


def test_a_restarted_broker_resumes_the_agents_own_session(home, tmp_path):
    """§2.1: after a restart the agent's native session is loaded again (session.resumed), so
    it keeps its context; an agent that cannot load it gets a new one (session.ready)."""
    state, log = tmp_path / "state.json", tmp_path / "acp.log"
    d = start(home, [agent("echo", env={"FAKE_ACP_STATE": str(state)})], log=log)
    gx = GX(d)
    gx.wait_terminal(gx.ok_post(["agent:echo"], "first")["turns"][0]["turnId"])
    d.stop()
    d = start(home, [agent("echo", env={"FAKE_ACP_STATE": str(state)})], log=log)
    try:
        gx = GX(d)
        assert gx.wait_terminal(gx.ok_post(["agent:echo"], "second")["turns"][0]["turnId"])["type"] == "turn.completed"
        kinds = [e["type"] for e in gx.events() if e["type"].startswith("session.")]
        assert kinds == ["session.starting", "session.ready", "session.starting", "session.resumed"], kinds
        calls = [json.loads(l) for l in log.read_text().splitlines()]
        new = [c for c in calls if c.get("method") == "session/new"]
        load = [c for c in calls if c.get("method") == "session/load"]
        assert len(new) == 1 and len(load) == 1
        # The native id stays inside the broker: no public event carries it.
        sid = load[0]["params"]["sessionId"]
        assert sid not in json.dumps(gx.events())
    finally:
        d.stop()
    # Without the agent's state the id is unknown to the new process: a new session, no error.
    state.unlink()
    d = start(home, [agent("echo", env={"FAKE_ACP_STATE": str(state)})])
    try:
        gx = GX(d)
        assert gx.wait_terminal(gx.ok_post(["agent:echo"], "third")["turns"][0]["turnId"])["type"] == "turn.completed"
        assert [e["type"] for e in gx.events() if e["type"].startswith("session.")][-1] == "session.ready"
    finally:
        d.stop()


def test_groupx_10_8_runtime_shutdown_needs_this_runtimes_scope_key_then_drains_and_stops(home):
    d = start(home, [agent("echo")])
    gx = GX(d)
    h = gx.call("GET", "/api/health")[1]
    st, v = gx.call("POST", "/api/runtime/shutdown", {"runtimeScopeKey": "0" * 64})
    assert st == 409 and v["error"]["code"] == "RUNTIME_CONFLICT"
    st, v = gx.call("POST", "/api/runtime/shutdown", {"runtimeScopeKey": h["runtimeScopeKey"], "force": True})
    assert st == 400
    assert gx.call("GET", "/api/health")[0] == 200, "a refused shutdown stops nothing"
    st, v = gx.call("POST", "/api/runtime/shutdown", {"runtimeScopeKey": h["runtimeScopeKey"]})
    assert st == 202 and v == {"accepted": True, "runtimeKey": h["runtimeKey"], "runtimeScopeKey": h["runtimeScopeKey"]}
    try:
        st, body = gx.call("GET", "/api/health")
        if st == 503:
            assert body["status"] == "closing" and body["runtimeKey"] == h["runtimeKey"]
    except OSError:
        pass  # already gone
    assert d.proc.wait(15) == 0


CODEX_FAKE = ROOT / "tests" / "fixtures" / "fake_codex_app_server.py"


def test_a_codex_app_server_agent_runs_turns_like_an_acp_one(home, tmp_path):
    """The `codex` driver (crates/convene-codex) behind the same lane: reply, interrupt, the
    §9 refusal of an approval request, and a failed turn."""
    log = tmp_path / "codex.log"
    codex = {"id": "codex", "name": "Codex", "driver": "codex", "command": ["python3", str(CODEX_FAKE)],
             "env": {"FAKE_CODEX_LOG": str(log)}}
    d = start(home, [codex])
    try:
        gx = GX(d)
        t = gx.ok_post(["agent:codex"], "hello codex")["turns"][0]["turnId"]
        assert gx.wait_terminal(t)["type"] == "turn.completed"
        reply = next(e for e in gx.events() if e["type"] == "message.created" and e["body"].get("turnId") == t)
        assert reply["body"]["content"] == "echo: hello codex" and reply["actor"]["displayName"] == "Codex"
        hung = gx.ok_post(["agent:codex"], "wait\n#hang")["turns"][0]["turnId"]
        gx.wait_type(hung, "turn.dispatched")
        assert gx.call("POST", f"/api/turns/{hung}/cancel")[0] == 202
        assert gx.wait_terminal(hung)["type"] == "turn.cancelled"
        methods = [json.loads(l).get("method") for l in log.read_text().splitlines()]
        assert "turn/interrupt" in methods
        perm = gx.ok_post(["agent:codex"], "risky\n#permission")["turns"][0]["turnId"]
        end = gx.wait_terminal(perm)
        assert end["type"] == "turn.failed" and end["body"]["errorCode"] == "UNEXPECTED_NATIVE_INTERACTION", end
        bad = gx.ok_post(["agent:codex"], "x\n#fail")["turns"][0]["turnId"]
        end = gx.wait_terminal(bad)
        assert end["type"] == "turn.failed" and end["body"]["errorCode"] == "AGENT_ERROR", end
        again = gx.ok_post(["agent:codex"], "still there?")["turns"][0]["turnId"]
        assert gx.wait_terminal(again)["type"] == "turn.completed"
    finally:
        d.stop()


def test_groupx_4_2_a_forward_references_the_original_and_never_copies_its_author(gx):
    first = gx.ok_post(["agent:echo"], "original words")
    gx.wait_terminal(first["turns"][0]["turnId"])
    answer = next(e for e in gx.events() if e["type"] == "message.created" and e["actor"]["actorId"] == "agent:echo")
    fwd = gx.ok_post(["agent:helper"], "see what echo said", forwardedEventId=answer["eventId"])
    env = next(e for e in gx.events() if e["eventId"] == fwd["messageEventId"])
    assert env["forwardedEventId"] == answer["eventId"]
    assert env["actor"]["actorId"] == "user:web"  # the forwarder; the original keeps its author
    gx.wait_terminal(fwd["turns"][0]["turnId"])
    before = gx.boot()["cursor"]
    st, v = gx.post(["agent:helper"], "x", forwardedEventId="evt_nowhere")
    assert st == 400 and v["error"]["code"] == "INVALID_ENVELOPE" and v["error"]["field"] == "forwardedEventId"
    st, v = gx.post(["agent:helper"], "x", forwardedFrom="agent:echo")
    assert st == 400 and v["error"]["code"] == "INVALID_ENVELOPE"
    assert gx.boot()["cursor"] == before
