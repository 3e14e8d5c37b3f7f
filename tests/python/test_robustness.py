"""Crash safety, bad input, and the single-writer rule (CCCS §12)."""
import json
import socket
import threading
import time

from cccc_sdk import CCCCClient

from conftest import Daemon, kill9_under_load


class Conn:
    """A persistent IPC connection (several requests per connection)."""

    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.settimeout(10)
        self.s.connect(str(path))
        self.f = self.s.makefile("rb")

    def send_raw(self, data: bytes) -> dict:
        self.s.sendall(data)
        return json.loads(self.f.readline())

    def call(self, op, args):
        return self.send_raw((json.dumps({"v": 1, "op": op, "args": args}) + "\n").encode())


def test_kill9_during_concurrent_appends_loses_no_acknowledged_event(home):
    d = Daemon(home).start()
    c = CCCCClient(cccc_home=str(home))
    gid = c.group_create(title="crash")["group_id"]
    c.actor_add(group_id=gid, actor_id="p1", runtime="none")
    acked = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(k):
        conn = Conn(d.sock)
        i = 0
        while not stop.is_set():
            try:
                r = conn.call("send", {"group_id": gid, "text": f"w{k}-{i}", "message_mode": "mail", "to": ["p1"]})
            except (OSError, ValueError):
                return  # the daemon died mid-exchange: that request was never acknowledged
            if r.get("ok"):
                with lock:
                    acked.append((r["result"]["event"]["id"], r["result"]["event"]["seq"]))
            i += 1

    kill9_under_load(d, writer, 8, stop)
    assert len(acked) > 100
    d2 = Daemon(home).start()
    try:
        got = {}
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(str(d2.sock))
        s.sendall((json.dumps({"v": 1, "op": "events_stream", "args": {"group_id": gid, "since_seq": 0, "follow": False}}) + "\n").encode())
        f = s.makefile("rb")
        assert json.loads(f.readline())["ok"]
        seqs = []
        for line in f:
            ev = json.loads(line)["event"]  # every record parses: no torn record
            seqs.append(ev["seq"])
            got[ev["id"]] = ev["seq"]
        assert seqs == list(range(1, len(seqs) + 1)), "seq must be gap-free"
        missing = [i for i, _ in acked if i not in got]
        assert not missing, f"{len(missing)} acknowledged events lost"
        assert all(got[i] == sq for i, sq in acked), "an acknowledged seq changed"
        # and the daemon keeps appending after the head
        nxt = CCCCClient(cccc_home=str(home)).send(group_id=gid, text="after", message_mode="mail", to=["p1"])["event"]
        assert nxt["seq"] == len(seqs) + 1
    finally:
        d2.stop()


def test_bad_input_gets_structured_errors_and_changes_nothing(daemon, client, group):
    head = client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"]
    conn = Conn(daemon.sock)
    cases = [
        (b"{not json\n", "invalid_request"),
        (b"[1,2,3]\n", "invalid_request"),
        (b'{"v":1,"op":"send","args":[]}\n', "invalid_request"),
        (b'{"v":1,"op":"send","args":{},"by":"root"}\n', "invalid_request"),  # unknown envelope field
        (b'{"v":2,"op":"ping","args":{}}\n', "invalid_request"),
        (b'{"v":1,"op":42}\n', "invalid_request"),
        (b'{"v":1,"op":"definitely_not_an_op","args":{}}\n', "unknown_op"),
        (json.dumps({"v": 1, "op": "send", "args": {"group_id": group, "text": 5, "message_mode": "send"}}).encode() + b"\n", "invalid_request"),
        (json.dumps({"v": 1, "op": "send", "args": {"group_id": group, "text": "x", "to": "p1"}}).encode() + b"\n", "invalid_request"),
        (json.dumps({"v": 1, "op": "send", "args": {"group_id": group, "text": "x", "message_mode": "shout"}}).encode() + b"\n", "invalid_request"),
        (json.dumps({"v": 1, "op": "ledger_tail", "args": {"group_id": group, "limit": "ten"}}).encode() + b"\n", "invalid_request"),
        (json.dumps({"v": 1, "op": "inbox_peek", "args": {"group_id": group, "actor_id": "p1", "limit": 100000}}).encode() + b"\n", "invalid_request"),
        (b'{"v":1,"op":"send","args":{"group_id":"' + b"x" * (5 * 1024 * 1024) + b'"}}\n', "limit_exceeded"),
        ("\udcff".encode("utf-8", "surrogatepass") + b"\n", "invalid_request"),
    ]
    for raw, code in cases:
        r = conn.send_raw(raw)
        assert r["v"] == 1 and r["ok"] is False, raw[:80]
        assert r["error"]["code"] == code, (raw[:80], r)
        assert isinstance(r["error"]["message"], str) and isinstance(r["error"]["details"], dict)
        # the same connection keeps serving
        assert conn.call("ping", {})["ok"] is True
    assert client.call("ledger_tail", {"group_id": group, "limit": 1})["head_seq"] == head


def test_pipelined_requests_are_answered_in_order(daemon):
    conn = Conn(daemon.sock)
    batch = b"".join((json.dumps({"v": 1, "op": "version", "args": {}}) + "\n").encode() for _ in range(50))
    conn.s.sendall(batch + b'{"v":1,"op":"ping"}\n')
    out = [json.loads(conn.f.readline()) for _ in range(51)]
    assert all(o["ok"] for o in out) and "ipc_v" in out[-1]["result"]


def test_CCCS_12_2_second_daemon_on_same_home_refuses(daemon, home):
    second = Daemon(home).start(wait=False)
    rc = second.proc.wait(10)
    assert rc != 0
    assert "already running" in (home / "daemon.log").read_text()
    # the first one still serves
    assert daemon.raw({"v": 1, "op": "ping", "args": {}})["ok"] is True


def test_shutdown_op_stops_the_daemon_and_removes_endpoint(daemon):
    r = daemon.raw({"v": 1, "op": "shutdown", "args": {}})
    assert r["result"]["shutting_down"] is True
    assert daemon.proc.wait(10) == 0
    assert not (daemon.home / "daemon" / "ccccd.addr.json").exists()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tcp_call(port, req):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall((json.dumps(req) + "\n").encode())
        return json.loads(s.makefile("rb").readline())


def test_CCCS_5_4_3_tcp_with_auth_requires_the_api_key(home):
    port = _free_port()
    d = Daemon(home, ["--tcp", f"127.0.0.1:{port}", "--require-key"]).start()
    try:
        r = _tcp_call(port, {"v": 1, "op": "groups", "args": {}})
        assert r["ok"] is False and r["error"]["code"] == "permission_denied"
        key = (home / "auth.key").read_text().strip()
        assert oct((home / "auth.key").stat().st_mode & 0o777) == "0o600"
        r = _tcp_call(port, {"v": 1, "op": "groups", "args": {"api_key": key}})
        assert r["ok"] is True
        r = _tcp_call(port, {"v": 1, "op": "groups", "args": {"api_key": "wrong"}})
        assert r["error"]["code"] == "permission_denied"
    finally:
        d.stop()


def test_tcp_loopback_is_local_trust_and_sdk_works_over_tcp(home):
    from cccc_sdk.transport import DaemonEndpoint
    port = _free_port()
    d = Daemon(home, ["--tcp", f"127.0.0.1:{port}"]).start()
    try:
        c = CCCCClient(endpoint=DaemonEndpoint(transport="tcp", host="127.0.0.1", port=port))
        gid = c.group_create(title="over tcp")["group_id"]
        assert c.group_show(gid)["group"]["title"] == "over tcp"
    finally:
        d.stop()


def test_an_http_request_to_the_ipc_tcp_port_is_refused_before_its_body_runs(home):
    # Loopback TCP is trusted, and a web page can make a browser POST to it with request
    # lines as a text/plain body: the connection must end at the request line.
    port = _free_port()
    d = Daemon(home, ["--tcp", f"127.0.0.1:{port}"]).start()
    try:
        body = json.dumps({"v": 1, "op": "group_create", "args": {"title": "pwned", "by": "user"}}) + "\n"
        req = (f"POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: https://evil.example\r\n"
               f"Content-Type: text/plain\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode()
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(req)
            answers = [json.loads(line) for line in s.makefile("rb")]  # until the daemon closes
        assert len(answers) == 1 and answers[0]["ok"] is False, answers
        groups = d.raw({"v": 1, "op": "groups", "args": {}})["result"]["groups"]
        assert "pwned" not in {g["title"] for g in groups}
    finally:
        d.stop()


def test_pipelined_sends_share_commits_keep_order_and_reads_see_them(daemon, client, group):
    conn = Conn(daemon.sock)
    n = 500
    reqs = b"".join((json.dumps({"v": 1, "op": "send", "args": {"group_id": group, "text": f"p{i}", "message_mode": "mail", "to": ["p1"]}}) + "\n").encode() for i in range(n))
    # a bad one in the middle and a read at the end, all in one write
    bad = (json.dumps({"v": 1, "op": "send", "args": {"group_id": group, "text": "x", "message_mode": "mail", "to": ["user"]}}) + "\n").encode()
    tail = (json.dumps({"v": 1, "op": "ledger_tail", "args": {"group_id": group, "limit": 1}}) + "\n").encode()
    # Write from another thread while reading, as a pipelining client must.
    w = threading.Thread(target=conn.s.sendall, args=(reqs + bad + tail,))
    w.start()
    answers = [json.loads(conn.f.readline()) for _ in range(n + 2)]
    w.join()
    seqs = [a["result"]["event"]["seq"] for a in answers[:n]]
    assert [a["result"]["event"]["data"]["text"] for a in answers[:n]] == [f"p{i}" for i in range(n)]
    assert seqs == list(range(seqs[0], seqs[0] + n)), "pipelined sends keep their order"
    assert answers[n]["ok"] is False and answers[n]["error"]["code"] == "invalid_request"
    assert answers[n + 1]["result"]["head_seq"] == seqs[-1], "a read after pipelined writes sees them"


def test_no_request_creates_an_event_the_sdk_cannot_read_back(client, group, daemon):
    """The cccc-sdk reads answer and stream lines of at most 4,000,000 bytes. A raw client
    could send a message of just over that (refs), accepted under a 4 MiB request limit; the
    event then broke every SDK stream replaying past it and its recipient's inbox_read (the
    cursor moved, the SDK refused the answer). The request limit now keeps events readable."""
    refs = [{"kind": "url", "url": "https://e.com/", "title": "t" * 63_000} for _ in range(64)]
    r = daemon.raw({"v": 1, "op": "send", "args": {"group_id": group, "text": "big", "message_mode": "mail",
                                                   "to": ["p1"], "by": "lead", "refs": refs}})
    assert r["ok"] is False and r["error"]["code"] == "limit_exceeded"
    assert r["error"]["details"]["reason"] == "request_too_large"
    # What is accepted is read back whole through the SDK.
    refs = refs[:50]
    assert daemon.raw({"v": 1, "op": "send", "args": {"group_id": group, "text": "big", "message_mode": "mail",
                                                      "to": ["p1"], "by": "lead", "refs": refs}})["ok"] is True
    got = client.inbox_read(group_id=group, actor_id="p1", by="p1")["messages"]
    assert len(got) == 1 and len(got[0]["data"]["refs"]) == 50
