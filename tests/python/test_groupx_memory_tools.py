"""GroupX agents' memory and identity MCP tools (§12) and the memory an agent's Context Packet
recalls (§10.4), end to end: a real daemon, fake ACP agents that advertise HTTP MCP and call
a tool on a `#mcp TOOL ARGS` directive, and direct `/mcp` calls with a session's binding."""
from __future__ import annotations

import json

import pytest

from test_groupx import GX, start
from test_groupx_mcp import agent_reply, directive, mcp_agent


@pytest.fixture
def pair(home, tmp_path):
    log = tmp_path / "acp.log"
    d = start(home, [mcp_agent("echo"), mcp_agent("helper")], log=log)
    yield GX(d), log
    d.stop()


def log_lines(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def binding_for(gx: GX, log, agent: str) -> str:
    """Gives `agent` a turn (so its session exists) and returns its session's binding: the
    binding of the session/new whose session then got the prompt naming that agent."""
    t = gx.ok_post([f"agent:{agent}"], "hello")["turns"][0]["turnId"]
    gx.wait_terminal(t, timeout=40)
    sessions, owner = {}, {}
    for m in log_lines(log):
        if m.get("method") == "session/new":
            sessions.setdefault("pending", []).append(m["params"]["mcpServers"][0]["headers"][0]["value"])
        elif m.get("method") == "session/prompt":
            text = prompt_of(m)
            for b in sessions.pop("pending", []):
                owner.setdefault(text.split("(agent:", 1)[1].split(")", 1)[0], b)
    return owner[agent]


def prompt_of(m: dict) -> str:
    return "\n".join(b.get("text", "") for b in m["params"]["prompt"] if b.get("type") == "text")


def prompts_to(log, agent: str) -> list[str]:
    return [p for p in (prompt_of(m) for m in log_lines(log) if m.get("method") == "session/prompt")
            if f"(agent:{agent}), one agent" in p]


def tool(gx: GX, binding: str, name: str, args: dict) -> tuple[bool, dict]:
    st, v = gx.call("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                     "params": {"name": name, "arguments": args}},
                    headers={"X-GroupX-Binding": binding})
    assert st == 200, v
    return v["result"]["isError"], v["result"]["structuredContent"]


def test_groupx_12_an_agents_memory_is_authored_by_its_binding(pair):
    gx, _ = pair
    user = gx.ok_post(["agent:echo"], "note it\n" + directive(
        "groupx.memory.remember", {"content": "We deploy on Fridays", "clientCommandId": "m1"}))
    rec = agent_reply(gx, user["turns"][0]["turnId"])["memory"]
    assert rec["authorActorId"] == "agent:echo" and rec["scope"] == "room" and rec["subjectActorId"] is None
    st, v = gx.call("GET", "/api/memory")
    assert st == 200 and [(m["memoryId"], m["authorActorId"]) for m in v["memories"]] == [(rec["memoryId"], "agent:echo")]
    # The author is never taken from the arguments.
    user = gx.ok_post(["agent:echo"], "forge\n" + directive(
        "groupx.memory.remember", {"content": "x", "clientCommandId": "m2", "authorActorId": "user:web"}))
    assert agent_reply(gx, user["turns"][0]["turnId"])["errorCode"] == "SENDER_FIELD_FORBIDDEN"
    st, v = gx.call("GET", "/api/memory")
    assert len(v["memories"]) == 1


def test_groupx_12_core_memory_is_private_recalled_and_fixed_to_the_caller(pair):
    gx, log = pair
    echo = binding_for(gx, log, "echo")
    helper = binding_for(gx, log, "helper")
    err, v = tool(gx, echo, "groupx.core_memory_remember", {"content": "Echo prefers tabs", "clientCommandId": "c1"})
    assert not err, v
    core = v["memory"]
    assert (core["scope"], core["agentMemoryType"], core["subjectActorId"], core["authorActorId"]) == \
        ("agent", "core", "agent:echo", "agent:echo")
    # The web client keeps an agent-scope note about helper: helper sees it, echo does not.
    st, w = gx.call("POST", "/api/memory", {"clientCommandId": "w1", "scope": "agent", "subjectActorId": "agent:helper",
                                            "content": "Helper prefers spaces"})
    assert st == 201, w
    err, v = tool(gx, helper, "groupx.memory.remember", {"content": "Room: tabs vs spaces is open", "clientCommandId": "r1"})
    assert not err, v
    err, v = tool(gx, helper, "groupx.memory.search", {"query": "PREFERS"})
    assert not err and [m["content"] for m in v["memories"]] == ["Helper prefers spaces"], v
    err, v = tool(gx, helper, "groupx.memory.search", {})
    assert [m["content"] for m in v["memories"]] == ["Room: tabs vs spaces is open", "Helper prefers spaces"], v
    err, v = tool(gx, echo, "groupx.memory.search", {"query": "prefers"})
    assert [m["content"] for m in v["memories"]] == ["Echo prefers tabs"], v
    err, v = tool(gx, echo, "groupx.memory.search", {"scope": "room", "limit": 1})
    assert [m["content"] for m in v["memories"]] == ["Room: tabs vs spaces is open"] and v["truncated"] is False, v
    # The next prompt of echo recalls its core memory and the room memory; helper's does not
    # get echo's core memory.
    for a in ("echo", "helper"):
        t = gx.ok_post([f"agent:{a}"], "next")["turns"][0]["turnId"]
        gx.wait_terminal(t, timeout=40)
    echo_prompt, helper_prompt = prompts_to(log, "echo")[-1], prompts_to(log, "helper")[-1]
    assert "- Echo prefers tabs" in echo_prompt and "(agent:helper) Room: tabs vs spaces is open" in echo_prompt
    assert "Echo prefers tabs" not in helper_prompt and "- Helper prefers spaces" in helper_prompt
    # Memory comes before the messages; the current message stays last.
    assert echo_prompt.index("Echo prefers tabs") < echo_prompt.index("Room messages since")
    assert echo_prompt.rstrip().endswith("next")


def test_groupx_12_forbidden_arguments_and_retries(pair):
    gx, log = pair
    echo = binding_for(gx, log, "echo")
    for bad in ("scope", "subjectActorId", "subject", "binding", "agentMemoryType"):
        err, v = tool(gx, echo, "groupx.core_memory_remember", {"content": "x", "clientCommandId": "c", bad: "agent:helper"})
        assert err and v["errorCode"] == "INVALID_ENVELOPE" and v["field"] == bad, v
    for bad in ("from", "author", "authorActorId"):
        err, v = tool(gx, echo, "groupx.core_memory_remember", {"content": "x", "clientCommandId": "c", bad: "agent:helper"})
        assert err and v["errorCode"] == "SENDER_FIELD_FORBIDDEN", v
    err, v = tool(gx, echo, "groupx.identity.remember", {"kind": "role", "content": "x", "clientCommandId": "i",
                                                         "subjectActorId": "agent:helper"})
    assert err and v["errorCode"] == "INVALID_ENVELOPE", v
    err, v = tool(gx, echo, "groupx.memory.remember", {"content": "x", "clientCommandId": "s", "sourceEventId": "evt_nope"})
    assert err and v["errorCode"] == "INVALID_ENVELOPE" and v["field"] == "sourceEventId", v
    st, v = gx.call("GET", "/api/memory")
    assert v["memories"] == []
    # A retry answers the first result; the key with another payload, or a key a message of
    # the same binding used, is a conflict.
    err, first = tool(gx, echo, "groupx.core_memory_remember", {"content": "keep it short", "clientCommandId": "k1"})
    err2, again = tool(gx, echo, "groupx.core_memory_remember", {"content": "keep it short", "clientCommandId": "k1"})
    assert not err and not err2 and again == first
    err, v = tool(gx, echo, "groupx.core_memory_remember", {"content": "something else", "clientCommandId": "k1"})
    assert err and v["errorCode"] == "CLIENT_COMMAND_CONFLICT", v
    err, v = tool(gx, echo, "groupx.publish", {"content": "hi", "clientCommandId": "k1"})
    assert err and v["errorCode"] == "CLIENT_COMMAND_CONFLICT", v
    err, v = tool(gx, echo, "groupx.publish", {"content": "hi", "clientCommandId": "p1"})
    assert not err, v
    err, v = tool(gx, echo, "groupx.memory.remember", {"content": "hi", "clientCommandId": "p1"})
    assert err and v["errorCode"] == "CLIENT_COMMAND_CONFLICT", v
    st, v = gx.call("GET", "/api/memory")
    assert [m["content"] for m in v["memories"]] == ["keep it short"]


def test_groupx_12_identity_is_about_the_caller_and_read_by_everyone(pair):
    gx, log = pair
    echo = binding_for(gx, log, "echo")
    helper = binding_for(gx, log, "helper")
    err, v = tool(gx, echo, "groupx.identity.remember", {"kind": "role", "content": "release reviewer", "clientCommandId": "i1"})
    assert not err and v["identity"]["subjectActorId"] == "agent:echo" == v["identity"]["authorActorId"], v
    err, v = tool(gx, helper, "groupx.identity.read", {})
    assert [(i["subjectActorId"], i["kind"], i["content"]) for i in v["identities"]] == [("agent:echo", "role", "release reviewer")]
    err, v = tool(gx, helper, "groupx.identity.read", {"agentId": "agent:helper"})
    assert not err and v["identities"] == []
    err, v = tool(gx, helper, "groupx.identity.read", {"agentId": "agent:nobody"})
    assert err and v["errorCode"] == "UNKNOWN_ACTOR", v
    t = gx.ok_post(["agent:echo"], "again")["turns"][0]["turnId"]
    gx.wait_terminal(t, timeout=40)
    assert "- role: release reviewer" in prompts_to(log, "echo")[-1]
