"""Cowchat fast paths at the wire: a pipelined run of sends handed to the ledger together,
and history answered from the recent events in memory. Each must answer exactly what the
plain path answers."""
from __future__ import annotations

import time

from conftest import Daemon, kill9_under_load
from test_cowchat import CC, cow, error_code, make_room  # noqa: F401 (cow is a fixture)


def history_queries(room: str, ids: list[str], seqs: list[int]) -> list[dict]:
    return [
        {"room_id": room},
        {"room_id": room, "limit": 1},
        {"room_id": room, "limit": 1000},
        {"room_id": room, "limit": 3, "before": seqs[5]},
        {"room_id": room, "limit": 4, "before": ids[7]},
        {"room_id": room, "limit": 5, "since_seq": 0},
        {"room_id": room, "limit": 5, "since_seq": seqs[2]},
        {"room_id": room, "limit": 1000, "since": ids[3]},
        {"room_id": room, "since_seq": seqs[-1]},
        {"room_id": room, "limit": 3, "since_seq": seqs[1], "before": seqs[9]},
        {"room_id": room, "limit": 100, "since_seq": seqs[1], "before": ids[4]},
    ]


def test_history_from_memory_matches_the_store_after_a_restart(home):
    from cccc_sdk import CCCCClient

    d = Daemon(home).start()
    unix = ("unix", str(home / "daemon" / "cowchat.sock"))
    a, b = CC(unix), CC(unix)
    aid, bid = a.register("alice", agent_id="alice"), b.register("bob", agent_id="bob")
    room = make_room(a, "memory")
    b.ok("join_room", {"room_id": room})
    sent = []
    for i in range(12):
        p = {"room_id": room, "content": f"m{i} \u00e9\"\\\n"}
        if i % 3 == 0:
            p["mentions"] = [bid]
        if i % 4 == 1:
            p["metadata"] = {"kind": "review", "n": i, "nested": {"x": [1, None]}}
        if i == 5:
            p["reply_to"] = sent[2]["message_id"]
        sent.append(a.ok("send_message", p))
        if i == 6:
            a.ok("thinking", {"room_id": room, "content": "pondering"})
        if i == 8:  # Mail takes a history slot but is never shown.
            CCCCClient(cccc_home=str(home)).send(group_id=room, text="private", message_mode="mail", to=[aid])
    ids, seqs = [m["message_id"] for m in sent], [m["seq"] for m in sent]
    queries = history_queries(room, ids, seqs)
    live = [b.ok("get_history", q) for q in queries]
    assert [m["content"] for m in live[2]["messages"]].count("pondering") == 1
    assert "private" not in [m["content"] for m in live[2]["messages"]]
    assert live[1]["has_more"] is True and live[8] == {"room_id": room, "messages": [], "has_more": False}
    # Both bounds: the oldest messages after since_seq, none at or after `before`.
    assert [m["seq"] for m in live[9]["messages"]] == seqs[2:5]
    assert [m["seq"] for m in live[10]["messages"]] == seqs[2:4]
    a.close()
    b.close()
    d.stop()

    # After a restart nothing is in memory: the store answers, and must answer the same.
    d = Daemon(home).start()
    try:
        c = CC(unix)
        c.register("carol")
        c.ok("join_room", {"room_id": room})
        # Joining appended an event after the history: the answers about it do not change.
        assert [c.ok("get_history", q) for q in queries] == live
        c.close()
    finally:
        d.stop()


def test_pipelined_run_answers_every_frame_in_order_and_stores_only_what_it_accepted(cow):
    a, b = CC(cow.cowchat_unix), CC(cow.cowchat_tcp)
    a.register("alice")
    b.register("bob")
    room = make_room(a, "burst")
    other = make_room(b, "not-alice")
    b.ok("join_room", {"room_id": room})
    frames = []
    for i in range(400):
        target = other if i == 150 else room  # one refused frame in the middle of the run
        frames.append(a.send("send_message", {"room_id": target, "content": f"p{i}"}))
    tip_rid = a.send("room_tip", {"room_id": room})  # observes every send before it
    replies, order = {}, []
    while len(replies) < len(frames) + 1:
        fr = a.read()
        if fr.get("reply_to") is not None:
            assert fr["reply_to"] not in replies, "one answer per frame"
            replies[fr["reply_to"]] = fr
            order.append(fr["reply_to"])
    # Answers come in frame order, the refusal in its place (a client may read them in turn).
    assert order == frames + [tip_rid]
    assert error_code(replies[frames[150]]) == "not_in_room"
    oks = [replies[r]["payload"] for i, r in enumerate(frames) if i != 150]
    assert all(replies[r]["type"] == "ok" for i, r in enumerate(frames) if i != 150)
    assert [m["content"] for m in oks] == [f"p{i}" for i in range(400) if i != 150]
    seqs = [m["seq"] for m in oks]
    assert seqs == sorted(set(seqs))
    assert replies[tip_rid]["payload"]["seq"] == seqs[-1]
    got = [b.push("message_received")["payload"] for _ in range(399)]
    assert [m["message_id"] for m in got] == [m["message_id"] for m in oks]
    h = b.ok("get_history", {"room_id": room, "limit": 1000})["messages"]
    assert [m["message_id"] for m in h] == [m["message_id"] for m in oks]


def test_steady_pipelined_load_keeps_the_wal_bounded(cow):
    """Under back-to-back group commits the WAL still starts over (it would otherwise grow by
    every commit's pages for as long as the load lasts)."""
    import os

    a = CC(cow.cowchat_unix)
    a.register("alice")
    room = make_room(a, "steady")
    started, n, sizes = time.time(), 0, []
    while n < 4000 or time.time() - started < 3:
        rids = [a.send("send_message", {"room_id": room, "content": "x" * 900}) for _ in range(200)]
        for rid in rids:
            assert a.reply(rid)["type"] == "ok"
        n += len(rids)
        sizes.append(os.path.getsize(cow.home / "ledger.sqlite-wal"))
    # A WAL that never starts over holds every commit's pages to the end of the load: the
    # first burst's growth per message, times all messages. One that starts over stays at
    # what a few checkpoint intervals write.
    never_restarted = sizes[0] * len(sizes)
    assert sizes[-1] < never_restarted // 2, f"WAL kept growing: {sizes}"


def test_kill9_during_pipelined_sends_loses_no_acknowledged_message(home):
    """Four connections pipeline windows of 32 sends into two rooms (runs committed as one job
    each, sharing group commits) until the daemon is killed: every message whose `ok` came
    back is in history after the restart, once, and each room's seqs only go up."""
    import json
    import threading

    d = Daemon(home).start()
    unix = ("unix", str(home / "daemon" / "cowchat.sock"))
    owner = CC(unix)
    owner.register("owner", agent_id="owner")
    rooms = [make_room(owner, f"crash-{i}") for i in range(2)]
    acked: list[tuple[str, str, str]] = []  # (room, message_id, content)
    lock = threading.Lock()
    stop = threading.Event()

    def writer(k: int) -> None:
        c = CC(unix)
        c.register(f"w{k}", agent_id=f"w{k}")
        room = rooms[k % 2]
        c.ok("join_room", {"room_id": room})
        i = 0
        try:
            while not stop.is_set():
                window = []
                for _ in range(32):
                    rid, content = f"s{k}-{i}", f"w{k}-{i}"
                    window.append((rid, content))
                    i += 1
                c.send_raw(b"".join((json.dumps({"id": rid, "type": "send_message", "payload": {
                    "room_id": room, "content": content}}) + "\n").encode() for rid, content in window))
                want = {rid: content for rid, content in window}
                while want:
                    fr = c.read()
                    content = want.pop(fr.get("reply_to"), None)
                    if content is None:
                        continue  # a push (another writer's message, a turn change)
                    assert fr["type"] == "ok", fr
                    with lock:
                        acked.append((room, fr["payload"]["message_id"], content))
        except (OSError, EOFError, ValueError):
            return  # the daemon died mid-window: what was not answered was not acknowledged

    kill9_under_load(d, writer, 4, stop)
    assert len(acked) > 200, len(acked)

    d = Daemon(home).start()
    try:
        c = CC(unix)
        c.register("owner", agent_id="owner")
        for room in rooms:
            rows, cursor = [], 0
            while True:
                page = c.ok("get_history", {"room_id": room, "limit": 1000, "since_seq": cursor})["messages"]
                if not page:
                    break
                rows += page
                cursor = page[-1]["seq"]
            seqs = [m["seq"] for m in rows]
            assert seqs == sorted(set(seqs)), "seqs must only go up, each once"
            contents = [m["content"] for m in rows]
            assert len(contents) == len(set(contents)), "no message stored twice"
            stored = {m["message_id"] for m in rows}
            missing = [a for a in acked if a[0] == room and a[1] not in stored]
            assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:3]}"
        c.close()
    finally:
        d.stop()


def test_a_history_page_of_long_messages_is_cut_at_8_mib_and_pages_on(home):
    # 10,000 messages of 256 KiB would be a 2.5 GB answer: a page stops at 8 MiB of messages
    # (the end the client pages from), says has_more, and paging reaches every message, from
    # memory and, after a restart, from the store.
    d = Daemon(home).start()
    unix = ("unix", str(home / "daemon" / "cowchat.sock"))
    a = CC(unix, timeout=60)
    a.register("alice", agent_id="alice")
    room = make_room(a, "long")
    big = "x" * (250 * 1024)
    seqs = [a.ok("send_message", {"room_id": room, "content": f"{i:03d}{big}"})["seq"] for i in range(40)]

    def check(c: CC) -> None:
        newest = c.ok("get_history", {"room_id": room, "limit": 1000})
        got = [m["seq"] for m in newest["messages"]]
        assert newest["has_more"] is True and 0 < len(got) < 40
        assert got == seqs[-len(got):], "the newest end is kept"
        assert sum(len(m["content"]) for m in newest["messages"]) <= 8 << 20
        # Backwards with `before` from the oldest shown, forwards with `since_seq`: all 40.
        back = list(got)
        while len(back) < 40:
            p = c.ok("get_history", {"room_id": room, "limit": 1000, "before": back[0]})
            back = [m["seq"] for m in p["messages"]] + back
        assert back == seqs
        fwd, cursor = [], 0
        while True:
            p = c.ok("get_history", {"room_id": room, "limit": 1000, "since_seq": cursor})
            fwd += [m["seq"] for m in p["messages"]]
            if not p["has_more"]:
                break
            cursor = fwd[-1]
        assert fwd == seqs

    check(a)
    a.close()
    d.stop()
    d = Daemon(home).start()
    b = CC(unix, timeout=60)
    b.register("alice", agent_id="alice")
    check(b)
    b.close()
    d.stop()
