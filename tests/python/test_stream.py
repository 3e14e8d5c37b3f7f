"""Event stream subscription (§10): cursors, filters, replay + live with no gap or duplicate."""
import json
import socket
import threading
import time

import pytest
from cccc_sdk import CCCCClient, DaemonAPIError


def open_stream(daemon, args):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(15)
    s.connect(str(daemon.sock))
    s.sendall((json.dumps({"v": 1, "op": "events_stream", "args": args}) + "\n").encode())
    f = s.makefile("rb")
    return s, f, json.loads(f.readline())


def events(f, n):
    out = []
    while len(out) < n:
        item = json.loads(f.readline())
        if item["t"] == "event":
            out.append(item["event"])
    return out


def test_sdk_events_stream_since_event_id_and_kinds(client, group):
    first = client.send(group_id=group, text="a", message_mode="send", to=["p1"])["event"]
    client.system_notify(group_id=group, message="n")
    b = client.send(group_id=group, text="b", message_mode="send", to=["p1"])["event"]
    got = []
    for item in client.events_stream(group_id=group, since_event_id=first["id"], kinds={"chat.message"}, timeout_s=5):
        if item.get("t") == "event":
            got.append(item["event"])
            if len(got) == 1:
                break
    assert [e["id"] for e in got] == [b["id"]]


def test_sdk_events_stream_since_ts_replays_from_that_time(client, group):
    created = client.group_show(group)["group"]["created_at"]
    ids = [client.send(group_id=group, text=f"t{i}", message_mode="mail", to=["p1"])["event"]["id"] for i in range(5)]
    seen = []
    for item in client.events_stream(group_id=group, since_ts=created, kinds={"chat.message"}, timeout_s=5):
        if item.get("t") == "event":
            seen.append(item["event"]["id"])
            if len(seen) == 5:
                break
    assert seen == ids


def test_since_ts_replays_every_later_event_when_imported_events_carry_older_ts(client, group, daemon):
    # Imported events keep their original ts but get new seq, so ts does not rise with seq.
    live = client.send(group_id=group, text="live", message_mode="send", to=["p1"])["event"]
    old = [{"v": 1, "id": f"imp{i}", "ts": f"2001-01-01T00:00:0{i}.000000Z", "kind": "chat.message",
            "by": "user", "data": {"text": f"old{i}", "message_mode": "send", "to": ["p1"]}} for i in range(2)]
    assert daemon.raw({"v": 1, "op": "ledger_import", "args": {"group_id": group, "events": old}})["ok"]
    _, f, hs = open_stream(daemon, {"group_id": group, "since_ts": live["ts"], "kinds": ["chat.message"], "follow": False})
    assert hs["ok"] is True
    got = [json.loads(line)["event"]["data"]["text"] for line in f]
    # The message at since_ts is replayed, and nothing appended after it is skipped.
    assert got == ["live", "old0", "old1"]


def test_CCCS_10_1_1_unknown_cursor_is_an_error_not_empty_replay(client, group, daemon):
    with pytest.raises(DaemonAPIError) as ei:
        for _ in client.events_stream(group_id=group, since_event_id="does-not-exist", timeout_s=5):
            pass
    assert ei.value.code == "event_not_found"
    _, _, hs = open_stream(daemon, {"group_id": group, "since_seq": 10_000})
    assert hs["ok"] is False and hs["error"]["code"] == "invalid_cursor"
    _, _, hs = open_stream(daemon, {"group_id": group, "since_ts": "yesterday"})
    assert hs["ok"] is False and hs["error"]["code"] == "invalid_request"
    _, _, hs = open_stream(daemon, {"group_id": "g_nope"})
    assert hs["error"]["code"] == "group_not_found"


def test_CCCS_10_1_1_since_seq_beside_another_cursor_is_refused_not_one_silently_preferred(client, group, daemon):
    a = client.send(group_id=group, text="a", message_mode="send", to=["p1"])["event"]
    b = client.send(group_id=group, text="b", message_mode="send", to=["p1"])["event"]
    # since_seq and since_event_id naming different starts: neither may win silently.
    _, _, hs = open_stream(daemon, {"group_id": group, "since_seq": a["seq"], "since_event_id": b["id"], "follow": False})
    assert hs["ok"] is False and hs["error"]["code"] == "invalid_request"
    assert hs["error"]["details"]["reason"] == "conflicting_cursors"
    assert hs["error"]["details"]["cursors"] == ["since_seq", "since_event_id"]
    # Also when they happen to agree, and for since_ts beside it.
    _, _, hs = open_stream(daemon, {"group_id": group, "since_seq": a["seq"], "since_event_id": a["id"]})
    assert hs["error"]["details"]["reason"] == "conflicting_cursors"
    _, _, hs = open_stream(daemon, {"group_id": group, "since_seq": a["seq"], "since_ts": a["ts"]})
    assert hs["error"]["details"]["cursors"] == ["since_seq", "since_ts"]


def test_CCCS_10_1_1_ccccs_cursor_pair_replays_after_the_event_else_from_the_timestamp(client, group, daemon):
    """CCCC clients may send since_event_id and since_ts together (the unmodified SDK passes
    both through): the event id when this ledger has it, else the timestamp, never less."""
    a = client.send(group_id=group, text="a", message_mode="send", to=["p1"])["event"]
    b = client.send(group_id=group, text="b", message_mode="send", to=["p1"])["event"]

    def replay(**cursors) -> list[str]:
        out = []
        for item in client.events_stream(group_id=group, kinds=["chat.message"], timeout_s=5, **cursors):
            ev = item.get("event") if isinstance(item, dict) else None
            if ev is None:
                continue
            out.append(ev["id"])
            if ev["id"] == b["id"]:
                break
        return out

    assert replay(since_event_id=a["id"], since_ts=a["ts"]) == [b["id"]]
    # An event id this ledger never had: the timestamp decides (a and b are at or after it).
    assert replay(since_event_id="not-in-this-ledger", since_ts=a["ts"]) == [a["id"], b["id"]]
    # An unparsable timestamp is refused even beside a known id.
    _, _, hs = open_stream(daemon, {"group_id": group, "since_event_id": a["id"], "since_ts": "yesterday"})
    assert hs["ok"] is False and hs["error"]["details"]["field"] == "since_ts"
    # Null or empty cursors count as absent: one real cursor is served.
    _, f, hs = open_stream(daemon, {"group_id": group, "since_seq": a["seq"], "since_event_id": "", "since_ts": None,
                                    "kinds": ["chat.message"], "follow": False})
    assert hs["ok"] is True
    assert [json.loads(line)["event"]["id"] for line in f] == [b["id"]]


def test_since_seq_resume_has_no_gap_and_no_duplicate_under_concurrent_writes(client, group, daemon):
    stop = threading.Event()
    sent = []

    def writer(n):
        c = CCCCClient(cccc_home=str(daemon.home))
        for i in range(n):
            sent.append(c.send(group_id=group, text=f"w{i}", message_mode="mail", to=["p1"])["event"]["seq"])

    threads = [threading.Thread(target=writer, args=(150,)) for _ in range(4)]
    for t in threads:
        t.start()
    # Read a first stretch, drop the connection, resume from the last seq seen.
    s, f, hs = open_stream(daemon, {"group_id": group, "since_seq": 0})
    assert hs["ok"] is True
    part1 = events(f, 100)
    s.close()
    s2, f2, _ = open_stream(daemon, {"group_id": group, "since_seq": part1[-1]["seq"]})
    for t in threads:
        t.join()
    head = client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"]
    part2 = events(f2, head - part1[-1]["seq"])
    seqs = [e["seq"] for e in part1 + part2]
    assert seqs == list(range(1, head + 1)), "gap or duplicate across resume"
    assert set(sent) <= set(seqs)
    s2.close()


def test_follow_false_and_limit_page_without_silent_cap(client, group, daemon):
    # 2,500 events: more than CCCC's 2,000-event replay cap.
    c = CCCCClient(cccc_home=str(daemon.home))
    import concurrent.futures as cf
    with cf.ThreadPoolExecutor(8) as ex:
        list(ex.map(lambda i: c.send(group_id=group, text=f"p{i}", message_mode="mail", to=["p1"]), range(2500)))
    head = client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"]
    s, f, hs = open_stream(daemon, {"group_id": group, "since_seq": 0, "follow": False})
    n = 0
    last = 0
    for line in f:
        item = json.loads(line)
        if item["t"] == "event":
            assert item["event"]["seq"] == last + 1
            last = item["event"]["seq"]
            n += 1
    assert n == head == last
    s, f, _ = open_stream(daemon, {"group_id": group, "since_seq": 10, "limit": 7})
    page = [json.loads(l)["event"]["seq"] for l in f]
    assert page == list(range(11, 18))


def test_live_events_arrive_and_heartbeats_flow(client, group, daemon):
    s, f, hs = open_stream(daemon, {"group_id": group})
    assert hs["result"]["since_seq"] == hs["result"]["head_seq"]
    ev = client.send(group_id=group, text="live", message_mode="send", to=["p1"])["event"]
    got = events(f, 1)[0]
    assert got["id"] == ev["id"]
    t0 = time.time()
    while True:
        item = json.loads(f.readline())
        if item["t"] == "heartbeat":
            break
    assert time.time() - t0 < 3 and item["ts"].endswith("Z")


def test_CCCS_10_1_1_resume_after_kill9_has_no_gap_no_duplicate_and_goes_live(client, group, daemon):
    s, f, hs = open_stream(daemon, {"group_id": group})
    assert hs["ok"] is True
    acked = [client.send(group_id=group, text=f"a{i}", message_mode="mail", to=["p1"])["event"] for i in range(20)]
    seen = events(f, 10)  # the subscriber is behind when the daemon dies
    daemon.kill9()
    s.close()
    daemon.start()
    for cursor in ({"since_seq": seen[-1]["seq"]}, {"since_event_id": seen[-1]["id"]}):
        s2, f2, hs2 = open_stream(daemon, {"group_id": group, **cursor})
        assert hs2["ok"] is True and hs2["result"]["since_seq"] == seen[-1]["seq"]
        replay = events(f2, len(acked) - len(seen))
        # Every acknowledged event survives the crash and follows the cursor exactly once.
        assert [e["id"] for e in seen + replay] == [e["id"] for e in acked]
        # Then the same connection cuts over to live events.
        late = client.send(group_id=group, text=f"late {cursor}", message_mode="mail", to=["p1"])["event"]
        assert events(f2, 1)[0]["id"] == late["id"]
        acked.append(late)
        s2.close()
