"""The daemon's tool gate: a CCS receipt for every tool-call decision, in the group ledger."""
import json
import subprocess
import time

import pytest
from cccc_sdk import DaemonAPIError

from conftest import convene_bin


def intake(tool, params, trace):
    return {"intake_version": "1.3", "agent_id": "lead", "tool": tool, "params": params,
            "timestamp": time.time(), "trace_id": trace}


def test_gate_allows_denies_and_records_receipts_in_ledger_order(client, group, daemon, tmp_path):
    before = client.send(group_id=group, text="about to fetch", message_mode="send", to=["lead"])["event"]
    ok = client.call("tool_gate", {"group_id": group, "intake": intake("http_get", {"url": "https://example.com/a"}, "t-1")})
    assert ok["permitted"] is True and ok["verdict"] == "allow"
    bad = client.call("tool_gate", {"group_id": group, "intake": intake("http_get", {"url": "http://169.254.169.254/latest/meta-data/"}, "t-2")})
    assert bad["permitted"] is False and bad["verdict"] == "deny"
    after = client.send(group_id=group, text="done", message_mode="send", to=["lead"])["event"]
    evs = client.call("ledger_search", {"group_id": group, "after": before["id"], "limit": 100})["events"]
    ours = [e for e in evs if e["kind"] != "runtime.delivery"]
    assert [e["kind"] for e in ours] == ["x.convene.evidence.receipt", "x.convene.evidence.receipt", "chat.message"]
    assert ours[-1]["id"] == after["id"]
    rec = [e for e in evs if e["kind"] == "x.convene.evidence.receipt"]
    assert rec[0]["by"] == "system" and rec[0]["data"]["trace_id"] == "t-1"
    assert rec[1]["data"]["verdict"] == "deny"
    # the receipt verifies offline with the daemon's key and the exact request
    r = tmp_path / "r.json"
    r.write_text(json.dumps(ok["receipt"]))
    i = tmp_path / "i.json"
    i.write_text(json.dumps(intake("http_get", {"url": "https://example.com/a"}, "t-1")))
    p = subprocess.run([convene_bin(), "evidence", "verify", "--receipt", str(r), "--key", str(daemon.home / "evidence" / "key.json"),
                        "--audience", ok["receipt"]["audience"], "--tool", "http_get",
                        "--params", str(_params(tmp_path, {"url": "https://example.com/a"}))], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    # and fails for other parameters (binding)
    p = subprocess.run([convene_bin(), "evidence", "verify", "--receipt", str(r), "--key", str(daemon.home / "evidence" / "key.json"),
                        "--audience", ok["receipt"]["audience"], "--tool", "http_get",
                        "--params", str(_params(tmp_path, {"url": "https://evil.example/"}))], capture_output=True, text=True)
    assert p.returncode != 0 and "BINDING_MISMATCH" in (p.stdout + p.stderr)


def _params(tmp_path, params):
    f = tmp_path / f"p{abs(hash(json.dumps(params)))}.json"
    f.write_text(json.dumps(params))
    return f


def test_gate_is_fail_closed_on_bad_intake(client, group):
    head = client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"]
    with pytest.raises(DaemonAPIError) as ei:
        client.call("tool_gate", {"group_id": group, "intake": {"intake_version": "9.9", "tool": "x"}})
    assert ei.value.code == "invalid_request" and ei.value.details["reason"] == "evidence_intake_failed"
    assert client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"] == head


def test_gate_dual_signs_after_a_rotation_is_announced_on_its_key(client, group, daemon, tmp_path):
    key = daemon.home / "evidence" / "key.json"
    old = json.loads(key.read_text())
    gate = lambda trace: client.call("tool_gate", {"group_id": group, "intake": intake(
        "http_get", {"url": "https://example.com/r"}, trace)})
    first = gate("t-0")["receipt"]
    assert "cosignature" not in first
    a = subprocess.run([convene_bin(), "evidence", "rotate", "announce", "--key", str(key), "--ttl", "60"],
                       capture_output=True, text=True)
    assert a.returncode == 0, a.stdout + a.stderr
    new = json.loads(a.stdout)["next"]
    # The running daemon follows its key file: a later tool call is dual-signed, and its
    # sequence continues.
    deadline = time.time() + 10
    n = 0
    while "cosignature" not in (rc := gate(f"t-{n}")["receipt"]):
        assert time.time() < deadline, "the running daemon never picked up the announced key"
        n += 1
        time.sleep(0.1)
    assert rc["cosignature"]["signing_key_fingerprint"] == new["fingerprint"]
    assert rc["sequence"] > first["sequence"]
    # And after a restart (the key file is read at start) too.
    daemon.stop()
    daemon.start()
    ok = gate("t-r")
    assert ok["permitted"] is True
    rc = ok["receipt"]
    assert rc["cosignature"]["signing_key_fingerprint"] == new["fingerprint"]
    r = tmp_path / "r.json"
    r.write_text(json.dumps(rc))
    params = _params(tmp_path, {"url": "https://example.com/r"})
    # A consumer that pinned only the incoming key accepts it.
    trust = tmp_path / "trust.json"
    enroll = subprocess.run([convene_bin(), "evidence", "trust", "enroll", "--trust", str(trust), "--issuer", rc["issuer"],
                             "--public-key", new["public_key"], "--fingerprint", new["fingerprint"]],
                            capture_output=True, text=True)
    assert enroll.returncode == 0, enroll.stdout + enroll.stderr
    for pin in (["--trust", str(trust)], ["--key", str(key)]):
        p = subprocess.run([convene_bin(), "evidence", "verify", "--receipt", str(r), *pin,
                            "--audience", rc["audience"], "--tool", "http_get", "--params", str(params)],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
    assert json.loads(key.read_text())["fingerprint"] == old["fingerprint"]


def test_gate_refusal_carries_the_ccs_error_object_ccs_3_4_1(client, group):
    head = client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"]
    cases = [
        (intake("http_get", {"q": "x" * (140 * 1024)}, "t-big"), "INTAKE_OVERFLOW"),
        # 10**20 + 1 parses to the same double as 10**20: no receipt may bind it.
        (intake("pay", {"amount": 10**20 + 1}, "t-int"), "INTAKE_MALFORMED"),
        ({**intake("http_get", {}, "t-tz"), "timestamp": "2026-01-01T09:00:00+09:00"}, "INTAKE_MALFORMED"),
        ({**intake("http_get", {}, "t-ver"), "intake_version": "1.2"}, "INTAKE_VERSION_UNSUPPORTED"),
    ]
    for bad, code in cases:
        with pytest.raises(DaemonAPIError) as ei:
            client.call("tool_gate", {"group_id": group, "intake": bad})
        ccs = ei.value.details["ccs"]
        assert ccs["error_code"] == code, ccs
        assert set(ccs) == {"error_code", "error_message", "retry_after", "trace_id"}
        assert "receipt" not in ccs
    assert client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"] == head


def test_gate_is_fail_closed_when_the_evidence_store_cannot_be_written_ccs_11_1_4(client, group, daemon):
    """Regression: a receipt that cannot be made durable is no permission, and nothing is
    appended to the ledger; the refusal does not leak the store's error text or path."""
    import sqlite3
    ok = client.call("tool_gate", {"group_id": group, "intake": intake("http_get", {"url": "https://example.com/"}, "t-s1")})
    db = daemon.home / "evidence" / "receipts.sqlite"
    with sqlite3.connect(db) as c:
        (body,) = c.execute("SELECT body FROM receipts WHERE trace_id='t-s1'").fetchone()
        # The ledger's receipt is the stored one, byte for byte after parsing.
        assert json.loads(body) == ok["receipt"]
        c.execute("CREATE TRIGGER refuse BEFORE INSERT ON receipts "
                  "BEGIN SELECT RAISE(ABORT, 'disk full at /secret/evidence'); END")
    head = client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"]
    with pytest.raises(DaemonAPIError) as ei:
        client.call("tool_gate", {"group_id": group, "intake": intake("http_get", {"url": "https://example.com/"}, "t-s2")})
    assert ei.value.details["reason"] == "evidence_intake_failed"
    assert ei.value.details["ccs"]["error_code"] == "INTAKE_FAILED"
    assert "secret" not in json.dumps(ei.value.details) + str(ei.value)
    assert client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"] == head


def test_tool_gate_is_advertised_in_capabilities(client):
    """ping.capabilities lists every op the IPC face serves (CCCS §10.3 discovery): an SDK
    that adapts to capabilities must find the gate it is meant to call before every tool."""
    caps = client.ping()["capabilities"]
    assert caps.get("tool_gate") is True and caps.get("runtime_attach") is True
