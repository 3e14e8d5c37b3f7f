"""The unmodified cccc-sdk 0.4.41 drives convene."""
import cccc_sdk
from cccc_sdk import CCCCClient, DaemonAPIError

ISSUE_OPS = [
    "ping", "version", "shutdown", "groups", "group_create", "group_show", "group_update", "group_delete",
    "group_settings_update", "attach", "group_detach_scope", "actor_add", "actor_update", "actor_remove",
    "actor_list", "send", "reply", "reply_request_cancel", "message_deliver", "inbox_peek", "inbox_read",
    "message_history", "system_notify", "send_cross_group", "ledger_tail", "ledger_search", "ledger_window",
    "ledger_statuses", "events_stream",
]


def test_sdk_version_is_the_pinned_one():
    assert cccc_sdk.__version__ == "0.4.41"


def test_assert_compatible_with_every_required_op(client):
    ping = client.assert_compatible(require_ops=ISSUE_OPS)
    assert ping["ipc_v"] == 1
    assert set(ISSUE_OPS) <= {k for k, v in ping["capabilities"].items() if v}


def test_unknown_op_answers_unknown_op(client):
    try:
        client.call("no_such_op", {})
        raise AssertionError("expected an error")
    except DaemonAPIError as e:
        assert e.code == "unknown_op"


def test_CCCS_10_3_capability_discovery_lists_cursors_and_filters(client):
    ping = client.ping()
    assert set(ping["stream"]["cursors"]) == {"since_seq", "since_event_id", "since_ts"}
    assert "kinds" in ping["stream"]["filters"] and "limit" in ping["stream"]["filters"]
    assert ping["stream"]["replay_cap"] is None


def test_endpoint_discovery_file_points_sdk_at_the_socket(daemon):
    import json
    doc = json.loads((daemon.home / "daemon" / "ccccd.addr.json").read_text())
    assert doc["v"] == 1 and doc["transport"] == "unix"
    c = CCCCClient(cccc_home=str(daemon.home))
    assert c.endpoint.path == doc["path"]
    assert c.ping()["implementation"] == "convene"


def test_groups_and_actors_management_profile(client):
    gid = client.group_create(title="alpha", topic="t1")["group_id"]
    assert any(g["group_id"] == gid for g in client.groups()["groups"])
    client.group_update(group_id=gid, patch={"title": "beta"})
    assert client.group_show(gid)["group"]["title"] == "beta"
    r1 = client.actor_add(group_id=gid, actor_id="lead", runtime="none")
    r2 = client.actor_add(group_id=gid, actor_id="p1", runtime="none")
    assert r1["actor"]["role"] == "foreman" and r2["actor"]["role"] == "peer"
    assert r1["event"]["kind"] == "actor.add"
    client.actor_update(group_id=gid, actor_id="p1", patch={"title": "Peer One"})
    actors = {a["id"]: a for a in client.actor_list(gid)["actors"]}
    assert actors["p1"]["title"] == "Peer One"
    client.actor_remove(group_id=gid, actor_id="lead")
    # The foreman role moves to the first remaining actor.
    assert client.actor_list(gid)["actors"][0]["role"] == "foreman"
    client.group_settings_update(group_id=gid, patch={"default_send_to": "all"})
    assert client.group_show(gid)["group"]["settings"]["default_send_to"] == "all"
    client.group_delete(group_id=gid)
    try:
        client.group_show(gid)
        raise AssertionError("deleted group still shown")
    except DaemonAPIError as e:
        assert e.code == "group_not_found"


def test_CCCS_3_2_scopes_attach_detach_scope_key_opaque(client, tmp_path):
    p1 = tmp_path / "proj1"
    p1.mkdir()
    p2 = tmp_path / "proj2"
    p2.mkdir()
    r = client.attach(path=str(p1))
    gid, sk1 = r["group_id"], r["scope_key"]
    assert sk1 and sk1.startswith("s_")
    sk2 = client.attach(path=str(p2), group_id=gid)["scope_key"]
    client.actor_add(group_id=gid, actor_id="lead", runtime="none")
    ev = client.send(group_id=gid, text="scoped", message_mode="send")["event"]
    assert ev["scope_key"] == sk2  # the active scope
    client.group_detach_scope(group_id=gid, scope_key=sk2)
    assert client.group_show(gid)["group"]["active_scope_key"] == sk1
    ev = client.send(group_id=gid, text="after detach", message_mode="send")["event"]
    assert ev["scope_key"] == sk1


def test_management_by_peer_is_denied(client, group):
    try:
        client.group_update(group_id=group, patch={"title": "x"}, by="p1")
        raise AssertionError
    except DaemonAPIError as e:
        assert e.code == "permission_denied"
    # the foreman may
    client.group_update(group_id=group, patch={"title": "y"}, by="lead")
