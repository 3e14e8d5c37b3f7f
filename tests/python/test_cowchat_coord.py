"""Cowchat coordination frames against a real daemon: sealed ballots stay secret in the
shared ledger until the reveal, a deadline vote survives a kill -9, elections with an
opt-out, leader-only decisions, and leadership clearing on leave and on disconnect."""
from __future__ import annotations

import base64
import json
import socket
import stat
import time

import pytest
from conftest import Daemon
from test_cowchat import CC, error_code, free_port, make_room, raw_ipc


def start(home, port: int) -> Daemon:
    d = Daemon(home, ["--cowchat-tcp", f"127.0.0.1:{port}"]).start()
    d.cowchat_tcp = ("tcp", ("127.0.0.1", port))
    d.cowchat_unix = ("unix", str(home / "daemon" / "cowchat.sock"))
    return d


@pytest.fixture
def cow(home):
    d = start(home, free_port())
    yield d
    d.stop()


def ledger(cow, room: str) -> list[dict]:
    """Every event of the room, read raw through the CCCS IPC `events_stream`."""
    lines = raw_ipc(cow, {"v": 1, "op": "events_stream", "args": {"group_id": room, "since_seq": 0, "follow": False}})
    assert lines[0]["ok"] is True
    return [l["event"] for l in lines[1:] if l.get("t") == "event"]


def wait_closed(c: CC, vote_id: str, timeout: float = 15.0) -> dict:
    """The vote's status once it is closed (polls; the close runs on the daemon's timers)."""
    deadline = time.time() + timeout
    while True:
        st = c.ok("get_vote_status", {"vote_id": vote_id})
        if st["status"] == "closed" or time.time() > deadline:
            assert st["status"] == "closed", st
            return st
        time.sleep(0.05)


def pair(cow, room_name: str = "room"):
    a, b = CC(cow.cowchat_unix), CC(cow.cowchat_tcp)
    aid, bid = a.register("alice", agent_id="alice"), b.register("bob", agent_id="bob")
    room = make_room(a, room_name)
    b.ok("join_room", {"room_id": room})
    a.push("agent_joined")
    return a, b, aid, bid, room


def test_sealed_ballots_are_secret_in_the_ledger_until_all_voted(cow):
    a, b, aid, bid, room = pair(cow)
    v = a.ok("create_vote", {"room_id": room, "title": "Pick", "options": ["A", "B", "C"]})
    assert v["status"] == "open" and v["eligible_voters"] == 2
    created = b.push("vote_created")["payload"]
    assert created["vote_id"] == v["vote_id"] and created["eligible_voter_ids"] == [aid, bid]
    assert a.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 2}) == {
        "vote_id": v["vote_id"], "votes_cast": 1, "eligible_voters": 2}
    # Another face reads the same ledger: the ballot is there, its choice is not.
    ballots = [e for e in ledger(cow, room) if e["kind"] == "x.cowchat.vote.ballot"]
    assert len(ballots) == 1 and ballots[0]["by"] == aid
    data = ballots[0]["data"]
    assert set(data) == {"vote_id", "agent_id", "sealed"}
    raw = base64.b64decode(data["sealed"])
    assert len(raw) == 12 + 4 + 16  # nonce, a 4-byte index, the tag: every ballot alike
    assert b"\x02\x00\x00\x00" not in raw[12:]  # the index never shows in clear
    assert not [e for e in ledger(cow, room) if e["kind"] == "x.cowchat.vote.result"]
    key = cow.home / "cowchat" / "seal.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    # While open: counts only.
    st = b.ok("get_vote_status", {"vote_id": v["vote_id"]})
    assert st["status"] == "open" and st["votes_cast"] == 1
    assert "tally" not in st and "ballots" not in st
    # The last ballot reveals to everyone at once.
    b.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 0})
    for c in (a, b):
        r = c.push("vote_result")["payload"]
        assert r["vote_id"] == v["vote_id"] and r["reason"] == "all_voted"
        assert [t["count"] for t in r["tally"]] == [1, 0, 1]
        assert {x["agent_id"]: x["option_index"] for x in r["ballots"]} == {aid: 2, bid: 0}
    # No connection ever got a ballot push.
    for c in (a, b):
        assert not [f for f in c.pending if "ballot" in f["type"] or "sealed" in json.dumps(f)]
    results = [e for e in ledger(cow, room) if e["kind"] == "x.cowchat.vote.result"]
    assert len(results) == 1 and results[0]["data"]["total_votes"] == 2
    closed = a.ok("get_vote_status", {"vote_id": v["vote_id"]})
    assert closed["status"] == "closed" and closed["tally"][2]["count"] == 1


def test_deadline_vote_survives_kill_9_and_is_revealed_after_restart(home):
    port = free_port()
    d = start(home, port)
    try:
        a, b, aid, bid, room = pair(d)
        v = a.ok("create_vote", {"room_id": room, "title": "Ship?", "options": ["yes", "no"], "duration_secs": 2})
        assert v["deadline"]
        b.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 1})
        # A second vote whose deadline is still ahead at the restart: re-armed, not closed early.
        later = a.ok("create_vote", {"room_id": room, "title": "Later?", "options": ["x", "y"], "duration_secs": 5})
        a.ok("cast_vote", {"vote_id": later["vote_id"], "option_index": 0})
        d.kill9()
        # Let the deadline pass while the daemon is down.
        time.sleep(2.5)
        d = start(home, port)
        a2 = CC(d.cowchat_unix)
        assert a2.register("alice", agent_id="alice")
        st = wait_closed(a2, v["vote_id"])
        assert st["reason"] == "deadline"
        assert st["total_votes"] == 1 and st["ballots"] == [{"agent_id": bid, "agent_name": "bob", "option_index": 1}]
        assert error_code(a2.req("cast_vote", {"vote_id": v["vote_id"], "option_index": 0})) == "vote_closed"
        st2 = wait_closed(a2, later["vote_id"])
        assert st2["reason"] == "deadline" and st2["closed_at"] >= later["deadline"]
        assert st2["ballots"] == [{"agent_id": aid, "agent_name": "alice", "option_index": 0}]
        listed = a2.ok("list_votes", {"room_id": room})["votes"]
        assert [x["vote_id"] for x in listed] == [later["vote_id"], v["vote_id"]]
    finally:
        d.stop()


def test_election_with_decline_then_leader_only_decision(cow):
    a, b, aid, bid, room = pair(cow, "council")
    started = a.ok("elect_leader", {"room_id": room})
    assert started["candidates"] == [aid, bid] and started["opt_out_seconds"] == 2
    assert b.push("election_started")["payload"]["started_by"] == aid
    assert error_code(b.req("elect_leader", {"room_id": room})) == "election_in_progress"
    b.ok("decline_election", {"room_id": room})
    for c in (a, b):
        got = c.push("leader_elected")["payload"]
        assert got["leader_id"] == aid and got["leader_name"] == "alice"
    assert error_code(b.req("decision", {"room_id": room, "content": "no"})) == "not_leader"
    sent = a.ok("decision", {"room_id": room, "content": "Plan B"})
    assert sent["metadata"]["type"] == "decision"
    made = b.push("decision_made")["payload"]
    assert made["leader_id"] == aid and made["content"] == "Plan B" and made["message_id"] == sent["message_id"]
    # The decision is an ordinary chat.message in the shared ledger.
    ev = [e for e in ledger(cow, room) if e["id"] == sent["message_id"]][0]
    assert ev["kind"] == "chat.message" and ev["data"]["cowchat"]["decision"] is True


def test_a_task_whose_assignee_left_can_still_be_updated(cow):
    # The assignee check is for a new assignee: a task whose assignee left the room can
    # still be marked done or noted (by the room's members), and everyone who stayed is told.
    a, b, aid, bid, room = pair(cow, "work")
    c = CC(cow.cowchat_unix)
    c.register("carol", agent_id="carol")
    c.ok("join_room", {"room_id": room})
    task = a.ok("assign_task", {"room_id": room, "title": "ship it", "assignee": bid})
    assert b.push("task_assigned")["payload"]["task_id"] == task["task_id"]
    b.ok("leave_room", {"room_id": room})
    done = a.ok("update_task", {"task_id": task["task_id"], "status": "completed", "note": "bob left"})
    assert done["status"] == "completed" and done["assignee"] == bid and done["note"] == "bob left"
    pushed = c.push("task_updated")["payload"]
    while pushed["task_id"] != task["task_id"] or pushed["status"] != "completed":
        pushed = c.push("task_updated")["payload"]
    assert pushed["updated_by"] == aid and pushed["assignee"] == bid
    # Naming a non-member as the new assignee is still refused, and changes nothing.
    assert error_code(a.req("update_task", {"task_id": task["task_id"], "assignee": bid})) == "not_in_room"
    reassigned = c.ok("update_task", {"task_id": task["task_id"], "assignee": "carol"})
    assert reassigned["assignee"] == "carol" and reassigned["status"] == "completed"
    listed = a.ok("list_tasks", {"room_id": room, "status": "completed"})["tasks"]
    assert [(t["task_id"], t["assignee"]) for t in listed] == [(task["task_id"], "carol")]


def test_an_election_whose_window_ends_while_the_daemon_is_down_keeps_its_declines(home):
    # kill -9 inside the opt-out window, back up after it: the election ends at once, only
    # among the candidates that did not decline; each agent that reconnects is pushed the
    # result it missed, and only the winner may decide.
    port = free_port()
    d = start(home, port)
    try:
        a, b, aid, bid, room = pair(d, "council")
        a.ok("elect_leader", {"room_id": room})
        a.ok("decline_election", {"room_id": room})
        d.kill9()
        time.sleep(2.5)  # the 2-second window passes while the daemon is down
        d = start(home, port)
        a, b = CC(d.cowchat_unix), CC(d.cowchat_tcp)
        a.register("alice", agent_id="alice", reconnect=True)
        b.register("bob", agent_id="bob", reconnect=True)
        for c in (a, b):
            got = c.push("leader_elected", timeout=10)["payload"]
            assert got == {"room_id": room, "leader_id": bid, "leader_name": "bob"}
        assert error_code(a.req("decision", {"room_id": room, "content": "mine"})) == "not_leader"
        assert error_code(a.req("decline_election", {"room_id": room})) == "no_election_active"
        made = b.ok("decision", {"room_id": room, "content": "bob decides"})
        assert a.push("decision_made")["payload"]["message_id"] == made["message_id"]
        kinds = [e["kind"] for e in ledger(d, room) if e["kind"].startswith(("x.cowchat.election", "x.cowchat.leader"))]
        assert kinds == ["x.cowchat.election.started", "x.cowchat.election.declined", "x.cowchat.leader.elected"]
    finally:
        d.stop()


def test_a_vote_whose_last_ballot_was_answered_just_before_a_kill_9_is_revealed_once(home):
    # The reveal runs after the last voter's answer; a crash in between must not leave the
    # vote open for good (nobody is left to vote) nor reveal it twice.
    port = free_port()
    d = start(home, port)
    try:
        a, b, aid, bid, room = pair(d)
        v = a.ok("create_vote", {"room_id": room, "title": "Pick", "options": ["A", "B"]})
        a.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 1})
        assert b.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 0})["votes_cast"] == 2
        d.kill9()
        d = start(home, port)
        a = CC(d.cowchat_unix)
        a.register("alice", agent_id="alice")
        st = wait_closed(a, v["vote_id"])
        assert st["reason"] == "all_voted" and [t["count"] for t in st["tally"]] == [1, 1]
        assert {x["agent_id"]: x["option_index"] for x in st["ballots"]} == {aid: 1, bid: 0}
        d.stop()
        d = start(home, port)  # and a later restart does not reveal it again
        a = CC(d.cowchat_unix)
        a.register("alice", agent_id="alice")
        assert a.ok("get_vote_status", {"vote_id": v["vote_id"]})["closed_at"] == st["closed_at"]
        assert len([e for e in ledger(d, room) if e["kind"] == "x.cowchat.vote.result"]) == 1
    finally:
        d.stop()


@pytest.fixture
def quick(home):
    """A daemon whose reconnect window is one second."""
    port = free_port()
    d = Daemon(home, ["--cowchat-tcp", f"127.0.0.1:{port}", "--cowchat-reconnect-secs", "1"]).start()
    d.cowchat_tcp = ("tcp", ("127.0.0.1", port))
    d.cowchat_unix = ("unix", str(home / "daemon" / "cowchat.sock"))
    yield d
    d.stop()


def test_leadership_clears_when_the_leader_leaves_or_disconnects(quick):
    cow = quick
    a, b, aid, bid, room = pair(cow, "council")
    a.ok("elect_leader", {"room_id": room})
    a.ok("decline_election", {"room_id": room})
    assert b.push("leader_elected")["payload"]["leader_id"] == bid
    b.ok("leave_room", {"room_id": room})
    cleared = a.push("leader_cleared")["payload"]
    assert cleared == {"room_id": room, "reason": "leader left", "leader_id": bid}
    assert error_code(b.req("decision", {"room_id": room, "content": "x"})) == "not_in_room"
    # Now alice leads, then her only connection closes: bob (back in the room) sees it.
    b.ok("join_room", {"room_id": room})
    a.ok("elect_leader", {"room_id": room})
    b.ok("decline_election", {"room_id": room})
    assert b.push("leader_elected")["payload"]["leader_id"] == aid
    a.close()  # a short drop keeps leadership; it ends when the reconnect window runs out
    cleared = b.push("leader_cleared", timeout=10)["payload"]
    assert cleared["reason"] == "leader disconnected" and cleared["leader_id"] == aid
    kinds = [e["kind"] for e in ledger(cow, room) if e["kind"].startswith("x.cowchat.leader")]
    assert kinds == ["x.cowchat.leader.elected", "x.cowchat.leader.cleared"] * 2


def import_events(cow, group: str, events: list[dict]) -> dict:
    r = cow.raw({"v": 1, "op": "ledger_import", "args": {"group_id": group, "events": events}})
    assert r["ok"] is True, r
    return r["result"]


def test_coordination_events_imported_over_ipc_show_at_once_and_ballots_stay_sealed(cow):
    """A room's votes, ballots, tasks and leader restored with the CCCS `ledger_import` are
    seen by the very next Cowchat frame (not only after a restart), each event counts once
    however often the export is imported, and an imported sealed ballot is opened only when
    the reveal rule fires."""
    a, b, aid, bid, src = pair(cow, "src")
    v = a.ok("create_vote", {"room_id": src, "title": "Pick", "options": ["A", "B"], "duration_secs": 3600})
    a.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 1})
    task = a.ok("assign_task", {"room_id": src, "title": "build", "assignee": bid})
    exported = [e for e in ledger(cow, src) if e["kind"].startswith("x.cowchat.")]
    a.ok("destroy_room", {"room_id": src})  # its votes and tasks leave memory with it
    dst = make_room(a, "restored")
    b.ok("join_room", {"room_id": dst})
    extra = [
        # A leader the face itself elected, and a vote whose deadline passed in the export.
        {"id": "imported-leader", "kind": "x.cowchat.leader.elected", "by": "svc:cowchat",
         "ts": "2026-01-01T00:00:00Z", "data": {"leader_id": aid, "leader_name": "alice"}},
        {"id": "imported-overdue", "kind": "x.cowchat.vote.created", "by": aid, "ts": "2026-01-01T00:00:00Z",
         "data": {"vote_id": "vote-overdue", "title": "Late?", "options": ["x", "y"], "eligible_voters": [aid, bid],
                  "duration_secs": 60, "deadline": "2026-01-01T00:01:00Z", "created_by": aid}},
    ]
    assert error_code(a.req("decision", {"room_id": dst, "content": "early"})) == "not_leader"
    assert import_events(cow, dst, exported + extra)["imported"] == len(exported) + 2
    tasks = b.ok("list_tasks", {"room_id": dst})["tasks"]
    assert [(t["task_id"], t["assignee"]) for t in tasks] == [(task["task_id"], bid)]
    st = b.ok("get_vote_status", {"vote_id": v["vote_id"]})
    assert st["status"] == "open" and st["room_id"] == dst and st["votes_cast"] == 1
    assert "tally" not in st and "ballots" not in st  # the imported ballot is still sealed
    assert v["vote_id"] in [x["vote_id"] for x in a.ok("list_votes", {"room_id": dst})["votes"]]
    assert a.ok("decision", {"room_id": dst, "content": "restored plan"})["metadata"]["type"] == "decision"
    # The overdue vote is revealed at once, as a restart would (nobody voted).
    late = wait_closed(a, "vote-overdue")
    assert late["reason"] == "deadline" and late["total_votes"] == 0
    # Importing the same export again appends nothing and counts nothing twice.
    assert import_events(cow, dst, exported + extra)["imported"] == 0
    assert len(b.ok("list_tasks", {"room_id": dst})["tasks"]) == 1
    assert b.ok("get_vote_status", {"vote_id": v["vote_id"]})["votes_cast"] == 1
    assert error_code(a.req("cast_vote", {"vote_id": v["vote_id"], "option_index": 0})) == "already_voted"
    # Bob's ballot is the last one: now, and only now, alice's imported ballot is opened.
    b.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 0})
    r = wait_closed(b, v["vote_id"])
    assert r["reason"] == "all_voted"
    assert {x["agent_id"]: x["option_index"] for x in r["ballots"]} == {aid: 1, bid: 0}


def test_a_voter_who_leaves_no_longer_holds_a_vote_open_and_is_named_in_the_result(quick):
    """A vote without a deadline closes once every eligible voter voted. An eligible voter that
    leaves the room without voting (or whose reconnect window runs out) can no longer vote: it
    stops being eligible, and the vote closes if everyone still eligible has voted. A voter
    that voted and then left keeps its ballot, shown by its name like every other."""
    cow = quick
    a, b = CC(cow.cowchat_unix), CC(cow.cowchat_unix)
    c, e = CC(cow.cowchat_unix), CC(cow.cowchat_unix)
    aid = a.register("Alice A", agent_id="alice")
    bid = b.register("Bob B", agent_id="bob")
    cid = c.register("Carol C", agent_id="carol")
    eid = e.register("Eve E", agent_id="eve")
    room = make_room(a, "council")
    for x in (b, c, e):
        x.ok("join_room", {"room_id": room})
    v = a.ok("create_vote", {"room_id": room, "title": "Pick", "options": ["A", "B"]})
    assert v["eligible_voters"] == 4
    a.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 0})
    b.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 1})
    b.ok("leave_room", {"room_id": room})  # voted, then left: the ballot stays
    c.ok("leave_room", {"room_id": room})  # left without voting: eve still holds it open
    st = a.ok("get_vote_status", {"vote_id": v["vote_id"]})
    assert st["status"] == "open" and st["eligible_voters"] == 3 and st["votes_cast"] == 2
    assert error_code(c.req("cast_vote", {"vote_id": v["vote_id"], "option_index": 0})) == "not_in_room"
    e.close()  # eve's reconnect window runs out: she leaves the room, the vote settles
    result = a.push("vote_result", timeout=15)["payload"]
    assert result["vote_id"] == v["vote_id"] and result["reason"] == "all_voted"
    assert result["ballots"] == [{"agent_id": aid, "agent_name": "Alice A", "option_index": 0},
                                 {"agent_id": bid, "agent_name": "Bob B", "option_index": 1}]
    assert result["total_votes"] == 2 and result["eligible_voters"] == 2
    assert [t["count"] for t in result["tally"]] == [1, 1]
    st = a.ok("get_vote_status", {"vote_id": v["vote_id"]})
    assert st["status"] == "closed" and st["ballots"] == result["ballots"]
    assert cid and eid


def test_a_voter_removed_without_a_voter_left_record_no_longer_holds_the_vote_after_a_restart(home):
    """The member removal and its `x.cowchat.vote.voter_left` are two commits: a kill -9
    between them, or a removal over the CCCS IPC (which the Cowchat face does not see), left
    an open vote waiting for a voter that can never vote again, for good. At start-up the
    open votes are reconciled with the rooms' members: the vote settles."""
    port = free_port()
    d = start(home, port)
    try:
        a, b, aid, bid, room = pair(d)
        c = CC(d.cowchat_unix)
        c.register("carol", agent_id="carol")
        c.ok("join_room", {"room_id": room})
        v = a.ok("create_vote", {"room_id": room, "title": "Pick", "options": ["A", "B"]})
        assert v["eligible_voters"] == 3
        a.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 0})
        b.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 1})
        # A kill -9 right after the removal's commit: the change follower may or may not
        # have settled the vote before the kill (it reacts to IPC removals at once), so the
        # start-up reconciliation and the live follower must end in the same single record.
        r = d.raw({"v": 1, "op": "actor_remove", "args": {"group_id": room, "actor_id": "carol", "by": "user"}})
        assert r["ok"] is True, r
        d.kill9()
        d = start(home, port)
        a = CC(d.cowchat_unix)
        a.register("alice", agent_id="alice")
        st = wait_closed(a, v["vote_id"])
        assert st["reason"] == "all_voted" and st["eligible_voters"] == 2, st
        assert [t["count"] for t in st["tally"]] == [1, 1]
        left = [e for e in ledger(d, room) if e["kind"] == "x.cowchat.vote.voter_left"]
        assert [(e["data"]["vote_id"], e["data"]["agent_id"]) for e in left] == [(v["vote_id"], "carol")]
    finally:
        d.stop()


def test_a_ballot_settles_the_votes_a_voter_removed_over_the_ipc_was_holding_open(cow):
    """Without a restart: the next ballot in the room sees that a voter was removed over the
    CCCS IPC, and every open vote of the room it was holding open closes."""
    a, b, aid, bid, room = pair(cow)
    c = CC(cow.cowchat_unix)
    c.register("carol", agent_id="carol")
    c.ok("join_room", {"room_id": room})
    waiting = a.ok("create_vote", {"room_id": room, "title": "Pick", "options": ["A", "B"]})
    live = a.ok("create_vote", {"room_id": room, "title": "Now", "options": ["A", "B"]})
    for x in (a, b):
        x.ok("cast_vote", {"vote_id": waiting["vote_id"], "option_index": 0})
    a.ok("cast_vote", {"vote_id": live["vote_id"], "option_index": 1})
    r = cow.raw({"v": 1, "op": "actor_remove", "args": {"group_id": room, "actor_id": "carol", "by": "user"}})
    assert r["ok"] is True, r
    assert b.ok("cast_vote", {"vote_id": live["vote_id"], "option_index": 1})["eligible_voters"] == 2
    for v, tally in ((live, [0, 2]), (waiting, [2, 0])):
        st = wait_closed(a, v["vote_id"])
        assert st["reason"] == "all_voted" and [t["count"] for t in st["tally"]] == tally, st


def test_a_leader_removed_without_a_cleared_record_does_not_lead_after_a_restart(home):
    """Like a voter: the leader's removal and `x.cowchat.leader.cleared` are two commits (a
    kill -9 can fall between them) and a removal over the CCCS IPC is not seen by the face.
    At start-up a leader that is no longer a member is cleared, so rejoining later does not
    bring back its authority."""
    port = free_port()
    d = start(home, port)
    try:
        a, b, aid, bid, room = pair(d, "council")
        a.ok("elect_leader", {"room_id": room})
        b.ok("decline_election", {"room_id": room})
        assert b.push("leader_elected")["payload"]["leader_id"] == aid
        r = d.raw({"v": 1, "op": "actor_remove", "args": {"group_id": room, "actor_id": aid, "by": "user"}})
        assert r["ok"] is True, r
        d.kill9()
        d = start(home, port)
        a = CC(d.cowchat_unix)
        a.register("alice", agent_id="alice")
        a.ok("join_room", {"room_id": room})
        assert error_code(a.req("decision", {"room_id": room, "content": "still mine"})) == "not_leader"
        cleared = [e for e in ledger(d, room) if e["kind"] == "x.cowchat.leader.cleared"]
        assert [(e["data"]["leader_id"], e["data"]["reason"]) for e in cleared] == [(aid, "leader left")]
    finally:
        d.stop()


def test_a_leader_removed_over_the_ipc_does_not_lead_when_it_rejoins(cow):
    a, b, aid, bid, room = pair(cow, "council")
    a.ok("elect_leader", {"room_id": room})
    b.ok("decline_election", {"room_id": room})
    assert b.push("leader_elected")["payload"]["leader_id"] == aid
    r = cow.raw({"v": 1, "op": "actor_remove", "args": {"group_id": room, "actor_id": aid, "by": "user"}})
    assert r["ok"] is True, r
    a.ok("join_room", {"room_id": room})
    cleared = b.push("leader_cleared")["payload"]
    assert cleared == {"room_id": room, "reason": "leader left", "leader_id": aid}
    assert error_code(a.req("decision", {"room_id": room, "content": "still mine"})) == "not_leader"


def test_a_voter_removed_over_the_ipc_settles_the_vote_at_once(cow):
    """No ballot, rejoin, import or restart needed: removing the last voter still to vote over
    the CCCS IPC closes the vote (`all_voted`) as soon as the removal commits, and every member
    is pushed the result."""
    a, b, aid, bid, room = pair(cow)
    v = a.ok("create_vote", {"room_id": room, "title": "Pick", "options": ["A", "B"]})
    b.push("vote_created")
    a.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 1})
    r = cow.raw({"v": 1, "op": "actor_remove", "args": {"group_id": room, "actor_id": bid, "by": "user"}})
    assert r["ok"] is True, r
    res = a.push("vote_result")["payload"]
    assert res["vote_id"] == v["vote_id"] and res["reason"] == "all_voted", res
    assert [t["count"] for t in res["tally"]] == [0, 1] and res["eligible_voters"] == 1
    left = [e for e in ledger(cow, room) if e["kind"] == "x.cowchat.vote.voter_left"]
    assert [(e["by"], e["data"]["agent_id"]) for e in left] == [("svc:cowchat", bid)]


def test_a_voter_removed_and_added_again_before_the_follower_saw_it_is_not_the_eligible_voter(cow):
    """Eligibility follows actor generations: an agent removed over the CCCS IPC and added again
    under its id before the change follower looked (here both in one import, so the follower
    only ever sees it as a member) is a later generation, not the voter the vote was created
    with. Before, it stayed eligible: its ballot counted and the vote waited for it."""
    import uuid
    a, b, aid, bid, room = pair(cow)
    c = CC(cow.cowchat_unix)
    cid = c.register("carol", agent_id="carol")
    c.ok("join_room", {"room_id": room})
    v = a.ok("create_vote", {"room_id": room, "title": "Pick", "options": ["A", "B"]})
    assert v["eligible_voters"] == 3
    a.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 1})

    def ev(kind, data):
        return {"v": 1, "id": uuid.uuid4().hex, "ts": "2026-01-01T00:00:00Z", "kind": kind, "group_id": room,
                "scope_key": "", "by": "user", "data": data}

    r = cow.raw({"v": 1, "op": "ledger_import", "args": {"group_id": room, "events": [
        ev("actor.remove", {"actor_id": bid}),
        ev("actor.add", {"actor": {"id": bid, "title": "bob", "runtime": "none"}})]}})
    assert r["ok"] is True and r["result"]["imported"] == 2, r
    gens = {x["id"]: x["generation"] for x in cow.raw({"v": 1, "op": "actor_list", "args": {"group_id": room}})["result"]["actors"]}
    assert gens[bid] == 2, gens
    assert error_code(b.req("cast_vote", {"vote_id": v["vote_id"], "option_index": 0})) == "not_in_room"
    c.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 1})
    res = a.push("vote_result")["payload"]
    assert res["reason"] == "all_voted" and res["eligible_voters"] == 2, res
    assert [t["count"] for t in res["tally"]] == [0, 2]
    left = [e for e in ledger(cow, room) if e["kind"] == "x.cowchat.vote.voter_left"]
    assert [(e["by"], e["data"]["agent_id"]) for e in left] == [("svc:cowchat", bid)]


def test_a_leader_removed_over_the_ipc_is_cleared_at_once(cow):
    """The leader's removal over the CCCS IPC clears the leadership as soon as it commits
    (`leader_cleared` pushed to the members), not when it rejoins or the daemon restarts."""
    a, b, aid, bid, room = pair(cow, "council")
    a.ok("elect_leader", {"room_id": room})
    b.ok("decline_election", {"room_id": room})
    assert b.push("leader_elected")["payload"]["leader_id"] == aid
    r = cow.raw({"v": 1, "op": "actor_remove", "args": {"group_id": room, "actor_id": aid, "by": "user"}})
    assert r["ok"] is True, r
    cleared = b.push("leader_cleared")["payload"]
    assert cleared == {"room_id": room, "reason": "leader left", "leader_id": aid}
    # Rejoining brings nothing back, and the clear is recorded once.
    a.ok("join_room", {"room_id": room})
    assert error_code(a.req("decision", {"room_id": room, "content": "still mine"})) == "not_leader"
    cleared = [e for e in ledger(cow, room) if e["kind"] == "x.cowchat.leader.cleared"]
    assert [(e["data"]["leader_id"], e["data"]["reason"]) for e in cleared] == [(aid, "leader left")]


def test_a_voter_removed_over_the_ipc_after_voting_is_named_in_the_result(cow):
    """A voter that voted and was then removed over the CCCS IPC keeps its ballot and is named
    at the reveal as it was called in the room (its actor title is gone with the removal, and
    no `voter_left` record names it: the name comes from its join in the room's ledger)."""
    a, b = CC(cow.cowchat_unix), CC(cow.cowchat_unix)
    aid = a.register("Alice A", agent_id="alice")
    bid = b.register("Bob B", agent_id="bob")
    room = make_room(a, "council")
    b.ok("join_room", {"room_id": room})
    v = a.ok("create_vote", {"room_id": room, "title": "Pick", "options": ["A", "B"]})
    b.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 1})
    r = cow.raw({"v": 1, "op": "actor_remove", "args": {"group_id": room, "actor_id": bid, "by": "user"}})
    assert r["ok"] is True, r
    a.ok("cast_vote", {"vote_id": v["vote_id"], "option_index": 0})
    result = a.push("vote_result")["payload"]
    assert result["ballots"] == [{"agent_id": bid, "agent_name": "Bob B", "option_index": 1},
                                 {"agent_id": aid, "agent_name": "Alice A", "option_index": 0}], result
