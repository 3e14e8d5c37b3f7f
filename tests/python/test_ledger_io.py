"""ledger export / import through the CLI, including a CCCC group's ledger.jsonl (§4.3)."""
import json

from conftest import run_cli


def test_CCCS_4_3_3_export_after_truncated_last_line_keeps_bytes_and_separates(client, group, daemon, tmp_path):
    ids = [client.send(group_id=group, text=f"e{i}", message_mode="mail", to=["p1"])["event"]["id"] for i in range(5)]
    out = tmp_path / "ledger.ndjson"
    torn = b'{"v":1,"id":"torn","kind":"chat.mes'
    out.write_bytes(torn)
    r = run_cli(daemon.home, "--json", "ledger", "export", group, "--out", str(out))
    assert json.loads(r.stdout)["exported"] >= 5
    data = out.read_bytes()
    assert data.startswith(torn + b"\n"), "existing bytes must be preserved and terminated"
    lines = data.split(b"\n")
    assert lines[-1] == b""
    recs = [json.loads(l) for l in lines[1:-1]]
    assert [e["seq"] for e in recs] == list(range(1, len(recs) + 1))
    assert set(ids) <= {e["id"] for e in recs}
    # import into a fresh group: the torn line is skipped, everything else is kept as is
    r = run_cli(daemon.home, "--json", "ledger", "import", str(out), "--group-id", "g_copy")
    res = json.loads(r.stdout)
    assert res["torn"] == 1 and res["imported"] == len(recs)
    copy = client.call("ledger_search", {"group_id": "g_copy", "limit": 1000})["events"]
    assert [(e["id"], e["kind"], e["data"]) for e in copy] == [(e["id"], e["kind"], e["data"]) for e in recs]
    assert [a["id"] for a in client.actor_list("g_copy")["actors"]] == ["lead", "p1", "p2"]
    # the Mail index is rebuilt: p1's inbox has the imported mail
    assert set(ids) <= {m["id"] for m in client.inbox_peek(group_id="g_copy", actor_id="p1", limit=200)["messages"]}
    # importing again adds nothing
    res2 = json.loads(run_cli(daemon.home, "--json", "ledger", "import", str(out), "--group-id", "g_copy").stdout)
    assert res2["imported"] == 0 and res2["skipped"] == len(recs)


def test_import_cccc_group_directory(client, daemon, tmp_path):
    gdir = tmp_path / "g_7547f9ded365"
    gdir.mkdir()
    lines = [
        {"v": 1, "id": "4a0b1c9d1ac14e53850ece303f25ea35", "ts": "2026-11-29T20:46:01.529251Z", "kind": "group.create", "group_id": "g_7547f9ded365", "scope_key": "", "by": "user", "data": {"title": "probe-A", "topic": "topic A"}},
        {"v": 1, "id": "c5bac3f5524b4824b0dcf51ada07d1bf", "ts": "2026-11-29T20:46:18.871745Z", "kind": "actor.add", "group_id": "g_7547f9ded365", "scope_key": "", "by": "user", "data": {"actor": {"id": "lead", "runtime": "custom", "title": ""}}},
        {"v": 1, "id": "d5bac3f5524b4824b0dcf51ada07d1bf", "ts": "2026-11-29T20:46:18.971745Z", "kind": "actor.add", "group_id": "g_7547f9ded365", "scope_key": "", "by": "user", "data": {"actor": {"id": "peer1", "runtime": "custom", "title": ""}}},
        {"v": 1, "id": "9d49bd80ba0b434e9d9000ef67f0b0c3", "ts": "2026-11-29T20:47:28.416843Z", "kind": "chat.message", "group_id": "g_7547f9ded365", "scope_key": "", "by": "user", "data": {"format": "plain", "message_mode": "mail", "text": "hello", "to": ["peer1"]}},
        {"v": 1, "id": "a8fc7c2c9667404a99b80c026c62b326", "ts": "2026-11-29T20:49:43.993645Z", "kind": "actor.activity", "group_id": "g_7547f9ded365", "scope_key": "", "by": "system", "data": {"actors": []}},
    ]
    (gdir / "ledger.jsonl").write_text("".join(json.dumps(l, separators=(",", ":")) + "\n" for l in lines))
    res = json.loads(run_cli(daemon.home, "--json", "ledger", "import", str(gdir)).stdout)
    assert res["group_id"] == "g_7547f9ded365" and res["imported"] == 5
    g = client.group_show("g_7547f9ded365")["group"]
    assert g["title"] == "probe-A"
    assert [(a["id"], a["role"]) for a in client.actor_list("g_7547f9ded365")["actors"]] == [("lead", "foreman"), ("peer1", "peer")]
    evs = client.call("ledger_tail", {"group_id": "g_7547f9ded365", "limit": 10})["events"]
    assert [e["seq"] for e in evs] == [1, 2, 3, 4, 5]
    assert evs[-1]["kind"] == "actor.activity"  # unknown kind kept untouched
    assert [m["id"] for m in client.inbox_peek(group_id="g_7547f9ded365", actor_id="peer1")["messages"]] == ["9d49bd80ba0b434e9d9000ef67f0b0c3"]


def test_cli_human_commands(daemon):
    h = daemon.home
    gid = run_cli(h, "group", "create", "cli-demo").stdout.decode().strip()
    assert gid.startswith("g_")
    assert "foreman" in run_cli(h, "actor", "add", gid, "lead").stdout.decode()
    out = run_cli(h, "send", gid, "hello from the shell").stdout.decode()
    assert "hello from the shell" in out and "@foreman" in out
    assert "hello from the shell" in run_cli(h, "tail", gid).stdout.decode()
    st = json.loads(run_cli(h, "--json", "status").stdout)
    assert st["ping"]["ipc_v"] == 1 and any(g["group_id"] == gid for g in st["groups"])
    bad = run_cli(h, "send", gid, "x", "--to", "user", "--to", "lead", check=False)
    assert bad.returncode != 0 and b"invalid_request" in bad.stderr


def test_CCCS_6_3_3_import_keeps_replies_cancellations_and_mail_cursors(client, group, daemon):
    q = client.send(group_id=group, text="q", message_mode="request_reply", to=["p1", "p2"], by="lead")["event"]
    client.call("reply", {"group_id": group, "reply_to": q["id"], "text": "a", "by": "p1"})
    client.call("reply_request_cancel", {"group_id": group, "source_event_id": q["id"], "by": "lead"})
    m = [client.send(group_id=group, text=f"m{i}", message_mode="mail", to=["p2"], by="lead")["event"] for i in range(2)]
    client.call("inbox_read", {"group_id": group, "actor_id": "p2", "limit": 1, "by": "p2"})
    events = client.call("ledger_tail", {"group_id": group, "limit": 1000})["events"]
    for g in (group + "_copy", group + "_copy2"):
        # One import holding the whole history, and one fed event by event.
        batches = [events] if g.endswith("_copy") else [[e] for e in events]
        for b in batches:
            client.call("ledger_import", {"group_id": g, "events": b})
        st = client.call("ledger_statuses", {"group_id": g, "event_ids": [q["id"]]})["statuses"][q["id"]]["obligation_status"]
        # The copy says what the original says: p1 replied, p2's request was cancelled, m0 is read.
        assert {a: s["status"] for a, s in st.items()} == {"p1": "replied", "p2": "cancelled"}, g
        assert [x["id"] for x in client.inbox_peek(group_id=g, actor_id="p2")["messages"]] == [m[1]["id"]], g


def _deliveries(client, gid):
    evs = client.call("ledger_search", {"group_id": gid, "kinds": ["runtime.delivery"], "limit": 1000})["events"]
    return [(e["data"]["delivery_id"], e["data"]["state"]) for e in evs]


def _settled(client, gid, did):
    import time
    deadline = time.time() + 30
    while time.time() < deadline:
        states = [s for d, s in _deliveries(client, gid) if d == did]
        if states and states[-1] != "claimed":
            return states
        time.sleep(0.05)
    raise AssertionError(f"{did} never settled")


def test_CCCS_6_4_5_import_round_trip_delivers_nothing_again_and_keeps_generations_and_delivery_states(client, daemon):
    """Importing an exported ledger is history, not traffic: no imported message is claimed
    again (one was accepted: no automatic retry, CCCS-6.4-5), the re-added actor keeps its
    generation (CCCS-6.4-1: its delivery ids never reuse the removed generation's), and
    ledger_statuses answers in the copy what it answers in the original. A delivery the
    export caught in flight is settled ambiguous, never left claimed (CCCS-6.4-4)."""
    from test_actor_lifecycle import all_events
    g = client.group_create(title="orig")["group_id"]
    client.actor_add(group_id=g, actor_id="lead", runtime="none")
    client.actor_add(group_id=g, actor_id="p1", runtime="command", command=["true"])
    m1 = client.send(group_id=g, text="to gen 1", to=["p1"], by="lead", message_mode="send")["event"]
    _settled(client, g, f"delivery:p1:1:{m1['id']}")
    client.actor_remove(group_id=g, actor_id="p1")
    client.actor_add(group_id=g, actor_id="p1", runtime="command", command=["true"])
    m2 = client.send(group_id=g, text="to gen 2", to=["p1"], by="lead", message_mode="send")["event"]
    _settled(client, g, f"delivery:p1:2:{m2['id']}")
    events = all_events(daemon, g)
    # An export taken while m3's delivery was in flight: its claim without a result.
    m3 = dict(m2, id="0" * 31 + "3", data=dict(m2["data"], text="in flight"))
    claim = next(e for e in events if e["kind"] == "runtime.delivery" and e["data"]["state"] == "claimed")
    in_flight = dict(claim, id="0" * 31 + "4",
                     data=dict(claim["data"], source_event_id=m3["id"], delivery_id=f"delivery:p1:2:{m3['id']}"))
    events += [m3, in_flight]
    before = _deliveries(client, g) + [(in_flight["data"]["delivery_id"], "claimed")]
    copy = "g_roundtrip"
    assert client.call("ledger_import", {"group_id": copy, "events": events})["imported"] == len(events)
    assert {a["id"]: a["generation"] for a in client.actor_list(group_id=copy)["actors"]} == {"lead": 1, "p1": 2}
    # A new message in the copy: its delivery is the current generation's. Once it settled,
    # the runtime worker has been through the import's batch too.
    m4 = client.send(group_id=copy, text="after import", to=["p1"], by="lead", message_mode="send")["event"]
    _settled(client, copy, f"delivery:p1:2:{m4['id']}")
    after = [x for x in _deliveries(client, copy) if m4["id"] not in x[0]]
    # Only what the export held, and the in-flight claim settled ambiguous.
    assert after == before + [(in_flight["data"]["delivery_id"], "ambiguous")]
    ids = [m1["id"], m2["id"]]
    orig = client.call("ledger_statuses", {"group_id": g, "event_ids": ids})["statuses"]
    assert client.call("ledger_statuses", {"group_id": copy, "event_ids": ids})["statuses"] == orig
    st = client.call("ledger_statuses", {"group_id": copy, "event_ids": [m3["id"]]})["statuses"][m3["id"]]
    assert st["obligation_status"]["p1"]["delivery_state"] == "ambiguous"
    # ... and ambiguous is not retried without the caller's force.
    from cccc_sdk import DaemonAPIError
    import pytest
    with pytest.raises(DaemonAPIError) as ei:
        client.message_deliver(group_id=copy, source_event_id=m3["id"], actor_ids=["p1"])
    assert ei.value.code == "delivery_conflict"


def test_CCCS_12_4_import_never_settles_a_delivery_in_flight_here(tmp_path):
    """An imported runtime.delivery is history of the ledger it came from: it never changes a
    delivery this daemon already has. Otherwise a client could import a result for an attempt
    in flight here, and the real result of that attempt could no longer be recorded."""
    from cccc_sdk import CCCCClient
    from conftest import Daemon
    from test_session_delivery import attach, delivery_rows, wait_until
    d = Daemon(tmp_path, ["--session-timeout-ms", "60000"]).start()
    try:
        client = CCCCClient(cccc_home=str(tmp_path))
        g = client.group_create(title="live")["group_id"]
        client.actor_add(group_id=g, actor_id="live", runtime="session")
        # A consumer that never reads: the big frame's attempt stays claimed.
        s, f = attach(d, g, "live")
        srcs = [client.send(group_id=g, text=f"{i} " + "x" * 250_000, message_mode="send", to=["live"])["event"]["id"]
                for i in range(4)]
        stuck = wait_until(lambda: next((k for k in srcs if [r["state"] for r in delivery_rows(client, g).get(k, [])] == ["claimed"]), None),
                           what="an attempt in flight")
        did = f"delivery:live:1:{stuck}"
        forged = {"v": 1, "id": "f" * 32, "ts": "2026-01-01T00:00:00Z", "kind": "runtime.delivery", "group_id": g,
                  "scope_key": "", "by": "system",
                  "data": {"actor_id": "live", "source_event_id": stuck, "delivery_id": did, "state": "accepted", "transport": "session"}}
        assert client.call("ledger_import", {"group_id": g, "events": [forged]})["imported"] == 1
        st = client.call("ledger_statuses", {"group_id": g, "event_ids": [stuck]})["statuses"][stuck]
        assert st["obligation_status"]["live"]["delivery_state"] == "claimed"
        # The consumer goes away: the attempt's own result is recorded, after the imported event.
        f.close()
        s.close()
        wait_until(lambda: len(delivery_rows(client, g)[stuck]) == 3, what="the attempt's own result")
        rows = [r["state"] for r in delivery_rows(client, g)[stuck]]
        assert rows[:2] == ["claimed", "accepted"] and len(rows) == 3 and rows[2] in ("failed", "ambiguous"), rows
    finally:
        d.stop()


def test_cli_export_import_round_trip_of_big_messages(client, group, daemon, tmp_path):
    """An export of many big messages imports whole: the CLI sends its events in requests
    that fit the daemon's request line limit (500 events a request made 5 MB of them one
    refused request, and the import stopped)."""
    ids = [client.send(group_id=group, text=f"{i} " + "b" * 10_000, message_mode="mail", to=["p1"])["event"]["id"]
           for i in range(600)]
    out = tmp_path / "big.ndjson"
    run_cli(daemon.home, "--json", "ledger", "export", group, "--out", str(out))
    r = run_cli(daemon.home, "--json", "ledger", "import", str(out), "--group-id", "g_big_copy", check=False)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["imported"] == len(out.read_bytes().splitlines())
    got = []
    while (batch := client.inbox_read(group_id="g_big_copy", actor_id="p1", by="p1", limit=200)["messages"]):
        got += [m["id"] for m in batch]
    assert got == ids


def test_CCCS_6_4_import_delivery_records_never_claim_or_settle_a_live_messages_delivery(client, group, daemon):
    """An import is history: its runtime.delivery events are kept, but they speak only for
    messages brought by an import (this one or an earlier one), never for a message appended
    live here. Before, an imported `ambiguous` for a live message made message_deliver refuse
    (delivery_conflict), and an imported `claimed` was settled `ambiguous` by the import."""
    live = client.send(group_id=group, text="live", to=["p1"], by="lead", message_mode="send")["event"]["id"]
    live2 = client.send(group_id=group, text="live 2", to=["p1"], by="lead", message_mode="send")["event"]["id"]

    def record(i, src, state):
        return {"v": 1, "id": f"{i:032x}", "ts": "2026-01-01T00:00:00Z", "kind": "runtime.delivery", "group_id": group,
                "scope_key": "", "by": "system",
                "data": {"actor_id": "p1", "source_event_id": src, "delivery_id": f"delivery:p1:1:{src}",
                         "state": state, "transport": "session"}}

    r = client.call("ledger_import", {"group_id": group, "events": [record(1, live, "ambiguous"), record(2, live2, "claimed")]})
    # Kept as history, but nothing set and nothing settled.
    assert r["imported"] == 2 and r["settled"] == 0
    kinds = [e["kind"] for e in client.call("ledger_tail", {"group_id": group, "limit": 2})["events"]]
    assert kinds == ["runtime.delivery", "runtime.delivery"]
    st = client.call("ledger_statuses", {"group_id": group, "event_ids": [live, live2]})["statuses"]
    assert st[live]["obligation_status"]["p1"]["delivery_state"] is None
    assert st[live2]["obligation_status"]["p1"]["delivery_state"] is None
    # The live message's delivery is this daemon's own: a manual attempt is made (p1's
    # runtime `none` has no adapter, so it records failed) instead of a conflict.
    client.message_deliver(group_id=group, source_event_id=live, actor_ids=["p1"])
    # Imported messages keep their imported delivery records, also across two imports (the
    # CLI imports in chunks): the message in one, its in-flight claim in the next.
    old = {"v": 1, "id": "e" * 32, "ts": "2026-01-01T00:00:00Z", "kind": "chat.message", "group_id": group,
           "scope_key": "", "by": "lead", "data": {"text": "old", "to": ["p1"], "message_mode": "send"}}
    client.call("ledger_import", {"group_id": group, "events": [old]})
    r = client.call("ledger_import", {"group_id": group, "events": [record(3, old["id"], "claimed")]})
    assert r["settled"] == 1
    st = client.call("ledger_statuses", {"group_id": group, "event_ids": [old["id"]]})["statuses"][old["id"]]
    assert st["obligation_status"]["p1"]["delivery_state"] == "ambiguous"


def test_CCCS_6_4_cli_import_keeps_a_claim_with_its_result_across_request_boundaries(client, daemon, tmp_path):
    """`convene ledger import` sends a file in requests of about 500 events, and the daemon
    settles a claim left without its result in one request `ambiguous` (in flight when the
    export was taken). A request boundary between a claim and its result made an `accepted`
    delivery `ambiguous` in the copy (1 to 3 of 400 per round trip of a live group, whose
    runs of claims come before their results); the CLI now never ends a request between a
    claim and its result."""
    g = "g_split_src"

    def ev(kind, by, data):
        return {"v": 1, "id": f"{len(events) + 1:032x}", "ts": "2026-01-01T00:00:00Z", "kind": kind, "group_id": g,
                "scope_key": "", "by": by, "data": data}

    def message(text):
        events.append(ev("chat.message", "lead", {"text": text, "to": ["p1"], "message_mode": "send"}))
        return events[-1]["id"]

    def delivery(src, state):
        events.append(ev("runtime.delivery", "system", {"actor_id": "p1", "source_event_id": src,
                                                         "delivery_id": f"delivery:p1:1:{src}", "state": state, "transport": "session"}))

    events: list[dict] = []
    events.append(ev("group.create", "user", {"title": "split"}))
    events.append(ev("actor.add", "user", {"actor": {"id": "lead", "runtime": "none"}}))
    events.append(ev("actor.add", "user", {"actor": {"id": "p1", "runtime": "session"}}))
    while len(events) < 493:
        message("filler")
    m1, m2 = message("one"), message("two")   # events 494, 495
    delivery(m1, "claimed")                    # 496
    message("filler")                          # 497
    delivery(m2, "claimed")                    # 498
    message("filler")                          # 499
    delivery(m1, "accepted")                   # 500: the first request's soft bound
    message("filler")                          # 501
    delivery(m2, "accepted")                   # 502
    f = tmp_path / "split.ndjson"
    f.write_text("".join(json.dumps(e) + "\n" for e in events))
    r = run_cli(daemon.home, "--json", "ledger", "import", str(f), "--group-id", "g_split_copy")
    assert json.loads(r.stdout)["imported"] == len(events)
    st = client.call("ledger_statuses", {"group_id": "g_split_copy", "event_ids": [m1, m2]})["statuses"]
    assert [st[m]["obligation_status"]["p1"]["delivery_state"] for m in (m1, m2)] == ["accepted", "accepted"]
    states = [e["data"]["state"] for e in client.call("ledger_search", {"group_id": "g_split_copy", "kinds": ["runtime.delivery"], "limit": 10})["events"]]
    assert states == ["claimed", "claimed", "accepted", "accepted"]
