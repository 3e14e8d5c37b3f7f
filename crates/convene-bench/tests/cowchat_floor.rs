//! The floor server speaks enough of the Cowchat wire for `shared/bench/cowchat_bench.py`:
//! replies carry `reply_to`, members get `message_received` pushes in seq order, and
//! `get_history` pages by `since_seq`. If it did less, the floor it measures would be wrong.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

/// The floor server on a free port, killed on drop.
struct Floor(Child, String);

impl Drop for Floor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start() -> Floor {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cowchat-floor"))
        .arg("127.0.0.1:0")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn cowchat-floor");
    let mut addr = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut addr)
        .expect("bound address");
    Floor(child, addr.trim().to_owned())
}

/// A raw NDJSON client.
struct Client {
    w: TcpStream,
    r: BufReader<TcpStream>,
    n: u32,
}

impl Client {
    fn new(addr: &str, name: &str) -> Client {
        let w = TcpStream::connect(addr).expect("connect");
        // A missing push fails the test instead of hanging it.
        w.set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        let r = BufReader::new(w.try_clone().expect("clone"));
        let mut c = Client { w, r, n: 0 };
        c.request(
            "register",
            json!({"key": "", "name": name, "protocol_version": 2}),
        );
        c
    }

    fn frame(&mut self) -> Value {
        let mut line = String::new();
        self.r.read_line(&mut line).expect("read");
        serde_json::from_str(&line).expect("a JSON frame")
    }

    fn request(&mut self, ty: &str, payload: Value) -> Value {
        self.n += 1;
        let id = format!("c{}", self.n);
        let line = json!({"id": id, "type": ty, "payload": payload}).to_string() + "\n";
        self.w.write_all(line.as_bytes()).expect("write");
        loop {
            let f = self.frame();
            if f["reply_to"] == id.as_str() {
                return f;
            }
        }
    }
}

#[test]
fn floor_answers_the_bench_protocol_and_pushes_in_order() {
    let floor = start();
    let mut tx = Client::new(&floor.1, "tx");
    let mut rx = Client::new(&floor.1, "rx");
    let room = tx.request("create_room", json!({"name": "r"}))["payload"]["room_id"]
        .as_str()
        .expect("room_id")
        .to_owned();
    for c in [&mut tx, &mut rx] {
        let ok = c.request("join_room", json!({"room_id": room}));
        assert_eq!(ok["type"], "ok");
    }
    for i in 0..5 {
        let ack = tx.request(
            "send_message",
            json!({"room_id": room, "content": format!("m{i}")}),
        );
        assert_eq!(ack["payload"]["seq"], i + 1);
    }
    for i in 0..5 {
        let push = rx.frame();
        assert_eq!(push["type"], "message_received");
        assert_eq!(push["payload"]["seq"], i + 1);
        assert_eq!(push["payload"]["content"], format!("m{i}"));
        assert_eq!(push["payload"]["agent_name"], "tx");
    }
    let last2 = rx.request("get_history", json!({"room_id": room, "limit": 2}));
    let seqs: Vec<_> = last2["payload"]["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["seq"].as_u64())
        .collect();
    assert_eq!(seqs, [Some(4), Some(5)]);
    let page = rx.request(
        "get_history",
        json!({"room_id": room, "limit": 2, "since_seq": 2}),
    );
    assert_eq!(page["payload"]["messages"][0]["seq"], 3);
    let tip = rx.request("room_tip", json!({"room_id": room}));
    assert_eq!(tip["payload"]["seq"], 5);
    let missing = rx.request("send_message", json!({"room_id": "nope", "content": "x"}));
    assert_eq!(missing["payload"]["code"], "room_not_found");
}
