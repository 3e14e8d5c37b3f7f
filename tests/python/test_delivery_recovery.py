"""Runtime recovery (CCCS §6.4): an automatic delivery is recorded as due together with its
message, so a kill -9 between the message's commit and the delivery's claim leaves it owed,
and the next start makes it. No message to a driven runtime is left without a delivery
record."""
import json
import threading
import time

from cccc_sdk import CCCCClient

from conftest import Daemon, kill9_under_load, run_cli


def deliveries_by_message(home, gid) -> tuple[list[str], dict[str, list[str]]]:
    """(ids of the messages to `w`, delivery states per message id) from a ledger export."""
    out = home / "export.ndjson"
    out.unlink(missing_ok=True)  # `ledger export` appends to an existing file
    run_cli(home, "ledger", "export", gid, "--out", str(out))
    msgs, states = [], {}
    for line in out.read_text().splitlines():
        e = json.loads(line)
        if e["kind"] == "chat.message" and e["data"].get("to") == ["w"]:
            msgs.append(e["id"])
        elif e["kind"] == "runtime.delivery" and e["data"]["actor_id"] == "w":
            states.setdefault(e["data"]["source_event_id"], []).append(e["data"]["state"])
    return msgs, states


def test_CCCS_6_4_4_a_delivery_whose_claim_a_kill9_cut_off_is_made_at_the_next_start(home):
    d = Daemon(home).start()
    c = CCCCClient(cccc_home=str(home))
    gid = c.group_create(title="t", topic="recovery")["group_id"]
    c.actor_add(group_id=gid, actor_id="lead", runtime="none")
    # A driven runtime with no consumer attached: every attempt is claimed, then `failed`.
    c.actor_add(group_id=gid, actor_id="w", runtime="session")
    stop = threading.Event()

    def writer(k: int) -> None:
        cl = CCCCClient(cccc_home=str(home))
        i = 0
        while not stop.is_set():
            try:
                cl.send(group_id=gid, text=f"{k}-{i}", message_mode="send", to=["w"])
            except Exception:
                return  # the daemon died mid-request
            i += 1

    # Two rounds of load cut by a kill -9 (the second also cuts the first round's recovery
    # short if it is still running): each round leaves a few messages unclaimed.
    for _ in range(2):
        kill9_under_load(d, writer, 4, stop, secs=1.0)
        stop.clear()
        d = Daemon(home).start()
    try:
        deadline = time.time() + 30
        while True:
            msgs, states = deliveries_by_message(home, gid)
            missing = [m for m in msgs if m not in states]
            open_ = [m for m in msgs if m in states and states[m][-1] == "claimed"]
            if not missing and not open_:
                break
            assert time.time() < deadline, (
                f"{len(missing)} of {len(msgs)} messages never got a delivery record, "
                f"{len(open_)} still claimed")
            time.sleep(0.2)
        assert len(msgs) > 100, len(msgs)
        # Exactly one attempt each: recovery never claims one a record already settled.
        assert all(s.count("claimed") == 1 for s in states.values()), states
        assert {s[-1] for s in states.values()} <= {"failed", "ambiguous", "accepted"}
        # Nothing is owed any more: a second restart recovers nothing and adds no record.
        d.stop()
        d = Daemon(home).start()
        time.sleep(0.5)
        assert deliveries_by_message(home, gid)[1] == states
    finally:
        d.stop()
