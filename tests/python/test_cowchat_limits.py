"""Per-key Cowchat limits at the boundary a user sees: `convene auth set-limits` on a running
daemon (no restart) and raw Cowchat frames on its Unix socket. Size limits (content,
metadata) for send_message / thinking / decision, the rate, room and agent limits of one key
without touching another, serve-flag defaults bounded by the protocol's hard bounds, and an
invalid limits file refusing that key's registrations until it is fixed."""
from __future__ import annotations

import json

from conftest import Daemon, run_cli
from test_cowchat import CC, error_code

DEFAULTS = {"agents_per_key": 256, "rooms_per_key": 1000, "messages_per_sec": 20000,
            "message_burst": 40000, "max_content_bytes": 262144, "max_metadata_bytes": 16384}


def start(home, *extra: str) -> Daemon:
    return Daemon(home, list(extra)).start()


def cc(home) -> CC:
    return CC(("unix", str(home / "daemon" / "cowchat.sock")))


def auth(home, *args: str) -> str:
    return run_cli(home, "auth", *args).stdout.decode().strip()


def auth_fails(home, *args: str) -> str:
    """Runs a `convene auth` command that must fail; returns its stderr."""
    p = run_cli(home, "auth", *args, check=False)
    assert p.returncode != 0, p.stdout
    return p.stderr.decode()


def reg(c: CC, name: str, key: str = "") -> dict:
    return c.req("register", {"name": name, "agent_id": name, "key": key, "protocol_version": 2})


def test_a_keys_own_limits_apply_at_its_next_register_without_a_restart(home):
    d = start(home)
    try:
        key = auth(home, "add-key", "team-b")
        a = cc(home)
        assert reg(a, "alice")["payload"]["limits"] == DEFAULTS
        room = a.ok("create_room", {"name": "shared", "public": True})["room_id"]
        a.ok("join_room", {"room_id": room})
        # Set while the daemon runs.
        auth(home, "set-limits", "team-b", "--agents", "1", "--rooms", "1", "--messages-per-sec", "1",
             "--message-burst", "3", "--max-content-bytes", "10", "--max-metadata-bytes", "20")
        b = cc(home)
        r = reg(b, "bob", key)
        assert r["type"] == "ok"
        assert r["payload"]["limits"] == {"agents_per_key": 1, "rooms_per_key": 1, "messages_per_sec": 1,
                                          "message_burst": 3, "max_content_bytes": 10, "max_metadata_bytes": 20}
        b.ok("join_room", {"room_id": room})
        # Oversized content or metadata: invalid_payload, for every kind of message. Checked
        # before the rate, so these refusals take no token of the burst below.
        for ftype in ("send_message", "thinking", "decision"):
            e = b.req(ftype, {"room_id": room, "content": "x" * 11})
            assert error_code(e) == "invalid_payload" and e["payload"]["message"] == "content exceeds 10 bytes"
            e = b.req(ftype, {"room_id": room, "content": "ok", "metadata": {"k": "v" * 20}})
            assert error_code(e) == "invalid_payload" and e["payload"]["message"] == "metadata exceeds 20 bytes"
        # At the limits: accepted, up to the burst of 3.
        sent = [b.ok("send_message", {"room_id": room, "content": "x" * 10, "metadata": {"k": "v" * 12}})["message_id"]
                for _ in range(3)]
        assert error_code(b.req("send_message", {"room_id": room, "content": "late"})) == "rate_limit_messages"
        b.ok("create_room", {"name": "b-own"})
        assert error_code(b.req("create_room", {"name": "b-two"})) == "rate_limit_rooms"
        assert error_code(reg(cc(home), "bob2", key)) == "rate_limit_agents"
        # The primary key is untouched by team-b's limits.
        mine = [a.ok("send_message", {"room_id": room, "content": "y" * 1000})["message_id"] for _ in range(5)]
        a.ok("create_room", {"name": "a-two"})
        # A refused message is not stored.
        h = a.ok("get_history", {"room_id": room, "limit": 100})["messages"]
        assert [m["message_id"] for m in h if m["agent_id"] == "bob"] == sent
        assert [m["message_id"] for m in h if m["agent_id"] == "alice"] == mine

        # Raised while bob is connected: the file is read at the key's next register.
        auth(home, "set-limits", "team-b", "--max-content-bytes", "50", "--messages-per-sec", "1000",
             "--message-burst", "1000")
        thirty = {"room_id": room, "content": "z" * 30}
        assert error_code(b.req("send_message", thirty)) == "invalid_payload"
        b2 = cc(home)
        r = reg(b2, "bob", key)  # a second connection of bob: not a new agent
        assert r["type"] == "ok", r
        # Only the flags given changed; from now on every connection of the key follows.
        assert r["payload"]["limits"] == {"agents_per_key": 1, "rooms_per_key": 1, "messages_per_sec": 1000,
                                          "message_burst": 1000, "max_content_bytes": 50, "max_metadata_bytes": 20}
        late = [b2.ok("send_message", thirty)["message_id"], b.ok("send_message", thirty)["message_id"]]
        assert error_code(b2.req("send_message", {"room_id": room, "content": "z" * 51})) == "invalid_payload"
        h = a.ok("get_history", {"room_id": room, "limit": 100})["messages"]
        assert [m["message_id"] for m in h if m["agent_id"] == "bob"] == sent + late

        auth(home, "clear-limits", "team-b")
        assert reg(cc(home), "bob", key)["payload"]["limits"] == DEFAULTS
    finally:
        d.stop()


def test_serve_flags_set_the_default_sizes_within_the_protocols_hard_bounds(home, tmp_path):
    d = start(home, "--cowchat-max-content-bytes", "64", "--cowchat-max-metadata-bytes", "32")
    try:
        a = cc(home)
        lim = reg(a, "alice")["payload"]["limits"]
        assert (lim["max_content_bytes"], lim["max_metadata_bytes"]) == (64, 32)
        room = a.ok("create_room", {"name": "r"})["room_id"]
        a.ok("join_room", {"room_id": room})
        ok = a.ok("send_message", {"room_id": room, "content": "x" * 64, "metadata": {"k": "v" * 24}})
        for ftype in ("send_message", "thinking"):
            assert error_code(a.req(ftype, {"room_id": room, "content": "x" * 65})) == "invalid_payload"
            e = a.req(ftype, {"room_id": room, "content": "x", "metadata": {"k": "v" * 25}})
            assert e["payload"]["message"] == "metadata exceeds 32 bytes"
        assert [m["message_id"] for m in a.ok("get_history", {"room_id": room})["messages"]] == [ok["message_id"]]
        # A key's own limit may be above the serve default, up to the hard bound.
        auth(home, "set-limits", "primary", "--max-content-bytes", "262144")
        a2 = cc(home)
        assert reg(a2, "alice")["payload"]["limits"]["max_content_bytes"] == 262144
        a2.ok("send_message", {"room_id": room, "content": "x" * 262144})
        e = a2.req("send_message", {"room_id": room, "content": "x" * 262145})
        assert e["payload"]["message"] == "content exceeds 262144 bytes"
        # Nothing above the hard bound, neither for a key nor as a default.
        assert "262144" in auth_fails(home, "set-limits", "primary", "--max-content-bytes", "262145")
        assert "16384" in auth_fails(home, "set-limits", "primary", "--max-metadata-bytes", "16385")
        p = run_cli(tmp_path, "serve", "--no-cowchat-tcp", "--cowchat-max-content-bytes", "262145", check=False)
        assert p.returncode != 0 and "262144" in p.stderr.decode()
        assert not (tmp_path / "daemon" / "cowchat.sock").exists()
    finally:
        d.stop()


def test_an_invalid_limits_file_refuses_the_keys_register_until_fixed(home):
    d = start(home)
    try:
        key = auth(home, "add-key", "team-b")
        before = cc(home)
        assert reg(before, "bob", key)["type"] == "ok"
        room = before.ok("create_room", {"name": "r"})["room_id"]
        before.ok("join_room", {"room_id": room})
        f = home / "keys.d" / "team-b.limits.json"
        for body in ("not json", '{"messages_per_second": 5}', '{"max_content_bytes": 262145}',
                     '{"message_burst": 0}', '{"agents_per_key": -1}'):
            f.write_text(body)
            e = reg(cc(home), "bob", key)
            assert error_code(e) == "internal_error", body
            assert "limits" in e["payload"]["message"]
            # The operator's tools say what is wrong and how to get out of it.
            err = auth_fails(home, "show-limits", "team-b")
            assert str(f) in err and "clear-limits" in err
            assert "clear-limits" in auth_fails(home, "set-limits", "team-b", "--agents", "3")
            # Another key is unaffected.
            assert reg(cc(home), "alice")["type"] == "ok"
            # `before` reads (and so answers heartbeats: the test daemon closes a peer
            # silent for 2 s) while the CLI runs.
            before.ok("room_tip", {"room_id": room})
        # A connection registered before the file broke keeps going; fixing it lets the key in.
        before.ok("send_message", {"room_id": room, "content": "still here"})
        auth(home, "clear-limits", "team-b")
        assert reg(cc(home), "bob", key)["payload"]["limits"] == DEFAULTS
        # The primary key (and keyless local clients) fail closed too.
        (home / "keys.d" / "primary.limits.json").write_text('{"rooms_per_key": "many"}')
        assert error_code(reg(cc(home), "carol")) == "internal_error"
        auth(home, "clear-limits", "primary")
        assert reg(cc(home), "carol")["type"] == "ok"
    finally:
        d.stop()


def test_limits_cli_names_existing_keys_and_removes_limits_with_their_key(home):
    for name in ("nobody", "../auth"):
        assert "no API key named" in auth_fails(home, "set-limits", name, "--agents", "1")
    auth(home, "add-key", "team-b")
    assert "at least one limit" in auth_fails(home, "set-limits", "team-b")
    assert "1.." in auth_fails(home, "set-limits", "team-b", "--messages-per-sec", "0")
    auth(home, "set-limits", "team-b", "--rooms", "0")
    shown = json.loads(run_cli(home, "--json", "auth", "show-limits", "team-b").stdout)
    assert shown["principal"] == "team-b" and shown["file"] == str(home / "keys.d" / "team-b.limits.json")
    assert shown["limits"] == {**{k: None for k in DEFAULTS}, "rooms_per_key": 0}
    assert json.loads((home / "keys.d" / "team-b.limits.json").read_text()) == {"rooms_per_key": 0}
    text = auth(home, "show-limits", "team-b")
    assert "rooms_per_key       0" in text and "agents_per_key      (serve default)" in text
    # A removed key takes its limits along: a new key of that name starts from the defaults.
    auth(home, "remove-key", "team-b")
    assert not (home / "keys.d" / "team-b.limits.json").exists()
    auth(home, "add-key", "team-b")
    shown = json.loads(run_cli(home, "--json", "auth", "show-limits", "team-b").stdout)
    assert shown["limits"] == {k: None for k in DEFAULTS}


def test_cli_errors_are_one_line_even_with_rust_backtrace_set(home):
    import os
    import subprocess
    from conftest import convene_bin
    p = subprocess.run([convene_bin(), "--home", str(home), "auth", "show-limits", "nosuchkey"],
                       capture_output=True, timeout=60, env={**os.environ, "RUST_BACKTRACE": "1"})
    err = p.stderr.decode()
    assert p.returncode == 1
    assert err.startswith("Error: ") and "nosuchkey" in err, err
    assert "backtrace" not in err.lower() and len(err.strip().splitlines()) == 1, err
