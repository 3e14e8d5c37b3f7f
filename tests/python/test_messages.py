"""chat.message rules (CCCS §4–§6.1) through cccc-sdk."""
import pytest
from cccc_sdk import DaemonAPIError


def err(fn, *a, **kw):
    with pytest.raises(DaemonAPIError) as ei:
        fn(*a, **kw)
    return ei.value


def test_CCCS_4_1_envelope_fields_and_daemon_assigned_seq_ts(client, group):
    e1 = client.send(group_id=group, text="one", message_mode="send", to=["p1"])["event"]
    e2 = client.send(group_id=group, text="two", message_mode="send", to=["p1"])["event"]
    for e in (e1, e2):
        assert set(e) == {"v", "id", "ts", "seq", "kind", "group_id", "scope_key", "by", "data"}
        assert e["v"] == 1 and e["kind"] == "chat.message" and e["group_id"] == group
        assert e["ts"].endswith("Z")
    assert e2["seq"] > e1["seq"]


def test_CCCS_4_3_1_client_ts_recorded_but_not_ordering(client, group):
    e = client.call("send", {"group_id": group, "text": "x", "message_mode": "send", "to": ["p1"], "client_ts": "1999-01-01T00:00:00Z"})["event"]
    assert e["data"]["client_ts"] == "1999-01-01T00:00:00Z"
    assert e["ts"] > "2020"


def test_CCCS_5_1_1_empty_to_materializes_default_send_to(client, group):
    e = client.send(group_id=group, text="no to", message_mode="send")["event"]
    assert e["data"]["to"] == ["@foreman"]
    e = client.send(group_id=group, text="empty to", message_mode="send", to=[])["event"]
    assert e["data"]["to"] == ["@foreman"]
    client.group_settings_update(group_id=group, patch={"default_send_to": "all"})
    e = client.send(group_id=group, text="no to", message_mode="send")["event"]
    assert e["data"]["to"] == ["@all"]


def test_CCCS_5_2_2_mixed_human_and_agent_recipients_rejected_before_append(client, group):
    before = client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"]
    e = err(client.send, group_id=group, text="mixed", message_mode="send", to=["user", "p1"])
    assert e.code == "invalid_request" and e.details.get("reason") == "mixed_audience"
    e = err(client.send, group_id=group, text="mixed", message_mode="send", to=["@user", "@all"])
    assert e.code == "invalid_request"
    assert client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"] == before


def test_CCCS_5_1_user_token_compat(client, group):
    e = client.send(group_id=group, text="to human", message_mode="send", to=["@user"], by="p1")["event"]
    assert e["data"]["to"] == ["user"]


def test_CCCS_6_1_4_mail_to_user_rejected(client, group):
    e = err(client.send, group_id=group, text="m", message_mode="mail", to=["user"], by="p1")
    assert e.details.get("reason") == "mail_to_user"


def test_CCCS_6_1_6_request_reply_needs_concrete_recipients(client, group):
    for to in (["@all"], ["@peers"], ["@foreman"]):
        e = err(client.send, group_id=group, text="rr", message_mode="request_reply", to=to)
        assert e.details.get("reason") == "request_reply_needs_concrete_recipients"
    ev = client.send(group_id=group, text="rr", message_mode="request_reply", to=["p1", "p2"])["event"]
    st = client.call("ledger_statuses", {"group_id": group, "event_ids": [ev["id"]]})["statuses"][ev["id"]]
    assert set(st["obligation_status"]) == {"p1", "p2"}
    assert all(v["reply_requested"] and v["status"] == "requested" for v in st["obligation_status"].values())


def test_CCCS_6_1_6_request_reply_addressed_only_to_its_sender_is_refused(client, group, daemon):
    head = client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"]
    # A request whose only recipient is its sender would open no obligation at all.
    for by, to in (("lead", ["lead"]), ("user", ["@user"])):
        e = err(client.send, group_id=group, text="rr", message_mode="request_reply", to=to, by=by)
        assert e.code == "invalid_request" and e.details.get("reason") == "request_reply_needs_concrete_recipients"
    assert client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"] == head
    ev = client.send(group_id=group, text="rr", message_mode="request_reply", to=["lead", "p1"], by="lead")["event"]
    st = client.call("ledger_statuses", {"group_id": group, "event_ids": [ev["id"]]})["statuses"][ev["id"]]
    assert set(st["obligation_status"]) == {"p1"}
    ev = client.send(group_id=group, text="rr", message_mode="request_reply", to=["user"], by="p1")["event"]
    st = client.call("ledger_statuses", {"group_id": group, "event_ids": [ev["id"]]})["statuses"][ev["id"]]
    assert set(st["obligation_status"]) == {"user"}


def test_CCCS_6_1_2_insight_limit_1200_normalized_chars(client, group):
    ok = client.send(group_id=group, text="i", message_mode="send", to=["p1"], insight="é" * 1200)["event"]
    assert len(ok["data"]["insight"]) == 1200
    # Surrounding whitespace is not counted (normalized length).
    client.send(group_id=group, text="i", message_mode="send", to=["p1"], insight="  " + "x" * 1200 + "   ")
    e = err(client.send, group_id=group, text="i", message_mode="send", to=["p1"], insight="x" * 1201)
    assert e.code == "invalid_request" and e.details["field"] == "insight"


def test_CCCS_6_1_1_text_required_empty_only_with_attachments(client, group):
    e = err(client.call, "send", {"group_id": group, "message_mode": "send", "to": ["p1"]})
    assert e.details["field"] == "text"
    e = err(client.send, group_id=group, text="", message_mode="send", to=["p1"])
    assert e.details["field"] == "text"
    blob = client.call("blob_put", {"group_id": group, "content_b64": "aGVsbG8=", "name": "h.txt", "mime_type": "text/plain"})
    ev = client.send(group_id=group, text="", message_mode="send", to=["p1"], attachments=[{"path": blob["path"], "kind": "file"}])["event"]
    assert ev["data"]["attachments"][0]["sha256"] == blob["sha256"]


def test_CCCS_6_1_5_reply_cannot_be_request_reply(client, group):
    src = client.send(group_id=group, text="q", message_mode="request_reply", to=["p1"])["event"]
    e = err(client.call, "reply", {"group_id": group, "reply_to": src["id"], "text": "a", "message_mode": "request_reply", "by": "p1"})
    assert e.code == "invalid_request"


def test_CCCS_6_1_7_src_fields_both_or_none(client, group):
    e = err(client.call, "send", {"group_id": group, "text": "x", "message_mode": "send", "to": ["p1"], "src_group_id": "g_x"})
    assert e.code == "invalid_request"


def test_client_id_idempotency_returns_original_event(client, group):
    a = client.send(group_id=group, text="once", message_mode="send", to=["p1"], client_id="k-1")
    b = client.send(group_id=group, text="once again", message_mode="send", to=["p1"], client_id="k-1")
    assert b["duplicate"] is True and b["event"]["id"] == a["event"]["id"]
    c = client.send(group_id=group, text="other sender", message_mode="send", to=["p2"], client_id="k-1", by="p1")
    assert c["event"]["id"] != a["event"]["id"]


def test_CCCS_4_1_2_unknown_data_fields_and_refs_preserved(client, group):
    refs = [{"kind": "url", "url": "https://example.com", "zz_extra": {"a": 1}},
            {"kind": "presentation_ref", "slot_id": "s1", "snapshot": {"path": "blobs/x"}, "unknown": True},
            {"kind": "task_ref", "task_id": "T-1", "status": "active"}]
    ev = client.send(group_id=group, text="refs", message_mode="send", to=["p1"], refs=refs)["event"]
    got = client.call("ledger_window", {"group_id": group, "center": ev["id"], "kind": "all", "before": 0, "after": 0})["events"][0]
    assert got["data"]["refs"] == refs
    e = err(client.send, group_id=group, text="bad", message_mode="send", to=["p1"], refs=[{"kind": "task_ref"}])
    assert e.code == "invalid_request"
    # CCCS-8.2-5: a presentation_ref names its slot
    e = err(client.send, group_id=group, text="bad", message_mode="send", to=["p1"], refs=[{"kind": "presentation_ref"}])
    assert e.code == "invalid_request"


def test_CCCS_4_1_1_unknown_kinds_stored_and_returned_untouched(client, group):
    data = {"anything": [1, {"deep": None}], "s": "ü"}
    ev = client.call("append_event", {"group_id": group, "kind": "x.acme.custom", "data": data})["event"]
    tail = client.call("ledger_tail", {"group_id": group, "limit": 1})["events"][0]
    assert tail["id"] == ev["id"] and tail["kind"] == "x.acme.custom" and tail["data"] == data


def test_CCCS_12_4_client_authored_runtime_delivery_rejected(client, group):
    e = err(client.call, "append_event", {"group_id": group, "kind": "runtime.delivery", "data": {"state": "accepted"}})
    assert e.code == "permission_denied"


def test_namespaces_of_convenes_own_faces_are_not_writable_through_append_event(client, group):
    # A Cowchat vote or an evidence receipt appended by an IPC client would read as a record
    # of the Cowchat face or of the tool gate: refused, and nothing is appended.
    before = client.call("ledger_tail", {"group_id": group, "limit": 1})["events"]
    for kind in ("x.cowchat.vote.created", "x.cowchat.task.assigned", "x.convene.evidence.receipt"):
        e = err(client.call, "append_event", {"group_id": group, "kind": kind, "data": {"vote_id": "v"}})
        assert e.code == "permission_denied", kind
    assert client.call("ledger_tail", {"group_id": group, "limit": 1})["events"] == before
    # Other extension namespaces stay open (CCCS-4-1).
    assert client.call("append_event", {"group_id": group, "kind": "x.cowchatter.note", "data": {}})["event"]


def test_groupx_broker_kinds_are_not_writable_through_append_event(client, group):
    # GroupX turns and room records are the broker's own (like runtime.delivery): a client's
    # x.groupx.turn.completed would read as a turn the broker finished.
    before = client.call("ledger_tail", {"group_id": group, "limit": 1})["events"]
    for kind in ("x.groupx.turn.queued", "x.groupx.turn.completed", "x.groupx.room.settings"):
        e = err(client.call, "append_event", {"group_id": group, "kind": kind, "data": {"groupx": {}, "body": {}}})
        assert e.code == "permission_denied" and e.details.get("kind") == kind, kind
    assert client.call("ledger_tail", {"group_id": group, "limit": 1})["events"] == before
    assert client.call("append_event", {"group_id": group, "kind": "x.groupxy.note", "data": {}})["event"]


def test_CCCS_5_1_3_internal_assistant_only_by_explicit_id(client, group):
    client.actor_add(group_id=group, actor_id="voice", runtime="none")
    client.actor_update(group_id=group, actor_id="voice", patch={"internal": True})
    ev = client.send(group_id=group, text="mail all", message_mode="mail", to=["@all"])["event"]
    assert ev["id"] not in [m["id"] for m in client.inbox_peek(group_id=group, actor_id="voice")["messages"]]
    assert ev["id"] in [m["id"] for m in client.inbox_peek(group_id=group, actor_id="p1")["messages"]]
    ev2 = client.send(group_id=group, text="to voice", message_mode="mail", to=["voice"])["event"]
    assert ev2["id"] in [m["id"] for m in client.inbox_peek(group_id=group, actor_id="voice")["messages"]]


def test_CCCS_7_1_system_notify_open_kind_and_im_visibility_fail_closed(client, group):
    r = client.system_notify(group_id=group, kind="brand_new_kind", message="hi")
    assert r["event"]["data"]["kind"] == "brand_new_kind" and r["im_eligible"] is False
    assert client.system_notify(group_id=group, message="pub", im_visibility="public")["im_eligible"] is True
    assert client.system_notify(group_id=group, message="bogus", im_visibility="PUBLIC!")["im_eligible"] is False
    r = client.system_notify(group_id=group, message="targeted", im_visibility="public", target_actor_id="p1")
    assert r["im_eligible"] is False


def test_CCCS_7_1_2_malformed_notify_target_is_refused_not_published(client, group, daemon):
    head = client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"]
    # A target that is not an actor id string would read as "no target" and go public.
    for bad in ({"target_actor_id": 5}, {"target_actor_id": ["p1"]}, {"target_actor_id": {"id": "p1"}},
                {"title": {"x": 1}}, {"message": 7}, {"related_event_id": 3}):
        r = daemon.raw({"v": 1, "op": "system_notify", "args": {"group_id": group, "kind": "k", "im_visibility": "public", **bad}})
        assert r["ok"] is False and r["error"]["code"] == "invalid_request", bad
        assert r["error"]["details"]["field"] == next(iter(bad))
    assert client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"] == head


def test_CCCS_6_5_reaction(client, group):
    ev = client.send(group_id=group, text="react to me", message_mode="send", to=["p1"])["event"]
    r = client.call("reaction", {"group_id": group, "event_id": ev["id"], "emoji": "👍", "by": "p1"})["event"]
    assert r["kind"] == "chat.reaction" and r["data"] == {"event_id": ev["id"], "actor_id": "p1", "emoji": "👍"}


def test_attachment_blob_resolves_to_bytes_and_limits(client, group, daemon):
    import base64
    payload = b"\x00\x01binary" * 100
    b = client.call("blob_put", {"group_id": group, "content_b64": base64.b64encode(payload).decode(), "name": "bin"})
    got = client.call("blob_get", {"group_id": group, "path": b["path"]})
    assert base64.b64decode(got["content_b64"]) == payload
    e = err(client.send, group_id=group, text="x", message_mode="send", to=["p1"], attachments=[{"path": "blobs/" + "0" * 64}])
    assert e.details.get("reason") == "invalid_attachments"
    big = base64.b64encode(b"x" * (3 * 1024 * 1024 + 1)).decode()
    # Over the SDK's own 2 MB request cap, so sent raw.
    r = daemon.raw({"v": 1, "op": "blob_put", "args": {"group_id": group, "content_b64": big}})
    assert r["ok"] is False and r["error"]["code"] == "limit_exceeded"


def test_message_text_limit(client, group):
    e = err(client.send, group_id=group, text="x" * (256 * 1024 + 1), message_mode="send", to=["p1"])
    assert e.code == "limit_exceeded"
