"""Cross-group relay with provenance (§9)."""
import pytest
from cccc_sdk import DaemonAPIError


@pytest.fixture
def two_groups(client):
    a = client.group_create(title="A")["group_id"]
    b = client.group_create(title="B")["group_id"]
    for g, actors in ((a, ("lead", "p1")), (b, ("bl", "bp"))):
        for x in actors:
            client.actor_add(group_id=g, actor_id=x, runtime="none")
    return a, b


def test_CCCS_9_1_send_cross_group_carries_provenance_and_send_record(client, two_groups):
    a, b = two_groups
    r = client.send_cross_group(group_id=a, dst_group_id=b, text="hello B", message_mode="mail", to=["bp"], by="p1")
    dst, src = r["dst_event"], r["src_event"]
    assert dst["group_id"] == b and src["group_id"] == a
    assert dst["data"]["text"] == "hello B"  # verbatim
    assert dst["data"]["src_group_id"] == a and dst["data"]["src_event_id"] == src["id"]
    # CCCS-9.2-1: the local record is to the user, mode send, destination preserved in dst_*
    assert src["data"]["to"] == ["user"] and src["data"]["message_mode"] == "send"
    assert src["data"]["dst_group_id"] == b and src["data"]["dst_to"] == ["bp"] and src["data"]["dst_message_mode"] == "mail"
    # a remote Mail does not create a local human Mail item or obligation
    assert [m["id"] for m in client.inbox_peek(group_id=b, actor_id="bp")["messages"]] == [dst["id"]]
    res = client.call("source_resolve", {"group_id": b, "event_id": dst["id"]})
    assert res["available"] is True and res["event"]["id"] == src["id"]


def test_CCCS_9_1_relay_existing_message_verbatim_or_summarized(client, two_groups):
    a, b = two_groups
    orig = client.send(group_id=a, text="the original words " * 30, message_mode="send", to=["p1"])["event"]
    r = client.call("send_cross_group", {"group_id": a, "dst_group_id": b, "src_event_id": orig["id"], "message_mode": "send", "record": False})
    assert r["dst_event"]["data"]["text"] == orig["data"]["text"] and r["src_event"] is None
    r = client.call("send_cross_group", {"group_id": a, "dst_group_id": b, "src_event_id": orig["id"], "message_mode": "send", "summarized": True, "text": "short version"})
    assert r["dst_event"]["data"]["text"] == "[Summarized] short version"
    assert r["dst_event"]["data"]["src_event_id"] == orig["id"]


def test_CCCS_9_1_3_source_unavailable_is_explicit(client, two_groups):
    a, b = two_groups
    r = client.send_cross_group(group_id=a, dst_group_id=b, text="soon orphaned", message_mode="send", to=["bl"])
    client.group_delete(group_id=a)
    res = client.call("source_resolve", {"group_id": b, "event_id": r["dst_event"]["id"]})
    assert res["available"] is False and res["state"] == "source_unavailable" and "source unavailable" in res["message"]


def test_cross_group_validates_destination_before_appending(client, two_groups):
    a, b = two_groups
    head = client.call("ledger_tail", {"group_id": a, "limit": 1})["head_seq"]
    with pytest.raises(DaemonAPIError) as ei:
        client.send_cross_group(group_id=a, dst_group_id=b, text="x", message_mode="mail", to=["user"])
    assert ei.value.code == "invalid_request"
    with pytest.raises(DaemonAPIError) as ei:
        client.send_cross_group(group_id=a, dst_group_id="g_missing", text="x", message_mode="send")
    assert ei.value.code == "group_not_found"
    assert client.call("ledger_tail", {"group_id": a, "limit": 1})["head_seq"] == head


def test_retried_relay_with_client_id_appends_nothing_and_keys_belong_to_their_sender(client, two_groups, daemon):
    a, b = two_groups
    c = client.group_create(title="C")["group_id"]
    client.actor_add(group_id=c, actor_id="lead", runtime="none")
    first = client.call("send_cross_group", {"group_id": a, "dst_group_id": b, "text": "once", "to": ["bp"], "client_id": "k1", "by": "lead"})
    heads = {g: client.call("ledger_tail", {"group_id": g, "limit": 1})["head_seq"] for g in (a, b)}
    daemon.kill9()
    daemon.start()
    again = client.call("send_cross_group", {"group_id": a, "dst_group_id": b, "text": "once", "to": ["bp"], "client_id": "k1", "by": "lead"})
    # The retry answers with the original pair and adds no second send record in the source.
    assert again.get("duplicate") is True
    assert again["dst_event"]["id"] == first["dst_event"]["id"]
    assert again["src_event"]["id"] == first["src_event"]["id"]
    assert {g: client.call("ledger_tail", {"group_id": g, "limit": 1})["head_seq"] for g in (a, b)} == heads
    # Another group's sender using the same key is a different message, not a duplicate of it.
    other = client.call("send_cross_group", {"group_id": c, "dst_group_id": b, "text": "mine", "to": ["bp"], "client_id": "k1", "by": "lead"})
    assert not other.get("duplicate") and other["dst_event"]["data"]["text"] == "mine"


def test_CCCS_6_3_3_relay_from_a_same_named_actor_of_another_group_is_not_that_groups_actor(client, two_groups):
    a, b = two_groups
    client.actor_add(group_id=b, actor_id="p1", runtime="none")  # a different actor, same id
    q = client.send(group_id=b, text="B asks its p1", message_mode="request_reply", to=["p1"], by="bl")["event"]
    r = client.call("send_cross_group", {"group_id": a, "dst_group_id": b, "text": "A's p1 here", "to": ["bl"],
                                          "reply_to": q["id"], "by": "p1"})
    dst = r["dst_event"]
    # Attributed to the relay with the sender named, never to B's own p1 ...
    assert dst["by"] == "svc:relay" and dst["data"]["relay_by"] == "p1" and dst["data"]["src_group_id"] == a
    # ... so it does not answer the request B made of its p1.
    st = client.call("ledger_statuses", {"group_id": b, "event_ids": [q["id"]]})["statuses"][q["id"]]
    assert st["obligation_status"]["p1"]["status"] == "requested"
