//! What every command needs: the endpoint, the identity, the room secret; connecting, room
//! resolution, sealing outgoing content and reading history pages.

use std::cell::Cell;

use anyhow::{bail, Context as _};
use convene_chat::{crypto, endpoint, message, Client, Endpoint, Identity, TlsConfig};
use serde_json::{json, Value};

use crate::Global;

/// History page size used when reading a whole range (until a page proves too large).
pub const PAGE: u64 = 1000;

/// Resolved global options.
pub struct Ctx {
    /// Server address.
    pub ep: Endpoint,
    /// Trust settings, built once (reconnects reuse them); only for `wss://`.
    pub tls: Option<TlsConfig>,
    /// Who we register as.
    pub who: Identity,
    /// End-to-end room secret.
    pub room_key: Option<String>,
    /// `--json`.
    pub json: bool,
    /// Rows per history page of [`Ctx::history_after`]: [`PAGE`], halved each time a page
    /// was too large to be received (a backlog of long messages over WebSocket).
    page: Cell<u64>,
}

/// A room resolved on a connection.
pub struct Room {
    /// Room id.
    pub id: String,
    /// Whether its content is end-to-end encrypted.
    pub encrypted: bool,
}

impl Ctx {
    /// Applies the defaults of docs/cowchat-cli.md to the global flags.
    pub fn new(g: &Global) -> anyhow::Result<Self> {
        let home = endpoint::convene_home();
        let ep = match g.url.as_deref().filter(|u| !u.is_empty()) {
            Some(u) => Endpoint::parse(u)?,
            None => Endpoint::Unix(endpoint::default_socket(&home)),
        };
        // Read the CA file only when it is used: an SSL_CERT_FILE exported for other tools
        // must not break Unix-socket use.
        let tls = match &ep {
            Endpoint::Wss(_) => Some(TlsConfig::new(
                g.ca_file.as_deref().filter(|p| !p.as_os_str().is_empty()),
            )?),
            _ => None,
        };
        let key = g
            .key
            .clone()
            .unwrap_or_else(|| endpoint::default_key(&home));
        let agent_id = g.agent_id.clone().filter(|a| !a.is_empty());
        let name = g
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .or_else(|| agent_id.clone())
            .unwrap_or_else(|| "cowchat-cli".into());
        Ok(Self {
            ep,
            tls,
            who: Identity {
                key,
                name,
                agent_id,
                capabilities: vec![],
            },
            room_key: g.room_key.clone().filter(|k| !k.is_empty()),
            json: g.json,
            page: Cell::new(PAGE),
        })
    }

    /// Connects and registers.
    pub fn connect(&self) -> anyhow::Result<Client> {
        Client::connect_with(&self.ep, &self.who, self.tls.as_ref())
            .with_context(|| format!("connecting to {}", self.ep))
    }

    /// Resolves `room` (name or id) and makes sure we are a member.
    pub fn room(&self, c: &mut Client, room: &str) -> anyhow::Result<Room> {
        let value = c.resolve_room(room)?;
        let id = value["room_id"].as_str().unwrap_or_default().to_string();
        c.ensure_joined(&id)
            .with_context(|| format!("joining {room}"))?;
        Ok(Room {
            encrypted: value["encrypted"].as_bool().unwrap_or(false),
            id,
        })
    }

    /// Content as sent to `room`: sealed when the room is encrypted. Refuses plaintext to an
    /// encrypted room without a key instead of letting the server bounce it.
    pub fn outgoing(&self, room: &Room, text: &str) -> anyhow::Result<String> {
        if !room.encrypted {
            return Ok(text.to_string());
        }
        match &self.room_key {
            Some(k) => Ok(crypto::seal(k, &room.id, text)?),
            None => bail!(
                "room {} is end-to-end encrypted: set COWCHAT_ROOM_KEY or --room-key",
                room.id
            ),
        }
    }

    /// A message as shown to the user: normalized and, with a key, decrypted.
    pub fn incoming(&self, mut m: Value) -> Value {
        message::normalize(&mut m);
        message::decrypt(&mut m, self.room_key.as_deref());
        m
    }

    /// Every message with seq > `after`, oldest first, paging through `get_history`.
    pub fn history_after(
        &self,
        c: &mut Client,
        room_id: &str,
        after: u64,
    ) -> anyhow::Result<Vec<Value>> {
        let mut out = Vec::new();
        let mut cur = after;
        let limit = self.page.get();
        loop {
            let r = c.request(
                "get_history",
                json!({"room_id": room_id, "since_seq": cur, "limit": limit}),
            )?;
            let page = r["messages"].as_array().cloned().unwrap_or_default();
            let Some(last) = page.last().map(message::seq) else {
                break;
            };
            if last <= cur {
                break; // a server that ignores since_seq: do not loop forever
            }
            cur = last;
            let more = r["has_more"]
                .as_bool()
                .unwrap_or(page.len() as u64 >= limit);
            out.extend(page.into_iter().map(|m| self.incoming(m)));
            if !more {
                break;
            }
        }
        Ok(out)
    }

    /// Halves the history page size after a page too large to receive; false when it is
    /// already one row.
    pub fn shrink_page(&self) -> bool {
        let p = self.page.get();
        self.page.set((p / 2).max(1));
        p > 1
    }

    /// The room's tip seq (newest message; 0 when empty).
    pub fn tip(&self, c: &mut Client, room_id: &str) -> anyhow::Result<u64> {
        let r = c.request("room_tip", json!({"room_id": room_id}))?;
        Ok(r["seq"].as_u64().unwrap_or(0))
    }
}

/// Prints a value as one compact JSON line.
pub fn print_json(v: &Value) {
    println!("{v}");
}
