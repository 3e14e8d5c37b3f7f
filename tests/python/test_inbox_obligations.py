"""Mail inbox (§6.2), reply obligations and cancellation (§6.3)."""
import pytest
from cccc_sdk import DaemonAPIError


def statuses(client, gid, eid):
    return client.call("ledger_statuses", {"group_id": gid, "event_ids": [eid]})["statuses"][eid]


def test_mail_inbox_peek_then_read_moves_cursor(client, group):
    ids = [client.send(group_id=group, text=f"m{i}", message_mode="mail", to=["p1"])["event"]["id"] for i in range(3)]
    client.send(group_id=group, text="not mail", message_mode="send", to=["p1"])
    peek = client.inbox_peek(group_id=group, actor_id="p1")
    assert [m["id"] for m in peek["messages"]] == ids
    assert peek["cursor"]["event_id"] is None
    read = client.inbox_read(group_id=group, actor_id="p1", by="p1", limit=2)
    assert [m["id"] for m in read["messages"]] == ids[:2]
    assert read["event"]["kind"] == "mail.read" and read["event"]["data"] == {"actor_id": "p1", "event_id": ids[1]}
    assert read["cursor"]["event_id"] == ids[1]
    assert [m["id"] for m in client.inbox_peek(group_id=group, actor_id="p1")["messages"]] == ids[2:]
    st = statuses(client, group, ids[0])
    assert st["read_status"] == {"p1": True}
    assert statuses(client, group, ids[2])["read_status"] == {"p1": False}
    empty = client.inbox_read(group_id=group, actor_id="p1", by="p1")
    assert [m["id"] for m in empty["messages"]] == ids[2:]
    again = client.inbox_read(group_id=group, actor_id="p1", by="p1")
    assert again["messages"] == [] and again["event"] is None


def test_CCCS_6_4_7_mail_append_creates_no_runtime_delivery(client, group):
    ev = client.send(group_id=group, text="quiet", message_mode="mail", to=["p1"])["event"]
    tail = client.call("ledger_tail", {"group_id": group, "limit": 5})["events"]
    assert tail[-1]["id"] == ev["id"]
    assert not [e for e in tail if e["kind"] == "runtime.delivery"]


def test_CCCS_6_2_2_mail_read_authorization(client, group):
    client.send(group_id=group, text="for p1", message_mode="mail", to=["p1"])
    with pytest.raises(DaemonAPIError) as ei:
        client.inbox_read(group_id=group, actor_id="p1", by="p2")
    assert ei.value.code == "permission_denied"
    # the user is privileged
    assert client.inbox_read(group_id=group, actor_id="p1", by="user")["event"]["by"] == "user"
    with pytest.raises(DaemonAPIError) as ei:
        client.inbox_peek(group_id=group, actor_id="user")
    assert ei.value.code == "invalid_request"


def test_CCCS_6_2_1_mail_read_must_reference_addressed_mail(client, group):
    send_ev = client.send(group_id=group, text="s", message_mode="send", to=["p1"])["event"]
    # mail.read through the engine is only reachable by inbox_read; it never points at Send.
    client.send(group_id=group, text="mail", message_mode="mail", to=["p2"])
    r = client.inbox_read(group_id=group, actor_id="p1", by="p1")
    assert r["event"] is None and send_ev["id"] not in [m["id"] for m in r["messages"]]


def test_reply_closes_only_the_repliers_obligation(client, group):
    src = client.send(group_id=group, text="review?", message_mode="request_reply", to=["p1", "p2"])["event"]
    rep = client.reply(group_id=group, reply_to=src["id"], text="done", by="p1")["event"]
    assert rep["data"]["reply_to"] == src["id"] and rep["data"]["to"] == ["user"]
    ob = statuses(client, group, src["id"])["obligation_status"]
    assert ob["p1"]["status"] == "replied" and ob["p1"]["closed_by"] == rep["id"]
    assert ob["p2"]["status"] == "requested"


def test_CCCS_6_3_3_cancel_closes_open_and_append_order_is_authoritative(client, group):
    src = client.send(group_id=group, text="q", message_mode="request_reply", to=["p1", "p2"], by="lead")["event"]
    client.reply(group_id=group, reply_to=src["id"], text="first", by="p1", message_mode="mail")
    c = client.reply_request_cancel(group_id=group, source_event_id=src["id"], by="lead")
    assert c["event"]["kind"] == "chat.reply_request.cancelled"
    assert c["obligations"] == {"p1": "replied", "p2": "cancelled"}
    # a later reply stays visible but does not turn cancelled into replied
    late = client.reply(group_id=group, reply_to=src["id"], text="late", by="p2")["event"]
    ob = statuses(client, group, src["id"])["obligation_status"]
    assert ob["p1"]["replied"] and not ob["p1"]["cancelled"]
    assert ob["p2"]["cancelled"] and not ob["p2"]["replied"]
    assert late["data"]["reply_to"] == src["id"]


def test_CCCS_6_3_2_only_sender_or_user_may_cancel(client, group):
    src = client.send(group_id=group, text="q", message_mode="request_reply", to=["p2"], by="p1")["event"]
    with pytest.raises(DaemonAPIError) as ei:
        client.reply_request_cancel(group_id=group, source_event_id=src["id"], by="p2")
    assert ei.value.code == "permission_denied"
    client.reply_request_cancel(group_id=group, source_event_id=src["id"], by="user")


def test_CCCS_6_3_1_cancel_target_must_be_request_reply(client, group):
    ev = client.send(group_id=group, text="plain", message_mode="send", to=["p1"])["event"]
    with pytest.raises(DaemonAPIError) as ei:
        client.reply_request_cancel(group_id=group, source_event_id=ev["id"])
    assert ei.value.code == "invalid_request"
    with pytest.raises(DaemonAPIError) as ei:
        client.reply_request_cancel(group_id=group, source_event_id="nope")
    assert ei.value.code == "event_not_found"


def test_request_reply_to_user_creates_user_obligation(client, group):
    src = client.send(group_id=group, text="approve?", message_mode="request_reply", to=["user"], by="lead")["event"]
    assert statuses(client, group, src["id"])["obligation_status"]["user"]["status"] == "requested"
    client.reply(group_id=group, reply_to=src["id"], text="approved", by="user")
    assert statuses(client, group, src["id"])["obligation_status"]["user"]["status"] == "replied"


def test_message_history_newest_first_pages_and_filters(client, group):
    ids = [client.send(group_id=group, text=f"h{i}", message_mode="mail" if i % 2 else "send", to=["p1"])["event"]["id"] for i in range(6)]
    client.send(group_id=group, text="other", message_mode="send", to=["p2"])
    h = client.message_history(group_id=group, actor_id="p1", limit=4)
    assert [m["id"] for m in h["messages"]] == ids[::-1][:4] and h["has_more"] is True
    h2 = client.message_history(group_id=group, actor_id="p1", before_event_id=ids[2], limit=10)
    assert [m["id"] for m in h2["messages"]] == [ids[1], ids[0]]
    mail = client.message_history(group_id=group, actor_id="p1", mode="mail")
    assert [m["id"] for m in mail["messages"]] == [ids[5], ids[3], ids[1]]
    q = client.message_history(group_id=group, actor_id="p1", query="H4")
    assert [m["id"] for m in q["messages"]] == [ids[4]]
    # history never consumes Mail
    assert len(client.inbox_peek(group_id=group, actor_id="p1")["messages"]) == 3


def test_mail_cursor_never_moves_back_under_concurrent_reads_and_survives_kill9(client, group, daemon):
    import threading
    from cccc_sdk import CCCCClient
    ids = [client.send(group_id=group, text=f"m{i}", message_mode="mail", to=["p1"])["event"]["id"] for i in range(12)]
    got = []

    def reader(limit):
        c = CCCCClient(cccc_home=str(daemon.home))
        got.extend(m["id"] for m in c.inbox_read(group_id=group, actor_id="p1", by="p1", limit=limit)["messages"])

    threads = [threading.Thread(target=reader, args=(n,)) for n in (5, 1, 3, 2, 1, 4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Wherever the reads interleaved, the cursor is at the furthest message any of them read.
    furthest = max(ids.index(i) for i in got)
    expect_unread = ids[furthest + 1:]

    def check():
        assert client.inbox_peek(group_id=group, actor_id="p1")["cursor"]["event_id"] == ids[furthest]
        assert [m["id"] for m in client.inbox_peek(group_id=group, actor_id="p1")["messages"]] == expect_unread
        unread = {a["id"]: a["unread_mail"] for a in client.actor_list(group_id=group)["actors"]}
        assert unread["p1"] == len(expect_unread) and unread["p2"] == 0

    check()
    daemon.kill9()
    daemon.start()
    check()


def test_inbox_read_never_reports_a_cursor_behind_the_stored_one_under_concurrent_reads(client, group, daemon):
    """Each answer's cursor is at least the stored cursor once its own mail.read committed,
    which is the furthest Mail consumed by any mail.read up to and including it (mail.read
    events in seq order are commit order)."""
    import random
    import threading
    from cccc_sdk import CCCCClient
    for i in range(240):
        client.send(group_id=group, text=f"m{i}", message_mode="mail", to=["p1"])
    answers = []
    lock = threading.Lock()

    def reader(k):
        c = CCCCClient(cccc_home=str(daemon.home))
        rnd = random.Random(k)
        while True:
            r = c.inbox_read(group_id=group, actor_id="p1", by="p1", limit=rnd.randint(1, 8))
            if not r["messages"]:
                return
            with lock:
                answers.append((r["event"]["seq"], r["cursor"]["seq"], r["messages"][-1]["seq"]))

    threads = [threading.Thread(target=reader, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    answers.sort()
    stored = 0
    behind = []
    for ev_seq, reported, last in answers:
        stored = max(stored, last)  # the cursor once this mail.read committed
        if reported < stored:
            behind.append((ev_seq, reported, stored))
    assert not behind, f"{len(behind)} answers reported a cursor behind the stored one (mail.read seq, reported, stored): {behind[:3]}"
    assert max(c for _, c, _ in answers) == client.inbox_peek(group_id=group, actor_id="p1")["cursor"]["seq"]


def test_CCCS_6_2_inbox_read_of_big_mail_fits_the_sdk_and_marks_read_only_what_it_returned(client, group):
    """The Mail cursor is evidence that Mail was returned (CCCS §6.2). The cccc-sdk refuses an
    answer over 4 MB; an inbox_read whose answer was bigger moved the cursor over all of its
    messages while the caller got an error, so 20 big mails were read and none received.
    The answer now carries what fits and the cursor moves over exactly that."""
    sent = [client.send(group_id=group, text=f"{i} " + "z" * 250_000, message_mode="mail", to=["p1"], by="lead")["event"]["id"]
            for i in range(20)]
    assert len(client.inbox_peek(group_id=group, actor_id="p1", limit=200)["messages"]) < 20
    got = []
    while True:
        r = client.inbox_read(group_id=group, actor_id="p1", by="p1", limit=200)
        if not r["messages"]:
            break
        assert r["cursor"]["event_id"] == r["messages"][-1]["id"]
        got += [m["id"] for m in r["messages"]]
    assert got == sent
