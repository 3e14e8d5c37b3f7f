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
