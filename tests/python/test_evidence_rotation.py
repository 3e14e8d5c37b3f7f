"""§7.3 key rotation through the CLI: `evidence rotate announce|cutover|retire|status`,
real processes and JSON files. Exit codes: 0 step taken, 1 refused (wrong phase or too
early), 2 usage.

Command prefix as in test_ccs_conformance.py:
  CONVENE_EVIDENCE_CMD  shell-split prefix, e.g. "convene evidence"
  CONVENE_EVIDENCE_BIN  binary taking "evidence ..." (default: target/debug/convene-evidence)
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

import pytest

from conftest import evidence_prefix

PREFIX = evidence_prefix()
pytestmark = pytest.mark.skipif(
    shutil.which(PREFIX[0]) is None and not Path(PREFIX[0]).exists() and not os.environ.get("CI"),
    reason=f"evidence binary not built: {PREFIX[0]} (cargo build -p convene-evidence)",
)
PARAMS = {"query": "weather in Tokyo"}


def ev(*args: str, check: int | None = 0) -> subprocess.CompletedProcess:
    p = subprocess.run([*PREFIX, *args], capture_output=True, text=True, timeout=60)
    if check is not None:
        assert p.returncode == check, f"{args}: rc={p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def out(*args: str, check: int = 0) -> dict:
    return json.loads(ev(*args, check=check).stdout)


def write(p: Path, v) -> Path:
    p.write_text(json.dumps(v))
    return p


def issue(w: Path, key: Path, name: str, *extra: str, check: int = 0) -> Path:
    intake = write(w / f"{name}-in.json", {"intake_version": "1.3", "agent_id": "agent",
                                            "tool": "search_web", "params": PARAMS,
                                            "timestamp": int(time.time()), "trace_id": name})
    r = w / f"{name}.json"
    ev("issue", "--key", str(key), "--intake", str(intake), "--out", str(r), *extra, check=check)
    return r


def verify(w: Path, receipt: Path, *trust: str) -> subprocess.CompletedProcess:
    """Six-step verification just after issuance (--now), so short lifetimes stay fresh."""
    r = json.loads(receipt.read_text())
    params = write(w / "params.json", PARAMS)
    return ev("verify", "--receipt", str(receipt), *trust, "--audience",
              "https://convene.local/executor", "--tool", "search_web", "--params", str(params),
              "--now", str(r["issued_at"] + 0.5), check=None)


def trust_with(w: Path, name: str, key: dict) -> list[str]:
    t = w / f"trust-{name}.json"
    ev("trust", "enroll", "--trust", str(t), "--issuer", "https://convene.local/ccs/v1",
       "--public-key", key["public_key"], "--fingerprint", key["fingerprint"])
    return ["--trust", str(t)]


def wait_until(t: float) -> None:
    time.sleep(max(0.0, t - time.time()) + 0.05)


def test_rotation_refusals_and_exit_codes(tmp_path):
    key = tmp_path / "k.json"
    ev("keygen", "--out", str(key))
    st = out("rotate", "status", "--key", str(key))
    assert st["phase"] is None and st["manifest"]["signing_key_fingerprint"] == st["fingerprint"]
    # Nothing announced: cutover and retire are refused (exit 1) and change nothing.
    before = key.read_text()
    assert "refused" in out("rotate", "cutover", "--key", str(key), check=1)
    assert "refused" in out("rotate", "retire", "--key", str(key), check=1)
    assert key.read_text() == before
    ev("rotate", "bogus", "--key", str(key), check=2)
    ev("rotate", "announce", "--key", str(key), "--ttl", "soon", check=2)
    # A lifetime that is not a positive number would make the 2x overlap check always pass
    # (NaN compares false), so cutover could follow at once.
    for bad in ("nan", "inf", "-3600", "0"):
        ev("rotate", "announce", "--key", str(key), "--ttl", bad, check=2)
    assert key.read_text() == before
    # Announced for 1 h receipts: cutover is refused until 2 h of dual-signing (CCS-7.3-2).
    a = out("rotate", "announce", "--key", str(key), "--ttl", "3600")
    assert a["cutover_not_before"] == pytest.approx(a["dual_sign_since"] + 7200)
    refused = out("rotate", "cutover", "--key", str(key), check=1)
    assert refused["not_before"] == pytest.approx(a["cutover_not_before"])
    assert refused["phase"] == "dual-sign"
    # One rotation at a time; retire needs a cutover first.
    out("rotate", "announce", "--key", str(key), check=1)
    out("rotate", "retire", "--key", str(key), check=1)
    # Receipts may not outlive what the overlap was sized for.
    issue(tmp_path, key, "long", "--ttl", "7200", check=2)


def test_announce_dual_sign_cutover_retire(tmp_path):
    key = tmp_path / "k.json"
    old = json.loads(ev("keygen", "--out", str(key)).stdout)
    plain_manifest = out("manifest", "--key", str(key))
    assert "next_signing_key" not in plain_manifest

    # Announce: the signed manifest names the incoming key; the file stays owner-only.
    m = tmp_path / "m.json"
    a = out("rotate", "announce", "--key", str(key), "--ttl", "1", "--manifest", str(m))
    new = a["next"]
    assert a["phase"] == "dual-sign" and a["fingerprint"] == old["fingerprint"]
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    announced = json.loads(m.read_text())["next_signing_key"]
    assert announced["signing_key_fingerprint"] == new["fingerprint"]
    assert announced["public_key"] == new["public_key"]
    assert announced["effective_at"] >= a["dual_sign_since"] + 2
    assert out("manifest", "--key", str(key))["next_signing_key"] == announced

    # Dual-sign: primary signature and HMAC by the old key, cosignature and its HMAC by the new.
    overlap = issue(tmp_path, key, "overlap")
    r = json.loads(overlap.read_text())
    assert r["cosignature"]["signing_key_fingerprint"] == new["fingerprint"]
    assert len(r["cosignature"]["receipt"]) == 32
    assert r["expires_at"] - r["issued_at"] == 1
    only_old, only_new = trust_with(tmp_path, "old", old), trust_with(tmp_path, "new", new)
    for trust in (["--key", str(key)], only_old, only_new):
        assert verify(tmp_path, overlap, *trust).returncode == 0, trust
    # A broken cosignature is refused even by a consumer that also pinned the old key.
    trust_with(tmp_path, "both", old)
    both = trust_with(tmp_path, "both", new)
    bad = dict(r, cosignature=dict(r["cosignature"], signature="00" * 64))
    p = verify(tmp_path, write(tmp_path / "bad.json", bad), *both)
    assert p.returncode == 1
    assert json.loads(p.stdout)["failure"]["failure_category"] == "SIGNATURE_INVALID"

    # Cutover once 2 x lifetime of dual-signing has passed: the file's key is the new one.
    wait_until(a["cutover_not_before"])
    c = out("rotate", "cutover", "--key", str(key))
    assert c["phase"] == "cut-over" and c["fingerprint"] == new["fingerprint"]
    assert c["previous"]["fingerprint"] == old["fingerprint"]
    assert c["manifest"]["signing_key_fingerprint"] == new["fingerprint"]
    assert "next_signing_key" not in c["manifest"]
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    after = issue(tmp_path, key, "after")
    assert "cosignature" not in json.loads(after.read_text())
    assert verify(tmp_path, after, *only_new).returncode == 0
    rejected = verify(tmp_path, after, *only_old)
    assert rejected.returncode == 1
    assert json.loads(rejected.stdout)["failure"]["failure_category"] == "SIGNATURE_INVALID"
    # The overlap receipt still verifies with the new key file alone: its cosignature HMAC
    # is by the new shared secret (dual HMAC).
    assert verify(tmp_path, overlap, "--key", str(key)).returncode == 0
    no_hmac = dict(r, cosignature={k: v for k, v in r["cosignature"].items() if k != "receipt"})
    assert verify(tmp_path, write(tmp_path / "nohmac.json", no_hmac), "--key", str(key)).returncode == 1

    # Retire once every old-key receipt has expired (cutover + lifetime).
    wait_until(c["retire_not_before"])
    done = out("rotate", "retire", "--key", str(key))
    assert done["phase"] is None and done["fingerprint"] == new["fingerprint"]
    assert "previous" not in done
    assert out("rotate", "status", "--key", str(key))["phase"] is None

    # Consumer side: retiring the old key in a trust file ends its acceptance.
    assert verify(tmp_path, overlap, *only_old).returncode == 0
    ev("trust", "retire", "--trust", only_old[1], "--fingerprint", old["fingerprint"])
    assert verify(tmp_path, overlap, *only_old).returncode == 1
    assert out("trust", "retire", "--trust", only_old[1], "--fingerprint", "0" * 16, check=1)["changed"] is False
    # Revocation is final: a revoked key cannot be retired (and so never re-enrolled).
    ev("trust", "revoke", "--trust", only_new[1], "--fingerprint", new["fingerprint"])
    assert out("trust", "retire", "--trust", only_new[1], "--fingerprint", new["fingerprint"], check=1)["changed"] is False
    assert json.loads(Path(only_new[1]).read_text())["keys"][new["fingerprint"]]["state"] == "revoked"


class VerifierProc:
    """`verifier serve` as a real process on a Unix socket (JSON lines)."""

    def __init__(self, w: Path, key: Path, *extra: str):
        self.sock = w / "v.sock"
        self.log = open(w / "verifier.log", "w+")
        self.p = subprocess.Popen([PREFIX[0], "verifier", "serve", "--key", str(key),
                                   "--socket", str(self.sock), *extra],
                                  stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 20
        while not self.sock.exists():
            assert self.p.poll() is None, "verifier exited"
            assert time.time() < deadline, "verifier socket never appeared"
            time.sleep(0.02)

    def call(self, req: dict) -> dict:
        import socket
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.sock))
            s.sendall((json.dumps(req) + "\n").encode())
            return json.loads(s.makefile().readline())

    def public(self) -> dict:
        return self.call({"op": "public"})

    def issue(self, trace: str) -> dict:
        got = self.call({"op": "issue", "intake": {
            "intake_version": "1.3", "agent_id": "agent", "tool": "search_web",
            "params": PARAMS, "timestamp": time.time(), "trace_id": trace}})
        assert got["ok"], got
        return got["bundle"]["receipt"]

    def until(self, pred, what: str) -> dict:
        deadline = time.time() + 10
        while True:
            pub = self.public()
            if pred(pub):
                return pub
            assert time.time() < deadline, f"running verifier never showed {what}: {pub}"
            time.sleep(0.05)

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def close(self):
        self.p.kill()
        self.p.wait()
        self.log.close()


def test_running_verifier_follows_rotation_steps_without_a_restart(tmp_path):
    key = tmp_path / "k.json"
    old = json.loads(ev("keygen", "--out", str(key)).stdout)
    v = VerifierProc(tmp_path, key, "--ttl", "1")
    try:
        assert v.public()["fingerprint"] == old["fingerprint"]
        first = v.issue("before")
        assert "cosignature" not in first

        # Announce beside the running verifier: it starts dual-signing, and its manifest
        # names the incoming key, without a restart.
        a = out("rotate", "announce", "--key", str(key), "--ttl", "1")
        new = a["next"]
        v.until(lambda p: "next_signing_key" in p["manifest"], "the announced key")
        during = v.issue("during")
        assert during["cosignature"]["signing_key_fingerprint"] == new["fingerprint"]
        assert during["sequence"] > first["sequence"]  # the sequence never goes back

        # Cutover: the running verifier signs with the new key alone.
        wait_until(a["cutover_not_before"])
        out("rotate", "cutover", "--key", str(key))
        v.until(lambda p: p["fingerprint"] == new["fingerprint"], "the new key")
        after = v.issue("after")
        assert "cosignature" not in after and after["sequence"] > during["sequence"]
        only_new, only_old = trust_with(tmp_path, "new", new), trust_with(tmp_path, "old", old)
        r = write(tmp_path / "after.json", after)
        assert verify(tmp_path, r, *only_new).returncode == 0
        assert verify(tmp_path, r, *only_old).returncode == 1

        # A key file that does not load keeps the current key serving (and says so). The
        # file is looked at on use, at most every 250 ms.
        key.write_text("{not json")
        deadline = time.time() + 10
        while "was not loaded" not in v.stderr():
            assert time.time() < deadline, v.stderr()
            assert v.public()["fingerprint"] == new["fingerprint"]
            time.sleep(0.05)
        assert v.issue("still")["sequence"] > after["sequence"]
    finally:
        v.close()
