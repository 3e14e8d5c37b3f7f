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
    # A vote of a room this key cannot see is one it does not know of.
    assert error_code(b.req("cast_vote", {"vote_id": vote, "option_index": 1})) == "vote_not_found"
    assert error_code(b.req("get_vote_status", {"vote_id": vote})) == "vote_not_found"
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


def same_answer(c: CC, ftype: str, real: dict, fake: dict, real_id: str, fake_id: str) -> str:
    """The error `c` gets for `real` (naming `real_id`) and for `fake` (naming `fake_id`,
    which does not exist) are the same, but for the id: returns its code."""
    r, f = c.req(ftype, real), c.req(ftype, fake)
    assert r["type"] == f["type"] == "error", (r, f)
    norm = lambda fr, i: json.dumps(fr["payload"], sort_keys=True).replace(i, "ID")
    assert norm(r, real_id) == norm(f, fake_id), (r, f)
    return r["payload"]["code"]


def test_votes_and_tasks_of_a_room_the_key_cannot_see_answer_as_unknown_ones(cow_ipc):
    """An id of a vote or task in another key's private room must not tell the caller that
    it exists (access_denied against vote_not_found was an existence oracle)."""
    d, _ = cow_ipc
    other = auth(d.home, "add-key", "team-b")
    a = CC(d.cowchat_unix)
    assert reg(a, "alice")["type"] == "ok"
    room = a.ok("create_room", {"name": "secret-plans"})["room_id"]
    a.ok("join_room", {"room_id": room})
    vote = a.ok("create_vote", {"room_id": room, "title": "go?", "options": ["y", "n"]})["vote_id"]
    task = a.ok("assign_task", {"room_id": room, "title": "launch"})["task_id"]
    b = CC(d.cowchat_unix)
    assert reg(b, "bob", other)["type"] == "ok"
    fake_vote, fake_task = vote[:-4] + "0000", task[:-4] + "0000"
    assert same_answer(b, "cast_vote", {"vote_id": vote, "option_index": 0},
                       {"vote_id": fake_vote, "option_index": 0}, vote, fake_vote) == "vote_not_found"
    assert same_answer(b, "get_vote_status", {"vote_id": vote}, {"vote_id": fake_vote},
                       vote, fake_vote) == "vote_not_found"
    assert same_answer(b, "update_task", {"task_id": task, "status": "completed"},
                       {"task_id": fake_task, "status": "completed"}, task, fake_task) == "task_not_found"
    # Nothing changed, and the owner still sees its vote and task.
    assert a.ok("get_vote_status", {"vote_id": vote})["votes_cast"] == 0
    assert [t["status"] for t in a.ok("list_tasks", {"room_id": room})["tasks"]] == ["pending"]


def test_a_name_held_by_a_room_the_key_cannot_see_is_free_for_it(cow_ipc):
    """`create_room` (and `rename_room`) with the name of another key's private room must
    answer as for a free name, or the name is an existence oracle. So names are unique among
    the rooms a key can see: the creator gets its room, each key resolves the name to the
    room it sees (its own first), and a visible room's name stays taken."""
    d, _ = cow_ipc
    other = auth(d.home, "add-key", "team-b")
    a = CC(d.cowchat_unix)
    assert reg(a, "alice")["type"] == "ok"
    mine = a.ok("create_room", {"name": "secret-plans"})["room_id"]
    public = a.ok("create_room", {"name": "open-coord", "public": True})["room_id"]
    b = CC(d.cowchat_unix)
    assert reg(b, "bob", other)["type"] == "ok"
    theirs = b.ok("create_room", {"name": "secret-plans"})
    assert theirs["room_id"] != mine and theirs["name"] == "secret-plans"
    assert b.ok("room_info", {"name": "secret-plans"})["room"]["room_id"] == theirs["room_id"]
    assert a.ok("room_info", {"name": "secret-plans"})["room"]["room_id"] == mine
    b.ok("join_room", {"name": "secret-plans"})
    assert b.ok("room_info", {"room_id": "secret-plans"})["agents"][0]["agent_id"] == "bob"
    # A public room is seen by every key: its name is taken for all of them.
    assert error_code(b.req("create_room", {"name": "open-coord"})) == "room_name_taken"
    other_room = b.ok("create_room", {"name": "b-room"})["room_id"]
    assert error_code(b.req("rename_room", {"room_id": other_room, "name": "open-coord"})) == "room_name_taken"
    # A public room may take the name of a private room its creator cannot see: that room's
    # key resolves the name to its own room, and lists both.
    a.ok("create_room", {"name": "b-plans"})
    b.ok("rename_room", {"room_id": other_room, "name": "b-plans"})
    a_only = a.ok("create_room", {"name": "a-only"})["room_id"]
    pub_b = b.ok("create_room", {"name": "a-only", "public": True})["room_id"]
    assert a.ok("room_info", {"name": "a-only"})["room"]["room_id"] == a_only
    assert b.ok("room_info", {"name": "a-only"})["room"]["room_id"] == pub_b
    assert sorted(r["room_id"] for r in a.ok("list_rooms")["rooms"] if r["name"] == "a-only") == sorted([a_only, pub_b])
    # Once public, its name is taken for every key.
    assert error_code(a.req("create_room", {"name": "a-only"})) == "room_name_taken"
    assert a.ok("room_info", {"name": "open-coord"})["room"]["room_id"] == public
