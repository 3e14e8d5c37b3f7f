"""Python baseline for benches/evidence.rs using ccs-verifier 1.2.0 (pip install ccs-verifier==1.2.0).

Same operations: issuance (3 built-in rules, HMAC L0 + Ed25519 L1 receipt, in-process),
six-step verification of an L1 receipt (freshness, audience, Ed25519 signature,
replay set, params binding, outcome), and full verification of a 16-hop chain
(17 receipts: signature + previous-digest linkage + summary hash).

Standalone it prints its own table. With --serve (used by benches/evidence.rs) it prepares
everything, prints "ready", then measures one ROUND of the named operation per input line
("issue", "verify" or "chain") and answers "<ops> <seconds>", so the Rust bench can
alternate its rounds with ours under the same machine load.
"""
from __future__ import annotations

import hashlib
import sys
import time
import warnings

from ccs_verifier import (Command, CredentialLeakRule, RCERule, SSRFRule, Verifier,
                          canonical_json, compute_args_digest, generate_ed25519_key,
                          get_public_key)
from ccs_verifier.ccs_verifier_l1 import L1Receipt

ROUND = 0.1  # seconds per round, as in benches/evidence.rs
ROUNDS = 24  # best round is reported, as in benches/evidence.rs
PARAMS = {"query": "weather in Tokyo", "max_results": 10, "url": "https://en.wikipedia.org/wiki/Tokyo"}


def row(name: str, ops: int, el: float) -> None:
    print(f"| {name:<44} | {ops / el:>12.0f} | {el / ops * 1e6:>10.2f} |")


def one_round(f) -> tuple[int, float]:
    t0 = time.perf_counter()
    n = 0
    while time.perf_counter() - t0 < ROUND:
        f()
        n += 1
    return n, time.perf_counter() - t0


def measure(name: str, f) -> None:
    best = (0, 1.0)
    for _ in range(ROUNDS):
        n, el = one_round(f)
        if n / el > best[0] / best[1]:
            best = (n, el)
    row(name, *best)


def main() -> None:
    warnings.simplefilter("ignore")
    key = generate_ed25519_key()
    pub = get_public_key(key)
    v = Verifier(rules=[SSRFRule(), RCERule(), CredentialLeakRule()], mode="in-process", l1_signing_key=key)
    serve = "--serve" in sys.argv
    if not serve:
        print("| operation                                    |      ops/s   |  us/op     |")
        print("|----------------------------------------------|--------------|------------|")

    counter = iter(range(10**9))

    def issue():
        n = next(counter)
        return v.verify(Command(agent_id="bench-agent", tool="search_web", params=PARAMS,
                                timestamp=1722384000.0, trace_id=f"{n:016x}")).l1_receipt

    if not serve:
        measure("issue (3 rules, HMAC+Ed25519)", issue)

    receipts = [issue() for _ in range(16000)]
    audience = receipts[0]["audience"]
    seen: set[tuple[str, str]] = set()
    pool = iter(receipts)

    def verify_one():
        rd = next(pool)
        now = rd["issued_at"] + 1.0
        r = L1Receipt.from_dict(rd)
        skew = r.max_clock_skew or 30.0
        assert not (now > r.expires_at + skew or now < r.issued_at - skew)  # 1 freshness
        assert r.audience == audience  # 2 audience
        assert r.verify_signature(pub)  # 3 signature
        assert (r.issuer, r.nonce) not in seen  # 4 replay
        seen.add((r.issuer, r.nonce))
        # 5 binding: the digest of the call's params is computed per receipt, as the Rust
        # side's Enforcer::validate does (a consumer binds the params it is about to run).
        assert r.args_digest == compute_args_digest(PARAMS)
        assert r.verdict in ("allow", "block")  # 6 outcome mapping

    if not serve:
        measure("verify (six steps, Ed25519 + replay)", verify_one)

    def ldigest(d: dict) -> str:
        return hashlib.sha256(canonical_json({x: y for x, y in d.items() if x != "signature"})).hexdigest()

    chain = receipts[:17]
    links = [None] + [ldigest(chain[i]) for i in range(16)]
    summary = hashlib.sha256(b"".join(bytes.fromhex(ldigest(c)) for c in chain)).hexdigest()
    def chain_verify():
        for i, rd in enumerate(chain):
            r = L1Receipt.from_dict(rd)
            assert r.verify_signature(pub)
            if i > 0:
                assert links[i] == ldigest(chain[i - 1])
        assert hashlib.sha256(b"".join(bytes.fromhex(ldigest(x)) for x in chain)).hexdigest() == summary

    if not serve:
        measure("chain verify full (16 hops, 17 receipts)", chain_verify)
        return
    ops = {"issue": issue, "verify": verify_one, "chain": chain_verify}
    print("ready", flush=True)
    for line in sys.stdin:
        n, el = one_round(ops[line.strip()])
        print(f"{n} {el}", flush=True)

if __name__ == "__main__":
    main()
