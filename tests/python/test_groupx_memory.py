"""GroupX memory and identity (§10.4) and room context usage/reset (§10.5) end to end: a real
daemon on loopback HTTP, a roster of fake ACP agents (tests/fixtures/fake_acp_agent.py), and a
plain HTTP client. Records are ledger events folded at start, so restarts are part of it."""
from __future__ import annotations

import http.client
import json
import time
import uuid
from pathlib import Path

import pytest

from conftest import ROOT, Daemon

from test_groupx import FAKE, TERMINAL, agent
from test_groupx import GX as BaseGX


class GX(BaseGX):
    """The GroupX client of test_groupx.py, with memory helpers."""

    def ok(self, method: str, path: str, body=None, status: int = 200) -> dict:
        st, v = self.call(method, path, body)
        assert st == status, (st, v)
        return v

    def refused(self, method: str, path: str, body, status: int, code: str) -> dict:
        st, v = self.call(method, path, body)
        assert (st, v.get("error", {}).get("code")) == (status, code), (path, body, st, v)
        assert v["error"]["message"]
        return v

    def remember(self, content: str, scope: str = "room", cid: str | None = None, **kw) -> dict:
        body = {"clientCommandId": cid or f"m-{uuid.uuid4()}", "scope": scope, "content": content, **kw}
        return self.ok("POST", "/api/memory", body, 201)["memory"]

    def memories(self, query: str = "") -> list[dict]:
        return self.ok("GET", "/api/memory" + (f"?{query}" if query else ""))["memories"]

    def boot(self) -> dict:
        return self.ok("GET", "/api/bootstrap")

    def cursor(self) -> int:
        return self.boot()["cursor"]

    def events(self) -> list[dict]:
        return self.boot()["events"]

    def post(self, to, content: str) -> dict:
        return self.ok("POST", "/api/messages", {"clientCommandId": f"t-{uuid.uuid4()}", "to": to, "content": content}, 202)

    def settle(self, v: dict, timeout: float = 20.0) -> None:
        """Waits until every turn of a POST /api/messages answer is terminal."""
        want = {t["turnId"] for t in v["turns"]}
        deadline = time.time() + timeout
        while time.time() < deadline:
            done = {e["body"].get("turnId") for e in self.events() if e["type"] in TERMINAL}
            if want <= done:
                return
            time.sleep(0.05)
        raise AssertionError(f"turns {want} did not finish")


def start(home: Path, agents: list[dict], limits: dict | None = None) -> Daemon:
    cfg = {"agents": agents}
    if limits:
        cfg["limits"] = limits
    (home / "groupx.json").write_text(json.dumps(cfg))
    return Daemon(home, ["--groupx", "127.0.0.1:0"]).start()


ROSTER = [agent("echo", name="Echo"), agent("helper"), agent("off", enabled=False)]


@pytest.fixture
def gx(home):
    d = start(home, ROSTER)
    yield GX(d)
    d.stop()


def restart(gx: GX) -> GX:
    gx.d.stop()
    return GX(Daemon(gx.d.home, ["--groupx", "127.0.0.1:0"]).start())


def test_a_room_memory_is_remembered_superseded_and_retracted_as_one_lineage(gx):
    m1 = gx.remember("the build uses cargo")
    assert m1["memoryId"].startswith("mem_") and m1["version"] == 1 and m1["supersedes"] is None
    assert (m1["scope"], m1["agentMemoryType"], m1["subjectActorId"]) == ("room", None, None)
    assert m1["authorActorId"] == "user:web" and m1["createdAt"] and m1["lineageId"] == m1["memoryId"]
    assert gx.memories() == [m1]

    m2 = gx.ok("POST", f"/api/memory/{m1['memoryId']}/supersede",
               {"clientCommandId": "s1", "content": "the build uses cargo and just"}, 201)["memory"]
    assert (m2["version"], m2["supersedes"], m2["lineageId"]) == (2, m1["memoryId"], m1["memoryId"])
    assert m2["memoryId"] != m1["memoryId"] and m2["scope"] == "room"
    # Only the latest version of a lineage is current.
    assert gx.memories() == [m2]
    gx.refused("POST", f"/api/memory/{m1['memoryId']}/supersede",
               {"clientCommandId": "s2", "content": "fork"}, 409, "MEMORY_SUPERSEDED")
    gx.refused("POST", f"/api/memory/{m1['memoryId']}/retract", {"clientCommandId": "r0"}, 409, "MEMORY_SUPERSEDED")

    gone = gx.ok("POST", f"/api/memory/{m2['memoryId']}/retract",
                 {"clientCommandId": "r1", "reason": "outdated"})["memory"]
    assert gone["retracted"] is True and gone["retractReason"] == "outdated" and gone["retractedBy"] == "user:web"
    assert gx.memories() == [] and gx.memories("includeRetracted=false") == []
    [shown] = gx.memories("includeRetracted=true")
    assert shown["memoryId"] == m2["memoryId"] and shown["retracted"] is True
    gx.refused("POST", f"/api/memory/{m2['memoryId']}/retract", {"clientCommandId": "r2"}, 409, "MEMORY_RETRACTED")
    gx.refused("POST", f"/api/memory/{m2['memoryId']}/supersede",
               {"clientCommandId": "s3", "content": "back"}, 409, "MEMORY_RETRACTED")
    gx.refused("POST", "/api/memory/mem_nope/retract", {"clientCommandId": "r3"}, 404, "UNKNOWN_MEMORY")
    gx.refused("POST", "/api/memory/mem_nope/supersede", {"clientCommandId": "s4", "content": "x"}, 404, "UNKNOWN_MEMORY")

    # Each change is a durable envelope of the room, authored by the binding.
    evs = [e for e in gx.events() if e["type"].startswith("memory.")]
    assert [e["type"] for e in evs] == ["memory.remembered", "memory.superseded", "memory.retracted"]
    assert all(e["actor"]["actorId"] == "user:web" and e["durability"] == "durable" and e["seq"] for e in evs)
    assert evs[0]["eventId"] == m1["eventId"] and evs[1]["causationId"] == m1["eventId"]
    assert evs[1]["body"]["supersedes"] == m1["memoryId"]


def test_agent_memory_has_a_subject_from_the_roster_and_core_or_dated_layers(gx):
    core = gx.remember("prefers small diffs", "agent", subjectActorId="agent:echo")
    assert (core["scope"], core["subjectActorId"], core["agentMemoryType"]) == ("agent", "agent:echo", "core")
    dated = gx.remember("2026-11-30: reviewed the parser", "agent", subjectActorId="agent:echo", agentMemoryType="dated")
    other = gx.remember("writes tests first", "agent", subjectActorId="agent:helper")
    # A disabled agent is still on the roster.
    off = gx.remember("was retired", "agent", subjectActorId="agent:off")
    about = gx.remember("echo answers fast", subjectActorId="agent:echo")
    ids = lambda rs: [r["memoryId"] for r in rs]
    assert ids(gx.memories("scope=agent")) == ids([core, dated, other, off])
    assert ids(gx.memories("scope=room")) == ids([about])
    assert ids(gx.memories("agentId=agent%3Aecho")) == ids([core, dated, about])
    assert ids(gx.memories("scope=agent&agentId=agent:echo&agentMemoryType=dated")) == ids([dated])
    # A superseded agent memory keeps its scope, subject and layer.
    v2 = gx.ok("POST", f"/api/memory/{dated['memoryId']}/supersede", {"clientCommandId": "d2", "content": "2026-11-30: fixed it"}, 201)["memory"]
    assert (v2["scope"], v2["subjectActorId"], v2["agentMemoryType"]) == ("agent", "agent:echo", "dated")

    before = gx.cursor()
    gx.refused("POST", "/api/memory", {"clientCommandId": "a1", "scope": "agent", "subjectActorId": "agent:nobody", "content": "x"}, 404, "UNKNOWN_ACTOR")
    gx.refused("POST", "/api/memory", {"clientCommandId": "a2", "scope": "agent", "content": "x"}, 400, "INVALID_ENVELOPE")
    gx.refused("POST", "/api/memory", {"clientCommandId": "a3", "scope": "room", "agentMemoryType": "core", "content": "x"}, 400, "INVALID_ENVELOPE")
    gx.refused("POST", "/api/memory", {"clientCommandId": "a4", "scope": "agent", "subjectActorId": "agent:echo", "agentMemoryType": "weekly", "content": "x"}, 400, "INVALID_ENVELOPE")
    gx.refused("GET", "/api/memory?scope=everything", None, 400, "INVALID_ENVELOPE")
    gx.refused("GET", "/api/memory?colour=red", None, 400, "INVALID_ENVELOPE")
    gx.refused("GET", "/api/memory?agentId=echo", None, 404, "UNKNOWN_ACTOR")
    assert gx.cursor() == before


ROUTES = [
    ("/api/memory", {"scope": "room", "content": "x"}),
    ("/api/memory/{m}/supersede", {"content": "x"}),
    ("/api/memory/{m}/retract", {}),
    ("/api/identity", {"subjectActorId": "agent:echo", "kind": "role", "content": "x"}),
    ("/api/identity/{i}/supersede", {"content": "x"}),
    ("/api/identity/{i}/retract", {}),
    ("/api/context/reset", {}),
]


@pytest.mark.parametrize("field", ["from", "actor", "author", "authorActorId", "provenance"])
def test_groupx_3_2_no_memory_identity_or_context_request_may_name_its_author(gx, field):
    m = gx.remember("x")["memoryId"]
    i = gx.ok("POST", "/api/identity", {"clientCommandId": "i", "subjectActorId": "agent:echo", "kind": "role", "content": "x"}, 201)["identity"]["identityId"]
    before = gx.cursor()
    for path, body in ROUTES:
        gx.refused("POST", path.format(m=m, i=i), {"clientCommandId": f"f-{path}", **body, field: "agent:echo"}, 400, "SENDER_FIELD_FORBIDDEN")
    assert gx.cursor() == before


def test_bad_bodies_limits_and_sources_get_their_codes_and_append_nothing(home):
    d = start(home, ROSTER, limits={"messageBytes": 100})
    try:
        gx = GX(d)
        msg = gx.post(["agent:echo"], "source of truth")
        gx.settle(msg)
        m = gx.remember("x")["memoryId"]
        i = gx.ok("POST", "/api/identity", {"clientCommandId": "i", "subjectActorId": "agent:echo", "kind": "role", "content": "x"}, 201)["identity"]["identityId"]
        before = gx.cursor()
        for path, body in ROUTES:
            path = path.format(m=m, i=i)
            gx.refused("POST", path, {"clientCommandId": "u", **body, "colour": "red"}, 400, "INVALID_ENVELOPE")
            gx.refused("POST", path, body, 400, "INVALID_ENVELOPE")  # no clientCommandId
            gx.refused("POST", path, {"clientCommandId": "u", **body, "transport": "direct"}, 400, "INVALID_ENVELOPE")
            if "content" in body:
                gx.refused("POST", path, {"clientCommandId": "u", **body, "content": "x" * 101}, 413, "MESSAGE_TOO_LARGE")
                gx.refused("POST", path, {"clientCommandId": "u", **body, "content": "  "}, 400, "INVALID_ENVELOPE")
        gx.refused("POST", f"/api/memory/{m}/retract", {"clientCommandId": "u", "reason": "r" * 101}, 413, "MESSAGE_TOO_LARGE")
        gx.refused("POST", "/api/memory", {"clientCommandId": "u", "scope": "room", "content": "x", "sourceEventId": "evt_missing"}, 400, "INVALID_ENVELOPE")
        gx.refused("POST", "/api/memory", b"{not json", 400, "INVALID_ENVELOPE")
        gx.refused("POST", "/api/memory/mem_x/forget", {"clientCommandId": "u"}, 404, "NOT_FOUND")
        gx.refused("DELETE", "/api/memory", None, 405, "METHOD_NOT_ALLOWED")
        gx.refused("GET", f"/api/memory/{m}/retract", None, 405, "METHOD_NOT_ALLOWED")
        gx.refused("POST", "/api/context", {"clientCommandId": "u"}, 405, "METHOD_NOT_ALLOWED")
        assert gx.cursor() == before
        # The limit is the content's bytes, not characters; exactly at the limit is fine.
        assert gx.remember("é" * 50)["content"] == "é" * 50
        src = gx.remember("from a message", sourceEventId=msg["messageEventId"])
        assert src["sourceEventId"] == msg["messageEventId"]
        ev = next(e for e in gx.events() if e.get("body", {}).get("memoryId") == src["memoryId"])
        assert ev["causationId"] == msg["messageEventId"]
    finally:
        d.stop()


def test_groupx_8_1_memory_commands_are_idempotent_across_routes_and_restarts(gx):
    first = gx.ok("POST", "/api/memory", {"clientCommandId": "k1", "scope": "room", "content": "once"}, 201)
    assert gx.ok("POST", "/api/memory", {"clientCommandId": "k1", "scope": "room", "content": "once"}, 201) == first
    gx.refused("POST", "/api/memory", {"clientCommandId": "k1", "scope": "room", "content": "twice"}, 409, "CLIENT_COMMAND_CONFLICT")
    mid = first["memory"]["memoryId"]
    sup = gx.ok("POST", f"/api/memory/{mid}/supersede", {"clientCommandId": "k2", "content": "v2"}, 201)
    # A retry after success answers the first result, although the target is no longer current.
    assert gx.ok("POST", f"/api/memory/{mid}/supersede", {"clientCommandId": "k2", "content": "v2"}, 201) == sup
    gx.refused("POST", f"/api/memory/{mid}/supersede", {"clientCommandId": "k2", "content": "v3"}, 409, "CLIENT_COMMAND_CONFLICT")
    ret = gx.ok("POST", f"/api/memory/{sup['memory']['memoryId']}/retract", {"clientCommandId": "k3"})
    assert gx.ok("POST", f"/api/memory/{sup['memory']['memoryId']}/retract", {"clientCommandId": "k3"}) == ret
    # One key is one command of the binding, whatever route used it.
    gx.refused("POST", "/api/identity", {"clientCommandId": "k1", "subjectActorId": "agent:echo", "kind": "role", "content": "once"}, 409, "CLIENT_COMMAND_CONFLICT")
    gx.refused("POST", "/api/context/reset", {"clientCommandId": "k1"}, 409, "CLIENT_COMMAND_CONFLICT")
    gx.refused("POST", "/api/messages", {"clientCommandId": "k1", "to": ["agent:echo"], "content": "once"}, 409, "CLIENT_COMMAND_CONFLICT")
    msg = gx.post(["agent:echo"], "a message")
    gx.settle(msg)
    msg_cid = "dup-" + msg["messageEventId"]
    gx.ok("POST", "/api/messages", {"clientCommandId": msg_cid, "to": ["agent:echo"], "content": "keyed"}, 202)
    gx.refused("POST", "/api/memory", {"clientCommandId": msg_cid, "scope": "room", "content": "keyed"}, 409, "CLIENT_COMMAND_CONFLICT")
    state = gx.memories("includeRetracted=true")
    count = sum(1 for e in gx.events() if e["type"].startswith("memory."))
    assert count == 3

    # Across a restart the keys are still known: they are folded from the ledger.
    g2 = restart(gx)
    try:
        assert g2.memories("includeRetracted=true") == state
        assert g2.ok("POST", "/api/memory", {"clientCommandId": "k1", "scope": "room", "content": "once"}, 201) == first
        assert g2.ok("POST", f"/api/memory/{mid}/supersede", {"clientCommandId": "k2", "content": "v2"}, 201) == sup
        assert g2.ok("POST", f"/api/memory/{sup['memory']['memoryId']}/retract", {"clientCommandId": "k3"}) == ret
        g2.refused("POST", "/api/memory", {"clientCommandId": "k1", "scope": "room", "content": "twice"}, 409, "CLIENT_COMMAND_CONFLICT")
        g2.refused("POST", "/api/memory", {"clientCommandId": msg_cid, "scope": "room", "content": "keyed"}, 409, "CLIENT_COMMAND_CONFLICT")
        assert sum(1 for e in g2.events() if e["type"].startswith("memory.")) == 3
    finally:
        g2.d.stop()


def test_identity_records_are_about_roster_agents_and_survive_a_restart(gx):
    body = {"clientCommandId": "id1", "subjectActorId": "agent:echo", "kind": "role", "content": "the reviewer"}
    r1 = gx.ok("POST", "/api/identity", body, 201)["identity"]
    assert r1["identityId"].startswith("idn_") and (r1["version"], r1["kind"], r1["authorActorId"]) == (1, "role", "user:web")
    assert gx.ok("POST", "/api/identity", body, 201)["identity"] == r1
    r2 = gx.ok("POST", "/api/identity", {"clientCommandId": "id2", "subjectActorId": "agent:helper", "kind": "style", "content": "terse"}, 201)["identity"]
    assert [r["identityId"] for r in gx.ok("GET", "/api/identity?agentId=agent:echo")["identities"]] == [r1["identityId"]]
    assert [r["identityId"] for r in gx.ok("GET", "/api/identity?kind=style")["identities"]] == [r2["identityId"]]
    v2 = gx.ok("POST", f"/api/identity/{r1['identityId']}/supersede", {"clientCommandId": "id3", "content": "the lead reviewer"}, 201)["identity"]
    assert (v2["version"], v2["supersedes"], v2["kind"], v2["subjectActorId"]) == (2, r1["identityId"], "role", "agent:echo")
    gx.ok("POST", f"/api/identity/{r2['identityId']}/retract", {"clientCommandId": "id4"})
    gx.refused("POST", f"/api/identity/{r2['identityId']}/supersede", {"clientCommandId": "id5", "content": "x"}, 409, "IDENTITY_RETRACTED")
    gx.refused("POST", f"/api/identity/{r1['identityId']}/retract", {"clientCommandId": "id6"}, 409, "IDENTITY_SUPERSEDED")
    gx.refused("POST", "/api/identity/idn_nope/retract", {"clientCommandId": "id7"}, 404, "UNKNOWN_IDENTITY")
    # A memory id is not an identity id, and the other way round.
    m = gx.remember("x")["memoryId"]
    gx.refused("POST", f"/api/identity/{m}/retract", {"clientCommandId": "id8"}, 404, "UNKNOWN_IDENTITY")
    gx.refused("POST", f"/api/memory/{r1['identityId']}/retract", {"clientCommandId": "id9"}, 404, "UNKNOWN_MEMORY")
    for subject in ["agent:nobody", "user:web"]:
        gx.refused("POST", "/api/identity", {**body, "clientCommandId": f"s-{subject}", "subjectActorId": subject}, 404, "UNKNOWN_ACTOR")
    assert [e["type"] for e in gx.events() if e["type"].startswith("identity.")] == \
        ["identity.remembered", "identity.remembered", "identity.superseded", "identity.retracted"]
    assert gx.memories() != [] and all(r["scope"] == "room" for r in gx.memories())
    state = gx.ok("GET", "/api/identity?includeRetracted=true")
    assert [r["identityId"] for r in gx.ok("GET", "/api/identity")["identities"]] == [v2["identityId"]]
    g2 = restart(gx)
    try:
        assert g2.ok("GET", "/api/identity?includeRetracted=true") == state
        g2.refused("POST", f"/api/identity/{r1['identityId']}/supersede", {"clientCommandId": "id10", "content": "x"}, 409, "IDENTITY_SUPERSEDED")
    finally:
        g2.d.stop()


def expected_chars(events: list[dict], floor: int) -> tuple[int, int]:
    """What §10.5 counts: message.created after the floor, text plus the packet's line frame."""
    msgs = [e for e in events if e["type"] == "message.created" and e["seq"] > floor]
    frame = lambda e: len(f"- {e['actor']['displayName']} ({e['actor']['actorId']}) [{e['eventId']}]: \n")
    return len(msgs), sum(len(e["body"]["content"]) + frame(e) for e in msgs)


def test_groupx_10_5_context_usage_counts_messages_since_the_floor_and_reset_moves_it(gx):
    empty = gx.ok("GET", "/api/context")
    assert (empty["estimatedCharacters"], empty["messages"], empty["floorSeq"]) == (0, 0, 0)
    assert empty["maxCharacters"] == 200000 and empty["utilizationPercent"] == 0
    # Nothing to reset in an empty room: nothing is appended.
    before = gx.cursor()
    assert gx.ok("POST", "/api/context/reset", {"clientCommandId": "r0"}) == {"reset": False, "floorSeq": 0}
    assert gx.cursor() == before

    gx.settle(gx.post(["agent:echo"], "first message, ünïcode ✓"))
    gx.settle(gx.post(["agent:echo", "agent:helper"], "second"))
    gx.remember("memories are not room context")
    n, chars = expected_chars(gx.events(), 0)
    u = gx.ok("GET", "/api/context")
    assert n == 5 and (u["messages"], u["estimatedCharacters"]) == (n, chars)
    assert u["utilizationPercent"] == round(chars * 100 / 200000, 2)

    head = gx.cursor()
    r1 = gx.ok("POST", "/api/context/reset", {"clientCommandId": "r1"})
    assert r1["reset"] is True and r1["floorSeq"] == head and r1["previousFloorSeq"] == 0
    [ev] = [e for e in gx.events() if e["type"] == "context.reset"]
    assert ev["eventId"] == r1["eventId"] and ev["actor"]["actorId"] == "system:groupx" and ev["body"]["requestedBy"] == "user:web"
    u = gx.ok("GET", "/api/context")
    assert (u["messages"], u["estimatedCharacters"], u["floorSeq"], u["resetEventId"]) == (0, 0, head, r1["eventId"])
    # The reset event is not room context: a second reset finds nothing and appends nothing.
    before = gx.cursor()
    assert gx.ok("POST", "/api/context/reset", {"clientCommandId": "r2"}) == {"reset": False, "floorSeq": head}
    assert gx.cursor() == before
    # The first key still answers what it did.
    assert gx.ok("POST", "/api/context/reset", {"clientCommandId": "r1"}) == r1

    g2 = restart(gx)
    try:
        u = g2.ok("GET", "/api/context")
        assert (u["floorSeq"], u["estimatedCharacters"]) == (head, 0)
        g2.settle(g2.post(["agent:helper"], "after the floor"))
        n, chars = expected_chars(g2.events(), head)
        u = g2.ok("GET", "/api/context")
        assert n == 2 and (u["messages"], u["estimatedCharacters"]) == (n, chars)
        r3 = g2.ok("POST", "/api/context/reset", {"clientCommandId": "r3"})
        assert r3["reset"] is True and r3["previousFloorSeq"] == head
        assert g2.ok("POST", "/api/context/reset", {"clientCommandId": "r1"}) == r1
    finally:
        g2.d.stop()


def test_the_context_limit_is_configured(home):
    d = start(home, ROSTER, limits={"contextCharacters": 1000})
    try:
        gx = GX(d)
        gx.settle(gx.post(["agent:echo"], "x" * 400))
        u = gx.ok("GET", "/api/context")
        assert u["maxCharacters"] == 1000
        assert u["utilizationPercent"] == round(u["estimatedCharacters"] * 100 / 1000, 2) and u["utilizationPercent"] > 80
    finally:
        d.stop()


def test_a_reset_floors_the_context_packet_of_every_agent(home, tmp_path):
    log = tmp_path / "acp.log"
    import os
    os.environ["FAKE_ACP_LOG"] = str(log)
    try:
        d = start(home, ROSTER)
    finally:
        del os.environ["FAKE_ACP_LOG"]
    gx = GX(d)
    try:
        def prompt_of(word: str) -> str:
            for line in log.read_text().splitlines():
                m = json.loads(line)
                if m.get("method") == "session/prompt":
                    text = "".join(b.get("text", "") for b in m["params"]["prompt"])
                    if text.rstrip().endswith(word):
                        return text
            raise AssertionError(f"no prompt ending with {word}")

        gx.settle(gx.post(["agent:echo"], "alpha"))
        gx.settle(gx.post(["agent:helper"], "beta"))
        # Without a reset, helper's packet carries what it had not seen.
        assert "alpha" in prompt_of("beta")
        gx.settle(gx.post(["agent:echo"], "gamma"))
        assert gx.ok("POST", "/api/context/reset", {"clientCommandId": "r"})["reset"] is True
        gx.settle(gx.post(["agent:helper"], "delta"))
        assert "gamma" not in prompt_of("delta")
    finally:
        d.stop()


def test_memory_events_stream_live_over_sse_after_the_cursor(gx):
    """The page learns of records the way it learns of messages: durable frames with their seq."""
    after = gx.cursor()
    c = http.client.HTTPConnection(gx.host, gx.port, timeout=10)
    c.request("GET", f"/api/events?afterSeq={after}")
    r = c.getresponse()
    assert r.status == 200
    m = gx.remember("streamed")
    frames, cur = [], None
    try:
        while not any(f["type"] == "memory.remembered" for _, f in frames):
            line = r.fp.readline().decode().rstrip("\n")
            if line.startswith("id: "):
                cur = line[4:]
            elif line.startswith("data: "):
                frames.append((cur, json.loads(line[6:])))
    finally:
        c.close()
    fid, f = next((i, f) for i, f in frames if f["type"] == "memory.remembered")
    assert f["body"]["memoryId"] == m["memoryId"] and f["seq"] == m["seq"] and fid == str(m["seq"])
    assert f["actor"]["actorId"] == "user:web" and f["durability"] == "durable"
