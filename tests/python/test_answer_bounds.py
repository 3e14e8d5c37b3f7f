"""Answers the cccc-sdk can read: it refuses an answer line over 4,000,000 bytes, so every read
that returns events or blob bytes ends a page early when it would be bigger, says so, and lets
the caller page on to get everything (nothing skipped, nothing duplicated)."""
import base64
import hashlib

import pytest
from cccc_sdk import DaemonAPIError

BIG = 250_000  # bytes of text per message (the limit is 256 KiB): 20 of them are 5 MB


def big_messages(client, group, n=20):
    return [client.send(group_id=group, text=f"{i} " + "q" * BIG, message_mode="send", to=["p1"], by="lead")["event"]["id"]
            for i in range(n)]


def test_message_history_of_big_messages_pages_within_the_sdk_line_limit(client, group):
    sent = big_messages(client, group)
    got, before, pages = [], "", 0
    while True:
        r = client.message_history(group_id=group, actor_id="p1", by="p1", limit=200, before_event_id=before)
        pages += 1
        got += [m["id"] for m in r["messages"]]
        if not r["has_more"]:
            break
        before = r["messages"][-1]["id"]
    assert pages > 1
    assert got == list(reversed(sent))


def test_ledger_tail_of_big_events_pages_back_with_before(client, group):
    sent = big_messages(client, group)
    r = client.call("ledger_tail", {"group_id": group, "limit": 1000, "kinds": ["chat.message"]})
    assert r["has_more"] and 0 < r["count"] < len(sent)
    got = [e["id"] for e in r["events"]]
    while r["has_more"]:
        r = client.call("ledger_tail", {"group_id": group, "limit": 1000, "kinds": ["chat.message"], "before": got[0]})
        got = [e["id"] for e in r["events"]] + got
    assert got == sent


def test_ledger_search_of_big_events_pages_on_before_and_after(client, group):
    sent = big_messages(client, group)
    # Newest first pages, going back with `before`.
    r = client.call("ledger_search", {"group_id": group, "q": "qqq", "limit": 1000})
    assert r["has_more"] and r["count"] < len(sent)
    back = [e["id"] for e in r["events"]]
    while r["has_more"]:
        r = client.call("ledger_search", {"group_id": group, "q": "qqq", "limit": 1000, "before": back[0]})
        back = [e["id"] for e in r["events"]] + back
    assert back == sent
    # Oldest first pages, going forward with `after` (from the first message on).
    fwd, pages = [sent[0]], 0
    while True:
        r = client.call("ledger_search", {"group_id": group, "kind": "chat", "after": fwd[-1], "limit": 1000})
        pages += 1
        fwd += [e["id"] for e in r["events"]]
        if not r["has_more"]:
            break
    assert pages > 1 and fwd == sent


def test_ledger_window_of_big_events_fits_and_says_what_is_left(client, group):
    sent = big_messages(client, group)
    r = client.call("ledger_window", {"group_id": group, "center": sent[10], "before": 1000, "after": 1000})
    ids = [e["id"] for e in r["events"]]
    assert ids[r["center_index"]] == sent[10]
    assert r["has_more_before"] and r["has_more_after"]
    # What it carries is a contiguous run around the center.
    lo = sent.index(ids[0])
    assert ids == sent[lo:lo + len(ids)]


def test_blob_get_of_a_blob_over_one_answer_comes_in_parts(client, group, daemon):
    payload = bytes(range(256)) * (3 * 1024 * 1024 // 256)  # 3 MiB: 4.2 MB in base64
    sha = hashlib.sha256(payload).hexdigest()
    # A blob store restored from a backup (or written by a daemon with a larger request
    # limit) holds blobs up to the 3 MiB blob limit, more than one answer carries in base64.
    (daemon.home / "blobs" / sha).write_bytes(payload)
    path = f"blobs/{sha}"
    with pytest.raises(DaemonAPIError) as e:
        client.call("blob_get", {"group_id": group, "path": path})
    assert e.value.code == "limit_exceeded" and e.value.details.get("reason") == "answer_too_large"
    assert e.value.details.get("bytes") == len(payload)
    got, off, parts = b"", 0, 0
    while True:
        r = client.call("blob_get", {"group_id": group, "path": path, "offset": off})
        assert r["offset"] == off and r["sha256"] == sha and r["bytes"] == len(payload)
        chunk = base64.b64decode(r["content_b64"])
        assert len(chunk) == r["part_bytes"]
        got += chunk
        parts += 1
        if not r["has_more"]:
            break
        off = r["next_offset"]
    assert parts == 2 and got == payload
    # A small blob still comes whole without `offset` (CCCC's shape).
    small = client.call("blob_put", {"group_id": group, "content_b64": base64.b64encode(b"abc").decode()})
    r = client.call("blob_get", {"group_id": group, "path": small["path"]})
    assert base64.b64decode(r["content_b64"]) == b"abc" and r["has_more"] is False
