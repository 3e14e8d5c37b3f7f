"""Cowchat rooms and principals at the boundary a client sees: private rooms per API key,
agent ids bound to their key, per-key limits, key rotation, the reconnect window (memberships
restored and missed messages replayed), the turn token's three rules, end-to-end encrypted
rooms refusing plaintext, and ephemeral rooms removed with their last member."""
from __future__ import annotations

import subprocess
import time

import pytest
from conftest import Daemon, convene_bin
from test_cowchat import CC, error_code, free_port, make_room

# The known answer: a real sealed blob (secret "correct horse battery staple",
# room "room-abc", nonce 00..0b, plaintext "hello world").
SEALED = "cow1:AAECAwQFBgcICQoLIyz9JMG5YnCtToYuqTS/uVRA+WmFnXIPxIAT"


def start(home, *extra: str) -> Daemon:
    port = free_port()
    d = Daemon(home, ["--cowchat-tcp", f"127.0.0.1:{port}", *extra]).start()
    d.cowchat_tcp = ("tcp", ("127.0.0.1", port))
    d.cowchat_unix = ("unix", str(home / "daemon" / "cowchat.sock"))
    return d


@pytest.fixture
def cow(home):
    d = start(home)
    yield d
    d.stop()


def auth(home, *args: str) -> str:
    out = subprocess.run([convene_bin(), "--home", str(home), "auth", *args],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def reg(c: CC, name: str, key: str = "", **extra) -> dict:
    return c.req("register", {"name": name, "key": key, "protocol_version": 2, "agent_id": name, **extra})


def test_private_rooms_are_visible_only_to_their_key_and_ids_are_bound_to_keys(cow):
    other = auth(cow.home, "add-key", "team-b")
    assert "team-b" in auth(cow.home, "list-keys").split()
    a = CC(cow.cowchat_unix)
    assert reg(a, "alice")["type"] == "ok"
    priv = a.ok("create_room", {"name": "secret-plans"})
    assert priv["public"] is False
    pub = a.ok("create_room", {"name": "open-coord", "public": True})
    b = CC(cow.cowchat_unix)
    assert error_code(reg(b, "bob", "not-a-key")) == "unauthorized"
    b = CC(cow.cowchat_unix)
    assert reg(b, "bob", other)["type"] == "ok"
    names = {r["name"] for r in b.ok("list_rooms")["rooms"]}
    assert "open-coord" in names and "lobby" in names and "secret-plans" not in names
    assert error_code(b.req("join_room", {"room_id": priv["room_id"]})) == "access_denied"
    assert error_code(b.req("room_info", {"room_id": priv["room_id"]})) == "access_denied"
    b.ok("join_room", {"room_id": pub["room_id"]})
    b.ok("join_room", {"name": "lobby"})
    # The same key sees its own private room.
    a2 = CC(cow.cowchat_tcp)
    assert reg(a2, "alice2")["type"] == "ok"
    assert "secret-plans" in {r["name"] for r in a2.ok("list_rooms")["rooms"]}
    # An agent id belongs to the key that first registered it.
    c = CC(cow.cowchat_unix)
    assert error_code(reg(c, "alice", other)) == "agent_id_taken"
    # The owner key is never on the wire.
    assert "owner" not in priv and all("owner" not in r for r in a.ok("list_rooms")["rooms"])


def test_room_attribute_changes_from_any_face_show_at_once(cow):
    """The face decodes a room's attributes once and keeps them: an operator's change over the
    CCCS IPC (a private room made public, then private again), a rename and a destroy must
    each show in the very next list_rooms / room_info."""
    other = auth(cow.home, "add-key", "team-b")
    a = CC(cow.cowchat_unix)
    assert reg(a, "alice")["type"] == "ok"
    rid = a.ok("create_room", {"name": "ops-room"})["room_id"]
    b = CC(cow.cowchat_unix)
    assert reg(b, "bob", other)["type"] == "ok"

    def bob_sees() -> bool:
        return "ops-room" in {r["name"] for r in b.ok("list_rooms")["rooms"]}

    def set_public(on: bool) -> None:
        g = cow.raw({"v": 1, "op": "group_show", "args": {"group_id": rid}})
        attrs = {**g["result"]["group"]["settings"]["cowchat"], "public": on}
        r = cow.raw({"v": 1, "op": "group_settings_update",
                     "args": {"group_id": rid, "patch": {"cowchat": attrs}}})
        assert r["ok"] is True, r

    assert not bob_sees()
    assert error_code(b.req("room_info", {"room_id": rid})) == "access_denied"
    set_public(True)
    assert bob_sees()
    assert b.ok("room_info", {"room_id": rid})["room"]["public"] is True
    set_public(False)
    assert not bob_sees()
    assert error_code(b.req("join_room", {"room_id": rid})) == "access_denied"
    a.ok("rename_room", {"room_id": rid, "name": "ops-renamed"})
    assert a.ok("room_info", {"name": "ops-renamed"})["room"]["room_id"] == rid
    assert "ops-room" not in {r["name"] for r in a.ok("list_rooms")["rooms"]}
    a.ok("destroy_room", {"room_id": rid})
    assert error_code(a.req("room_info", {"room_id": rid})) == "room_not_found"
    assert rid not in {r["room_id"] for r in a.ok("list_rooms")["rooms"]}


def test_per_key_limits_are_enforced_and_nothing_acknowledged_is_lost(home):
    d = start(home, "--cowchat-messages-per-sec", "1", "--cowchat-message-burst", "3",
              "--cowchat-agents-per-key", "2", "--cowchat-rooms-per-key", "2")
    try:
        a = CC(d.cowchat_unix)
        reg(a, "alice")
        room = a.ok("create_room", {"name": "r1"})["room_id"]
        a.ok("create_room", {"name": "r2"})
        assert error_code(a.req("create_room", {"name": "r3"})) == "rate_limit_rooms"
        a.ok("join_room", {"room_id": room})
        sent = [a.ok("send_message", {"room_id": room, "content": f"m{i}"})["message_id"] for i in range(3)]
        assert error_code(a.req("send_message", {"room_id": room, "content": "too fast"})) == "rate_limit_messages"
        assert error_code(a.req("thinking", {"room_id": room, "content": "too fast"})) == "rate_limit_messages"
        h = a.ok("get_history", {"room_id": room})["messages"]
        assert [m["message_id"] for m in h] == sent
        b = CC(d.cowchat_unix)
        assert reg(b, "bob")["type"] == "ok"
        c = CC(d.cowchat_unix)
        assert error_code(reg(c, "carol")) == "rate_limit_agents"
        # A second connection of an existing agent is not a new agent.
        a2 = CC(d.cowchat_unix)
        assert reg(a2, "alice")["type"] == "ok"
    finally:
        d.stop()


def test_rotated_key_is_required_by_keyed_transports(home):
    d = start(home, "--require-key")
    try:
        old = auth(home, "show-key")
        c = CC(d.cowchat_tcp)
        assert error_code(reg(c, "x")) == "unauthorized"  # keyless refused when keys are required
        assert reg(CC(d.cowchat_tcp), "y", old)["type"] == "ok"
        new = auth(home, "rotate-key")
        assert new != old and auth(home, "show-key") == new
        assert error_code(reg(CC(d.cowchat_tcp), "z", old)) == "unauthorized"
        assert reg(CC(d.cowchat_tcp), "z", new)["type"] == "ok"
        # The local socket stays keyless.
        assert reg(CC(d.cowchat_unix), "w")["type"] == "ok"
    finally:
        d.stop()


def test_reconnect_within_the_window_replays_missed_messages_then_the_window_closes(home):
    d = start(home, "--cowchat-reconnect-secs", "2")
    try:
        a, b = CC(d.cowchat_unix), CC(d.cowchat_tcp)
        reg(a, "alice")
        reg(b, "bob")
        room = a.ok("create_room", {"name": "r", "public": True})["room_id"]
        a.ok("join_room", {"room_id": room})
        b.ok("join_room", {"room_id": room})
        a.push("agent_joined")
        a.close()
        missed = [b.ok("send_message", {"room_id": room, "content": f"while away {i}"})["seq"] for i in range(3)]
        a = CC(d.cowchat_unix)
        back = reg(a, "alice", reconnect=True)["payload"]
        assert back["rooms"] == [room] and back["replayed"] is True
        got = [a.push("message_received")["payload"] for _ in range(3)]
        assert [m["seq"] for m in got] == missed
        # Away longer than the window: the agent leaves its rooms (others see agent_left).
        a.close()
        left = b.push("agent_left", timeout=10)["payload"]
        assert left["agent_id"] == "alice" and left["room_id"] == room
        a = CC(d.cowchat_unix)
        assert reg(a, "alice")["payload"]["rooms"] == []
    finally:
        d.stop()


@pytest.mark.parametrize("crash", [False, True], ids=["stop", "kill9"])
def test_reconnect_after_a_daemon_restart_replays_what_was_missed_before_and_after_it(home, crash):
    d = start(home, "--cowchat-reconnect-secs", "60")
    a, b = CC(d.cowchat_unix), CC(d.cowchat_tcp)
    reg(a, "alice", agent_id="alice")
    reg(b, "bob", agent_id="bob")
    room = a.ok("create_room", {"name": "r", "public": True})["room_id"]
    a.ok("join_room", {"room_id": room})
    b.ok("join_room", {"room_id": room})
    first = b.ok("send_message", {"room_id": room, "content": "before"})["seq"]
    assert a.push("message_received")["payload"]["seq"] == first
    a.close()
    away = [b.ok("send_message", {"room_id": room, "content": f"away {i}"})["seq"] for i in range(2)]
    if crash:
        time.sleep(2.5)  # one save of the replay points (every 2 s when they moved)
        d.kill9()
    else:
        d.stop()
    d = start(home, "--cowchat-reconnect-secs", "60")
    try:
        b = CC(d.cowchat_tcp)
        reg(b, "bob", agent_id="bob")
        after = b.ok("send_message", {"room_id": room, "content": "after the restart"})["seq"]
        a = CC(d.cowchat_unix)
        back = reg(a, "alice", agent_id="alice", reconnect=True)["payload"]
        assert back["rooms"] == [room] and back["replayed"] is True
        got = [a.push("message_received")["payload"] for _ in range(3)]
        assert [m["seq"] for m in got] == away + [after]
        assert [m["content"] for m in got] == ["away 0", "away 1", "after the restart"]
    finally:
        d.stop()


def test_reconnect_replays_each_missed_message_once_and_only_for_rooms_still_joined(home):
    """A room left before the disconnect is neither restored nor replayed; the other room's
    missed messages come once, in order, then live pushes go on without a repeat. A second
    reconnect while that connection is still open (its close not noticed yet) resumes from
    what the open one was sent: no replay of what it already had."""
    d = start(home, "--cowchat-reconnect-secs", "60")
    try:
        a, b = CC(d.cowchat_unix), CC(d.cowchat_unix)
        reg(a, "alice")
        reg(b, "bob")
        gone = a.ok("create_room", {"name": "gone", "public": True})["room_id"]
        kept = a.ok("create_room", {"name": "kept", "public": True})["room_id"]
        for r in (gone, kept):
            a.ok("join_room", {"room_id": r})
            b.ok("join_room", {"room_id": r})
        a.ok("leave_room", {"room_id": gone})
        a.close()
        b.ok("send_message", {"room_id": gone, "content": "after alice left"})
        missed = [b.ok("send_message", {"room_id": kept, "content": f"missed {i}"})["seq"] for i in range(3)]
        a = CC(d.cowchat_unix)
        back = reg(a, "alice", reconnect=True)["payload"]
        assert back["rooms"] == [kept] and back["replayed"] is True
        live = b.ok("send_message", {"room_id": kept, "content": "live"})["seq"]
        mark = b.ok("send_message", {"room_id": kept, "content": "mark"})["seq"]

        def until(conn: CC, seq: int) -> list[tuple[str, int]]:
            got = []
            while not got or got[-1][1] != seq:
                m = conn.push("message_received")["payload"]
                got.append((m["room_id"], m["seq"]))
            return got

        assert until(a, mark) == [(kept, s) for s in missed + [live, mark]]
        a2 = CC(d.cowchat_unix)
        assert reg(a2, "alice", reconnect=True)["payload"]["rooms"] == [kept]
        after = b.ok("send_message", {"room_id": kept, "content": "to both"})["seq"]
        assert until(a2, after) == [(kept, after)]
        assert until(a, after) == [(kept, after)]
    finally:
        d.stop()


def test_ephemeral_room_goes_when_its_last_member_is_gone(home):
    d = start(home, "--cowchat-reconnect-secs", "1")
    try:
        w = CC(d.cowchat_unix)
        reg(w, "watcher")
        a = CC(d.cowchat_unix)
        reg(a, "alice")
        eph = a.ok("create_room", {"name": "quick", "ephemeral": True, "public": True})["room_id"]
        assert w.push("room_created")["payload"]["room_id"] == eph
        a.ok("join_room", {"room_id": eph})
        a.close()  # disconnect, not leave: the room lives until the window runs out
        assert w.push("room_destroyed", timeout=10)["payload"]["room_id"] == eph
        assert error_code(w.req("join_room", {"room_id": eph})) == "room_not_found"
    finally:
        d.stop()


def room_kinds(d: Daemon, room: str) -> list[str]:
    """The kinds of the room's ledger events, read through the CCCS IPC."""
    from test_cowchat import raw_ipc
    lines = raw_ipc(d, {"v": 1, "op": "events_stream", "args": {"group_id": room, "since_seq": 0, "follow": False}})
    assert lines[0]["ok"] is True, lines[0]
    return [l["event"]["kind"] for l in lines[1:] if l.get("t") == "event"]


def test_an_ephemeral_room_left_empty_by_a_kill_9_before_its_deletion_goes_at_start(home, monkeypatch):
    """The last member's removal and the room's deletion are two commits: a kill -9 between
    them (held open here by a debug-build pause) left an empty ephemeral room for good. At
    start-up an ephemeral room that had members and has none is destroyed; one nobody has
    joined yet stays (the running daemon keeps it too, and restarting changes nothing)."""
    monkeypatch.setenv("CONVENE_TEST_PAUSE_BEFORE_EPHEMERAL_DESTROY_MS", "60000")
    d = start(home)
    try:
        a = CC(d.cowchat_unix)
        reg(a, "alice")
        eph = a.ok("create_room", {"name": "quick", "ephemeral": True, "public": True})["room_id"]
        unjoined = a.ok("create_room", {"name": "later", "ephemeral": True, "public": True})["room_id"]
        a.ok("join_room", {"room_id": eph})
        a.send("leave_room", {"room_id": eph})  # answered only after the deletion
        deadline = time.time() + 10
        while "actor.remove" not in room_kinds(d, eph):
            assert time.time() < deadline, "the leave never committed"
            time.sleep(0.05)
        d.kill9()
        monkeypatch.delenv("CONVENE_TEST_PAUSE_BEFORE_EPHEMERAL_DESTROY_MS")
        d = start(home)
        b = CC(d.cowchat_unix)
        reg(b, "bob")
        rooms = {r["room_id"] for r in b.ok("list_rooms")["rooms"]}
        assert eph not in rooms and unjoined in rooms, rooms
        assert error_code(b.req("join_room", {"room_id": eph})) == "room_not_found"
        b.ok("join_room", {"room_id": unjoined})
    finally:
        d.stop()


def test_an_ephemeral_room_whose_last_member_is_removed_over_the_ipc_goes_at_once(cow):
    w, a = CC(cow.cowchat_unix), CC(cow.cowchat_unix)
    reg(w, "watcher")
    reg(a, "alice")
    eph = a.ok("create_room", {"name": "quick", "ephemeral": True, "public": True})["room_id"]
    assert w.push("room_created")["payload"]["room_id"] == eph
    a.ok("join_room", {"room_id": eph})
    r = cow.raw({"v": 1, "op": "actor_remove", "args": {"group_id": eph, "actor_id": "alice", "by": "user"}})
    assert r["ok"] is True, r
    assert w.push("room_destroyed")["payload"]["room_id"] == eph
    assert error_code(w.req("join_room", {"room_id": eph})) == "room_not_found"


def test_a_turn_holder_removed_over_the_ipc_passes_the_token_at_once(cow):
    """Rule 3 for a holder removed over the CCCS IPC: the token leaves it as soon as the
    removal commits (it used to stay with the non-member until the next message or join)."""
    a, b = CC(cow.cowchat_unix), CC(cow.cowchat_unix)
    reg(a, "a")
    reg(b, "b")
    room = a.ok("create_room", {"name": "t", "public": True})["room_id"]
    a.ok("join_room", {"room_id": room})
    b.ok("join_room", {"room_id": room})
    assert b.ok("room_info", {"room_id": room})["current_turn_holder"] == "a"
    r = cow.raw({"v": 1, "op": "actor_remove", "args": {"group_id": room, "actor_id": "a", "by": "user"}})
    assert r["ok"] is True, r
    while True:
        p = b.push("turn_changed")["payload"]
        if p["reason"] == "left":
            break
    assert (p["current_turn_holder"], p["turn_order"]) == ("b", ["b"]), p
    info = b.ok("room_info", {"room_id": room})
    assert (info["current_turn_holder"], info["turn_order"]) == ("b", ["b"]), info


def test_rooms_renamed_or_deleted_over_the_ipc_are_pushed_to_those_who_see_them(cow):
    """`room_updated` / `room_destroyed` used to reach clients only for this face's own rename
    and destroy. An operator's rename, settings change or delete over the CCCS IPC is now
    pushed too, as the change commits, to the connections that can see the room (another
    key's connection never hears of a private room); the face's own rename is pushed once."""
    other = auth(cow.home, "add-key", "team-b")
    a, w, x = CC(cow.cowchat_unix), CC(cow.cowchat_unix), CC(cow.cowchat_unix)
    reg(a, "alice")
    reg(w, "watcher")
    assert reg(x, "outsider", key=other)["type"] == "ok"
    pub = a.ok("create_room", {"name": "open", "public": True})["room_id"]
    assert x.push("room_created")["payload"]["room_id"] == pub
    priv = a.ok("create_room", {"name": "secret"})["room_id"]
    a.ok("rename_room", {"room_id": pub, "name": "open-2"})
    for c in (w, x):
        assert c.push("room_updated")["payload"]["name"] == "open-2"
    r = cow.raw({"v": 1, "op": "group_settings_update", "args": {"group_id": pub, "patch": {"cowchat_room": "open-3"}}})
    assert r["ok"] is True, r
    for c in (w, x):
        p = c.push("room_updated")["payload"]
        assert (p["room_id"], p["name"]) == (pub, "open-3"), p  # no second push of open-2
    r = cow.raw({"v": 1, "op": "group_settings_update", "args": {"group_id": priv, "patch": {"cowchat_room": "secret-2"}}})
    assert r["ok"] is True, r
    assert w.push("room_updated")["payload"]["name"] == "secret-2"
    for gid in (priv, pub):
        assert cow.raw({"v": 1, "op": "group_delete", "args": {"group_id": gid}})["ok"] is True
    assert [w.push("room_destroyed")["payload"]["room_id"] for _ in range(2)] == [priv, pub]
    # The outsider's key cannot see the private room: it hears of the public one only.
    assert x.push("room_destroyed")["payload"]["room_id"] == pub
    assert not [f for f in x.pending if f["payload"].get("room_id") == priv]
    assert error_code(w.req("room_info", {"room_id": pub})) == "room_not_found"


def test_rooms_made_or_hidden_over_the_ipc_are_pushed_to_those_who_gain_or_lose_sight(cow):
    """A room made over another face (an operator's group given Cowchat room settings over
    the CCCS IPC) used to appear to Cowchat clients only in their next list_rooms: now it is
    pushed as `room_created`. A room made private to one key is `room_destroyed` for the
    keys that lose sight of it (they had been told it exists) and `room_updated` for the
    owner's; made public again, it is `room_created` for those who gain sight of it."""
    other = auth(cow.home, "add-key", "team-b")
    w, x = CC(cow.cowchat_unix), CC(cow.cowchat_unix)
    reg(w, "watcher")
    assert reg(x, "outsider", key=other)["type"] == "ok"
    mine = w.ok("create_room", {"name": "mine"})["room_id"]
    owner = cow.raw({"v": 1, "op": "group_show", "args": {"group_id": mine}})["result"]["group"]["settings"]["cowchat"]["owner"]
    gid = cow.raw({"v": 1, "op": "group_create", "args": {"title": "ops"}})["result"]["group_id"]

    def settings(attrs: dict, **more) -> None:
        r = cow.raw({"v": 1, "op": "group_settings_update", "args": {"group_id": gid, "patch": {"cowchat": attrs, **more}}})
        assert r["ok"] is True, r

    settings({"public": True, "created_by": "operator"}, cowchat_room="ops")
    for c in (w, x):
        p = c.push("room_created")["payload"]
        assert (p["room_id"], p["name"], p["public"]) == (gid, "ops", True), p
    settings({"public": False, "created_by": "operator", "owner": owner})
    assert x.push("room_destroyed")["payload"] == {"room_id": gid}
    p = w.push("room_updated")["payload"]
    assert (p["room_id"], p["public"]) == (gid, False), p
    settings({"public": True, "created_by": "operator", "owner": owner})
    p = x.push("room_created")["payload"]
    assert (p["room_id"], p["public"]) == (gid, True), p
    assert w.push("room_updated")["payload"]["public"] is True
    # The outsider never heard of the room while it was private, nor twice of its creation.
    assert not [f for f in x.pending if f["payload"].get("room_id") == gid], x.pending
    assert not [f for f in w.pending if f["type"] == "room_created" and f["payload"].get("room_id") == gid], w.pending


def test_turn_token_follows_the_three_rules(cow):
    a, b, c = CC(cow.cowchat_unix), CC(cow.cowchat_unix), CC(cow.cowchat_unix)
    for x, n in ((a, "a"), (b, "b"), (c, "c")):
        reg(x, n)
    room = a.ok("create_room", {"name": "t", "public": True})["room_id"]

    def holder_seen(conn: CC, reason: str) -> str:
        while True:
            p = conn.push("turn_changed")["payload"]
            if p["reason"] == reason:
                return p["current_turn_holder"]

    a.ok("join_room", {"room_id": room})
    assert holder_seen(a, "joined") == "a"  # rule 1: first into an empty room
    b.ok("join_room", {"room_id": room})
    c.ok("join_room", {"room_id": room})
    info = a.ok("room_info", {"room_id": room})
    assert info["current_turn_holder"] == "a" and info["turn_order"] == ["a", "b", "c"]
    a.ok("send_message", {"room_id": room, "content": "1"})
    assert holder_seen(c, "message_sent") == "b"  # rule 2: the member after the sender
    assert holder_seen(b, "message_sent") == "b"
    c.ok("send_message", {"room_id": room, "content": "out of turn"})
    assert holder_seen(b, "message_sent") == "a"  # wraps around; sends are never blocked
    a.ok("thinking", {"room_id": room, "content": "hmm"})
    assert a.ok("room_info", {"room_id": room})["current_turn_holder"] == "a"  # thinking keeps it
    a.close()  # rule 3: the holder disconnects
    assert holder_seen(b, "disconnected") == "b"
    assert b.ok("room_info", {"room_id": room})["turn_order"] == ["b", "c"]


def test_a_holder_that_leaves_passes_the_token_to_the_member_after_it(cow):
    # Rule 3 for a leave, not only a disconnect: the token goes to the member after the
    # holder in join order, not back to the first member (the holder's place is gone from
    # the room once it left, so it has to be taken from the order before the leave).
    conns = {n: CC(cow.cowchat_unix) for n in "abcd"}
    for n, c in conns.items():
        reg(c, n)
    a, b, c, d = (conns[n] for n in "abcd")
    room = a.ok("create_room", {"name": "t", "public": True})["room_id"]
    for x in (a, b, c, d):
        x.ok("join_room", {"room_id": room})
    a.ok("send_message", {"room_id": room, "content": "1"})
    b.ok("send_message", {"room_id": room, "content": "2"})
    assert a.ok("room_info", {"room_id": room})["current_turn_holder"] == "c"
    c.ok("leave_room", {"room_id": room})
    while True:
        p = d.push("turn_changed")["payload"]
        if p["reason"] == "left":
            break
    assert p["current_turn_holder"] == "d" and p["turn_order"] == ["a", "b", "d"]
    info = a.ok("room_info", {"room_id": room})
    assert info["current_turn_holder"] == "d" and info["turn_order"] == ["a", "b", "d"]
    # The last member in join order passes it round to the first.
    d.ok("leave_room", {"room_id": room})
    assert a.ok("room_info", {"room_id": room})["current_turn_holder"] == "a"
    for x in conns.values():
        x.close()


def test_encrypted_room_refuses_plaintext_and_stores_sealed_blobs_as_given(cow):
    a, b = CC(cow.cowchat_unix), CC(cow.cowchat_tcp)
    reg(a, "alice")
    reg(b, "bob")
    room = a.ok("create_room", {"name": "vault", "encrypted": True, "public": True})
    assert room["encrypted"] is True
    rid = room["room_id"]
    a.ok("join_room", {"room_id": rid})
    b.ok("join_room", {"room_id": rid})
    for ftype in ("send_message", "thinking"):
        assert error_code(a.req(ftype, {"room_id": rid, "content": "the eagle lands"})) == "plaintext_in_encrypted_room"
    assert error_code(a.req("send_message", {"room_id": rid, "content": "cow1:short"})) == "plaintext_in_encrypted_room"
    a.ok("send_message", {"room_id": rid, "content": SEALED, "metadata": {"kind": "note"}})
    a.ok("send_message", {"room_id": rid, "content": "clw1:" + SEALED[5:]})
    got = b.push("message_received")["payload"]
    assert got["content"] == SEALED and got["metadata"] == {"kind": "note"}
    h = b.ok("get_history", {"room_id": rid})["messages"]
    assert [m["content"][:5] for m in h] == ["cow1:", "clw1:"]


def test_default_tcp_port_is_taken_when_free_and_skipped_when_busy(home):
    """`convene serve` serves Cowchat on 127.0.0.1:9229 like a Cowchat server; a busy default
    port is not fatal (Unix socket only), an explicitly requested busy port is."""
    import json
    import socket as so

    holder = so.socket()
    holder.setsockopt(so.SOL_SOCKET, so.SO_REUSEADDR, 1)
    try:
        holder.bind(("127.0.0.1", 9229))
        holder.listen(1)
    except OSError:
        pass  # someone else holds it: just as busy
    try:
        # conftest adds --no-cowchat-tcp to its daemons: start this one by hand.
        proc = subprocess.Popen([convene_bin(), "--home", str(home), "serve"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            addr_file = home / "daemon" / "cowchat.addr.json"
            deadline = time.time() + 15
            while not addr_file.exists():
                assert proc.poll() is None, proc.stderr.read()
                assert time.time() < deadline
                time.sleep(0.05)
            assert json.loads(addr_file.read_text())["tcp"] is None
            c = CC(("unix", str(home / "daemon" / "cowchat.sock")))
            assert reg(c, "still-served")["type"] == "ok"
        finally:
            proc.terminate()
            proc.wait(10)
        busy = subprocess.run([convene_bin(), "--home", str(home), "serve", "--cowchat-tcp", "127.0.0.1:9229"],
                              capture_output=True, text=True, timeout=30)
        assert busy.returncode != 0 and "9229" in busy.stderr
    finally:
        holder.close()


def test_a_refused_decision_does_not_use_up_the_message_rate(home):
    # Decision, send and thinking share the key's message bucket; a decision refused because
    # the sender is not the leader must not spend it.
    d = start(home, "--cowchat-messages-per-sec", "1", "--cowchat-message-burst", "2")
    try:
        a = CC(d.cowchat_unix)
        reg(a, "alice")
        room = a.ok("create_room", {"name": "no-leader"})["room_id"]
        a.ok("join_room", {"room_id": room})
        for i in range(5):
            assert error_code(a.req("decision", {"room_id": room, "content": f"d{i}"})) == "not_leader"
        for i in range(2):
            a.ok("send_message", {"room_id": room, "content": f"m{i}"})
    finally:
        d.stop()


def test_room_names_resolve_and_stay_unique_across_rename_destroy_other_faces_and_restart(home):
    """Names resolve to the right room and are taken exactly once after renames, destroys,
    an operator's rename and delete over the CCCS IPC, and a restart; the rooms-per-key
    count follows the same changes."""
    d = start(home, "--cowchat-rooms-per-key", "3")
    try:
        a = CC(d.cowchat_unix)
        assert reg(a, "alice")["type"] == "ok"

        def resolves(name: str) -> str | None:
            fr = a.req("room_info", {"name": name})
            return None if fr["type"] == "error" and fr["payload"]["code"] == "room_not_found" else fr["payload"]["room"]["room_id"]

        r1 = a.ok("create_room", {"name": "alpha"})["room_id"]
        r2 = a.ok("create_room", {"name": "beta"})["room_id"]
        assert error_code(a.req("create_room", {"name": "alpha"})) == "room_name_taken"
        assert error_code(a.req("rename_room", {"room_id": r2, "name": "alpha"})) == "room_name_taken"
        a.ok("rename_room", {"room_id": r1, "name": "gamma"})
        assert (resolves("gamma"), resolves("alpha")) == (r1, None)
        assert a.ok("room_info", {"room_id": "gamma"})["room"]["room_id"] == r1  # a name where an id goes
        r3 = a.ok("create_room", {"name": "alpha"})["room_id"]  # the old name is free again
        assert resolves("alpha") == r3 and r3 != r1
        assert error_code(a.req("create_room", {"name": "delta"})) == "rate_limit_rooms"
        a.ok("destroy_room", {"room_id": r2})
        assert resolves("beta") is None
        assert error_code(a.req("join_room", {"name": "beta"})) == "room_not_found"
        r4 = a.ok("create_room", {"name": "beta"})["room_id"]  # name and room count freed
        # An operator renames and deletes rooms over the CCCS IPC.
        ren = d.raw({"v": 1, "op": "group_settings_update", "args": {"group_id": r4, "patch": {"cowchat_room": "delta"}}})
        assert ren["ok"] is True, ren
        assert (resolves("delta"), resolves("beta")) == (r4, None)
        assert error_code(a.req("create_room", {"name": "delta"})) == "room_name_taken"
        assert d.raw({"v": 1, "op": "group_delete", "args": {"group_id": r3}})["ok"] is True
        assert resolves("alpha") is None
        r5 = a.ok("create_room", {"name": "alpha"})["room_id"]
        assert error_code(a.req("create_room", {"name": "epsilon"})) == "rate_limit_rooms"
    finally:
        d.stop()
    d = start(home, "--cowchat-rooms-per-key", "3")
    try:
        a = CC(d.cowchat_unix)
        assert reg(a, "alice")["type"] == "ok"
        assert {n: resolves(n) for n in ("alpha", "beta", "gamma", "delta")} == {
            "alpha": r5, "beta": None, "gamma": r1, "delta": r4}
        for taken in ("alpha", "gamma", "delta", "lobby"):
            assert error_code(a.req("create_room", {"name": taken})) == "room_name_taken"
        assert error_code(a.req("create_room", {"name": "epsilon"})) == "rate_limit_rooms"
        assert [r["name"] for r in a.ok("list_rooms")["rooms"]].count("lobby") == 1
        a.ok("rename_room", {"room_id": r5, "name": "omega"})
        assert (resolves("omega"), resolves("alpha")) == (r5, None)
    finally:
        d.stop()


def test_a_connection_of_an_agent_that_left_and_joined_again_elsewhere_gets_pushes_again(cow):
    # Membership is the agent's, not the connection's: a listener left open keeps following
    # the room after the same agent id leaves and joins again from another connection (a
    # one-shot CLI command), and sees nothing sent while the agent was not a member.
    listen, cli, peer = CC(cow.cowchat_unix), CC(cow.cowchat_unix), CC(cow.cowchat_unix)
    listen.register("me", agent_id="me")
    cli.register("me", agent_id="me")
    peer.register("peer", agent_id="peer")
    room = make_room(peer, "rejoin")
    listen.ok("join_room", {"room_id": room})
    peer.ok("send_message", {"room_id": room, "content": "before"})
    assert listen.push("message_received")["payload"]["content"] == "before"
    cli.ok("leave_room", {"room_id": room})
    peer.ok("send_message", {"room_id": room, "content": "while away"})
    cli.ok("join_room", {"room_id": room})
    peer.ok("send_message", {"room_id": room, "content": "after"})
    assert listen.push("message_received")["payload"]["content"] == "after"
    shown = [f["payload"].get("content") for f in listen.pending if f["type"] == "message_received"]
    assert "while away" not in shown
    for c in (listen, cli, peer):
        c.close()


def test_the_turn_token_follows_ledger_order_when_members_send_at_once(cow):
    """Rule 2 is 'the member after the sender of the latest message'. When members send at
    the same instant, the token must end after the sender of the message the ledger holds
    last, not after whichever answer happened to be handled last."""
    import threading

    names = ["a", "b", "c"]
    conns = {n: CC(cow.cowchat_unix) for n in names}
    for n, c in conns.items():
        reg(c, n)
    room = conns["a"].ok("create_room", {"name": "race", "public": True})["room_id"]
    for n in names:
        conns[n].ok("join_room", {"room_id": room})
    wrong = []
    for rnd in range(150):
        gate = threading.Barrier(len(names))
        errs: list = []

        def send(n: str) -> None:
            try:
                gate.wait()
                conns[n].ok("send_message", {"room_id": room, "content": f"{rnd}-{n}"})
            except Exception as e:  # noqa: BLE001 - reported below
                errs.append(e)

        ts = [threading.Thread(target=send, args=(n,)) for n in names]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errs, errs
        # A non-send frame waits until the connection's earlier sends (and their turn moves)
        # are done: after one per connection, every move of this round has been applied.
        infos = [conns[n].ok("room_info", {"room_id": room}) for n in names]
        last = conns["a"].ok("get_history", {"room_id": room, "limit": 1})["messages"][-1]
        want = names[(names.index(last["agent_id"]) + 1) % len(names)]
        got = conns["a"].ok("room_info", {"room_id": room})["current_turn_holder"]
        if got != want:
            wrong.append((rnd, last["content"], got, want, infos[-1]["current_turn_holder"]))
    assert not wrong, wrong


def test_a_parent_given_by_name_is_stored_as_its_room_id(cow):
    """`create_room` resolves `parent_id` like every room reference (an id, or a name among
    the rooms the key can see). The sub-room must record the parent's id: a name stored as
    given left the sub-room out of `list_rooms(parent_id)` and the parent's `sub_rooms`."""
    a = CC(cow.cowchat_unix)
    reg(a, "alice")
    parent = a.ok("create_room", {"name": "general"})["room_id"]
    child = a.ok("create_room", {"name": "child", "parent_id": "general"})
    assert child["parent_id"] == parent, child
    assert [r["room_id"] for r in a.ok("list_rooms", {"parent_id": parent})["rooms"]] == [child["room_id"]]
    a.ok("join_room", {"room_id": parent})
    info = a.ok("room_info", {"room_id": parent})
    assert [r["room_id"] for r in info["sub_rooms"]] == [child["room_id"]], info


def test_the_lobby_comes_back_after_an_operator_deleted_it_and_its_name_stays_reserved(home):
    """An operator may delete the lobby's group over the CCCS IPC. No key may then take the
    name `lobby` for a room of its own (that room would stand in for the lobby at the next
    start, private to that key, and every other key would have no lobby), and the next start
    brings the system lobby back."""
    d = start(home)
    try:
        a = CC(d.cowchat_unix)
        reg(a, "alice")
        lobby = [r for r in a.ok("list_rooms")["rooms"] if r["name"] == "lobby"][0]["room_id"]
        assert d.raw({"v": 1, "op": "group_delete", "args": {"group_id": lobby, "by": "user"}})["ok"] is True
        b = CC(d.cowchat_unix)
        reg(b, "bob", auth(home, "add-key", "team-b"))
        assert error_code(b.req("create_room", {"name": "lobby"})) == "room_name_taken"
        mine = b.ok("create_room", {"name": "mine"})["room_id"]
        assert error_code(b.req("rename_room", {"room_id": mine, "name": " lobby "})) == "room_name_taken"
        d.stop()
        d = start(home)
        c = CC(d.cowchat_unix)
        reg(c, "carol")
        joined = c.ok("join_room", {"name": "lobby"})
        assert joined["public"] is True and joined["room_id"] != lobby, joined
    finally:
        d.stop()


def test_sub_rooms_that_stored_their_parents_name_are_migrated_to_its_id_at_start(home):
    """Before sub-rooms stored their parent's id, a parent given by name was stored as that
    name, and `list_rooms parent_id=<id>` / `room_info`'s `sub_rooms` never found them. The
    old shape is rebuilt here over the CCCS IPC (the `cowchat` settings as an old daemon wrote
    them); at start-up a stored name that names exactly one room the sub-room's key can see
    becomes that room's id. A name naming several such rooms, or none, is left as stored."""
    d = start(home)
    try:
        a = CC(d.cowchat_unix)
        reg(a, "alice")
        alpha = a.ok("create_room", {"name": "alpha", "public": True})["room_id"]
        twin1 = a.ok("create_room", {"name": "twin"})["room_id"]
        twin2 = a.ok("create_room", {"name": "twin-2"})["room_id"]
        subs = {n: a.ok("create_room", {"name": n, "parent_id": p})["room_id"]
                for n, p in (("alpha-tests", alpha), ("twin-tests", twin1), ("orphan", alpha))}

        def old_shape(rid: str, parent: str) -> None:
            g = d.raw({"v": 1, "op": "group_show", "args": {"group_id": rid}})
            attrs = {**g["result"]["group"]["settings"]["cowchat"], "parent_id": parent}
            r = d.raw({"v": 1, "op": "group_settings_update", "args": {"group_id": rid, "patch": {"cowchat": attrs}}})
            assert r["ok"] is True, r

        old_shape(subs["alpha-tests"], "alpha")
        old_shape(subs["twin-tests"], "twin")
        old_shape(subs["orphan"], "gone-parent")
        # Two rooms of one key named alike (another face can do that): the name is ambiguous.
        r = d.raw({"v": 1, "op": "group_settings_update", "args": {"group_id": twin2, "patch": {"cowchat_room": "twin"}}})
        assert r["ok"] is True, r
        assert a.ok("list_rooms", {"parent_id": alpha})["rooms"] == []
        d.kill9()
        d = start(home)
        b = CC(d.cowchat_unix)
        reg(b, "alice")
        listed = b.ok("list_rooms", {"parent_id": alpha})["rooms"]
        assert [(r["room_id"], r["parent_id"]) for r in listed] == [(subs["alpha-tests"], alpha)]
        info = b.ok("room_info", {"room_id": alpha})
        assert [s["room_id"] for s in info["sub_rooms"]] == [subs["alpha-tests"]]
        parents = {r["room_id"]: r["parent_id"] for r in b.ok("list_rooms")["rooms"]}
        assert parents[subs["twin-tests"]] == "twin" and parents[subs["orphan"]] == "gone-parent"
        # The migration is one settings update, recorded once: a second start changes nothing.
        d.stop()
        d = start(home)
        g = d.raw({"v": 1, "op": "group_show", "args": {"group_id": subs["alpha-tests"]}})
        assert g["result"]["group"]["settings"]["cowchat"]["parent_id"] == alpha
        from test_cowchat import raw_ipc
        lines = raw_ipc(d, {"v": 1, "op": "events_stream", "args": {"group_id": subs["alpha-tests"], "since_seq": 0, "follow": False}})
        updates = [(l["event"]["by"], l["event"]["data"]["patch"]["cowchat"]["parent_id"]) for l in lines[1:]
                   if l.get("t") == "event" and l["event"]["kind"] == "group.settings_update"]
        # Created, made old-shaped, migrated once.
        assert updates == [("svc:cowchat", alpha), ("user", "alpha"), ("svc:cowchat", alpha)], updates
    finally:
        d.stop()
