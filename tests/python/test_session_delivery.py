"""The `session` runtime transport never records `accepted` for a payload that did not reach
the consumer's socket (CCCS §6.4): queued frames of a consumer that goes away are `failed`
(and may be retried), the frame being written is `ambiguous`, written frames are `accepted`."""
import json
import socket
import time

import pytest
from cccc_sdk import CCCCClient, DaemonAPIError

from conftest import Daemon

# Frames far larger than a Unix socket's send buffer (212992 bytes by default), so a consumer
# that stops reading blocks the daemon's writer after a few of them.
BIG = "x" * (64 * 1024)


def attach(daemon, gid, actor):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(30)
    s.connect(str(daemon.sock))
    s.sendall((json.dumps({"v": 1, "op": "runtime_attach", "args": {"group_id": gid, "actor_id": actor}}) + "\n").encode())
    f = s.makefile("rb")
    assert json.loads(f.readline())["ok"] is True
    return s, f


def delivery_rows(client, gid):
    evs = client.call("ledger_search", {"group_id": gid, "kinds": ["runtime.delivery"], "limit": 1000})["events"]
    by_src: dict[str, list[dict]] = {}
    for e in evs:
        by_src.setdefault(e["data"]["source_event_id"], []).append(e["data"])
    return by_src


def latest(client, gid, srcs):
    rows = delivery_rows(client, gid)
    return {s: (rows[s][-1]["state"] if s in rows else None) for s in srcs}


def wait_until(pred, timeout=30.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def wait_writer_blocked(client, gid, srcs):
    """Every source claimed, some still unsettled, and nothing moving for a while: the
    daemon's writer is stuck on the consumer that stopped reading."""
    prev = None
    stable_since = time.time()
    deadline = time.time() + 30
    while time.time() < deadline:
        st = latest(client, gid, srcs)
        if st != prev:
            prev, stable_since = st, time.time()
        elif None not in st.values() and "claimed" in st.values() and time.time() - stable_since > 0.7:
            return st
        time.sleep(0.05)
    raise AssertionError(f"deliveries never backed up behind the stalled consumer: {prev}")


def send_many(client, gid, actor, n):
    return [client.send(group_id=gid, text=f"{i} {BIG}", message_mode="send", to=[actor])["event"]["id"] for i in range(n)]


@pytest.fixture
def slow_daemon(home):
    # A long handoff bound, so only the consumer going away settles the backed-up frames.
    d = Daemon(home, ["--session-timeout-ms", "60000"]).start()
    yield d
    d.stop()


def test_CCCS_6_4_2_CCCS_6_4_5_consumer_gone_with_frames_queued_records_failed_not_accepted_and_retry_works(slow_daemon):
    client = CCCCClient(cccc_home=str(slow_daemon.home))
    gid = client.group_create(title="never lose")["group_id"]
    client.actor_add(group_id=gid, actor_id="live", runtime="session")
    s, f = attach(slow_daemon, gid, "live")
    srcs = send_many(client, gid, "live", 30)
    before = wait_writer_blocked(client, gid, srcs)
    accepted_before = {k for k, v in before.items() if v == "accepted"}
    # The consumer dies with deliveries still queued for it (the file holds the fd too).
    f.close()
    s.close()
    after = wait_until(lambda: (lambda st: st if "claimed" not in st.values() else None)(latest(client, gid, srcs)),
                       what="every attempt to settle")
    rows = delivery_rows(client, gid)
    for src in srcs:
        # CCCS-6.4-2: claimed, then exactly one result.
        assert [r["state"] for r in rows[src]][0] == "claimed" and len(rows[src]) == 2, rows[src]
    # Nothing still pending when the consumer died became accepted.
    assert {k for k, v in after.items() if v == "accepted"} == accepted_before
    failed = [k for k, v in after.items() if v == "failed"]
    ambiguous = [k for k, v in after.items() if v == "ambiguous"]
    assert failed, after
    assert len(ambiguous) <= 1, after  # at most the one frame being written
    for k in failed:
        assert rows[k][-1]["reason"] == "session closed before the payload was written"
    # failed proves the handoff did not occur: an explicit retry is allowed and arrives.
    s2, f2 = attach(slow_daemon, gid, "live")
    for k in failed:
        client.message_deliver(group_id=gid, source_event_id=k, actor_ids=["live"])
    got = set()
    while len(got) < len(failed):
        item = json.loads(f2.readline())
        if item["t"] == "delivery":
            got.add(item["event"]["id"])
    assert got == set(failed)
    wait_until(lambda: all(v == "accepted" for v in latest(client, gid, failed).values()), what="retries accepted")
    # CCCS-6.4-5: ambiguous is never retried without the caller's explicit force.
    for k in ambiguous:
        with pytest.raises(DaemonAPIError) as ei:
            client.message_deliver(group_id=gid, source_event_id=k, actor_ids=["live"])
        assert ei.value.code == "delivery_conflict"
    f2.close()
    s2.close()


def test_CCCS_6_4_2_session_reading_consumer_gets_every_frame_and_all_are_accepted(client, group, daemon):
    client.actor_add(group_id=group, actor_id="live", runtime="session")
    s, f = attach(daemon, group, "live")
    srcs = send_many(client, group, "live", 12)
    got = set()
    while len(got) < len(srcs):
        item = json.loads(f.readline())
        if item["t"] == "delivery":
            got.add(item["event"]["id"])
    assert got == set(srcs)
    wait_until(lambda: all(v == "accepted" for v in latest(client, group, srcs).values()), what="all accepted")
    rows = delivery_rows(client, group)
    assert all([r["state"] for r in rows[k]] == ["claimed", "accepted"] for k in srcs)
    s.close()


def test_CCCS_6_4_2_stalled_consumer_is_settled_within_the_bound_and_disconnected(home):
    d = Daemon(home, ["--session-timeout-ms", "1500"]).start()
    try:
        client = CCCCClient(cccc_home=str(home))
        gid = client.group_create(title="stalled")["group_id"]
        client.actor_add(group_id=gid, actor_id="live", runtime="session")
        s, f = attach(d, gid, "live")
        srcs = send_many(client, gid, "live", 20)
        # Nobody reads: the bound settles every attempt on what can be proven.
        after = wait_until(lambda: (lambda st: st if None not in st.values() and "claimed" not in st.values() else None)(
            latest(client, gid, srcs)), what="every attempt to settle")
        assert "failed" in after.values(), after
        assert list(after.values()).count("ambiguous") <= 1, after
        rows = delivery_rows(client, gid)
        for k, v in after.items():
            assert len(rows[k]) == 2
            if v == "failed":
                assert "withdrawn" in rows[k][-1]["reason"] or rows[k][-1]["reason"] == "session closed before the payload was written"
        # The stalled consumer was detached without reading anything, and its connection
        # closes: reading on finds the end of the stream.
        wait_until(lambda: [a["attached"] for a in client.actor_list(group_id=gid)["actors"] if a["id"] == "live"] == [False],
                   what="the stalled session to be detached")
        s.settimeout(30)
        while f.readline():
            pass
        s.close()
    finally:
        d.stop()


def test_session_queue_depth_is_explicit_and_a_full_queue_fails_the_handoff(home):
    d = Daemon(home, ["--session-queue", "4", "--session-timeout-ms", "60000"]).start()
    try:
        client = CCCCClient(cccc_home=str(home))
        gid = client.group_create(title="full")["group_id"]
        client.actor_add(group_id=gid, actor_id="live", runtime="session")
        s, f = attach(d, gid, "live")
        srcs = send_many(client, gid, "live", 30)
        rows = wait_until(lambda: (lambda r: r if sum(1 for k in srcs if k in r and r[k][-1]["state"] == "failed") > 0 else None)(
            delivery_rows(client, gid)), what="a queue-full failure")
        full = [k for k in srcs if k in rows and rows[k][-1]["state"] == "failed"]
        assert all(rows[k][-1]["reason"] == "session queue full (4 frames)" for k in full)
        # Never more waiting than the queue holds (+1 being written), nothing accepted beyond it.
        st = wait_writer_blocked(client, gid, srcs)
        assert list(st.values()).count("claimed") <= 5, st
        f.close()
        s.close()
    finally:
        d.stop()


def test_CCCS_6_4_1_removed_actors_session_ends_and_never_gets_the_readded_generations_deliveries(client, group, daemon):
    """A session belongs to the actor generation it attached as. Removing the actor ends it;
    an actor added again under the same id is another generation, whose deliveries never
    reach the old connection (it might be held by whoever was removed)."""
    client.actor_add(group_id=group, actor_id="live", runtime="session")
    s, f = attach(daemon, group, "live")
    client.actor_remove(group_id=group, actor_id="live")
    client.actor_add(group_id=group, actor_id="live", runtime="session")
    assert next(a for a in client.actor_list(group_id=group)["actors"] if a["id"] == "live")["attached"] is False
    m = client.send(group_id=group, text="for the new generation", message_mode="send", to=["live"])["event"]
    # The old session was closed: heartbeats until then, never the new generation's message.
    while (line := f.readline()):
        assert json.loads(line)["t"] == "heartbeat", line
    did = f"delivery:live:2:{m['id']}"
    wait_until(lambda: latest(client, group, [m["id"]])[m["id"]] not in (None, "claimed"), what="settled")
    rows = delivery_rows(client, group)[m["id"]]
    assert [(r["delivery_id"], r["state"]) for r in rows] == [(did, "claimed"), (did, "failed")]
    assert rows[-1]["reason"] == "no session attached"
    f.close()
    s.close()
    # The new generation's own session gets it on an explicit retry.
    s2, f2 = attach(daemon, group, "live")
    client.message_deliver(group_id=group, source_event_id=m["id"], actor_ids=["live"])
    item = json.loads(f2.readline())
    while item["t"] != "delivery":
        item = json.loads(f2.readline())
    assert item["delivery_id"] == did and item["event"]["id"] == m["id"]
    wait_until(lambda: latest(client, group, [m["id"]])[m["id"]] == "accepted", what="accepted")
    f2.close()
    s2.close()


def test_CCCS_6_4_2_graceful_shutdown_records_failed_for_frames_never_written(slow_daemon):
    """A daemon asked to stop settles what it can still prove: frames queued behind a stalled
    consumer were never written (failed, retryable after the restart), the one being written
    is ambiguous. Before, every one of them was left claimed and came back ambiguous, so no
    never-written message could be retried without force."""
    client = CCCCClient(cccc_home=str(slow_daemon.home))
    gid = client.group_create(title="stop")["group_id"]
    client.actor_add(group_id=gid, actor_id="live", runtime="session")
    s, f = attach(slow_daemon, gid, "live")
    srcs = send_many(client, gid, "live", 20)
    before = wait_writer_blocked(client, gid, srcs)
    assert slow_daemon.raw({"v": 1, "op": "shutdown"})["result"]["shutting_down"] is True
    slow_daemon.proc.wait(30)
    f.close()
    s.close()
    slow_daemon.start()
    rows = delivery_rows(client, gid)
    for src in srcs:
        assert [r["state"] for r in rows[src]][0] == "claimed" and len(rows[src]) == 2, rows[src]
    after = latest(client, gid, srcs)
    assert {k for k, v in after.items() if v == "accepted"} == {k for k, v in before.items() if v == "accepted"}
    failed = [k for k, v in after.items() if v == "failed"]
    assert failed and sum(v == "ambiguous" for v in after.values()) <= 1, after
    assert all(rows[k][-1]["reason"] == "session closed before the payload was written" for k in failed)
    # failed may be retried once the consumer is back, and arrives.
    s2, f2 = attach(slow_daemon, gid, "live")
    client.message_deliver(group_id=gid, source_event_id=failed[0], actor_ids=["live"])
    item = json.loads(f2.readline())
    while item["t"] != "delivery":
        item = json.loads(f2.readline())
    assert item["event"]["id"] == failed[0]
    f2.close()
    s2.close()


def test_session_receives_its_messages_in_ledger_order(client, group, daemon):
    """The ledger's append order is the authoritative order (CCCS §4.3): an attached session
    gets its deliveries in that order, also when senders pipeline and write concurrently
    (each delivery used to be claimed and queued by its own task, so the first frame out
    could be the 100th message)."""
    import threading
    client.actor_add(group_id=group, actor_id="live", runtime="session")
    s, f = attach(daemon, group, "live")
    n, senders = 150, 3

    def pipeline(k):
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(60)
        c.connect(str(daemon.sock))
        c.sendall(b"".join((json.dumps({"v": 1, "op": "send", "args": {
            "group_id": group, "text": f"{k}-{i}", "to": ["live"], "message_mode": "send", "by": "lead"}}) + "\n").encode()
            for i in range(n)))
        cf = c.makefile("rb")
        for _ in range(n):
            assert json.loads(cf.readline())["ok"] is True
        c.close()

    threads = [threading.Thread(target=pipeline, args=(k,)) for k in range(senders)]
    for t in threads:
        t.start()
    seqs = []
    while len(seqs) < n * senders:
        item = json.loads(f.readline())
        if item["t"] == "delivery":
            seqs.append(item["event"]["seq"])
    for t in threads:
        t.join()
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    s.close()


def test_CCCS_6_4_2_a_reconnecting_consumer_takes_over_the_frames_its_old_session_never_started(slow_daemon):
    """A consumer whose old connection went quiet attaches again: the frames still queued on
    the old session move to the new one in ledger order and are accepted there (before, they
    waited behind the stuck write and were recorded `failed` when the bound ran out). The frame
    the old connection had started stays its own: it gets exactly one result there."""
    client = CCCCClient(cccc_home=str(slow_daemon.home))
    gid = client.group_create(title="reconnect")["group_id"]
    client.actor_add(group_id=gid, actor_id="live", runtime="session")
    s, f = attach(slow_daemon, gid, "live")
    srcs = send_many(client, gid, "live", 30)
    before = wait_writer_blocked(client, gid, srcs)
    unsettled = [k for k in srcs if before[k] == "claimed"]
    started, waiting = unsettled[0], unsettled[1:]
    assert waiting and all(before[k] == "accepted" for k in srcs[:srcs.index(started)])
    # The consumer reconnects; its old socket is still open but nobody reads it.
    s2, f2 = attach(slow_daemon, gid, "live")
    got = []
    deadline = time.time() + 20
    while len(got) < len(waiting) and time.time() < deadline:
        item = json.loads(f2.readline())
        if item["t"] == "delivery":
            got.append(item["event"]["id"])
    assert got == waiting, f"the new session got {len(got)} of the {len(waiting)} frames left queued"
    wait_until(lambda: all(v == "accepted" for v in latest(client, gid, waiting).values()), what="taken-over frames accepted")
    # The old connection goes away mid-frame: that frame alone settles there.
    f.close()
    s.close()
    after = wait_until(lambda: (lambda st: st if "claimed" not in st.values() else None)(latest(client, gid, srcs)),
                       what="every attempt to settle")
    assert after[started] in ("ambiguous", "accepted"), after[started]
    rows = delivery_rows(client, gid)
    for k in srcs:
        assert [r["state"] for r in rows[k]][0] == "claimed" and len(rows[k]) == 2, rows[k]
    assert client.actor_list(group_id=gid)["actors"][0]["attached"] is True
    f2.close()
    s2.close()
