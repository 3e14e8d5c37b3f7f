"""CCS interop: Convene's CLI issues receipts, exports them in the "L1 1.1" profile,
and the independent `ccs-conformance-check` (PyPI ccs-conformance-checker 1.4.2)
must pass them unmodified and must report tampered copies.

Command prefix:
  CONVENE_EVIDENCE_CMD  shell-split prefix, e.g. "convene evidence"
  CONVENE_EVIDENCE_BIN  binary taking "evidence ..." (default: target/debug/convene-evidence)
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import evidence_prefix

PREFIX = evidence_prefix()
CHECKER = shutil.which("ccs-conformance-check")

pytestmark = [
    pytest.mark.skipif(
        # In CI nothing may be skipped: a missing binary fails the suite instead.
        shutil.which(PREFIX[0]) is None and not Path(PREFIX[0]).exists() and not os.environ.get("CI"),
        reason=f"evidence binary not built: {PREFIX[0]} (cargo build -p convene-evidence)",
    ),
]

needs_checker = pytest.mark.skipif(
    CHECKER is None and not os.environ.get("CI"), reason="pip install ccs-conformance-checker==1.4.2"
)


def ev(*args: str, check: int | None = 0, stdin: str | None = None) -> subprocess.CompletedProcess:
    p = subprocess.run([*PREFIX, *args], capture_output=True, text=True, input=stdin, timeout=60)
    if check is not None:
        assert p.returncode == check, f"{args}: rc={p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def verifier_prefix() -> list[str]:
    # The verifier lives beside "evidence": swap the last word of the prefix.
    assert PREFIX[-1] == "evidence", PREFIX
    return [*PREFIX[:-1], "verifier"]


def intake(tool: str, params: dict, trace: str, **extra) -> dict:
    d = {"intake_version": "1.3", "agent_id": "agent-001", "tool": tool, "params": params,
         "timestamp": 1722384000.0, "trace_id": trace}
    d.update(extra)
    return d


def write(p: Path, v) -> Path:
    p.write_text(json.dumps(v, indent=2) + "\n")
    return p


def reindex(root: Path) -> None:
    files = {}
    for f in sorted(root.rglob("*")):
        if f.is_file() and f.name != "manifest.json":
            files[f.relative_to(root).as_posix()] = hashlib.sha256(f.read_bytes()).hexdigest()
    write(root / "manifest.json", {"files": files})


def run_checker(d: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, CORRECTOVER_REGION="GLOBAL")
    return subprocess.run([CHECKER, str(d)], capture_output=True, text=True, timeout=120, env=env)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    w = tmp_path_factory.mktemp("ccs")
    key = w / "key.json"
    pub = json.loads(ev("keygen", "--out", str(key), "--key-id", "key-test").stdout)
    assert len(pub["fingerprint"]) == 16
    store = w / "evidence.db"
    common = ["--key", str(key), "--store", str(store)]
    # allow, finalized with the tool response
    write(w / "allow.json", intake("search_web", {"query": "weather in Tokyo"}, "a000000000000001"))
    write(w / "resp.json", {"results": ["sunny", 24]})
    ev("issue", *common, "--intake", str(w / "allow.json"), "--out", str(w / "allow.r.json"),
       "--bundle", str(w / "allow.b.json"), "--response", str(w / "resp.json"))
    # deny: exit code 3, receipt still written
    write(w / "deny.json", intake("shell_exec", {"command": "rm -rf /"}, "d000000000000001"))
    ev("issue", *common, "--intake", str(w / "deny.json"), "--out", str(w / "deny.r.json"),
       "--bundle", str(w / "deny.b.json"), check=3)
    # a 3-hop delegation chain
    prev = None
    bundles = []
    for hop in range(3):
        write(w / f"h{hop}.json", intake("delegate_search", {"hop": hop}, f"c00000000000000{hop}"))
        args = ["issue", *common, "--intake", str(w / f"h{hop}.json"),
                "--out", str(w / f"h{hop}.r.json"), "--bundle", str(w / f"h{hop}.b.json")]
        if prev:
            args += ["--parent", str(prev)]
        ev(*args)
        prev = w / f"h{hop}.r.json"
        bundles.append(str(w / f"h{hop}.b.json"))
    out = w / "vectors"
    ev("export", "--profile", "l1-1.1", "--key", str(key), "--out", str(out), "--case", "01-allow",
       str(w / "allow.b.json"))
    ev("export", "--profile", "l1-1.1", "--key", str(key), "--out", str(out), "--case", "02-deny",
       str(w / "deny.b.json"))
    ev("export", "--profile", "l1-1.1", "--key", str(key), "--out", str(out), "--case", "03-chain",
       "--chained", *bundles)
    return {"dir": w, "vectors": out, "key": key, "store": store, "pub": pub}


@needs_checker
def test_exported_receipts_pass_unmodified_checker(exported):
    p = run_checker(exported["vectors"])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "ALL VECTORS PASSED" in p.stdout
    assert "Cases:  3/3" in p.stdout
    r = json.loads((exported["vectors"] / "02-deny" / "receipt-01.json").read_text())
    assert r["verdict"] == "block" and len(r) == 30


def tampered(exported, tmp_path, case: str, fn) -> subprocess.CompletedProcess:
    d = tmp_path / "t"
    shutil.copytree(exported["vectors"], d)
    fn(d / case)
    reindex(d)  # the manifest is re-signed so only the tampering itself can fail
    return run_checker(d)


@needs_checker
def test_checker_reports_changed_params(exported, tmp_path):
    def edit(c: Path):
        write(c / "tool-args.json", {"query": "weather in Osaka"})
    p = tampered(exported, tmp_path, "01-allow", edit)
    assert p.returncode == 1
    assert "args_digest mismatch" in p.stdout


@needs_checker
def test_checker_reports_key_swap(exported, tmp_path):
    other = tmp_path / "other.json"
    pub = json.loads(ev("keygen", "--out", str(other)).stdout)

    def edit(c: Path):
        r = json.loads((c / "receipt-01.json").read_text())
        r["public_key"], r["public_key_fingerprint"] = pub["public_key"], pub["fingerprint"]
        write(c / "receipt-01.json", r)
    p = tampered(exported, tmp_path, "01-allow", edit)
    assert p.returncode == 1
    assert "signature:ed25519" in p.stdout


@needs_checker
def test_checker_reports_broken_chain_link(exported, tmp_path):
    def edit(c: Path):
        rc = json.loads((c / "runtime-context-02.json").read_text())
        rc["prev_receipt_digest"] = "sha256:" + "0" * 64
        write(c / "runtime-context-02.json", rc)
    p = tampered(exported, tmp_path, "03-chain", edit)
    assert p.returncode == 1
    assert "prev-hash-matches" in p.stdout


@needs_checker
def test_checker_reports_expired_window(exported, tmp_path):
    def edit(c: Path):
        r = json.loads((c / "receipt-01.json").read_text())
        r["issued_at"] = r["verified_at"] - 600
        r["expires_at"] = r["verified_at"] - 300
        write(c / "receipt-01.json", r)
    p = tampered(exported, tmp_path, "01-allow", edit)
    assert p.returncode == 1
    assert "verified-within-window" in p.stdout


def test_cli_verify_accepts_then_detects_replay(exported, tmp_path):
    d = exported["dir"]
    args = ["verify", "--receipt", str(d / "allow.r.json"), "--key", str(exported["key"]),
            "--audience", "https://convene.local/executor", "--intake", str(d / "allow.json"),
            "--replay-db", str(tmp_path / "replay.db")]
    ok = json.loads(ev(*args).stdout)
    assert ok["accepted"] is True and ok["action"] == "proceed"
    again = json.loads(ev(*args, check=1).stdout)  # a new process: the cache persisted
    assert again["failure"]["failure_category"] == "REPLAY_DETECTED"


def test_cli_verify_rejects_tampering(exported, tmp_path):
    d = exported["dir"]
    base = ["--key", str(exported["key"]), "--audience", "https://convene.local/executor"]
    changed = write(tmp_path / "osaka.json", intake("search_web", {"query": "weather in Osaka"}, "a000000000000001"))
    p = ev("verify", "--receipt", str(d / "allow.r.json"), *base, "--intake", str(changed), check=1)
    assert json.loads(p.stdout)["failure"]["failure_category"] == "BINDING_MISMATCH"
    p = ev("verify", "--receipt", str(d / "allow.r.json"), *base, "--intake", str(d / "allow.json"),
           "--now", str(time.time() + 86400), check=1)
    assert json.loads(p.stdout)["failure"]["failure_category"] == "FRESHNESS_EXPIRED"
    p = ev("verify", "--receipt", str(d / "allow.r.json"), "--key", str(exported["key"]),
           "--audience", "https://someone-else", "--intake", str(d / "allow.json"), check=1)
    assert json.loads(p.stdout)["failure"]["failure_category"] == "AUDIENCE_MISMATCH"
    r = json.loads((d / "allow.r.json").read_text())
    r["verdict"] = "deny"
    forged = write(tmp_path / "forged.json", r)
    p = ev("verify", "--receipt", str(forged), *base, "--intake", str(d / "allow.json"), check=1)
    assert json.loads(p.stdout)["failure"]["failure_category"] == "SIGNATURE_INVALID"


def test_cli_intake_failure_is_fail_closed(exported, tmp_path):
    bad = intake("search_web", {"q": 1}, "e000000000000001")
    del bad["tool"]
    write(tmp_path / "bad.json", bad)
    out = tmp_path / "never.json"
    p = ev("issue", "--key", str(exported["key"]), "--intake", str(tmp_path / "bad.json"),
           "--out", str(out), check=4)
    err = json.loads(p.stdout)
    assert err["error_code"] == "INTAKE_MISSING_FIELD"
    assert "receipt" not in err and not out.exists()
    p = ev("issue", "--key", str(exported["key"]), "--intake", "-", stdin="{not json", check=4)
    assert json.loads(p.stdout)["error_code"] == "INTAKE_MALFORMED"


def test_cli_chain_verify_and_prune(exported, tmp_path):
    d = exported["dir"]
    chain = tmp_path / "chain.json"
    ev("chain", "build", "--out", str(chain), *(str(d / f"h{i}.r.json") for i in range(3)))
    res = json.loads(ev("chain", "verify", "--chain", str(chain), "--key", str(exported["key"])).stdout)
    assert res == {"chain_valid": True, "broken_at": None, "missing_hops": [], "total_hops": 2,
                   "verification_mode": "full", "summary_match": True, "flagged_for_review": False,
                   "sealed": False}
    ev("chain", "prune", "--chain", str(chain), "--hop", "1", "--out", str(tmp_path / "p.json"))
    pruned = json.loads((tmp_path / "p.json").read_text())
    assert len(pruned["pruned_receipts"]) == 1 and pruned["summary_hash"] != json.loads(chain.read_text())["summary_hash"]
    ev("chain", "verify", "--chain", str(tmp_path / "p.json"), "--key", str(exported["key"]))
    c = json.loads(chain.read_text())
    c["receipts"][1]["receipt"]["tool"] = "wire_transfer"
    write(chain, c)
    res = json.loads(ev("chain", "verify", "--chain", str(chain), "--key", str(exported["key"]), check=1).stdout)
    assert res["chain_valid"] is False and res["broken_at"] == 1


def test_verifier_serve_over_unix_socket(exported, tmp_path):
    sock = tmp_path / "v.sock"
    proc = subprocess.Popen([*verifier_prefix(), "serve", "--key", str(exported["key"]),
                             "--socket", str(sock)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.05)
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(5)
        s.connect(str(sock))
        req = {"op": "issue", "intake": intake("search_web", {"query": "x"}, "5000000000000001")}
        s.sendall((json.dumps(req) + "\n").encode())
        resp = json.loads(s.makefile().readline())
        assert resp["ok"] is True
        assert resp["bundle"]["receipt"]["verdict"] == "allow"
        bad = {"op": "issue", "intake": {"intake_version": "9"}}
        s.sendall((json.dumps(bad) + "\n").encode())
        resp = json.loads(s.makefile().readline())
        assert resp["ok"] is False and "receipt" not in resp["error"]
        s.close()
    finally:
        proc.kill()
        proc.wait()
