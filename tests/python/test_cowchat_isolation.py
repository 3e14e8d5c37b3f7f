"""One API key's agents against another key's rooms and agents, and keyless callers against
the keyed boundary, at the sockets a client sees: agent ids stay bound to their key across a
restart, a rename cannot reach a group that is not the caller's room, and an HTTP request
(what any web page can make a browser send to a loopback port) is never served as frames."""
from __future__ import annotations

import json
import socket
import time

import pytest
from test_cowchat import CC, error_code
from test_cowchat_rooms import auth, reg, start


def test_an_agent_id_stays_bound_to_its_key_across_a_restart(home):
    """After a restart, another key must not take over an agent id of a member of a private
    room: the id would carry that room's membership, its history and the missed replay."""
    d = start(home, "--cowchat-reconnect-secs", "60")
    other = auth(home, "add-key", "team-b")
    a = CC(d.cowchat_unix)
    assert reg(a, "alice")["type"] == "ok"
    room = a.ok("create_room", {"name": "secret-plans"})["room_id"]
    a.ok("join_room", {"room_id": room})
    a.ok("send_message", {"room_id": room, "content": "the launch code is 1234"})
    a.close()
    d.stop()
    d = start(home, "--cowchat-reconnect-secs", "60")
    try:
        thief = CC(d.cowchat_unix)
        assert error_code(reg(thief, "alice", other, reconnect=True)) == "agent_id_taken"
        # The owner's key still gets its agent back, with its room.
        back = reg(CC(d.cowchat_unix), "alice", reconnect=True)
        assert back["type"] == "ok" and back["payload"]["rooms"] == [room], back
    finally:
        d.stop()


def test_rename_by_name_changes_the_callers_room_and_never_another_group(cow_ipc):
    """`rename_room` accepts a room name in `room_id`. A room named like an existing CCCC
    group's id must not let the rename land on that group (which would make it a public
    Cowchat room anyone could join and read)."""
    d, gid = cow_ipc
    other = auth(d.home, "add-key", "team-b")
    b = CC(d.cowchat_unix)
    assert reg(b, "bob", other)["type"] == "ok"
    mine = b.ok("create_room", {"name": gid})["room_id"]
    renamed = b.ok("rename_room", {"room_id": gid, "name": "stolen"})
    assert renamed["room_id"] == mine and renamed["name"] == "stolen"
    assert error_code(b.req("room_info", {"room_id": gid})) == "room_not_found"
    assert error_code(b.req("join_room", {"room_id": gid})) == "room_not_found"
    g = d.raw({"v": 1, "op": "group_show", "args": {"group_id": gid}})["result"]["group"]
    assert "cowchat_room" not in g["settings"], g["settings"]


def test_an_http_request_to_the_tcp_face_is_refused_before_its_body_is_read_as_frames(home):
    """A web page can make the browser POST to 127.0.0.1:<port> with a text/plain body of
    NDJSON lines. Loopback TCP is keyless, so serving that body would let any site act as a
    local agent: the connection must end at the request line."""
    d = start(home)
    try:
        body = "".join(json.dumps(f) + "\n" for f in [
            {"id": "1", "type": "register", "payload": {"name": "evil", "key": "", "protocol_version": 2}},
            {"id": "2", "type": "create_room", "payload": {"name": "pwned", "public": True}},
        ])
        req = (f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{d.cowchat_tcp[1][1]}\r\n"
               f"Origin: https://evil.example\r\nContent-Type: text/plain\r\n"
               f"Content-Length: {len(body)}\r\n\r\n{body}").encode()
        with socket.create_connection(d.cowchat_tcp[1], timeout=10) as s:
            s.sendall(req)
            f = s.makefile("rb")
            frames = [json.loads(line) for line in f]  # until the server closes
        assert frames and frames[0]["type"] == "error", frames
        assert all(fr["type"] != "ok" for fr in frames), frames
        c = CC(d.cowchat_unix)
        assert reg(c, "auditor")["type"] == "ok"
        assert "pwned" not in {r["name"] for r in c.ok("list_rooms")["rooms"]}
    finally:
        d.stop()


@pytest.fixture
def cow_ipc(home):
    d = start(home)
    r = d.raw({"v": 1, "op": "group_create", "args": {"title": "internal", "by": "user"}})
    assert r["ok"] is True, r
    yield d, r["result"]["group_id"]
    d.stop()


def test_list_agents_shows_another_keys_agents_only_through_a_room_this_key_can_see(cow_ipc):
    """`list_agents` without a room lists connected agents: another key's agent (its name,
    presence detail, capabilities) shows only once it is in a room this key can see."""
    d, _ = cow_ipc
    other = auth(d.home, "add-key", "team-b")
    a = CC(d.cowchat_unix)
    assert reg(a, "alice", capabilities=["secret-work"])["type"] == "ok"
    a.ok("set_presence", {"status": "working", "status_detail": "reviewing secret-plans"})
    b = CC(d.cowchat_unix)
    assert reg(b, "bob", other)["type"] == "ok"
    b2 = CC(d.cowchat_unix)
    assert reg(b2, "bob-2", other)["type"] == "ok"
    seen = {x["agent_id"] for x in b.ok("list_agents")["agents"]}
    assert seen == {"bob", "bob-2"}, seen
    a.ok("join_room", {"name": "lobby"})
    assert "alice" in {x["agent_id"] for x in b.ok("list_agents")["agents"]}
    # The owning key sees its own agents and, through the lobby, nobody else's yet.
    assert {x["agent_id"] for x in a.ok("list_agents")["agents"]} == {"alice"}


def read_until_closed(c: CC, bound: float = 15.0) -> list[dict]:
    """Frames until the server closes; fails (instead of hanging: the server's pings would
    keep the connection alive) when it is still open after `bound` seconds."""
    frames = []
    deadline = time.time() + bound
    try:
        while time.time() < deadline:
            frames.append(c.read(pings=True))
    except EOFError:
        return [f for f in frames if f["type"] != "ping"]
    raise AssertionError(f"the connection is still open: {frames[-3:]}")


def test_a_rotated_or_removed_key_ends_the_connections_that_registered_with_it(home):
    """Rotating a leaked key must lock its holder out, not only from new registers: an open
    connection of the old key gets `unauthorized` and is closed; others go on."""
    d = start(home, "--require-key")
    try:
        old = auth(home, "show-key")
        team = auth(home, "add-key", "team-b")
        stale, gone = CC(d.cowchat_tcp), CC(d.cowchat_tcp)
        assert reg(stale, "holder", old)["type"] == "ok"
        assert reg(gone, "team-agent", team)["type"] == "ok"
        local = CC(d.cowchat_unix)
        assert reg(local, "local")["type"] == "ok"
        new = auth(home, "rotate-key")
        fresh = CC(d.cowchat_tcp)
        assert reg(fresh, "fresh", new)["type"] == "ok"
        frames = read_until_closed(stale)
        assert [f["payload"]["code"] for f in frames if f["type"] == "error"] == ["unauthorized"], frames
        auth(home, "remove-key", "team-b")
        frames = read_until_closed(gone)
        assert [f["payload"]["code"] for f in frames if f["type"] == "error"] == ["unauthorized"], frames
        # The new key's and the keyless local connections were not touched.
        fresh.ok("list_rooms")
        local.ok("list_rooms")
    finally:
        d.stop()


def test_an_id_that_is_a_member_of_another_keys_private_room_gives_no_access_to_it(cow_ipc):
    """Membership is by actor id. An actor an operator added over the CCCS IPC (a bridge to
    another runtime) has no key: only the daemon key may register that id (another key is
    refused: test_an_ipc_actors_id_cannot_be_claimed_by_another_key), and even then it must
    be refused everything in another key's private room it is a member of (read, post,
    typing, coordination, webhooks)."""
    d, _ = cow_ipc
    other = auth(d.home, "add-key", "team-b")
    a = CC(d.cowchat_unix)
    assert reg(a, "alice", other)["type"] == "ok"
    room = a.ok("create_room", {"name": "secret-plans"})["room_id"]
    a.ok("join_room", {"room_id": room})
    a.ok("send_message", {"room_id": room, "content": "the launch code is 1234"})
    r = d.raw({"v": 1, "op": "actor_add", "args": {"group_id": room, "actor_id": "bridge",
                                                   "runtime": "none", "by": "user"}})
    assert r["ok"] is True, r
    vote = a.ok("create_vote", {"room_id": room, "title": "go?", "options": ["y", "n"]})["vote_id"]
    b = CC(d.cowchat_unix)
    # Not restored as one of its rooms either (that would also start its pushes).
    assert reg(b, "bridge")["payload"]["rooms"] == []
    assert error_code(b.req("cast_vote", {"vote_id": vote, "option_index": 1})) == "access_denied"
    assert error_code(b.req("get_vote_status", {"vote_id": vote})) == "access_denied"
    for ftype, p in [("get_history", {"room_id": room}),
                     ("send_message", {"room_id": room, "content": "hi"}),
                     ("thinking", {"room_id": room, "content": "hm"}),
                     ("set_typing", {"room_id": room, "typing": True}),
                     ("list_tasks", {"room_id": room}),
                     ("list_votes", {"room_id": room}),
                     ("assign_task", {"room_id": room, "title": "t"}),
                     ("elect_leader", {"room_id": room})]:
        assert error_code(b.req(ftype, p)) == "access_denied", ftype
    contents = [m["content"] for m in a.ok("get_history", {"room_id": room})["messages"]]
    assert contents == ["the launch code is 1234"]
    # Nor does its presence reach that room: a push from b's handler is queued to a before
    # b's next answer, and a's own answer comes after it.
    b.ok("set_presence", {"status": "working", "status_detail": "x"})
    b.req("ping")
    a.req("ping")
    assert all(f["type"] != "presence_update" for f in a.pending), a.pending


def test_only_the_creating_key_and_id_may_rename_or_destroy_and_never_the_lobby(cow_ipc):
    d, _ = cow_ipc
    other = auth(d.home, "add-key", "team-b")
    a, a2, b = CC(d.cowchat_unix), CC(d.cowchat_unix), CC(d.cowchat_tcp)
    assert reg(a, "alice")["type"] == "ok"
    assert reg(a2, "alice-2")["type"] == "ok"  # same key, another id
    assert reg(b, "bob", other)["type"] == "ok"
    room = a.ok("create_room", {"name": "open-coord", "public": True})["room_id"]
    lobby = a.ok("room_info", {"name": "lobby"})["room"]["room_id"]
    for c in (a2, b):
        assert error_code(c.req("rename_room", {"room_id": room, "name": "mine"})) == "access_denied"
        assert error_code(c.req("destroy_room", {"room_id": room})) == "access_denied"
    for c in (a, a2, b):
        assert error_code(c.req("rename_room", {"room_id": lobby, "name": "x"})) == "access_denied"
        assert error_code(c.req("destroy_room", {"room_id": lobby})) == "access_denied"
    assert b.ok("room_info", {"room_id": room})["room"]["name"] == "open-coord"
    a.ok("rename_room", {"room_id": room, "name": "renamed"})
    assert b.push("room_updated")["payload"]["name"] == "renamed"
    a.ok("destroy_room", {"room_id": room})
    assert b.push("room_destroyed")["payload"]["room_id"] == room


def test_an_ipc_actors_id_cannot_be_claimed_by_another_key(cow_ipc):
    """An actor added over the CCCS IPC records no API key. Another key must not register its
    id and post as it: not in a public room it is a member of (the lobby here), nor anywhere
    (its id names it in its CCCC group). The daemon key may: it can act as any actor over
    the IPC already. Ids bound to a key stay that key's."""
    d, gid = cow_ipc
    other = auth(d.home, "add-key", "team-b")
    a = CC(d.cowchat_unix)
    assert reg(a, "alice")["type"] == "ok"
    lobby = a.ok("room_info", {"name": "lobby"})["room"]["room_id"]
    for group, actor in ((gid, "peer1"), (lobby, "bridge")):
        r = d.raw({"v": 1, "op": "actor_add", "args": {"group_id": group, "actor_id": actor,
                                                       "runtime": "none", "by": "user"}})
        assert r["ok"] is True, r
    for actor in ("peer1", "bridge"):
        b = CC(d.cowchat_unix)
        assert error_code(reg(b, actor, other)) == "agent_id_taken", actor
        b.close()
    a.ok("join_room", {"room_id": lobby})
    assert a.ok("get_history", {"room_id": lobby})["messages"] == []
    # A team-b agent that joined a room keeps its id bound to team-b: the daemon key cannot
    # take it either.
    b = CC(d.cowchat_unix)
    assert reg(b, "bob", other)["type"] == "ok"
    b.ok("join_room", {"room_id": lobby})
    b.close()
    assert error_code(reg(CC(d.cowchat_unix), "bob")) == "agent_id_taken"
    # The daemon key (here keyless local) may be the IPC actor, as over the IPC itself.
    p = CC(d.cowchat_unix)
    assert reg(p, "bridge")["type"] == "ok"
    p.ok("send_message", {"room_id": lobby, "content": "from the bridge"})
    assert [m["agent_id"] for m in a.ok("get_history", {"room_id": lobby})["messages"]] == ["bridge"]
