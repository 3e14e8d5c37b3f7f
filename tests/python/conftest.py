"""Fixtures: a real convene daemon on a temp home, driven by the unmodified cccc-sdk."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def convene_bin() -> str:
    b = os.environ.get("CONVENE_BIN") or str(ROOT / "target" / "debug" / "convene")
    if not Path(b).exists():
        raise RuntimeError(f"convene binary not found at {b}; run `cargo build` first")
    return b


def kill9_under_load(d: "Daemon", writer, writers: int, stop, secs: float = 1.5) -> None:
    """Runs `writer(k)` on `writers` threads, kills the daemon with SIGKILL after `secs`,
    then sets `stop` and waits for every writer to return."""
    import threading
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(writers)]
    for t in threads:
        t.start()
    time.sleep(secs)
    d.kill9()
    stop.set()
    for t in threads:
        t.join()


def evidence_prefix() -> list[str]:
    """The command prefix of `evidence ...`: CONVENE_EVIDENCE_CMD (shell-split, e.g.
    "convene evidence"), else CONVENE_EVIDENCE_BIN (a binary taking "evidence ..."), else
    target/debug/convene-evidence."""
    import shlex
    cmd = os.environ.get("CONVENE_EVIDENCE_CMD")
    if cmd:
        return shlex.split(cmd)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    default = target / "debug" / "convene-evidence"
    return [os.environ.get("CONVENE_EVIDENCE_BIN", str(default)), "evidence"]


class Daemon:
    """A convene daemon process on its own home."""

    def __init__(self, home: Path, extra: list[str] | None = None):
        self.home = home
        self.extra = extra or []
        self.proc: subprocess.Popen | None = None

    @property
    def sock(self) -> Path:
        return self.home / "daemon" / "ccccd.sock"

    def start(self, wait: bool = True) -> "Daemon":
        log = open(self.home / "daemon.log", "ab")
        env = dict(os.environ, CONVENE_LOG=os.environ.get("CONVENE_LOG", "warn"))
        self.proc = subprocess.Popen(
            [convene_bin(), "--home", str(self.home), "serve", "--heartbeat-ms", "500",
             # Tests never take the shared Cowchat default port unless they ask for TCP.
             *([] if "--cowchat-tcp" in self.extra else ["--no-cowchat-tcp"]),
             *([] if "--groupx" in self.extra else ["--no-groupx"]), *self.extra],
            stdout=log, stderr=log, env=env,
        )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc and self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}: {(self.home / 'daemon.log').read_text()[-2000:]}")
            try:
                self.raw({"v": 1, "op": "ping", "args": {}})
                return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("daemon did not become ready")

    def raw(self, req, timeout: float = 10.0) -> dict:
        """One request on a fresh connection; `req` is a dict or raw bytes."""
        data = req if isinstance(req, (bytes, bytearray)) else (json.dumps(req) + "\n").encode()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect(str(self.sock))
            s.sendall(data)
            f = s.makefile("rb")
            line = f.readline()
        return json.loads(line)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture
def home():
    d = Path(tempfile.mkdtemp(prefix="convene-test-"))
    yield d
    if not os.environ.get("CONVENE_KEEP_HOMES"):
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def daemon(home):
    d = Daemon(home).start()
    yield d
    d.stop()


@pytest.fixture
def client(daemon):
    from cccc_sdk import CCCCClient

    return CCCCClient(cccc_home=str(daemon.home))


@pytest.fixture
def group(client):
    """A group with a foreman `lead` and peers `p1`, `p2`."""
    gid = client.group_create(title="t", topic="tests")["group_id"]
    for a in ("lead", "p1", "p2"):
        client.actor_add(group_id=gid, actor_id=a, runtime="none")
    return gid


def run_cli(home: Path, *args: str, input: bytes | None = None, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([convene_bin(), "--home", str(home), *args], capture_output=True, input=input, check=check, timeout=60)
