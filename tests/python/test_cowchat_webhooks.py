"""Cowchat webhook subscriptions: a real daemon driven over its Cowchat Unix socket, POSTing
to a real local HTTP receiver whose signature checks are the PyPI `standardwebhooks`
reference library. Local targets need the test-only `--cowchat-webhooks-allow-local`, and
`--cowchat-webhooks-retry-unit-ms` shrinks the +1/+4/+16/+64/+256 s retry schedule."""
from __future__ import annotations

import base64
import json
import os
import socket
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import Daemon, convene_bin
from test_cowchat import CC, error_code
import trustme
from standardwebhooks import Webhook

SECRET = "s3cret-raw-bytes"


def flags(unit_ms: int = 5, allow_local: bool = True) -> list[str]:
    f = ["--cowchat-webhooks-retry-unit-ms", str(unit_ms)]
    return f + (["--cowchat-webhooks-allow-local"] if allow_local else [])


class Cow(CC):
    """test_cowchat's raw client on the Unix socket, with this file's shorthands."""

    def __init__(self, home, timeout: float = 10.0):
        super().__init__(("unix", str(home / "daemon" / "cowchat.sock")), timeout)

    def err(self, ftype: str, payload: dict | None = None) -> str:
        return error_code(self.req(ftype, payload))

    def register(self, name: str, agent_id: str | None = None, key: str | None = None) -> str:
        p = {"name": name, "agent_id": agent_id or name, "protocol_version": 2}
        if key:
            p["key"] = key
        return self.ok("register", p)["agent_id"]

    def join(self, room: str) -> None:
        fr = self.req("join_room", {"room_id": room})
        # The creator may already be a member.
        assert fr["type"] != "error" or fr["payload"]["code"] == "already_in_room", fr

    def post(self, room: str, content: str, **metadata) -> dict:
        p = {"room_id": room, "content": content}
        if metadata:
            p["metadata"] = metadata
        return self.ok("send_message", p)


class Receiver:
    """A local HTTP server recording every POST; `fail` > 0 answers that many with 500,
    `fail = -1` answers all with 500; `/redirect…` answers 302 to `/hook`; the next `slow`
    requests hang for 3 s and then answer 204 (recorded as status "slow"). While `gate` is
    clear, requests wait (unanswered) until it is set; `inflight` counts requests received and
    not yet answered, `max_inflight` its peak."""

    def __init__(self, tls: ssl.SSLContext | None = None):
        self.scheme = "https" if tls else "http"
        self.hits: list[dict] = []
        self.fail = 0
        self.slow = 0
        self.inflight = 0
        self.max_inflight = 0
        self.gate = threading.Event()
        self.gate.set()
        self.cv = threading.Condition()
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                with outer.cv:
                    outer.inflight += 1
                    outer.max_inflight = max(outer.max_inflight, outer.inflight)
                    outer.cv.notify_all()
                outer.gate.wait(30)
                with outer.cv:
                    failing = outer.fail != 0
                    if outer.fail > 0:
                        outer.fail -= 1
                    slow = outer.slow > 0
                    outer.slow -= slow
                    status = 302 if self.path.startswith("/redirect") else 500 if failing else 204
                    outer.hits.append({"path": self.path, "headers": dict(self.headers), "body": body, "status": "slow" if slow else status})
                    outer.cv.notify_all()
                if slow:
                    time.sleep(3)
                # Counted out before the answer: the daemon may start its next attempt as soon
                # as it reads the status line.
                with outer.cv:
                    outer.inflight -= 1
                    outer.cv.notify_all()
                self.send_response(status)
                if status == 302:
                    self.send_header("location", outer.url("/hook"))
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *a):
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        if tls:
            self.srv.socket = tls.wrap_socket(self.srv.socket, server_side=True)
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.srv.server_address[1]}{path}"

    def delivered(self, path: str | None = None) -> list[dict]:
        """Successful deliveries (2xx), in arrival order, decoded."""
        with self.cv:
            return [json.loads(h["body"]) for h in self.hits if h["status"] == 204 and (path is None or h["path"] == path)]

    def wait(self, pred, timeout: float = 20.0):
        deadline = time.time() + timeout
        with self.cv:
            while not pred():
                left = deadline - time.time()
                if left <= 0:
                    raise TimeoutError(f"receiver saw {len(self.hits)} requests")
                self.cv.wait(left)

    def wait_delivered(self, n: int, path: str | None = None) -> list[dict]:
        self.wait(lambda: len([h for h in self.hits if h["status"] == 204 and (path is None or h["path"] == path)]) >= n)
        return self.delivered(path)

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def start(home, extra: list[str]) -> Daemon:
    """A daemon whose Cowchat socket accepts connections (it binds after the IPC socket)."""
    d = Daemon(home, extra).start()
    deadline = time.time() + 15
    while True:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.connect(str(home / "daemon" / "cowchat.sock"))
            return d
        except OSError:
            assert time.time() < deadline, "cowchat socket never came up"
            time.sleep(0.02)


@pytest.fixture
def rx():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def hooked(home):
    d = start(home, flags())
    yield d
    d.stop()


def setup_room(home, name: str = "alice", agent_id: str | None = None) -> tuple[Cow, str]:
    c = Cow(home)
    c.register(name, agent_id)
    room = c.ok("create_room", {"name": "hooks"})["room_id"]
    c.join(room)
    return c, room


def subscribe(c: Cow, room: str, url: str, **kw) -> dict:
    return c.ok("subscribe", {"room_id": room, "webhook_url": url, "secret": kw.pop("secret", SECRET), **kw})


def test_delivery_is_signed_and_the_secret_is_never_shown(hooked, rx):
    c, room = setup_room(hooked.home)
    c.post(room, "before the subscription")
    sub = subscribe(c, room, rx.url())
    assert sub["status"] == "active" and sub["room_id"] == room and sub["failures"] == 0
    assert sub["subscription_id"].startswith("sub_") and "secret" not in sub
    sent = c.post(room, "hello hooks", kind="review_request")
    [body] = rx.wait_delivered(1)
    hit = rx.hits[0]
    # The reference verifier (raw secrets are passed to it as bytes).
    assert Webhook(SECRET.encode()).verify(hit["body"], hit["headers"]) == body
    with pytest.raises(Exception):
        Webhook(b"wrong secret").verify(hit["body"], hit["headers"])
    assert hit["headers"]["Content-Type"] == "application/json"
    assert hit["path"] == "/hook"
    assert body["type"] == "cowchat.message.created"
    assert body["subscription_id"] == sub["subscription_id"] and body["room_id"] == room
    m = body["message"]
    assert m["message_id"] == sent["message_id"] and m["content"] == "hello hooks"
    assert m["metadata"] == {"kind": "review_request"} and m["agent_id"] == "alice"
    assert m["seq"] == sent["seq"]
    # Only future messages by default: the earlier message was not delivered.
    assert len(rx.hits) == 1
    listed = c.ok("list_subscriptions")
    assert SECRET not in json.dumps(listed)
    [s] = listed["subscriptions"]
    assert "secret" not in s and s["subscription_id"] == sub["subscription_id"]
    assert set(s) >= {"subscription_id", "room_id", "webhook_url", "kinds", "only_from", "not_from",
                      "exclude_thinking", "status", "cursor_seq", "failures", "created_at"}
    deadline = time.time() + 10
    while c.ok("list_subscriptions")["subscriptions"][0]["cursor_seq"] < sent["seq"]:
        assert time.time() < deadline, "cursor did not advance"
        time.sleep(0.02)
    assert c.ok("list_subscriptions", {"room_id": "g_nope"})["subscriptions"] == []


def test_whsec_secret_is_base64_decoded(hooked, rx):
    c, room = setup_room(hooked.home)
    secret = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    subscribe(c, room, rx.url(), secret=secret)
    c.post(room, "signed with a whsec secret")
    rx.wait_delivered(1)
    hit = rx.hits[0]
    assert Webhook(secret).verify(hit["body"], hit["headers"])["message"]["content"] == "signed with a whsec secret"
    # Signing with the literal string would not verify.
    with pytest.raises(Exception):
        Webhook(secret.encode()).verify(hit["body"], hit["headers"])
    assert c.err("subscribe", {"room_id": room, "webhook_url": rx.url(), "secret": "whsec_!!notbase64"}) == "invalid_payload"


def test_filters_and_across_fields_or_within_kinds(hooked, rx):
    a, room = setup_room(hooked.home, "alice", "a-1")
    b = Cow(hooked.home)
    b.register("bob", "b-1")
    b.join(room)
    # only_from by display name, not_from by agent id: either matches.
    subscribe(a, room, rx.url("/s1"), kinds=["review", "verdict"], only_from="alice")
    subscribe(a, room, rx.url("/s2"), not_from=["b-1"], exclude_thinking=True)
    subscribe(a, room, rx.url("/s3"))
    a.post(room, "a-review", kind="review")
    a.post(room, "a-chat", kind="chat")
    b.post(room, "b-verdict", kind="verdict")
    a.post(room, "a-thinking", type="thinking")
    a.ok("thinking", {"room_id": room, "content": "a-pulse"})  # a real thinking pulse
    a.post(room, "a-plain")
    a.post(room, "end", kind="verdict")
    got = lambda p: [m["message"]["content"] for m in rx.delivered(p)]
    rx.wait(lambda: any(json.loads(h["body"])["message"]["content"] == "end" for h in rx.hits if h["path"] == "/s1"))
    rx.wait(lambda: any(json.loads(h["body"])["message"]["content"] == "end" for h in rx.hits if h["path"] == "/s2"))
    rx.wait(lambda: any(json.loads(h["body"])["message"]["content"] == "end" for h in rx.hits if h["path"] == "/s3"))
    assert got("/s1") == ["a-review", "end"]
    assert got("/s2") == ["a-review", "a-chat", "a-plain", "end"]
    assert got("/s3") == ["a-review", "a-chat", "b-verdict", "a-thinking", "a-pulse", "a-plain", "end"]
    [pulse] = [m["message"] for m in rx.delivered("/s3") if m["message"]["content"] == "a-pulse"]
    assert pulse["metadata"]["type"] == "thinking" and pulse["agent_name"] == "alice"
    for h in rx.hits:
        assert Webhook(SECRET.encode()).verify(h["body"], h["headers"])


def test_retries_keep_the_webhook_id_and_order(hooked, rx):
    c, room = setup_room(hooked.home)
    subscribe(c, room, rx.url())
    rx.fail = 3
    m1 = c.post(room, "m1")
    m2 = c.post(room, "m2")
    got = rx.wait_delivered(2)
    assert [g["message"]["message_id"] for g in got] == [m1["message_id"], m2["message_id"]]
    ids = [h["headers"]["webhook-id"] for h in rx.hits]
    assert [h["status"] for h in rx.hits] == [500, 500, 500, 204, 204]
    # Every attempt of m1 carried the same id; m2 has its own.
    assert len(set(ids[:4])) == 1 and ids[4] != ids[0]
    for h in rx.hits:
        Webhook(SECRET.encode()).verify(h["body"], h["headers"])
    assert c.ok("list_subscriptions")["subscriptions"][0]["failures"] == 0


def wait_status(c: Cow, status: str, timeout: float = 30.0) -> dict:
    deadline = time.time() + timeout
    while True:
        [s] = c.ok("list_subscriptions")["subscriptions"]
        if s["status"] == status:
            return s
        assert time.time() < deadline, s
        time.sleep(0.02)


def test_failed_after_five_retries_then_enable_replays_backlog(hooked, rx):
    c, room = setup_room(hooked.home)
    sub = subscribe(c, room, rx.url())
    start = sub["cursor_seq"]
    rx.fail = -1
    m1 = c.post(room, "m1")
    m2 = c.post(room, "m2")
    s = wait_status(c, "failed")
    # One attempt plus five retries, all for m1; the cursor did not move.
    assert len(rx.hits) == 6 and s["failures"] == 6
    assert {json.loads(h["body"])["message"]["message_id"] for h in rx.hits} == {m1["message_id"]}
    assert s["cursor_seq"] == start
    m3 = c.post(room, "m3")  # lands while failed: delivered only after enable
    rx.fail = 0
    again = c.ok("enable_subscription", {"subscription_id": sub["subscription_id"]})
    assert again["status"] == "active" and again["failures"] == 0
    got = rx.wait_delivered(3)
    assert [g["message"]["message_id"] for g in got] == [m1["message_id"], m2["message_id"], m3["message_id"]]
    assert c.err("enable_subscription", {"subscription_id": "sub_nope"}) == "invalid_payload"


def test_backfill_from_zero_and_unsubscribe(hooked, rx):
    c, room = setup_room(hooked.home)
    c.post(room, "old-1")
    c.post(room, "old-2")
    sub = subscribe(c, room, rx.url(), since_seq=0)
    assert [g["message"]["content"] for g in rx.wait_delivered(2)] == ["old-1", "old-2"]
    assert c.ok("unsubscribe", {"subscription_id": sub["subscription_id"]}) == {"subscription_id": sub["subscription_id"]}
    assert c.ok("list_subscriptions")["subscriptions"] == []
    assert c.err("unsubscribe", {"subscription_id": sub["subscription_id"]}) == "invalid_payload"
    assert c.err("subscribe", {"room_id": room, "webhook_url": rx.url(), "secret": SECRET, "since_seq": -1}) == "invalid_payload"
    assert c.err("subscribe", {"room_id": room, "webhook_url": rx.url(), "secret": SECRET, "since_seq": "later"}) == "invalid_payload"


def test_restart_resumes_from_the_persisted_cursor(home, rx):
    d = start(home, flags(unit_ms=200))
    try:
        c, room = setup_room(home)
        sub = subscribe(c, room, rx.url())
        m1 = c.post(room, "m1")
        rx.wait_delivered(1)
        rx.fail = -1
        m2 = c.post(room, "m2")
        m3 = c.post(room, "m3")
        rx.wait(lambda: len(rx.hits) >= 2)  # m2's first attempt failed: a retry is pending
        c.close()
        d.kill9()
        rx.fail = 0
        d = start(home, flags(unit_ms=200))
        got = rx.wait_delivered(3)
        assert [g["message"]["message_id"] for g in got] == [m1["message_id"], m2["message_id"], m3["message_id"]]
        # The retry after the restart kept m2's webhook-id.
        m2_ids = {h["headers"]["webhook-id"] for h in rx.hits if json.loads(h["body"])["message"]["message_id"] == m2["message_id"]}
        assert len(m2_ids) == 1
        c = Cow(home)
        c.register("alice")
        [s] = c.ok("list_subscriptions")["subscriptions"]
        assert s["subscription_id"] == sub["subscription_id"] and s["status"] == "active"
        # Still live after the restart.
        m4 = c.post(room, "m4")
        assert rx.wait_delivered(4)[-1]["message"]["message_id"] == m4["message_id"]
    finally:
        d.stop()


def test_ssrf_guard_refuses_local_and_non_http_targets(home, rx):
    d = start(home, flags(allow_local=False))
    try:
        c, room = setup_room(home)
        for url in [rx.url(), "http://localhost:9/", "http://169.254.169.254/latest/meta-data/",
                    "http://10.0.0.1/", "http://[::1]/", "http://[::ffff:127.0.0.1]/", "http://100.64.1.1/",
                    "ftp://example.com/", "http://user:pw@example.com/", "not a url"]:
            assert c.err("subscribe", {"room_id": room, "webhook_url": url, "secret": SECRET}) == "invalid_payload", url
        assert c.err("subscribe", {"room_id": room, "webhook_url": "https://127.0.0.1/hook", "secret": SECRET}) == "invalid_payload"
        assert c.ok("list_subscriptions")["subscriptions"] == []
        c.post(room, "nobody is listening")
        assert rx.hits == []
    finally:
        d.stop()


def test_subscribe_needs_membership_and_a_room(hooked, rx):
    a, room = setup_room(hooked.home)
    b = Cow(hooked.home)
    b.register("bob")
    code = b.err("subscribe", {"room_id": room, "webhook_url": rx.url(), "secret": SECRET})
    assert code in ("not_member", "not_in_room")
    assert a.err("subscribe", {"room_id": "g_000000000000", "webhook_url": rx.url(), "secret": SECRET}) == "room_not_found"
    assert a.err("subscribe", {"room_id": room, "webhook_url": rx.url(), "secret": ""}) == "invalid_payload"


def test_https_targets_verify_the_certificate(home):
    ca = trustme.CA()
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(ctx)
    rx = Receiver(ctx)
    rogue_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    trustme.CA().issue_cert("127.0.0.1", "localhost").configure_cert(rogue_ctx)
    rogue = Receiver(rogue_ctx)
    ca_file = home / "test-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    d = start(home, flags() + ["--cowchat-webhooks-ca-file", str(ca_file)])
    try:
        c, room = setup_room(home)
        subscribe(c, room, rx.url("/by-name", host="localhost"))  # SNI + name check, pinned address
        subscribe(c, room, rx.url("/by-ip"))  # IP SAN
        bad = subscribe(c, room, rogue.url())  # certificate from a CA the daemon does not trust
        c.post(room, "over tls")
        for path in ("/by-name", "/by-ip"):
            [body] = rx.wait_delivered(1, path)
            assert body["message"]["content"] == "over tls"
        for h in rx.hits:
            Webhook(SECRET.encode()).verify(h["body"], h["headers"])
        deadline = time.time() + 60
        while True:
            s = [x for x in c.ok("list_subscriptions")["subscriptions"] if x["subscription_id"] == bad["subscription_id"]][0]
            if s["status"] == "failed":
                break
            assert time.time() < deadline, (s, (home / "daemon.log").read_text()[-4000:])
            time.sleep(0.02)
        assert s["failures"] == 6 and rogue.hits == []
    finally:
        d.stop()
        rx.close()
        rogue.close()


def test_subscriptions_belong_to_the_api_key(hooked, rx):
    c, room = setup_room(hooked.home)
    mine = subscribe(c, room, rx.url())
    keys = hooked.home / "keys.d"
    keys.mkdir(exist_ok=True)
    fd = os.open(keys / "team2.key", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"team2-api-key\n")
    os.close(fd)
    other = Cow(hooked.home)
    other.register("carol", key="team2-api-key")
    assert other.ok("list_subscriptions")["subscriptions"] == []
    sid = {"subscription_id": mine["subscription_id"]}
    assert other.err("unsubscribe", sid) == "invalid_payload"
    assert other.err("enable_subscription", sid) == "invalid_payload"
    room2 = other.ok("create_room", {"name": "team2-room"})["room_id"]
    other.join(room2)
    theirs = subscribe(other, room2, rx.url("/team2"))
    assert [x["subscription_id"] for x in other.ok("list_subscriptions")["subscriptions"]] == [theirs["subscription_id"]]
    assert [x["subscription_id"] for x in c.ok("list_subscriptions")["subscriptions"]] == [mine["subscription_id"]]


def test_another_keys_refused_enable_does_not_stop_deliveries(hooked, rx):
    # `enable_subscription` of a subscription id the caller does not own is refused like
    # an unknown id, and must leave the owner's deliveries running (it used to stop the
    # delivery task before looking at the owner, silencing the subscription until a restart).
    c, room = setup_room(hooked.home)
    mine = subscribe(c, room, rx.url())
    m1 = c.post(room, "m1")
    rx.wait_delivered(1)
    keys = hooked.home / "keys.d"
    keys.mkdir(exist_ok=True)
    fd = os.open(keys / "team2.key", os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, b"team2-api-key\n")
    os.close(fd)
    other = Cow(hooked.home)
    other.register("carol", key="team2-api-key")
    assert other.err("enable_subscription", {"subscription_id": mine["subscription_id"]}) == "invalid_payload"
    m2 = c.post(room, "m2")
    got = rx.wait_delivered(2)
    assert [g["message"]["message_id"] for g in got] == [m1["message_id"], m2["message_id"]]
    # The cursor is written just after the receiver answered.
    deadline = time.time() + 20
    while (s := c.ok("list_subscriptions")["subscriptions"][0])["cursor_seq"] != m2["seq"]:
        assert time.time() < deadline, s
        time.sleep(0.02)
    assert s["status"] == "active"


def test_redirects_are_failures_and_never_followed(hooked, rx):
    c, room = setup_room(hooked.home)
    subscribe(c, room, rx.url("/redirect"))
    c.post(room, "m1")
    s = wait_status(c, "failed")
    assert s["failures"] == 6
    assert [h["path"] for h in rx.hits] == ["/redirect"] * 6  # /hook was never requested


def test_a_timed_out_attempt_is_a_failure(home, rx):
    d = start(home, flags() + ["--cowchat-webhooks-timeout-ms", "500"])
    try:
        c, room = setup_room(home)
        subscribe(c, room, rx.url())
        rx.slow = 1
        m1 = c.post(room, "m1")
        [got] = rx.wait_delivered(1)
        assert got["message"]["message_id"] == m1["message_id"]
        # The hung attempt (which would have answered 204 after 3 s) was abandoned at 0.5 s
        # and retried: one message, two requests, one webhook-id.
        assert [h["status"] for h in rx.hits] == ["slow", 204]
        assert len({h["headers"]["webhook-id"] for h in rx.hits}) == 1
    finally:
        d.stop()


def test_destroying_the_room_removes_its_subscriptions(hooked, rx):
    c, room = setup_room(hooked.home)
    subscribe(c, room, rx.url())
    c.ok("destroy_room", {"room_id": room})
    deadline = time.time() + 30
    while c.ok("list_subscriptions")["subscriptions"]:
        assert time.time() < deadline, "subscription outlived its room"
        time.sleep(0.05)


def test_a_failed_subscription_goes_with_its_room_destroyed_on_any_face(home, rx):
    """A failed subscription has no delivery task to notice its room is gone: it used to stay
    listed (and counted against the key's limit) after the room was destroyed, until someone
    re-enabled it. It now goes with the room: destroyed by its creator or deleted over the
    CCCS IPC while the daemon runs, or found gone at start-up."""
    d = start(home, flags())
    try:
        c, room = setup_room(home)
        other = c.ok("create_room", {"name": "other"})["room_id"]
        c.join(other)
        rx.fail = -1
        for r in (room, other):
            subscribe(c, r, rx.url())
            c.post(r, "m")
        deadline = time.time() + 30
        while {s["status"] for s in c.ok("list_subscriptions")["subscriptions"]} != {"failed"}:
            assert time.time() < deadline
            time.sleep(0.02)
        c.ok("destroy_room", {"room_id": room})
        assert d.raw({"v": 1, "op": "group_delete", "args": {"group_id": other}})["ok"] is True
        deadline = time.time() + 10
        while c.ok("list_subscriptions")["subscriptions"]:
            assert time.time() < deadline, "a failed subscription outlived its room"
            time.sleep(0.05)
    finally:
        d.stop()


@pytest.mark.parametrize("cap,per_host,expected", [
    (["--cowchat-webhook-concurrency", "2"], [], 2),  # the global cap binds
    ([], ["--cowchat-webhook-per-host", "3"], 3),  # the per-host cap binds
    ([], [], 4),  # defaults: 16 overall, 4 per host
    ([], ["--cowchat-webhook-per-host", "16"], 5),  # one attempt per subscription
], ids=["global-2", "per-host-3", "defaults", "per-subscription"])
def test_concurrency_caps_bound_in_flight_posts_and_keep_each_order(home, rx, cap, per_host, expected):
    subs, per = 5, 4
    d = start(home, flags() + cap + per_host)
    try:
        c, room = setup_room(home)
        sent = [c.post(room, f"m{i}")["seq"] for i in range(per)]
        # Every request waits at the receiver until the gate opens, so attempts pile up.
        rx.gate.clear()
        for i in range(subs):
            subscribe(c, room, rx.url(f"/s{i}"), since_seq=0)
        # One attempt per subscription at a time, never more than the global cap overall,
        # nor more than the per-host cap to this receiver (all subscriptions share its host).
        rx.wait(lambda: rx.inflight >= expected)
        with pytest.raises(TimeoutError):
            rx.wait(lambda: rx.inflight > expected, timeout=1.0)
        rx.gate.set()
        rx.wait_delivered(subs * per)
        assert rx.max_inflight == expected
        for i in range(subs):
            got = [b["message"]["seq"] for b in rx.delivered(f"/s{i}")]
            assert got == sent, i
        assert all(h["status"] == 204 for h in rx.hits)
    finally:
        rx.gate.set()
        d.stop()


def auth(home, *args: str) -> str:
    out = subprocess.run([convene_bin(), "--home", str(home), "auth", *args],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def wait_sub_status(c: Cow, sid: str, status: str, timeout: float = 30.0) -> dict:
    deadline = time.time() + timeout
    while True:
        [s] = [x for x in c.ok("list_subscriptions")["subscriptions"] if x["subscription_id"] == sid]
        if s["status"] == status:
            return s
        assert time.time() < deadline, s
        time.sleep(0.05)


def test_a_removed_or_rotated_keys_subscriptions_stop_delivering(home, rx):
    """A subscription made with an API key is bound to that key: removing or rotating the key
    (what an operator does with a leaked one) must stop its deliveries, or whoever held the
    key keeps receiving the room. They become `revoked` (kept, never deleted), stay so across
    a restart, and the owner with its current key can see and re-enable them. A keyless local
    client's subscription is not bound to a key and goes on."""
    d = start(home, flags())
    try:
        team = auth(home, "add-key", "team2")
        local = Cow(home)
        local.register("alice")
        room = local.ok("create_room", {"name": "hooks", "public": True})["room_id"]
        local.join(room)
        control = subscribe(local, room, rx.url("/keyless"))
        keyed = Cow(home)
        keyed.register("pat", key=auth(home, "show-key"))
        keyed.join(room)
        by_primary_key = subscribe(keyed, room, rx.url("/primary-key"))
        t = Cow(home)
        t.register("carol", key=team)
        t.join(room)
        by_team = subscribe(t, room, rx.url("/team2"))
        m1 = local.post(room, "m1")
        for p in ("/keyless", "/primary-key", "/team2"):
            assert [g["message"]["message_id"] for g in rx.wait_delivered(1, p)] == [m1["message_id"]]

        auth(home, "rotate-key")
        auth(home, "remove-key", "team2")
        new_team = auth(home, "add-key", "team2")  # same principal, a new key
        p2 = Cow(home)
        p2.register("pat-2", key=auth(home, "show-key"))
        t2 = Cow(home)
        t2.register("carol-2", key=new_team)
        wait_sub_status(p2, by_primary_key["subscription_id"], "revoked")
        wait_sub_status(t2, by_team["subscription_id"], "revoked")
        assert wait_sub_status(local, control["subscription_id"], "active")

        m2 = local.post(room, "m2")
        assert rx.wait_delivered(2, "/keyless")[-1]["message"]["message_id"] == m2["message_id"]
        local.close()
        p2.close()
        t2.close()
        d.stop()
        d = start(home, flags())
        local = Cow(home)
        local.register("alice")
        m3 = local.post(room, "m3")
        assert rx.wait_delivered(3, "/keyless")[-1]["message"]["message_id"] == m3["message_id"]
        # Nothing after m1 reached the revoked subscriptions, before or after the restart.
        for p in ("/primary-key", "/team2"):
            assert [g["message"]["message_id"] for g in rx.delivered(p)] == [m1["message_id"]], p
        # The owner, with its current key, sees the revoked subscription and may re-arm it:
        # it is then bound to that key and replays what it missed.
        t3 = Cow(home)
        t3.register("carol-3", key=new_team)
        s = wait_sub_status(t3, by_team["subscription_id"], "revoked")
        assert s["cursor_seq"] == m1["seq"]
        again = t3.ok("enable_subscription", {"subscription_id": by_team["subscription_id"]})
        assert again["status"] == "active"
        got = rx.wait_delivered(3, "/team2")
        assert [g["message"]["message_id"] for g in got] == [m1["message_id"], m2["message_id"], m3["message_id"]]
        assert rx.delivered("/primary-key")[-1]["message"]["message_id"] == m1["message_id"]
    finally:
        d.stop()


def test_re_enabling_while_the_old_task_records_a_failure_starts_from_a_clean_count(home, rx):
    """`enable_subscription` stops the old delivery task, but a store write it already
    started cannot be cancelled: its failure count, retry seq and due time could land after
    the re-arm and be taken up by the new task (fewer retries, a late first attempt) or sit
    in the row for the next restart. Each round re-enables right as the old task reads a 500,
    then holds the new task's first attempt unanswered: nothing may show a failure then."""
    d = start(home, flags(unit_ms=60_000))  # a failed attempt's retry waits a minute
    try:
        c, room = setup_room(home)
        sub = subscribe(c, room, rx.url())
        sid = sub["subscription_id"]
        rx.gate.clear()
        c.post(room, "stuck")
        rx.wait(lambda: rx.inflight == 1)  # the first task's attempt, held
        stale = []
        for rnd in range(150):
            n = len(rx.hits)
            rx.fail = 1
            rx.gate.set()  # the held attempt gets its 500
            rx.wait(lambda: len(rx.hits) > n)
            rx.gate.clear()  # the next attempt (the new task's) is held
            again = c.ok("enable_subscription", {"subscription_id": sid})
            try:
                rx.wait(lambda: rx.inflight == 1, timeout=5)
            except TimeoutError:
                stale.append((rnd, "the new task did not attempt at once"))
                break
            s = next(x for x in c.ok("list_subscriptions")["subscriptions"] if x["subscription_id"] == sid)
            if s["failures"] != 0 or s["status"] != "active" or again["failures"] != 0:
                stale.append((rnd, again["failures"], s["failures"], s["status"]))
        assert not stale, stale
    finally:
        rx.gate.set()
        d.stop()


def test_concurrent_re_enables_leave_the_newest_task_delivering_and_recording(hooked, rx):
    """Two `enable_subscription`s of one subscription at once: each starts a new generation
    and a task for it, in either order. The task left running must be the newest one, whose
    writes land: a delivery it makes moves the stored cursor."""
    import threading

    c, room = setup_room(hooked.home)
    other = Cow(hooked.home)
    other.register("alice-2", "alice")  # the same agent (same key) on a second connection
    sid = subscribe(c, room, rx.url())["subscription_id"]
    stuck = []
    for rnd in range(150):
        gate = threading.Barrier(2)

        def enable(conn: Cow) -> None:
            gate.wait()
            conn.ok("enable_subscription", {"subscription_id": sid})

        ts = [threading.Thread(target=enable, args=(x,)) for x in (c, other)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        m = c.post(room, f"m{rnd}")
        rx.wait_delivered(rnd + 1)
        deadline = time.time() + 5
        while True:
            s = next(x for x in c.ok("list_subscriptions")["subscriptions"] if x["subscription_id"] == sid)
            if s["cursor_seq"] >= m["seq"]:
                break
            if time.time() > deadline:
                stuck.append((rnd, s["cursor_seq"], m["seq"]))
                break
            time.sleep(0.02)
        if stuck:
            break
    assert not stuck, stuck
