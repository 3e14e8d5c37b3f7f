"""Actor management through the unmodified cccc-sdk: `actor_update` patch keys, and what an
actor re-added under a removed actor's id starts with."""
import pytest
from cccc_sdk import DaemonAPIError


def actor(client, gid, aid):
    return next(a for a in client.actor_list(group_id=gid)["actors"] if a["id"] == aid)


def event_count(client, gid):
    return client.call("ledger_tail", {"group_id": gid, "limit": 1})["head_seq"]


def test_actor_update_refuses_unknown_patch_keys_and_changes_nothing(client, group):
    before = actor(client, group, "p1")
    head = event_count(client, group)
    with pytest.raises(DaemonAPIError) as ei:
        # One known key beside the unknown ones: the whole patch is refused.
        client.actor_update(group_id=group, actor_id="p1", patch={"title": "new", "colour": "red", "generation": 9})
    e = ei.value
    assert e.code == "invalid_request"
    assert e.details["field"] == "patch" and e.details["reason"] == "invalid_patch"
    assert e.details["unknown_keys"] == ["colour", "generation"]
    assert "title" in e.details["allowed_keys"]
    assert actor(client, group, "p1") == before
    assert event_count(client, group) == head
    with pytest.raises(DaemonAPIError) as ei:
        client.actor_update(group_id=group, actor_id="p1", patch={})
    assert ei.value.code == "invalid_request" and ei.value.details["reason"] == "invalid_patch"
    assert event_count(client, group) == head


def test_actor_update_accepts_the_keys_cccc_accepts(client, group):
    patch = {"title": "P", "runtime": "command", "command": ["true"], "enabled": True, "default_scope_key": "",
             "env": {"A": "1"}, "runner": "headless", "submit": "enter", "capability_autoload": ["x"],
             "capability_hidden": [], "avatar_asset_path": "", "role": "peer", "runtime_state_source": ""}
    r = client.actor_update(group_id=group, actor_id="p1", patch=patch)
    assert r["event"]["kind"] == "actor.update"
    a = actor(client, group, "p1")
    assert a["title"] == "P" and a["command"] == ["true"] and a["env"] == {"A": "1"} and a["runner"] == "headless"


def all_events(daemon, gid):
    import json
    import socket
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(15)
    s.connect(str(daemon.sock))
    s.sendall((json.dumps({"v": 1, "op": "events_stream", "args": {"group_id": gid, "since_seq": 0, "follow": False}}) + "\n").encode())
    f = s.makefile("rb")
    assert json.loads(f.readline())["ok"] is True
    out = [json.loads(line)["event"] for line in f]
    f.close()
    s.close()
    return out


def obligation(client, gid, src, aid):
    return client.call("ledger_statuses", {"group_id": gid, "event_ids": [src]})["statuses"][src]["obligation_status"].get(aid)


def test_CCCS_6_4_1_readded_actor_is_a_new_generation_without_the_old_mail_or_reply_obligations(client, group, daemon):
    """Policy (the spec names actor generations only for delivery_id): removing an actor ends
    its generation. Its Mail index and cursor go with it and its open reply obligations close
    as cancelled by the actor.remove event; an actor re-added under the same id starts empty."""
    mails = [client.send(group_id=group, text=f"m{i}", message_mode="mail", to=["p1"], by="lead")["event"] for i in range(3)]
    client.inbox_read(group_id=group, actor_id="p1", by="p1", limit=1)
    ask = client.send(group_id=group, text="answer me", message_mode="request_reply", to=["p1", "p2"], by="lead")["event"]
    removed = client.actor_remove(group_id=group, actor_id="p1")["event"]
    ob = obligation(client, group, ask["id"], "p1")
    assert ob["status"] == "cancelled" and ob["closed_by"] == removed["id"]
    assert obligation(client, group, ask["id"], "p2")["status"] == "requested"

    client.actor_add(group_id=group, actor_id="p1", runtime="none")

    def check():
        assert actor(client, group, "p1")["unread_mail"] == 0
        peek = client.inbox_peek(group_id=group, actor_id="p1")
        assert peek["messages"] == [] and peek["cursor"]["seq"] == 0
        st = client.call("ledger_statuses", {"group_id": group, "event_ids": [m["id"] for m in mails]})["statuses"]
        # The old generation's Mail is not the new one's: no read state is reported for it.
        assert all("p1" not in st[m["id"]]["read_status"] for m in mails)
        assert obligation(client, group, ask["id"], "p1")["status"] == "cancelled"

    check()
    assert client.inbox_read(group_id=group, actor_id="p1", by="p1")["event"] is None
    # A reply from the new generation does not turn the cancelled obligation into replied.
    client.reply(group_id=group, reply_to=ask["id"], text="late", by="p1")
    check()
    # Mail sent to the new generation is its own, from the first item.
    new = client.send(group_id=group, text="fresh", message_mode="mail", to=["p1"], by="lead")["event"]
    assert [m["id"] for m in client.inbox_peek(group_id=group, actor_id="p1")["messages"]] == [new["id"]]
    assert actor(client, group, "p1")["unread_mail"] == 1
    # The same projection after a restart, and after exporting and importing the ledger.
    daemon.kill9()
    daemon.start()
    assert [m["id"] for m in client.inbox_peek(group_id=group, actor_id="p1")["messages"]] == [new["id"]]
    imported = "g_reimport"
    r = client.call("ledger_import", {"group_id": imported, "events": all_events(daemon, group)})
    assert r["skipped"] == 0
    assert [m["id"] for m in client.inbox_peek(group_id=imported, actor_id="p1")["messages"]] == [new["id"]]
    assert obligation(client, imported, ask["id"], "p1")["status"] == "cancelled"
    assert obligation(client, imported, ask["id"], "p2")["status"] == "requested"
