"""The Cowchat face over WebSocket (`convene serve --cowchat-ws ADDR`, path /ws), driven by the
`websockets` client: one NDJSON frame per text message, the same ledger as the Unix socket."""
from __future__ import annotations

import http.client
import json
import time
from pathlib import Path

import pytest
from conftest import Daemon
from test_cowchat import CC, error_code
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

MAX_FRAME_BYTES = 1 << 20


def addr_doc(home: Path, timeout: float = 10.0) -> dict:
    """<home>/daemon/cowchat.addr.json, once the daemon has written it."""
    p = home / "daemon" / "cowchat.addr.json"
    deadline = time.time() + timeout
    while time.time() < deadline:
        if p.exists():
            return json.loads(p.read_text())
        time.sleep(0.02)
    raise TimeoutError(str(p))


@pytest.fixture
def wsd(home):
    d = Daemon(home, ["--cowchat-ws", "127.0.0.1:0"]).start()
    d.addr = addr_doc(home)
    d.url = d.addr["ws"]
    d.host, d.port = d.url.removeprefix("ws://").removesuffix("/ws").rsplit(":", 1)
    yield d
    d.stop()


class WC(CC):
    """The raw Cowchat client of test_cowchat over WebSocket: one frame per text message.
    Only the transport differs; requests, replies, pushes and pings are CC's."""

    def __init__(self, url: str, **kw):
        # proxy=None: never route loopback tests through an environment proxy.
        self.ws = connect(url, proxy=None, max_size=None, open_timeout=10, legacy=True, **kw)
        self.n = 0
        self.pending: list[dict] = []
        self.pings = 0

    def send_text(self, text: str | bytes) -> None:
        self.ws.send(text)

    def send_raw(self, data: bytes) -> None:
        self.send_text(data.decode().rstrip("\n"))

    def read(self, pings: bool = False, timeout: float = 10.0) -> dict:
        while True:
            fr = json.loads(self.ws.recv(timeout=timeout))
            if fr.get("type") == "ping" and fr.get("reply_to") is None:
                self.pings += 1
                self.send_text(json.dumps({"id": "p", "type": "pong", "reply_to": fr["id"], "payload": {}}))
                if pings:
                    return fr
                continue
            return fr

    def close(self) -> None:
        self.ws.close()


def http_get(d, path: str, headers: dict | None = None) -> tuple[int, dict]:
    c = http.client.HTTPConnection(d.host, int(d.port), timeout=10)
    try:
        c.request("GET", path, headers=headers or {})
        r = c.getresponse()
        r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}
    finally:
        c.close()


def test_addr_file_names_every_listener_and_goes_away_at_stop(wsd):
    a = wsd.addr
    assert a["unix"] == str(wsd.home / "daemon" / "cowchat.sock")
    assert a["tcp"] is None
    assert a["ws"].startswith("ws://127.0.0.1:") and a["ws"].endswith("/ws") and int(wsd.port) > 0
    wsd.stop()
    assert not (wsd.home / "daemon" / "cowchat.addr.json").exists()


def test_register_room_and_message_pushed_to_second_ws_client(wsd):
    a, b = WC(wsd.url), WC(wsd.url)
    reg = a.ok("register", {"name": "alice", "protocol_version": 2})
    assert reg["protocol_version"] == 2
    b.register("bob")
    room = a.ok("create_room", {"name": "general", "description": "d"})["room_id"]
    a.ok("join_room", {"room_id": room})
    b.ok("join_room", {"room_id": room})
    sent = a.ok("send_message", {"room_id": room, "content": "hi over ws"})
    got = b.push("message_received")["payload"]
    assert got["message_id"] == sent["message_id"] and got["content"] == "hi over ws"
    assert got["room_id"] == room


def test_invalid_json_gets_an_error_frame_and_the_connection_stays(wsd):
    c = WC(wsd.url)
    c.send_text("{not json")
    fr = c.read()
    assert error_code(fr) == "invalid_frame" and fr.get("reply_to") is None
    assert c.req("ping")["type"] == "pong"
    # A binary message holding UTF-8 JSON is a frame like a text message.
    c.send_text(json.dumps({"id": "bin1", "type": "ping", "payload": {}}).encode())
    assert c.reply("bin1")["type"] == "pong"
    # A pretty-printed frame (newlines as JSON whitespace) is still one frame.
    c.send_text(json.dumps({"id": "pretty", "type": "ping", "payload": {}}, indent=2))
    assert c.reply("pretty")["type"] == "pong"


def test_message_over_the_frame_limit_is_refused_and_the_connection_stays(wsd):
    c = WC(wsd.url)
    c.register("big")
    frame = json.dumps({"id": "huge", "type": "ping", "payload": {"pad": "x" * MAX_FRAME_BYTES}})
    assert len(frame) > MAX_FRAME_BYTES
    c.send_text(frame)
    assert error_code(c.read()) == "frame_too_large"
    assert c.req("ping")["type"] == "pong"
    # Exactly at the limit is still a frame.
    head = json.dumps({"id": "edge", "type": "ping", "payload": {"pad": ""}})
    edge = head.replace('"pad": ""', '"pad": "' + "y" * (MAX_FRAME_BYTES - len(head)) + '"')
    assert len(edge) == MAX_FRAME_BYTES
    c.send_text(edge)
    assert c.reply("edge")["type"] == "pong"


def test_message_over_the_hard_limit_closes_with_1009(wsd):
    c = WC(wsd.url)
    try:
        c.send_text("x" * (4 * MAX_FRAME_BYTES + 1))
    except ConnectionClosed:
        pass  # the server may refuse (and close) before the client has sent it all
    frames = []
    with pytest.raises(ConnectionClosed) as e:
        while True:
            frames.append(c.read())
    assert [error_code(f) for f in frames] == ["frame_too_large"]
    assert e.value.rcvd is not None and e.value.rcvd.code == 1009


def test_other_paths_are_404_and_a_plain_get_on_ws_needs_an_upgrade(wsd):
    assert http_get(wsd, "/")[0] == 404
    assert http_get(wsd, "/wsx")[0] == 404
    status, headers = http_get(wsd, "/ws")
    assert status == 426 and headers["upgrade"].lower() == "websocket"
    # The query string does not change the path.
    c = WC(wsd.url + "?client=test")
    assert c.req("ping")["type"] == "pong"


def test_ws_message_reaches_a_unix_socket_client(wsd):
    w = WC(wsd.url)
    u = CC(("unix", wsd.addr["unix"]))
    w.register("web")
    u.register("local")
    room = w.ok("create_room", {"name": "bridge"})["room_id"]
    w.ok("join_room", {"room_id": room})
    u.ok("join_room", {"room_id": room})
    sent = w.ok("send_message", {"room_id": room, "content": "from the web"})
    got = u.push("message_received")["payload"]
    assert got["message_id"] == sent["message_id"] and got["content"] == "from the web"
    u.ok("send_message", {"room_id": room, "content": "from the socket"})
    assert w.push("message_received")["payload"]["content"] == "from the socket"
    hist = u.ok("get_history", {"room_id": room})["messages"]
    assert [m["content"] for m in hist] == ["from the web", "from the socket"]


def test_browser_origin_must_present_the_api_key(wsd):
    key = (wsd.home / "auth.key").read_text().strip()
    page = WC(wsd.url, origin="http://evil.example")
    assert error_code(page.req("register", {"name": "page", "protocol_version": 2})) == "unauthorized"
    keyed = WC(wsd.url, origin="http://localhost:3000")
    keyed.register("page", key=key)
    # Without an Origin (not a browser) a loopback peer is local and needs no key.
    WC(wsd.url).register("cli")


def test_websocket_ping_is_answered(wsd):
    c = WC(wsd.url)
    assert c.ws.ping(b"hello").wait(5)


def test_daemon_stop_sends_a_close_frame(wsd):
    c = WC(wsd.url)
    c.register("stay")
    wsd.stop()
    with pytest.raises(ConnectionClosed) as e:
        while True:
            c.read()
    assert e.value.rcvd is not None and e.value.rcvd.code == 1001
