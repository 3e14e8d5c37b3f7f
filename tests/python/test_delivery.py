"""runtime.delivery (§6.4) with real transports: a command runtime and an attached session."""
import json
import socket
import time

import pytest
from cccc_sdk import CCCCClient, DaemonAPIError


def deliveries(client, gid, src_id):
    evs = client.call("ledger_search", {"group_id": gid, "kinds": ["runtime.delivery"], "limit": 1000})["events"]
    return [e["data"] for e in evs if e["data"]["source_event_id"] == src_id]


def wait_state(client, gid, src_id, actor, states, timeout=10.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = client.call("ledger_statuses", {"group_id": gid, "event_ids": [src_id]})["statuses"][src_id]
        s = st["obligation_status"].get(actor, {}).get("delivery_state")
        if s in states:
            return s
        time.sleep(0.02)
    raise AssertionError(f"delivery to {actor} never reached {states}")


def add_cmd_actor(client, gid, actor, cmd):
    client.actor_add(group_id=gid, actor_id=actor, runtime="command", command=cmd)


def test_CCCS_6_4_2_command_transport_claimed_then_accepted(client, group, tmp_path):
    out = tmp_path / "got.ndjson"
    add_cmd_actor(client, group, "bot", ["sh", "-c", f"cat >> {out}"])
    src = client.send(group_id=group, text="run it", message_mode="send", to=["bot"])["event"]
    assert wait_state(client, group, src["id"], "bot", {"accepted"}) == "accepted"
    ds = deliveries(client, group, src["id"])
    assert [d["state"] for d in ds] == ["claimed", "accepted"]
    # CCCS-6.4-1: deterministic id from (source, actor generation, actor)
    assert ds[0]["delivery_id"] == ds[1]["delivery_id"] == f"delivery:bot:1:{src['id']}"
    payload = json.loads(out.read_text().splitlines()[0])
    assert payload["delivery_id"] == ds[0]["delivery_id"] and payload["event"]["id"] == src["id"]


def test_CCCS_6_4_1_readded_actor_gets_new_generation(client, group, tmp_path):
    add_cmd_actor(client, group, "bot", ["true"])
    client.actor_remove(group_id=group, actor_id="bot")
    add_cmd_actor(client, group, "bot", ["true"])
    src = client.send(group_id=group, text="gen", message_mode="send", to=["bot"])["event"]
    wait_state(client, group, src["id"], "bot", {"accepted"})
    assert deliveries(client, group, src["id"])[0]["delivery_id"] == f"delivery:bot:2:{src['id']}"


def test_CCCS_6_4_5_no_automatic_retry_after_ambiguous_manual_needs_force(client, group):
    add_cmd_actor(client, group, "bot", ["sh", "-c", "cat >/dev/null; exit 3"])
    src = client.send(group_id=group, text="x", message_mode="send", to=["bot"])["event"]
    assert wait_state(client, group, src["id"], "bot", {"ambiguous"}) == "ambiguous"
    time.sleep(0.3)
    assert [d["state"] for d in deliveries(client, group, src["id"])] == ["claimed", "ambiguous"]
    with pytest.raises(DaemonAPIError) as ei:
        client.message_deliver(group_id=group, source_event_id=src["id"], actor_ids=["bot"])
    assert ei.value.code == "delivery_conflict"
    r = client.message_deliver(group_id=group, source_event_id=src["id"], actor_ids=["bot"], force_ambiguous=True)
    assert r["delivery_state"] == "claimed" and r["deliveries"][0]["delivery_id"] == f"delivery:bot:1:{src['id']}"


def test_failed_handoff_and_explicit_redelivery_without_second_message(client, group):
    add_cmd_actor(client, group, "bot", ["/nonexistent/convene-test-binary"])
    src = client.send(group_id=group, text="x", message_mode="send", to=["bot"])["event"]
    assert wait_state(client, group, src["id"], "bot", {"failed"}) == "failed"
    client.actor_update(group_id=group, actor_id="bot", patch={"command": ["true"]})
    before = client.call("ledger_search", {"group_id": group, "kind": "chat", "limit": 1000})["count"]
    client.message_deliver(group_id=group, source_event_id=src["id"], actor_ids=["bot"])
    wait_state(client, group, src["id"], "bot", {"accepted"})
    assert [d["state"] for d in deliveries(client, group, src["id"])] == ["claimed", "failed", "claimed", "accepted"]
    # CCCS-6.4-7: no second chat.message
    assert client.call("ledger_search", {"group_id": group, "kind": "chat", "limit": 1000})["count"] == before


def test_CCCS_6_4_7_manual_delivery_of_mail(client, group, tmp_path):
    out = tmp_path / "m"
    add_cmd_actor(client, group, "bot", ["sh", "-c", f"cat > {out}"])
    src = client.send(group_id=group, text="mail me", message_mode="mail", to=["bot"])["event"]
    time.sleep(0.2)
    assert deliveries(client, group, src["id"]) == []
    client.message_deliver(group_id=group, source_event_id=src["id"], actor_ids=["bot"])
    wait_state(client, group, src["id"], "bot", {"accepted"})
    with pytest.raises(DaemonAPIError) as ei:
        client.message_deliver(group_id=group, source_event_id=src["id"], actor_ids=["p1"])
    assert ei.value.details.get("reason") == "event_not_for_actor"
    with pytest.raises(DaemonAPIError) as ei:
        client.message_deliver(group_id=group, source_event_id=src["id"], actor_ids=["bot"], by="p2")
    assert ei.value.code == "permission_denied"


def test_CCCS_6_4_3_concurrent_claimant_does_not_retry_active_attempt(client, group):
    add_cmd_actor(client, group, "bot", ["sh", "-c", "cat >/dev/null; sleep 1.5"])
    src = client.send(group_id=group, text="slow", message_mode="send", to=["bot"])["event"]
    wait_state(client, group, src["id"], "bot", {"claimed"})
    with pytest.raises(DaemonAPIError) as ei:
        client.message_deliver(group_id=group, source_event_id=src["id"], actor_ids=["bot"])
    assert ei.value.code == "delivery_conflict" and ei.value.details["state"] == "claimed"
    wait_state(client, group, src["id"], "bot", {"accepted"})
    assert [d["state"] for d in deliveries(client, group, src["id"])] == ["claimed", "accepted"]


def test_session_transport_hands_payload_to_attached_actor(client, group, daemon):
    client.actor_add(group_id=group, actor_id="live", runtime="session")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(str(daemon.sock))
    s.sendall((json.dumps({"v": 1, "op": "runtime_attach", "args": {"group_id": group, "actor_id": "live"}}) + "\n").encode())
    f = s.makefile("rb")
    assert json.loads(f.readline())["ok"] is True
    src = client.send(group_id=group, text="to the live session", message_mode="request_reply", to=["live"])["event"]
    while True:
        item = json.loads(f.readline())
        if item["t"] == "delivery":
            break
    assert item["event"]["id"] == src["id"] and item["delivery_id"] == f"delivery:live:1:{src['id']}"
    assert wait_state(client, group, src["id"], "live", {"accepted"}) == "accepted"
    s.close()


def test_session_transport_without_session_fails_cleanly(client, group):
    client.actor_add(group_id=group, actor_id="offline", runtime="session")
    src = client.send(group_id=group, text="nobody home", message_mode="send", to=["offline"])["event"]
    assert wait_state(client, group, src["id"], "offline", {"failed"}) == "failed"
    assert deliveries(client, group, src["id"])[-1]["reason"] == "no session attached"


def test_CCCS_6_4_4_claimed_left_by_killed_daemon_settles_to_ambiguous(home):
    from conftest import Daemon
    d = Daemon(home).start()
    c = CCCCClient(cccc_home=str(home))
    gid = c.group_create(title="crash")["group_id"]
    c.actor_add(group_id=gid, actor_id="bot", runtime="command", command=["sh", "-c", "sleep 30"])
    src = c.send(group_id=gid, text="never finishes", message_mode="send", to=["bot"])["event"]
    wait_state(c, gid, src["id"], "bot", {"claimed"})
    d.kill9()
    d2 = Daemon(home).start()
    try:
        ds = deliveries(c, gid, src["id"])
        assert [x["state"] for x in ds] == ["claimed", "ambiguous"]
        assert "cannot be proven" in ds[-1]["reason"]
        # and it is not retried automatically
        time.sleep(0.3)
        assert len(deliveries(c, gid, src["id"])) == 2
    finally:
        d2.stop()


def test_CCCS_6_4_3_message_deliver_claims_each_actor_once_and_nothing_when_one_is_in_progress(client, group):
    add_cmd_actor(client, group, "slow", ["sh", "-c", "cat >/dev/null; sleep 5"])
    add_cmd_actor(client, group, "fast", ["sh", "-c", "cat >/dev/null"])
    src = client.send(group_id=group, text="mail both", message_mode="mail", to=["slow", "fast"])["event"]
    client.message_deliver(group_id=group, source_event_id=src["id"], actor_ids=["slow"])
    # CCCS-6.4-3: refused as a whole, so the caller is not told "failed" about a handoff to
    # `fast` that did happen (and would repeat on retry).
    with pytest.raises(DaemonAPIError) as ei:
        client.message_deliver(group_id=group, source_event_id=src["id"], actor_ids=["fast", "slow"])
    assert ei.value.code == "delivery_conflict"
    assert [d["actor_id"] for d in deliveries(client, group, src["id"])] == ["slow"]
    # An actor listed twice is one attempt, not an attempt and a conflict.
    r = client.message_deliver(group_id=group, source_event_id=src["id"], actor_ids=["fast", "fast"])
    assert r["actor_ids"] == ["fast"] and len(r["deliveries"]) == 1
    wait_state(client, group, src["id"], "fast", {"accepted"})
    assert [d["state"] for d in deliveries(client, group, src["id"]) if d["actor_id"] == "fast"] == ["claimed", "accepted"]


def test_CCCS_6_4_1_statuses_report_the_readded_actors_own_delivery(client, group):
    add_cmd_actor(client, group, "bot", ["sh", "-c", "cat >/dev/null; exit 3"])
    src = client.send(group_id=group, text="x", message_mode="send", to=["bot"])["event"]
    assert wait_state(client, group, src["id"], "bot", {"ambiguous"}) == "ambiguous"
    client.actor_remove(group_id=group, actor_id="bot")
    add_cmd_actor(client, group, "bot", ["sh", "-c", "cat >/dev/null"])
    r = client.message_deliver(group_id=group, source_event_id=src["id"], actor_ids=["bot"])
    assert r["deliveries"][0]["delivery_id"] == f"delivery:bot:2:{src['id']}"
    deadline = time.time() + 10
    while [d["state"] for d in deliveries(client, group, src["id"])][-1:] != ["accepted"] and time.time() < deadline:
        time.sleep(0.02)
    # The new generation's attempt was accepted; the old generation's ambiguous one is history.
    st = client.call("ledger_statuses", {"group_id": group, "event_ids": [src["id"]]})["statuses"][src["id"]]
    assert st["obligation_status"]["bot"]["delivery_state"] == "accepted"
