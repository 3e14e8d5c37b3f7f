"""The Cowchat v2 face, driven with raw sockets over TCP and the Unix socket, plus the
cross-face guarantee: Cowchat and CCCC IPC read and write the same group ledger."""
from __future__ import annotations

import json
import socket
import time

import pytest
from conftest import Daemon


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def cow(home):
    port = free_port()
    d = Daemon(home, ["--cowchat-tcp", f"127.0.0.1:{port}"]).start()
    d.cowchat_tcp = ("tcp", ("127.0.0.1", port))
    d.cowchat_unix = ("unix", str(home / "daemon" / "cowchat.sock"))
    yield d
    d.stop()


class CC:
    """A raw Cowchat connection that answers server pings while it reads."""

    def __init__(self, target, timeout: float = 10.0):
        kind, where = target
        if kind == "unix":
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            self.sock.connect(where)
        else:
            self.sock = socket.create_connection(where, timeout=timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.sock.makefile("rb")
        self.n = 0
        self.pending: list[dict] = []
        self.pings = 0

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send(self, ftype: str, payload: dict | None = None) -> str:
        self.n += 1
        rid = f"c{self.n}"
        frame = {"id": rid, "type": ftype, "payload": payload if payload is not None else {}}
        self.send_raw((json.dumps(frame) + "\n").encode())
        return rid

    def read(self, pings: bool = False) -> dict:
        """The next frame; server pings are answered (and returned only if `pings`)."""
        while True:
            line = self.f.readline()
            if not line:
                raise EOFError("server closed the connection")
            fr = json.loads(line)
            if fr.get("type") == "ping" and fr.get("reply_to") is None:
                self.pings += 1
                self.send_raw((json.dumps({"id": "p", "reply_to": fr["id"], "type": "pong", "payload": {}}) + "\n").encode())
                if pings:
                    return fr
                continue
            return fr

    def reply(self, rid: str) -> dict:
        while True:
            fr = self.read()
            if fr.get("reply_to") == rid:
                return fr
            self.pending.append(fr)

    def req(self, ftype: str, payload: dict | None = None) -> dict:
        return self.reply(self.send(ftype, payload))

    def ok(self, ftype: str, payload: dict | None = None) -> dict:
        fr = self.req(ftype, payload)
        assert fr["type"] != "error", fr
        return fr["payload"]

    def push(self, ftype: str, timeout: float = 5.0) -> dict:
        """The next pushed frame of `ftype` (already buffered or arriving)."""
        for i, fr in enumerate(self.pending):
            if fr["type"] == ftype:
                return self.pending.pop(i)
        deadline = time.time() + timeout
        while time.time() < deadline:
            fr = self.read(pings=True)  # pings return, so the deadline is checked
            if fr["type"] == "ping" and fr.get("reply_to") is None:
                continue
            if fr["type"] == ftype and fr.get("reply_to") is None:
                return fr
            self.pending.append(fr)
        raise TimeoutError(ftype)

    def register(self, name: str, **extra) -> str:
        return self.ok("register", {"name": name, "key": "", "capabilities": [], "protocol_version": 2, **extra})["agent_id"]

    def close(self) -> None:
        # The makefile() reader holds the descriptor too: close both, as a process exit would.
        self.f.close()
        self.sock.close()


def error_code(fr: dict) -> str:
    assert fr["type"] == "error", fr
    return fr["payload"]["code"]


def make_room(c: CC, name: str = "room") -> str:
    room = c.ok("create_room", {"name": name, "description": "d"})["room_id"]
    c.ok("join_room", {"room_id": room})
    return room


def test_register_requires_protocol_version_2_and_reconnect_keeps_agent_id(cow):
    c = CC(cow.cowchat_tcp)
    assert error_code(c.req("list_rooms")) == "not_registered"
    assert error_code(c.req("register", {"name": "a", "key": ""})) == "unsupported_protocol_version"
    assert error_code(c.req("register", {"name": "a", "protocol_version": 1})) == "unsupported_protocol_version"
    p = c.ok("register", {"name": "alice", "key": "", "protocol_version": 2})
    assert p["protocol_version"] == 2 and p["agent_id"]
    assert error_code(c.req("register", {"name": "a", "protocol_version": 2})) == "already_registered"
    room = make_room(c)
    c.close()
    # Reconnect with the stable id: still a member, pushes resume without a new join.
    c2 = CC(cow.cowchat_unix)
    again = c2.ok("register", {"name": "alice", "protocol_version": 2, "agent_id": p["agent_id"]})
    assert again["agent_id"] == p["agent_id"] and again["rooms"] == [room]
    b = CC(cow.cowchat_tcp)
    b.register("bob")
    b.ok("join_room", {"room_id": room})
    b.ok("send_message", {"room_id": room, "content": "welcome back"})
    assert c2.push("message_received")["payload"]["content"] == "welcome back"


def test_rooms_create_join_list_info_and_agents(cow):
    a = CC(cow.cowchat_unix)
    aid = a.register("alice")
    room = a.ok("create_room", {"name": "general", "description": "talk"})
    assert room["name"] == "general" and room["member_count"] == 0
    assert error_code(a.req("create_room", {"name": "general"})) == "room_name_taken"
    assert a.ok("create_room", {"name": "secret", "encrypted": True})["encrypted"] is True
    assert error_code(a.req("create_room", {"name": "child", "parent_id": "g_nope"})) == "room_not_found"
    child = a.ok("create_room", {"name": "child", "parent_id": room["room_id"]})
    assert child["parent_id"] == room["room_id"]
    joined = a.ok("join_room", {"name": "general"})
    assert joined["room_id"] == room["room_id"] and joined["member_count"] == 1
    assert error_code(a.req("join_room", {"room_id": room["room_id"]})) == "already_in_room"
    assert error_code(a.req("join_room", {"room_id": "g_000000000000"})) == "room_not_found"
    rooms = {r["name"]: r for r in a.ok("list_rooms")["rooms"]}
    assert rooms["general"]["member_count"] == 1 and rooms["general"]["last_activity"]
    assert rooms["child"]["member_count"] == 0
    info = a.ok("room_info", {"room_id": room["room_id"]})
    assert [m["agent_id"] for m in info["agents"]] == [aid] and info["agents"][0]["online"]
    assert [x["agent_id"] for x in a.ok("list_agents")["agents"]] == [aid]
    assert [x["agent_id"] for x in a.ok("list_agents", {"room_id": room["room_id"]})["agents"]] == [aid]


def test_send_message_pushes_message_received_to_other_connections(cow):
    a, b = CC(cow.cowchat_tcp), CC(cow.cowchat_unix)
    aid, bid = a.register("alice"), b.register("bob")
    room = make_room(a)
    b.ok("join_room", {"room_id": room})
    joined = a.push("agent_joined")["payload"]
    assert joined["agent"]["agent_id"] == bid and joined["room_id"] == room
    sent = a.ok("send_message", {"room_id": room, "content": "hi bob", "mentions": [bid], "metadata": {"k": [1, 2]}})
    got = b.push("message_received")["payload"]
    assert got["message_id"] == sent["message_id"] and got["seq"] == sent["seq"]
    assert got["agent_id"] == aid and got["content"] == "hi bob"
    assert got["mentions"] == [bid] and got["metadata"] == {"k": [1, 2]}
    r = b.ok("send_message", {"room_id": room, "content": "re", "reply_to": sent["message_id"]})
    assert r["seq"] > sent["seq"]
    assert a.push("message_received")["payload"]["reply_to"] == sent["message_id"]
    # The sender gets its reply, not an echo of its own message.
    assert not [f for f in a.pending if f["type"] == "message_received" and f["payload"]["agent_id"] == aid]
    assert error_code(a.req("send_message", {"room_id": room, "content": "x", "mentions": ["nobody"]})) == "not_in_room"
    assert error_code(a.req("send_message", {"room_id": room, "content": 5})) == "invalid_payload"
    c = CC(cow.cowchat_tcp)
    c.register("carol")
    assert error_code(c.req("send_message", {"room_id": room, "content": "x"})) == "not_in_room"
    assert error_code(c.req("get_history", {"room_id": room})) == "not_in_room"


def test_leave_room_stops_pushes_and_announces_agent_left(cow):
    a, b = CC(cow.cowchat_tcp), CC(cow.cowchat_tcp)
    a.register("alice")
    bid = b.register("bob")
    room = make_room(a)
    b.ok("join_room", {"room_id": room})
    b.ok("leave_room", {"room_id": room})
    assert a.push("agent_left")["payload"]["agent_id"] == bid
    a.ok("send_message", {"room_id": room, "content": "after leave"})
    assert b.ok("ping") == {}  # the reply arrives; a message push before it would be buffered
    assert not [f for f in b.pending if f["type"] == "message_received"]
    assert error_code(b.req("leave_room", {"room_id": room})) == "not_in_room"


def test_get_history_limit_since_seq_before_and_room_tip(cow):
    a = CC(cow.cowchat_tcp)
    a.register("alice")
    room = make_room(a)
    seqs = [a.ok("send_message", {"room_id": room, "content": f"m{i}"})["seq"] for i in range(10)]
    assert seqs == sorted(seqs)
    h = a.ok("get_history", {"room_id": room, "limit": 3})["messages"]
    assert [m["content"] for m in h] == ["m7", "m8", "m9"]
    h = a.ok("get_history", {"room_id": room, "limit": 4, "since_seq": seqs[2]})["messages"]
    assert [m["seq"] for m in h] == seqs[3:7]
    h = a.ok("get_history", {"room_id": room, "limit": 2, "before": seqs[5]})["messages"]
    assert [m["content"] for m in h] == ["m3", "m4"]
    all_ = a.ok("get_history", {"room_id": room, "limit": 100})["messages"]
    assert [m["content"] for m in all_] == [f"m{i}" for i in range(10)]
    since = a.ok("get_history", {"room_id": room, "since": all_[7]["message_id"]})["messages"]
    assert [m["content"] for m in since] == ["m8", "m9"]
    tip = a.ok("room_tip", {"room_id": room})
    assert tip["seq"] == seqs[-1] and tip["message_id"] == all_[-1]["message_id"]
    assert error_code(a.req("get_history", {"room_id": room, "since_seq": -1})) == "invalid_payload"


def test_get_history_refuses_since_and_since_seq_together(cow):
    """`since` (a message id) and `since_seq` are two lower bounds; when both came, one used
    to win silently. The pair is refused, naming both fields, whether or not they agree."""
    a = CC(cow.cowchat_unix)
    a.register("alice")
    room = make_room(a)
    sent = [a.ok("send_message", {"room_id": room, "content": f"m{i}"}) for i in range(4)]
    for since_seq in (sent[0]["seq"], sent[2]["seq"]):
        fr = a.req("get_history", {"room_id": room, "since": sent[2]["message_id"], "since_seq": since_seq})
        assert error_code(fr) == "invalid_payload", fr
        assert "since" in fr["payload"]["message"] and "since_seq" in fr["payload"]["message"], fr
        assert fr["payload"]["details"] == {"reason": "conflicting_cursors", "fields": ["since", "since_seq"]}, fr
    # Each alone still works; an empty `since` counts as absent, as before.
    assert [m["content"] for m in a.ok("get_history", {"room_id": room, "since": sent[2]["message_id"]})["messages"]] == ["m3"]
    assert [m["content"] for m in a.ok("get_history", {"room_id": room, "since": "", "since_seq": sent[1]["seq"]})["messages"]] == ["m2", "m3"]


def test_pipelined_sends_keep_frame_order(cow):
    a = CC(cow.cowchat_unix)
    a.register("alice")
    room = make_room(a)
    rids = [a.send("send_message", {"room_id": room, "content": f"p{i}"}) for i in range(300)]
    replies = {}
    while len(replies) < len(rids):
        fr = a.read()
        if fr.get("reply_to") is None:
            continue  # a push (turn_changed, …)
        assert fr["type"] == "ok", fr
        replies[fr["reply_to"]] = fr["payload"]["seq"]
    seqs = [replies[r] for r in rids]
    assert seqs == sorted(seqs) and len(set(seqs)) == 300
    h = a.ok("get_history", {"room_id": room, "limit": 1000})["messages"]
    assert [m["content"] for m in h] == [f"p{i}" for i in range(300)]


def test_unparseable_and_unknown_frames_get_error_frames(cow):
    a = CC(cow.cowchat_tcp)
    a.send_raw(b"this is not json\n")
    fr = a.read()
    assert error_code(fr) == "invalid_frame" and "reply_to" not in fr
    a.send_raw(b"[1,2]\n")
    assert error_code(a.read()) == "invalid_frame"
    a.send_raw(b'{"id":"x1","payload":{}}\n')
    fr = a.read()
    assert error_code(fr) == "invalid_frame" and fr["reply_to"] == "x1"
    a.register("alice")
    assert error_code(a.req("vote_cast", {})) == "unknown_type"
    assert a.req("ping")["type"] == "pong"


def test_frame_over_the_limit_is_refused_and_the_connection_survives(cow):
    a = CC(cow.cowchat_unix)
    a.register("alice")
    big = json.dumps({"id": "big", "type": "ping", "payload": {"pad": "x" * (1 << 20)}}) + "\n"
    a.send_raw(big.encode())
    assert error_code(a.read()) == "frame_too_large"
    assert a.req("ping")["type"] == "pong"


def test_server_pings_and_closes_a_silent_peer(cow):
    # conftest starts the daemon with --heartbeat-ms 500: pings every 0.5 s, a peer silent
    # for four intervals is closed.
    a = CC(cow.cowchat_tcp)
    a.register("alice")
    # A peer that answers pings stays connected well past four intervals.
    t0 = time.time()
    while time.time() - t0 < 3:
        a.read(pings=True)
    assert a.pings >= 5
    assert a.req("ping")["type"] == "pong"
    s = CC(cow.cowchat_tcp)
    s.register("silent")
    s.sock.settimeout(10)
    t0 = time.time()
    frames = []
    while True:
        line = s.f.readline()
        if not line:
            break
        frames.append(json.loads(line))
    assert time.time() - t0 < 8
    assert frames and all(f["type"] == "ping" for f in frames)


def raw_ipc(cow, req: dict) -> list[dict]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(cow.sock))
        s.sendall((json.dumps(req) + "\n").encode())
        return [json.loads(l) for l in s.makefile("rb")]


def test_cowchat_message_is_in_the_cccs_ledger_of_the_same_group(cow):
    from cccc_sdk import CCCCClient

    a = CC(cow.cowchat_tcp)
    aid = a.register("alice")
    room = make_room(a, "shared")
    sent = a.ok("send_message", {"room_id": room, "content": "to the ledger", "metadata": {"m": 1}})
    client = CCCCClient(cccc_home=str(cow.home))
    assert client.group_show(room)["group"]["title"] == "shared"
    tail = client.call("ledger_tail", {"group_id": room, "limit": 10, "kind": "chat.message"})
    ev = tail["events"][-1]
    assert ev["id"] == sent["message_id"] and ev["seq"] == sent["seq"] and ev["by"] == aid
    assert ev["data"]["text"] == "to the ledger" and ev["data"]["cowchat"]["metadata"] == {"m": 1}
    lines = raw_ipc(cow, {"v": 1, "op": "events_stream", "args": {"group_id": room, "since_seq": 0, "follow": False}})
    assert lines[0]["ok"] is True
    streamed = [l["event"] for l in lines[1:] if l.get("t") == "event"]
    assert [e["seq"] for e in streamed] == list(range(1, sent["seq"] + 1))
    assert streamed[-1]["id"] == sent["message_id"]


def test_cccs_send_reaches_cowchat_history_and_push(cow):
    from cccc_sdk import CCCCClient

    a = CC(cow.cowchat_unix)
    a.register("alice")
    room = make_room(a, "bridge")
    client = CCCCClient(cccc_home=str(cow.home))
    ev = client.send(group_id=room, text="hello from cccc", message_mode="send", to=["@all"])["event"]
    got = a.push("message_received")["payload"]
    assert got["message_id"] == ev["id"] and got["seq"] == ev["seq"] and got["agent_id"] == "user"
    assert got["content"] == "hello from cccc" and got.get("metadata", {}) == {}
    h = a.ok("get_history", {"room_id": room})["messages"]
    assert h[-1]["message_id"] == ev["id"]
    # Mail is private to its recipients: never shown as a room message.
    client.send(group_id=room, text="private", message_mode="mail", to=[a.ok("list_agents")["agents"][0]["agent_id"]])
    assert [m["content"] for m in a.ok("get_history", {"room_id": room})["messages"]] == ["hello from cccc"]


def test_require_key_makes_tcp_peers_send_the_api_key(home):
    port = free_port()
    d = Daemon(home, ["--cowchat-tcp", f"127.0.0.1:{port}", "--require-key"]).start()
    try:
        c = CC(("tcp", ("127.0.0.1", port)))
        assert error_code(c.req("register", {"name": "a", "key": "", "protocol_version": 2})) == "unauthorized"
        assert error_code(c.req("register", {"name": "a", "key": "wrong", "protocol_version": 2})) == "unauthorized"
        key = (home / "auth.key").read_text().strip()
        assert c.ok("register", {"name": "a", "key": key, "protocol_version": 2})["agent_id"]
        # The Unix socket is local: keyless.
        u = CC(("unix", str(home / "daemon" / "cowchat.sock")))
        assert u.register("b")
    finally:
        d.stop()


def test_slow_reader_loses_nothing_and_does_not_hold_up_the_sender(cow):
    a, b = CC(cow.cowchat_tcp), CC(cow.cowchat_unix)
    a.register("alice")
    b.register("bob")
    room = make_room(a)
    b.ok("join_room", {"room_id": room})
    # b stops reading while a sends ~3 MB: far more than b's outbound queue and socket
    # buffers. a's sends must all be answered regardless.
    n, window, pad = 3000, 64, "x" * 1000
    sent = done = 0
    inflight = set()
    while done < n:
        while len(inflight) < window and sent < n:
            inflight.add(a.send("send_message", {"room_id": room, "content": f"{sent:05d}{pad}"}))
            sent += 1
        fr = a.read()
        if fr.get("reply_to") in inflight:
            assert fr["type"] == "ok", fr
            inflight.discard(fr["reply_to"])
            done += 1
    # Now b catches up: every message once, in order, nothing skipped.
    got = [b.push("message_received", timeout=30)["payload"] for _ in range(n)]
    assert [int(m["content"][:5]) for m in got] == list(range(n))
    seqs = [m["seq"] for m in got]
    assert seqs == sorted(set(seqs))
    assert b.req("ping")["type"] == "pong"


def test_leaving_on_one_connection_stops_pushes_on_the_agents_other_connections(cow):
    a, b1, b2 = CC(cow.cowchat_tcp), CC(cow.cowchat_tcp), CC(cow.cowchat_unix)
    a.register("alice")
    room = make_room(a)
    b1.register("bob", agent_id="bob")
    b1.ok("join_room", {"room_id": room})
    assert b2.register("bob", agent_id="bob") == "bob"  # resumes pushes for `room`
    a.ok("send_message", {"room_id": room, "content": "both"})
    assert b1.push("message_received")["payload"]["content"] == "both"
    assert b2.push("message_received")["payload"]["content"] == "both"
    b1.ok("leave_room", {"room_id": room})
    a.ok("send_message", {"room_id": room, "content": "after leave"})
    time.sleep(0.3)
    assert b2.ok("ping") == {}
    assert not [f for f in b2.pending if f["type"] == "message_received"]
    # Joining again on b2 starts a fresh push task.
    b2.ok("join_room", {"room_id": room})
    a.ok("send_message", {"room_id": room, "content": "back"})
    assert b2.push("message_received")["payload"]["content"] == "back"


def test_cccc_sdk_send_wakes_a_blocked_cowchat_wait(cow):
    """Cross-face: the real `cowchat` CLI blocks in `wait --loop`; a message sent with the
    unmodified cccc-sdk to the same group wakes it, and it returns that message."""
    import subprocess
    from pathlib import Path

    from cccc_sdk import CCCCClient
    from conftest import convene_bin

    cowchat = str(Path(convene_bin()).with_name("cowchat"))
    a = CC(cow.cowchat_unix)
    a.register("alice", agent_id="alice")
    room = a.ok("create_room", {"name": "bridge-wait", "public": True})["room_id"]
    env = dict(__import__("os").environ, CONVENE_HOME=str(cow.home))
    tip = subprocess.run([cowchat, "--agent-id", "bob", "rooms", "tip", "bridge-wait"],
                         env=env, capture_output=True, text=True, timeout=30)
    assert tip.returncode == 0, tip.stderr
    waiter = subprocess.Popen(
        [cowchat, "--agent-id", "bob", "wait", "bridge-wait", "--loop", "--not-from", "bob",
         "--since-seq", tip.stdout.strip(), "--idle-timeout", "60"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Wait until bob is in the room (the waiter joins it), then send through the CCCS face.
    deadline = time.time() + 20
    while "bob" not in [x["agent_id"] for x in a.ok("list_agents", {"room_id": room})["agents"]]:
        assert time.time() < deadline and waiter.poll() is None, waiter.stderr.read() if waiter.poll() is not None else "bob never joined"
        time.sleep(0.05)
    client = CCCCClient(cccc_home=str(cow.home))
    ev = client.send(group_id=room, text="from cccc-sdk", message_mode="send", to=["@all"])["event"]
    out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 0, err
    got = [json.loads(l) for l in out.splitlines() if l.strip()]
    assert [m["content"] for m in got] == ["from cccc-sdk"]
    assert got[0]["message_id"] == ev["id"] and got[0]["agent_id"] == "user"
