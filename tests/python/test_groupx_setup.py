"""GroupX local agent setup (§10.6) against a real daemon: `GET /api/setup` (the file's roster as a
draft, the agent CLIs found on the daemon's PATH), `POST /api/setup` (strict draft, the config
loader's own rules, an atomic write that keeps the limits), and the running roster left alone
until a restart loads the new one."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from conftest import Daemon
from test_groupx import GX

LIMITS = {"queuePerAgent": 5, "messageBytes": 4096}
ROSTER = [
    {"id": "echo", "name": "Echo", "command": ["python3", "fake.py"]},
    {"id": "old", "command": ["python3", "old.py"], "enabled": False, "mode": "auto"},
]


def start(home: Path, cfg: dict | None, path: Path | None = None, env_path: str | None = None) -> tuple[Daemon, GX]:
    path = path or home / "groupx.json"
    if cfg is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cfg))
    extra = ["--groupx", "127.0.0.1:0"] + (["--groupx-config", str(path)] if path != home / "groupx.json" else [])
    d = Daemon(home, extra)
    saved = os.environ.get("PATH")
    if env_path is not None:
        os.environ["PATH"] = env_path  # the daemon inherits it: what its detection searches
    try:
        d.start()
    finally:
        if saved is not None:
            os.environ["PATH"] = saved
    return d, GX(d)


@pytest.fixture
def running(home):
    d, gx = start(home, {"agents": ROSTER, "limits": LIMITS})
    yield gx
    d.stop()


def setup(gx: GX) -> dict:
    st, v = gx.call("GET", "/api/setup")
    assert st == 200, v
    return v


def roster_ids(gx: GX) -> dict[str, bool]:
    return {a["actorId"]: a["enabled"] for a in gx.boot()["agents"]}


def test_get_shows_the_file_the_runtime_and_the_draft(running):
    v = setup(running)
    assert set(v) == {"configPath", "exists", "running", "restartRequired", "serverPort", "storagePath", "drivers", "draft"}
    home = running.d.home
    assert v["configPath"] == str((home / "groupx.json").resolve())
    assert v["exists"] is True and v["running"] is True and v["restartRequired"] is False
    assert v["serverPort"] == running.port
    assert Path(v["storagePath"]).resolve() == home.resolve()
    # The draft is the file's roster with defaults spelled out, and nothing outside the contract.
    assert v["draft"] == {"agents": [
        {"id": "echo", "name": "Echo", "driver": "acp", "command": ["python3", "fake.py"], "enabled": True},
        {"id": "old", "name": "", "driver": "acp", "command": ["python3", "old.py"], "enabled": False, "mode": "auto"},
    ]}
    # The draft posts back as it is (the same shape both ways).
    st, r = running.call("POST", "/api/setup", v["draft"])
    assert st == 200, r


def test_a_missing_file_is_an_empty_draft(home):
    d, gx = start(home, None)
    try:
        v = setup(gx)
        assert v["exists"] is False and v["restartRequired"] is False and v["draft"] == {"agents": []}
    finally:
        d.stop()


def test_drivers_are_detected_on_the_daemons_path_without_running_them(home, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "ran"
    for name, mode in [("gemini", 0o755), ("claude-code-acp", 0o755), ("kimi", 0o644)]:
        (bin_dir / name).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (bin_dir / name).chmod(mode)
    (bin_dir / "hermes").mkdir()  # a directory named like a CLI is not a CLI
    d, gx = start(home, {"agents": ROSTER}, env_path=str(bin_dir))
    try:
        drivers = {x["id"]: x for x in setup(gx)["drivers"]}
        assert set(drivers) == {"codex", "claude", "gemini", "kimi", "hermes"}
        assert drivers["gemini"] == {"driver": "acp", "id": "gemini", "name": "Gemini", "command": ["gemini", "--experimental-acp"],
                                     "detected": True, "path": str(bin_dir / "gemini")}
        assert drivers["claude"]["detected"] is True and drivers["claude"]["command"] == ["claude-code-acp"]
        assert drivers["claude"]["path"] == str(bin_dir / "claude-code-acp")
        assert drivers["kimi"]["detected"] is False and "path" not in drivers["kimi"], "not executable"
        assert drivers["kimi"]["command"] == ["kimi", "acp"] and drivers["kimi"]["mode"] == "auto"
        assert drivers["hermes"] == {"driver": "acp", "id": "hermes", "name": "Hermes", "command": ["hermes", "--yolo", "acp"],
                                     "detected": False, "mode": "dont_ask"}
        assert drivers["codex"] == {"driver": "codex", "id": "codex", "name": "Codex", "command": ["codex", "app-server"],
                                    "detected": False}
        assert not marker.exists(), "detection never runs a CLI"
    finally:
        d.stop()


def agent(aid: str, **kw) -> dict:
    return {"id": aid, "command": ["python3", "x.py"], **kw}


REFUSALS = [
    # (body, status, code, field)
    ({"agents": [agent("a")], "from": "user:web"}, 400, "SENDER_FIELD_FORBIDDEN", "from"),
    ({"agents": [agent("a", actor="agent:x")]}, 400, "SENDER_FIELD_FORBIDDEN", "agents[0].actor"),
    ({"agents": [agent("a")], "provenance": {}}, 400, "SENDER_FIELD_FORBIDDEN", "provenance"),
    # sender fields are checked first, before any other refusal
    ({"agents": [agent("a", model="m")], "from": "x"}, 400, "SENDER_FIELD_FORBIDDEN", "from"),
    ({"agents": [agent("a")], "transport": "direct"}, 400, "INVALID_ENVELOPE", "transport"),
    ({"agents": [agent("a", access="restricted")]}, 400, "INVALID_ENVELOPE", "agents[0].access"),
    ({"agents": [agent("a", approval="never")]}, 400, "INVALID_ENVELOPE", "agents[0].approval"),
    ({"agents": [agent("a", sandbox="off")]}, 400, "INVALID_ENVELOPE", "agents[0].sandbox"),
    ({"agents": [agent("a", model="gpt")]}, 400, "INVALID_ENVELOPE", "agents[0].model"),
    ({"agents": [agent("a", env={"model": "x"})]}, 400, "INVALID_ENVELOPE", "agents[0].env.model"),
    ({"agents": [agent("a")], "limits": {"queuePerAgent": 1}}, 400, "INVALID_ENVELOPE", "limits"),
    ({"agents": [agent("a")], "serverPort": 1}, 400, "INVALID_ENVELOPE", "serverPort"),
    ({"agents": [agent("a", flags=["--x"])]}, 400, "INVALID_ENVELOPE", "agents[0].flags"),
    ({"agents": [agent("a"), agent("a")]}, 400, "INVALID_ENVELOPE", "agents[1].id"),
    ({"agents": [agent("assistant")]}, 400, "INVALID_ENVELOPE", "agents[0].id"),
    ({"agents": [agent("b"), agent("__assistant__")]}, 400, "INVALID_ENVELOPE", "agents[1].id"),
    ({"agents": [agent("user")]}, 400, "INVALID_ENVELOPE", "agents[0].id"),
    ({"agents": [agent("a b")]}, 400, "INVALID_ENVELOPE", "agents[0].id"),
    ({"agents": [agent("")]}, 400, "INVALID_ENVELOPE", "agents[0].id"),
    ({"agents": [agent("x" * 65)]}, 400, "INVALID_ENVELOPE", "agents[0].id"),
    ({"agents": [{"command": ["x"]}]}, 400, "INVALID_ENVELOPE", "agents[0].id"),
    ({"agents": [agent("a", driver="direct")]}, 400, "INVALID_ENVELOPE", "agents[0].driver"),
    ({"agents": [agent("a", command=[])]}, 400, "INVALID_ENVELOPE", "agents[0].command"),
    ({"agents": [agent("a", command=[""])]}, 400, "INVALID_ENVELOPE", "agents[0].command"),
    ({"agents": [agent("a", command="python3 x.py")]}, 400, "INVALID_ENVELOPE", "agents[0].command"),
    ({"agents": [{"id": "a"}]}, 400, "INVALID_ENVELOPE", "agents[0].command"),
    ({"agents": [agent("a", enabled="yes")]}, 400, "INVALID_ENVELOPE", "agents[0].enabled"),
    ({"agents": [agent("a", env={"K": 1})]}, 400, "INVALID_ENVELOPE", "agents[0].env"),
    ({"agents": [agent("a", enabled=False), agent("b", enabled=False)]}, 400, "INVALID_ENVELOPE", "agents"),
    ({"agents": []}, 400, "INVALID_ENVELOPE", "agents"),
    ({}, 400, "INVALID_ENVELOPE", "agents"),
    ({"agents": ["a"]}, 400, "INVALID_ENVELOPE", "agents[0]"),
    ({"draft": {"agents": [agent("a")]}}, 400, "INVALID_ENVELOPE", "draft"),
]


@pytest.mark.parametrize("body,status,code,field", REFUSALS)
def test_a_refused_draft_writes_nothing(running, body, status, code, field):
    path = running.d.home / "groupx.json"
    before = path.read_bytes()
    st, v = running.call("POST", "/api/setup", body)
    assert (st, v["error"]["code"], v["error"].get("field")) == (status, code, field), v
    assert path.read_bytes() == before
    assert setup(running)["restartRequired"] is False


def test_malformed_requests_are_refused(running):
    path = running.d.home / "groupx.json"
    before = path.read_bytes()
    for body, headers in [("not json", {}), ("[1]", {}), (json.dumps({"agents": [agent("a")]}), {"Content-Type": "text/plain"})]:
        st, v = running.call("POST", "/api/setup", body, headers)
        assert st == 400 and v["error"]["code"] == "INVALID_ENVELOPE", v
    st, v = running.call("PUT", "/api/setup", {"agents": [agent("a")]})
    assert st == 405 and v["error"]["code"] == "METHOD_NOT_ALLOWED"
    # The same origin guard as every route: another site's page, or a rebound DNS name, is refused.
    for h in [{"Origin": "http://evil.example"}, {"Host": "evil.example:%d" % running.port}]:
        st, v = running.call("POST", "/api/setup", {"agents": [agent("a")]}, h)
        assert st == 403 and v["error"]["code"] == "INVALID_ENVELOPE", v
        st, _ = running.call("GET", "/api/setup", None, h)
        assert st == 403
    st, v = running.call("POST", "/api/setup", {"agents": [agent("a")]}, {"Origin": f"http://127.0.0.1:{running.port}"})
    assert st == 200, v
    assert path.read_bytes() != before


def test_save_is_atomic_keeps_limits_and_applies_only_after_a_restart(home):
    cfg_path = home / "conf" / "team.json"
    d, gx = start(home, {"agents": ROSTER, "limits": LIMITS}, path=cfg_path)
    cfg_path.chmod(0o640)
    health = gx.call("GET", "/api/health")[1]
    before = roster_ids(gx)
    assert before == {"agent:echo": True, "agent:old": False}
    new = [
        {"id": "echo", "name": "Echo 2", "driver": "acp", "command": ["python3", "fake.py", "--fast"], "enabled": False},
        {"id": "newbie", "name": "New", "driver": "codex", "command": ["codex", "app-server"], "cwd": str(home),
         "identity": "the new one", "enabled": True, "env": {"K": "v"}},
        {"id": "hermes", "command": ["hermes", "--yolo", "acp"], "mode": "dont_ask"},
    ]
    st, v = gx.call("POST", "/api/setup", {"agents": new})
    assert st == 200, v
    assert v == {"saved": True, "restartRequired": True, "configPath": str(cfg_path.resolve())}
    on_disk = json.loads(cfg_path.read_text())
    assert on_disk["limits"] == LIMITS, "the file's limits are kept as they were"
    assert [a["id"] for a in on_disk["agents"]] == ["echo", "newbie", "hermes"]
    assert on_disk["agents"][2] == {"id": "hermes", "name": "", "driver": "acp", "command": ["hermes", "--yolo", "acp"],
                                    "enabled": True, "mode": "dont_ask"}
    assert sorted(p.name for p in cfg_path.parent.iterdir()) == ["team.json"], "no temp file left"
    assert stat.S_IMODE(cfg_path.stat().st_mode) == 0o640, "the file keeps its permissions"
    s = setup(gx)
    assert s["restartRequired"] is True and s["configPath"] == str(cfg_path.resolve())
    assert [a["id"] for a in s["draft"]["agents"]] == ["echo", "newbie", "hermes"]

    # The running runtime keeps its roster: no hot swap of sessions or bindings (§10.6).
    assert roster_ids(gx) == before
    assert gx.call("GET", "/api/health")[1]["runtimeKey"] == health["runtimeKey"]
    st, v = gx.post(["agent:newbie"], "hello")
    assert st == 404 and v["error"]["code"] == "UNKNOWN_TARGET", v

    d.stop()
    d, gx = start(home, None, path=cfg_path)
    try:
        assert roster_ids(gx) == {"agent:echo": False, "agent:newbie": True, "agent:hermes": True}
        names = {a["actorId"]: (a["displayName"], a["driver"]) for a in gx.boot()["agents"]}
        assert names["agent:newbie"] == ("New", "codex") and names["agent:echo"] == ("Echo 2", "acp")
        assert setup(gx)["restartRequired"] is False
        h2 = gx.call("GET", "/api/health")[1]
        assert h2["runtimeKey"] != health["runtimeKey"] and h2["runtimeScopeKey"] == health["runtimeScopeKey"]
    finally:
        d.stop()


def test_a_new_file_is_owner_only_and_a_broken_one_is_not_overwritten(home):
    d, gx = start(home, None)
    try:
        path = home / "groupx.json"
        st, v = gx.call("POST", "/api/setup", {"agents": [agent("first")]})
        assert st == 200, v
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert json.loads(path.read_text()) == {"agents": [{"id": "first", "name": "", "driver": "acp",
                                                             "command": ["python3", "x.py"], "enabled": True}]}
        path.write_text("{broken")
        s = setup(gx)
        assert s["restartRequired"] is True and "fileError" in s
        assert s["draft"] == {"agents": []}, "a broken file shows the running roster"
        st, v = gx.call("POST", "/api/setup", {"agents": [agent("second")]})
        assert st == 400 and v["error"]["field"] == "configPath", v
        assert path.read_text() == "{broken"
        # A file with limits the loader refuses: the save is refused by the same rule.
        path.write_text(json.dumps({"agents": [], "limits": {"askMs": 999999}}))
        st, v = gx.call("POST", "/api/setup", {"agents": [agent("second")]})
        assert st == 400 and v["error"]["field"] == "limits", v
    finally:
        d.stop()


def test_the_page_adds_a_detected_cli_and_saves_through_the_real_route(home, tmp_path):
    import shutil
    import subprocess

    from conftest import ROOT
    node = shutil.which("node")
    if node is None or not (ROOT / "tests" / "js" / "node_modules" / "jsdom").is_dir():
        pytest.skip("node + jsdom needed: npm install --prefix tests/js")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gemini").write_text("#!/bin/sh\nexit 1\n")
    (bin_dir / "gemini").chmod(0o755)
    d, gx = start(home, {"agents": ROSTER, "limits": LIMITS}, env_path=str(bin_dir))
    try:
        before = setup(gx)["draft"]["agents"]
        r = subprocess.run([node, str(ROOT / "tests" / "js" / "page_setup_live_test.mjs"), f"http://127.0.0.1:{gx.port}/"],
                           capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        on_disk = json.loads((home / "groupx.json").read_text())
        # The rows the page loaded went back unchanged (mode included), the new one after them.
        assert on_disk["agents"] == before + [{"id": "gemini", "name": "Gemini", "driver": "acp",
                                               "command": ["gemini", "--experimental-acp"], "enabled": True}]
        assert on_disk["limits"] == LIMITS
        assert setup(gx)["restartRequired"] is True
    finally:
        d.stop()
