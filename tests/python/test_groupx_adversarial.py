"""Adversarial checks of the GroupX face at the user's boundary: odd request paths, restarts
with a changed roster, and many concurrent posts and cancels against one daemon, checked from
the ledger (every queued turn has exactly one terminal event, nothing moves after it)."""
from __future__ import annotations

import json
import random
import threading
import time
import uuid

from conftest import Daemon
from test_groupx import GX, SSE, TERMINAL, agent, start


def test_a_cancel_path_without_a_turn_id_is_an_error_answer_not_a_dropped_connection(home):
    d = start(home, [agent("echo")])
    try:
        gx = GX(d)
        for path in ["/api/turns/cancel", "/api/turns//cancel", "/api/turns/%20/cancel"]:
            st, v = gx.call("POST", path, {})
            assert st in (404, 400), (path, st, v)
            assert v["error"]["code"] in ("UNKNOWN_TURN", "NOT_FOUND", "INVALID_ENVELOPE"), v
        assert gx.call("GET", "/api/health")[0] == 200
    finally:
        d.stop()


def test_a_queued_turn_of_an_agent_disabled_across_a_restart_is_settled_not_left_queued(home):
    d = start(home, [agent("echo"), agent("other")])
    gx = GX(d)
    hung = gx.ok_post(["agent:echo"], "long\n#slow 300")["turns"][0]["turnId"]
    waiting = gx.ok_post(["agent:echo"], "never runs")["turns"][0]["turnId"]
    gx.wait_type(hung, "turn.started")
    d.kill9()
    # The operator turns the agent off before starting again.
    (home / "groupx.json").write_text(json.dumps({"agents": [agent("echo", enabled=False), agent("other")]}))
    d = Daemon(home, ["--groupx", "127.0.0.1:0"]).start()
    try:
        gx = GX(d)
        assert gx.wait_terminal(hung)["type"] == "turn.interrupted"
        end = gx.wait_terminal(waiting, timeout=10)
        assert end["type"] == "turn.failed" and end["body"]["errorCode"] == "UNKNOWN_TARGET", end
        assert gx.boot()["turns"] == []
    finally:
        d.stop()


def ledger_turns(gx: GX, until) -> dict[str, list[dict]]:
    """Every durable turn event of the room, from seq 0, by turn id (read over SSE)."""
    s = SSE(gx, after=0)
    try:
        s.wait(lambda fr: until([f for _, f in fr]), timeout=60)
        frames = list(s.frames)
    finally:
        s.close()
    seqs = [int(i) for i, _ in frames if i is not None]
    assert seqs == sorted(seqs) and len(seqs) == len(set(seqs)), "durable SSE frames out of order or repeated"
    by: dict[str, list[dict]] = {}
    for i, f in frames:
        if i is None:
            continue
        tid = f["body"].get("turnId")
        if tid and f["type"].startswith("turn.") and f["type"] != "turn.reasoning.recorded":
            by.setdefault(tid, []).append(f)
    return by


def test_many_posts_racing_cancels_leave_every_turn_with_exactly_one_terminal_and_the_lane_alive(home):
    d = start(home, [agent("echo"), agent("helper")], limits={"queuePerAgent": 64})
    try:
        gx = GX(d)
        turns: list[str] = []
        lock = threading.Lock()
        rng = random.Random(7)

        def worker(n: int, seed: int):
            r = random.Random(seed)
            for i in range(n):
                to = r.choice([["agent:echo"], ["agent:helper"], ["@all"]])
                cid = f"t-{uuid.uuid4()}"
                body = f"m{i}\n#slow {r.randint(1, 3)}"
                st, v = gx.post(to, body, cid=cid)
                if st != 202:
                    assert st == 429, v
                    continue
                # A retry answers the first result, identically.
                st2, v2 = gx.post(to, body, cid=cid)
                assert (st2, v2["messageEventId"], [t["turnId"] for t in v2["turns"]]) == (
                    202, v["messageEventId"], [t["turnId"] for t in v["turns"]]), v2
                ids = [t["turnId"] for t in v["turns"]]
                with lock:
                    turns.extend(ids)
                for tid in ids:
                    if r.random() < 0.7:
                        st, c = gx.call("POST", f"/api/turns/{tid}/cancel", {})
                        assert st == 202, c

        threads = [threading.Thread(target=worker, args=(12, rng.random())) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        # Both lanes still run work after the storm.
        last = gx.ok_post(["@all"], "after the storm")
        final = [t["turnId"] for t in last["turns"]]
        everything = turns + final

        def all_settled(frames):
            done = {f["body"]["turnId"] for f in frames if f["type"] in TERMINAL}
            return all(t in done for t in everything)

        by = ledger_turns(gx, all_settled)
        for tid in everything:
            evs = by[tid]
            kinds = [e["type"] for e in evs]
            assert kinds[0] == "turn.queued", (tid, kinds)
            assert sum(k in TERMINAL for k in kinds) == 1, (tid, kinds)
            assert kinds[-1] in TERMINAL, (tid, kinds)
            assert kinds.count("turn.dispatched") <= 1, (tid, kinds)
        for tid in final:
            assert by[tid][-1]["type"] == "turn.completed", by[tid]
        assert gx.boot()["turns"] == []
    finally:
        d.stop()


def test_a_retried_interrupt_steer_answers_the_first_result_and_leaves_the_rerouted_turn_alone(home, tmp_path):
    from test_groupx_supervision import agent as sagent, boss_binding, tool
    log = tmp_path / "acp.log"
    d = start(home, [sagent("worker"), sagent("boss", FAKE_ACP_WATCH_DIRECTIVE="#hang")],
              limits={"steersPerSubjectTurn": 1}, log=log)
    try:
        gx = GX(d)
        v = gx.ok_post(["agent:worker"], "long job\n#slow 300",
                       supervision={"observers": ["agent:boss"], "mode": "live_steer"})
        work, watch = v["turns"][0]["turnId"], v["watchTurns"][0]["turnId"]
        b = boss_binding(gx, log, watch)
        gx.wait_type(work, "turn.started")
        args = {"action": "interrupt", "reason": "wrong", "content": "redo it\n#slow 300", "clientCommandId": "st1"}
        first = tool(gx, b, "groupx.steer", args)
        assert not first["isError"], first
        new = first["structuredContent"]["newTurnId"]
        assert gx.wait_terminal(work)["type"] == "turn.cancelled"
        gx.wait_type(new, "turn.started")
        # The MCP client retries the same call (say its answer was lost): the same answer, and
        # nothing else happens - above all, the re-routed turn is not cancelled.
        again = tool(gx, b, "groupx.steer", args)
        assert again == first, (again, first)
        assert not [e for e in gx.turn_events(new) if e["type"] in ("turn.cancelling", "turn.cancelled")]
        assert sum(e["type"] == "supervision.steered" for e in gx.events()) == 1
        gx.call("POST", f"/api/turns/{new}/cancel", {})
    finally:
        d.stop()


def test_an_mcp_send_after_the_callers_turn_ended_is_refused_not_made_a_new_root_chain(home, tmp_path):
    from test_groupx_supervision import bindings, tool
    log = tmp_path / "acp.log"
    mcp = {"FAKE_ACP_HTTP_MCP": "1"}
    d = start(home, [agent("echo", env=mcp), agent("helper", env=mcp)], limits={"maxHops": 1}, log=log)
    try:
        gx = GX(d)
        t = gx.ok_post(["agent:echo"], "wait\n#slow 300")["turns"][0]["turnId"]
        gx.wait_type(t, "turn.started")
        [b] = bindings(log)
        # The user cancels; the agent's tool call was still in flight and lands afterwards.
        gx.call("POST", f"/api/turns/{t}/cancel", {})
        gx.wait_terminal(t)
        before = gx.boot()["cursor"]
        r = tool(gx, b, "groupx.send", {"to": ["agent:helper"], "content": "late", "clientCommandId": "late1"})
        assert r["isError"] and r["structuredContent"]["errorCode"] == "MCP_BINDING_MISMATCH", r
        assert not any(e["type"] == "message.created" and e["body"]["content"] == "late" for e in gx.events())
        assert gx.boot()["cursor"] == before
        # Reading the room stays possible.
        r = tool(gx, b, "groupx.read", {"afterSeq": 0, "limit": 5})
        assert not r["isError"], r
    finally:
        d.stop()


def test_concurrent_steers_cannot_pass_the_steer_limit_together(home, tmp_path):
    from test_groupx_supervision import agent as sagent, boss_binding, tool
    log = tmp_path / "acp.log"
    d = start(home, [sagent("worker"), sagent("boss", FAKE_ACP_WATCH_DIRECTIVE="#hang")],
              limits={"steersPerSubjectTurn": 1}, log=log)
    try:
        gx = GX(d)
        v = gx.ok_post(["agent:worker"], "long job\n#slow 300",
                       supervision={"observers": ["agent:boss"], "mode": "live_steer"})
        work, watch = v["turns"][0]["turnId"], v["watchTurns"][0]["turnId"]
        b = boss_binding(gx, log, watch)
        results: list[dict] = []
        go = threading.Barrier(10)

        def nudge(i: int):
            go.wait()
            results.append(tool(gx, b, "groupx.steer", {"action": "nudge", "reason": f"r{i}",
                                                        "content": f"hint {i}", "clientCommandId": f"c{i}"}))

        threads = [threading.Thread(target=nudge, args=(i,)) for i in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ok = [r for r in results if not r["isError"]]
        assert len(ok) == 1, [r["structuredContent"] for r in results]
        assert all(r["structuredContent"]["errorCode"] == "STEER_LIMIT_REACHED" for r in results if r["isError"])
        assert sum(e["type"] == "supervision.steered" for e in gx.events()) == 1
        gx.call("POST", f"/api/turns/{work}/cancel", {})
    finally:
        d.stop()


def test_one_client_command_id_used_at_once_for_a_message_and_a_memory_serves_only_one(home):
    d = start(home, [agent("echo")])
    try:
        gx = GX(d)
        for i in range(25):
            cid = f"same-{i}"
            out: dict[str, tuple] = {}
            go = threading.Barrier(2)

            def msg():
                go.wait()
                out["msg"] = gx.post(["agent:echo"], f"m{i}", cid=cid)

            def mem():
                go.wait()
                out["mem"] = gx.call("POST", "/api/memory", {"clientCommandId": cid, "scope": "room", "content": f"x{i}"})

            ts = [threading.Thread(target=msg), threading.Thread(target=mem)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            ok = [k for k, (st, _) in out.items() if st in (201, 202)]
            assert len(ok) == 1, (i, out)
            # The winner's retry still answers its first result.
            if ok == ["msg"]:
                st, v = gx.post(["agent:echo"], f"m{i}", cid=cid)
                assert st == 202 and v["messageEventId"] == out["msg"][1]["messageEventId"], v
    finally:
        d.stop()


def test_kill9_at_random_points_of_busy_lanes_never_runs_a_turn_twice_or_leaves_one_open(home):
    agents = [agent("echo"), agent("helper")]
    d = start(home, agents, limits={"queuePerAgent": 64})
    rng = random.Random(11)
    posted: list[str] = []
    for round_ in range(3):
        gx = GX(d)
        stop = threading.Event()

        def writer(seed: int):
            r = random.Random(seed)
            while not stop.is_set():
                try:
                    st, v = gx.post(r.choice([["agent:echo"], ["agent:helper"], ["@all"]]), f"w\n#slow {r.randint(1, 4)}")
                except OSError:
                    return
                if st == 202:
                    posted.extend(t["turnId"] for t in v["turns"])
                    if r.random() < 0.3:
                        try:
                            gx.call("POST", f"/api/turns/{v['turns'][0]['turnId']}/cancel", {})
                        except OSError:
                            return

        ws = [threading.Thread(target=writer, args=(rng.random(),)) for _ in range(3)]
        for w in ws:
            w.start()
        threading.Event().wait(0.5 + rng.random())
        d.kill9()
        stop.set()
        for w in ws:
            w.join()
        d = Daemon(home, ["--groupx", "127.0.0.1:0"]).start()
    try:
        gx = GX(d)
        last = gx.ok_post(["@all"], "after the crashes")
        final = [t["turnId"] for t in last["turns"]]
        everything = set(posted) | set(final)

        def settled(frames):
            done = {f["body"]["turnId"] for f in frames if f["type"] in TERMINAL}
            return set(final) <= done

        by = ledger_turns(gx, settled)
        # Turns the crash cut off before their answer reached the client are in the ledger too.
        for tid, evs in by.items():
            kinds = [e["type"] for e in evs]
            assert kinds[0] == "turn.queued", (tid, kinds)
            assert sum(k in TERMINAL for k in kinds) == 1, (tid, kinds)
            assert kinds[-1] in TERMINAL, (tid, kinds)
            assert kinds.count("turn.dispatched") <= 1, (tid, kinds)
        assert everything <= set(by), everything - set(by)
        assert gx.boot()["turns"] == []
    finally:
        d.stop()


def test_a_cancel_that_waited_for_the_dispatch_commit_settles_the_turn_and_the_lane_goes_on(home):
    """A cancel arriving while the lane commits `turn.dispatched` waits for that fold and then
    records `turn.cancelling`; the lane used to see "not dispatching" and give the turn up,
    leaving it `cancelling` forever and its agent's lane blocked. Other agents' commits and
    memory writes keep the room lock busy so the cancel is queued on it at the right moment."""
    d = start(home, [agent("echo"), agent("helper"), agent("other")], limits={"queuePerAgent": 64})
    try:
        gx = GX(d)
        stop = threading.Event()

        def noise(aid: str):
            while not stop.is_set():
                gx.post([f"agent:{aid}"], "n\n#reply ok")

        def memory_noise():
            while not stop.is_set():
                gx.call("POST", "/api/memory", {"clientCommandId": str(uuid.uuid4()), "scope": "room", "content": "m"})

        ns = [threading.Thread(target=noise, args=(a,)) for a in ("helper", "other")]
        ns += [threading.Thread(target=memory_noise) for _ in range(2)]
        for n in ns:
            n.start()
        r = random.Random(5)
        mine = []
        try:
            for i in range(60):
                tid = gx.ok_post(["agent:echo"], f"e{i}\n#reply hi")["turns"][0]["turnId"]
                mine.append(tid)
                threading.Event().wait(r.random() * 0.02)
                # Cancel until the answer shows the turn left the queue (the racing window).
                for _ in range(30):
                    st, c = gx.call("POST", f"/api/turns/{tid}/cancel", {})
                    assert st == 202, c
                    if c["status"] != "queued":
                        break
        finally:
            stop.set()
            for n in ns:
                n.join()
        last = gx.ok_post(["agent:echo"], "still alive?")["turns"][0]["turnId"]
        assert gx.wait_terminal(last, timeout=30)["type"] == "turn.completed"
        assert not [t for t in gx.boot()["turns"] if t["turnId"] in mine]
    finally:
        d.stop()


def test_agents_starting_sessions_together_all_keep_their_native_session_for_a_restart(home):
    names = [f"a{i}" for i in range(8)]
    for attempt in range(5):
        h = home / f"run{attempt}"
        h.mkdir()
        d = start(h, [agent(n) for n in names])
        try:
            gx = GX(d)
            turns = [t["turnId"] for t in gx.ok_post(["@all"], "hello all")["turns"]]
            for t in turns:
                assert gx.wait_terminal(t)["type"] == "turn.completed"
            kept = json.loads((h / "groupx" / "native-sessions.json").read_text())
            assert sorted(kept) == names, f"attempt {attempt}: kept {sorted(kept)}"
        finally:
            d.stop()


def test_a_turn_woken_by_another_face_gets_the_room_context_like_any_other(home, tmp_path):
    log = tmp_path / "acp.log"
    d = start(home, [agent("echo"), agent("helper")], log=log)
    try:
        gx = GX(d)
        t = gx.ok_post(["agent:helper"], "the launch code is ABC-123")["turns"][0]["turnId"]
        gx.wait_terminal(t)
        groups = d.raw({"v": 1, "op": "groups", "args": {}})["result"]["groups"]
        gid = next(g["group_id"] for g in groups if g["title"] == "groupx main")
        r = d.raw({"v": 1, "op": "send", "args": {"group_id": gid, "by": "user", "text": "what is the code?", "to": ["echo"]}})
        src = r["result"]["event"]["id"]
        turn = gx.wait(lambda evs: next((e for e in evs if e["type"] == "turn.queued" and e["body"]["sourceEventId"] == src), None))
        gx.wait_terminal(turn["body"]["turnId"])
        prompts = [json.loads(line) for line in log.read_text().splitlines()]
        text = next(p["params"]["prompt"][0]["text"] for p in prompts
                    if p.get("method") == "session/prompt" and "what is the code?" in json.dumps(p))
        assert "ABC-123" in text, text
        # The message itself is the current one, not an "earlier" one.
        assert text.count("what is the code?") == 1, text
    finally:
        d.stop()


def _room_gid(gx: GX) -> str:
    groups = gx.d.raw({"v": 1, "op": "groups", "args": {}})["result"]["groups"]
    return next(g["group_id"] for g in groups if g["title"] == "groupx main")


def test_imported_history_wakes_nobody_and_its_turns_never_rerun(home):
    """An import is history: a message naming an agent and a queued turn from an exported room
    must not run, live or after a restart."""
    d = start(home, [agent("echo")])
    gx = GX(d)
    gid = _room_gid(gx)
    old = [
        {"v": 1, "id": "imp-msg", "ts": "2001-01-01T00:00:00.000000Z", "kind": "chat.message", "by": "user",
         "data": {"text": "old question", "to": ["echo"]}},
        {"v": 1, "id": "imp-turn", "ts": "2001-01-01T00:00:01.000000Z", "kind": "x.groupx.turn.queued", "by": "system",
         "data": {"groupx": {"correlationId": "c0", "rootCorrelationId": "c0"},
                  "body": {"turnId": "turn_old", "target": "agent:echo", "sourceEventId": "imp-msg"}}},
    ]
    r = d.raw({"v": 1, "op": "ledger_import", "args": {"group_id": gid, "events": old}})
    assert r["ok"] is True, r
    time.sleep(1.0)
    assert not any(e["type"] == "turn.queued" and e["body"].get("sourceEventId") == "imp-msg" and e["body"]["turnId"] != "turn_old"
                   for e in gx.events())
    d.stop()
    d = Daemon(home, ["--groupx", "127.0.0.1:0"]).start()
    try:
        gx = GX(d)
        time.sleep(1.0)
        assert not any(e["type"] == "turn.dispatched" for e in gx.events()), "an imported turn ran"
        assert gx.boot()["turns"] == []
    finally:
        d.stop()


def test_cursors_past_the_stored_range_are_refused_not_read_from_the_start(home):
    d = start(home, [agent("echo")])
    try:
        gx = GX(d)
        st, v = gx.call("GET", f"/api/events?afterSeq={2**63}")
        assert st == 400 and v["error"]["code"] == "INVALID_ENVELOPE"
    finally:
        d.stop()


def test_an_answer_the_ledger_refuses_fails_the_turn_instead_of_stalling_the_lane(home):
    """The agent's actor is removed over the CCCS IPC mid-turn: its answer can no longer be
    written. Before, the lane retried that commit every second forever."""
    d = start(home, [agent("echo")])
    try:
        gx = GX(d)
        t = gx.ok_post(["agent:echo"], "long one\n#slow 15")["turns"][0]["turnId"]
        gx.wait_type(t, "turn.started")
        r = d.raw({"v": 1, "op": "actor_remove", "args": {"group_id": _room_gid(gx), "actor_id": "echo", "by": "user"}})
        assert r["ok"] is True, r
        end = gx.wait_terminal(t)
        assert end["type"] == "turn.failed" and end["body"]["errorCode"] == "RESPONSE_REFUSED", end
    finally:
        d.stop()
