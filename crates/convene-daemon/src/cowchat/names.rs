//! The room directory: room name → room, how many rooms each API key owns, the rooms each
//! key can see and each room's sub-rooms, without scanning every group on each lookup
//! (`create_room`'s checks, `rename_room`, resolving a room by name, the lobby at start,
//! `list_rooms`, `room_info`'s `sub_rooms`), and the groups each actor id is in
//! (`register`'s rooms and agent-id claim check, presence and turn-token fan-out).
//!
//! It is derived from the engine's groups and brought up to date on use: when the engine's
//! [`revision`](convene_core::Engine::revision) moved (a group changed, from any face: a
//! create, rename, destroy, import, an operator's settings update over CCCS IPC), only the
//! groups [`changed_since`](convene_core::Engine::changed_since) the directory's revision are
//! looked at again; when the engine cannot tell (first use, a reload, a long gap), the
//! directory is derived from every group again. It is read under the same
//! engine read guard as the groups it points at, so it is never stale.

use std::collections::{HashMap, HashSet};

use convene_core::{Engine, Group};
use parking_lot::Mutex;
use serde_json::Value;

use super::attrs::Attrs;
use super::ROOM_KEY;

/// The room directory (see the module docs).
#[derive(Default)]
pub(super) struct Directory {
    inner: Mutex<Index>,
}

#[derive(Default)]
struct Index {
    /// The engine revision the index describes (0: never derived).
    revision: u64,
    /// room id → its name and owning key.
    rooms: HashMap<String, Entry>,
    /// name → room ids (more than one when rooms no one key can see all of share a name, or
    /// another face gave two groups one name).
    by_name: HashMap<String, Vec<String>>,
    /// owning key → how many rooms it owns.
    owned: HashMap<String, usize>,
    /// Rooms every key can see (public, system, or without an owner).
    open: HashSet<String>,
    /// owning key → its private rooms.
    private: HashMap<String, HashSet<String>>,
    /// parent room id → its sub-rooms.
    children: HashMap<String, HashSet<String>>,
    /// actor id → the groups (rooms or not) it is an actor of.
    member_of: HashMap<String, HashSet<String>>,
    /// group id → the actor ids indexed for it in `member_of`.
    actors: HashMap<String, Vec<String>>,
}

struct Entry {
    name: String,
    owner: Option<String>,
    /// Visible to one key only (`owner`).
    private: bool,
    parent: Option<String>,
}

/// Groups in creation order (as [`Engine::groups`] lists them).
fn in_creation_order(mut v: Vec<&Group>) -> Vec<&Group> {
    v.sort_by(|a, b| {
        a.created_at
            .cmp(&b.created_at)
            .then(a.group_id.cmp(&b.group_id))
    });
    v
}

/// The room name of a group, if it is a room.
pub(super) fn room_name(g: &Group) -> Option<&str> {
    g.settings.extra.get(ROOM_KEY).and_then(Value::as_str)
}

impl Directory {
    /// The room named `name` in `eng` (held by the caller's read guard); of several rooms
    /// with one name, the earliest created, as a scan in creation order would find (the
    /// face looks names up among the rooms a key can see: [`Directory::named`]).
    #[cfg(test)]
    pub fn by_name<'a>(&self, eng: &'a Engine, name: &str) -> Option<&'a Group> {
        let mut ix = self.inner.lock();
        ix.sync(eng);
        ix.by_name
            .get(name)?
            .iter()
            .filter_map(|id| eng.group(id))
            .min_by(|a, b| {
                a.created_at
                    .cmp(&b.created_at)
                    .then(a.group_id.cmp(&b.group_id))
            })
    }

    /// Every room named `name` in `eng`, in creation order (names are unique among the rooms
    /// one key can see, not overall: another key's private room may share a name).
    pub fn named<'a>(&self, eng: &'a Engine, name: &str) -> Vec<&'a Group> {
        let mut ix = self.inner.lock();
        ix.sync(eng);
        in_creation_order(
            ix.by_name
                .get(name)
                .into_iter()
                .flatten()
                .filter_map(|id| eng.group(id))
                .collect(),
        )
    }

    /// The rooms `principal` can see, in creation order: the open ones and its own private
    /// ones (other keys' private rooms are not looked at). With `parent`, only its sub-rooms.
    pub fn visible<'a>(
        &self,
        eng: &'a Engine,
        principal: &str,
        parent: Option<&str>,
    ) -> Vec<&'a Group> {
        let mut ix = self.inner.lock();
        ix.sync(eng);
        let ix = &*ix;
        let seen = |id: &&String| {
            ix.open.contains(*id) || ix.private.get(principal).is_some_and(|p| p.contains(*id))
        };
        let ids: Vec<&String> = match parent {
            Some(p) => ix
                .children
                .get(p)
                .into_iter()
                .flatten()
                .filter(seen)
                .collect(),
            None => ix
                .open
                .iter()
                .chain(ix.private.get(principal).into_iter().flatten())
                .collect(),
        };
        in_creation_order(ids.into_iter().filter_map(|id| eng.group(id)).collect())
    }

    /// The groups of `eng` (rooms or not) that have an actor `actor`, in creation order.
    pub fn groups_of<'a>(&self, eng: &'a Engine, actor: &str) -> Vec<&'a Group> {
        let mut ix = self.inner.lock();
        ix.sync(eng);
        in_creation_order(
            ix.member_of
                .get(actor)
                .into_iter()
                .flatten()
                .filter_map(|id| eng.group(id))
                .collect(),
        )
    }

    /// How many rooms of `eng` the API key `principal` owns.
    pub fn owned_by(&self, eng: &Engine, principal: &str) -> usize {
        let mut ix = self.inner.lock();
        ix.sync(eng);
        ix.owned.get(principal).copied().unwrap_or(0)
    }
}

impl Index {
    /// Brings the index to the engine's revision.
    fn sync(&mut self, eng: &Engine) {
        if self.revision == eng.revision() {
            return;
        }
        match eng.changed_since(self.revision) {
            Some(changed) => {
                for id in changed {
                    self.forget(id);
                    if let Some(g) = eng.group(id) {
                        self.add(g);
                    }
                }
            }
            None => {
                *self = Index::default();
                for g in eng.groups() {
                    self.add(g);
                }
            }
        }
        self.revision = eng.revision();
    }

    fn add(&mut self, g: &Group) {
        let ids: Vec<String> = g.actors.iter().map(|a| a.id.clone()).collect();
        for a in &ids {
            self.member_of
                .entry(a.clone())
                .or_default()
                .insert(g.group_id.clone());
        }
        self.actors.insert(g.group_id.clone(), ids);
        let Some(name) = room_name(g) else { return };
        let attrs = Attrs::decode(g);
        let owner = attrs.owner.clone();
        if let Some(o) = &owner {
            *self.owned.entry(o.clone()).or_default() += 1;
        }
        let id = g.group_id.clone();
        // The same rule as `Attrs::visible_to`.
        let private = match &owner {
            Some(o) if !attrs.public && !attrs.system => {
                self.private
                    .entry(o.clone())
                    .or_default()
                    .insert(id.clone());
                true
            }
            _ => {
                self.open.insert(id.clone());
                false
            }
        };
        if let Some(p) = &attrs.parent_id {
            self.children.entry(p.clone()).or_default().insert(id);
        }
        self.by_name
            .entry(name.to_string())
            .or_default()
            .push(g.group_id.clone());
        self.rooms.insert(
            g.group_id.clone(),
            Entry {
                name: name.to_string(),
                owner,
                private,
                parent: attrs.parent_id,
            },
        );
    }

    fn forget(&mut self, id: &str) {
        for a in self.actors.remove(id).unwrap_or_default() {
            if let Some(gs) = self.member_of.get_mut(&a) {
                gs.remove(id);
                if gs.is_empty() {
                    self.member_of.remove(&a);
                }
            }
        }
        let Some(e) = self.rooms.remove(id) else {
            return;
        };
        if let Some(ids) = self.by_name.get_mut(&e.name) {
            ids.retain(|x| x != id);
            if ids.is_empty() {
                self.by_name.remove(&e.name);
            }
        }
        if let Some(p) = &e.parent {
            if let Some(c) = self.children.get_mut(p) {
                c.remove(id);
                if c.is_empty() {
                    self.children.remove(p);
                }
            }
        }
        self.open.remove(id);
        if let Some(o) = e.owner {
            if e.private {
                if let Some(p) = self.private.get_mut(&o) {
                    p.remove(id);
                    if p.is_empty() {
                        self.private.remove(&o);
                    }
                }
            }
            if let Some(n) = self.owned.get_mut(&o) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    self.owned.remove(&o);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use convene_core::{Command, CoreError, DeliveryRow, LedgerView, Limits, Obligation};
    use serde_json::{json, Map};

    use super::*;

    /// A ledger with no events: group management never reads it.
    struct Empty;

    impl LedgerView for Empty {
        fn event(&self, _: &str, _: &str) -> Result<Option<convene_core::Event>, CoreError> {
            Ok(None)
        }
        fn obligations(&self, _: &str, _: &str) -> Result<Vec<Obligation>, CoreError> {
            Ok(Vec::new())
        }
        fn mail_addressed(&self, _: &str, _: &str, _: &str) -> Result<Option<u64>, CoreError> {
            Ok(None)
        }
        fn mail_cursor(&self, _: &str, _: &str) -> Result<u64, CoreError> {
            Ok(0)
        }
        fn delivery(&self, _: &str, _: &str) -> Result<Option<DeliveryRow>, CoreError> {
            Ok(None)
        }
        fn idempotent(
            &self,
            _: &str,
            _: &str,
            _: &str,
            _: i64,
        ) -> Result<Option<String>, CoreError> {
            Ok(None)
        }
    }

    fn run(eng: &mut Engine, cmd: Command) -> Result<String, CoreError> {
        let out = eng.execute(&Empty, cmd, time::OffsetDateTime::now_utc())?;
        Ok(out
            .events
            .first()
            .map(|e| e.group_id.clone())
            .unwrap_or_default())
    }

    /// A group made over the CCCS IPC: not a room.
    fn create_ipc_group(eng: &mut Engine) -> String {
        run(
            eng,
            Command::GroupCreate {
                by: "user".into(),
                title: "ipc".into(),
                topic: String::new(),
                settings: Map::new(),
            },
        )
        .expect("group")
    }

    fn create(eng: &mut Engine, name: &str, owner: &str) -> String {
        create_with(eng, name, json!({"owner": owner}))
    }

    fn rename(eng: &mut Engine, id: &str, name: &str) {
        let mut patch = Map::new();
        patch.insert(ROOM_KEY.into(), json!(name));
        run(
            eng,
            Command::GroupSettingsUpdate {
                group_id: id.into(),
                by: "user".into(),
                patch,
            },
        )
        .expect("rename");
    }

    /// What the directory replaced: the first room with the name, in creation order.
    fn scan<'a>(eng: &'a Engine, name: &str) -> Option<&'a Group> {
        eng.groups()
            .into_iter()
            .find(|g| room_name(g) == Some(name))
    }

    fn id(g: Option<&Group>) -> Option<&str> {
        g.map(|g| g.group_id.as_str())
    }

    #[test]
    fn the_directory_answers_as_a_scan_would_through_every_kind_of_change() {
        let mut eng = Engine::new(Vec::new(), Limits::default());
        let dir = Directory::default();
        let a = create(&mut eng, "a", "k1");
        let b = create(&mut eng, "b", "k1");
        let check = |eng: &Engine| {
            for n in ["a", "b", "c", "x"] {
                assert_eq!(id(dir.by_name(eng, n)), id(scan(eng, n)), "{n}");
            }
        };
        check(&eng);
        assert_eq!(dir.owned_by(&eng, "k1"), 2);
        rename(&mut eng, &a, "c");
        check(&eng);
        // Another face gives a second group the same name: the earlier one wins, as before.
        rename(&mut eng, &b, "c");
        check(&eng);
        assert_eq!(id(dir.by_name(&eng, "c")), Some(a.as_str()));
        run(
            &mut eng,
            Command::GroupDelete {
                group_id: a.clone(),
                by: "user".into(),
            },
        )
        .expect("delete");
        check(&eng);
        assert_eq!(id(dir.by_name(&eng, "c")), Some(b.as_str()));
        assert_eq!(dir.owned_by(&eng, "k1"), 1);
        // A refused command changes nothing (the engine undoes it): the directory stays right.
        assert!(run(
            &mut eng,
            Command::GroupDelete {
                group_id: a,
                by: "user".into(),
            },
        )
        .is_err());
        create(&mut eng, "a", "k2");
        check(&eng);
        assert_eq!((dir.owned_by(&eng, "k1"), dir.owned_by(&eng, "k2")), (1, 1));
    }

    fn create_with(eng: &mut Engine, name: &str, attrs: serde_json::Value) -> String {
        let mut settings = Map::new();
        settings.insert(ROOM_KEY.into(), json!(name));
        settings.insert(super::super::ATTRS_KEY.into(), attrs);
        run(
            eng,
            Command::GroupCreate {
                by: "svc:cowchat".into(),
                title: name.into(),
                topic: String::new(),
                settings,
            },
        )
        .expect("create")
    }

    fn set_attrs(eng: &mut Engine, id: &str, attrs: serde_json::Value) {
        let mut patch = Map::new();
        patch.insert(super::super::ATTRS_KEY.into(), attrs);
        run(
            eng,
            Command::GroupSettingsUpdate {
                group_id: id.into(),
                by: "user".into(),
                patch,
            },
        )
        .expect("settings");
    }

    /// What `list_rooms` and `room_info` used to do: scan every group.
    fn scan_visible<'a>(eng: &'a Engine, principal: &str, parent: Option<&str>) -> Vec<&'a str> {
        eng.groups()
            .into_iter()
            .filter(|g| room_name(g).is_some())
            .filter(|g| {
                let a = Attrs::decode(g);
                a.visible_to(principal) && (parent.is_none() || a.parent_id.as_deref() == parent)
            })
            .map(|g| g.group_id.as_str())
            .collect()
    }

    #[test]
    fn visible_rooms_and_sub_rooms_answer_as_a_scan_would_through_every_kind_of_change() {
        let mut eng = Engine::new(Vec::new(), Limits::default());
        let dir = Directory::default();
        let lobby = create_with(&mut eng, "lobby", json!({"system": true, "public": true}));
        let p1 = create_with(&mut eng, "p1", json!({"owner": "k1", "public": false}));
        let pub2 = create_with(&mut eng, "pub2", json!({"owner": "k2", "public": true}));
        let sub = create_with(
            &mut eng,
            "sub",
            json!({"owner": "k2", "public": false, "parent_id": pub2}),
        );
        create_with(
            &mut eng,
            "sub-open",
            json!({"owner": "k1", "public": true, "parent_id": pub2}),
        );
        // A group that is not a room, and a room made before attributes existed (public).
        create_ipc_group(&mut eng);
        let mut settings = Map::new();
        settings.insert(ROOM_KEY.into(), json!("old"));
        run(
            &mut eng,
            Command::GroupCreate {
                by: "user".into(),
                title: "old".into(),
                topic: String::new(),
                settings,
            },
        )
        .expect("old room");
        let check = |eng: &Engine| {
            for k in ["k1", "k2", "k3"] {
                for parent in [None, Some(pub2.as_str()), Some(p1.as_str()), Some("nope")] {
                    let got: Vec<&str> = dir
                        .visible(eng, k, parent)
                        .into_iter()
                        .map(|g| g.group_id.as_str())
                        .collect();
                    assert_eq!(got, scan_visible(eng, k, parent), "{k} {parent:?}");
                }
            }
        };
        check(&eng);
        assert_eq!(dir.visible(&eng, "k3", None).len(), 4); // lobby, pub2, sub-open, old
                                                            // An operator makes a private room public, then private to another key; a room is
                                                            // moved under another parent; rooms are deleted.
        set_attrs(&mut eng, &p1, json!({"owner": "k1", "public": true}));
        check(&eng);
        set_attrs(&mut eng, &p1, json!({"owner": "k2", "public": false}));
        check(&eng);
        set_attrs(
            &mut eng,
            &sub,
            json!({"owner": "k2", "public": false, "parent_id": p1}),
        );
        check(&eng);
        for id in [&sub, &lobby] {
            run(
                &mut eng,
                Command::GroupDelete {
                    group_id: id.to_string(),
                    by: "user".into(),
                },
            )
            .expect("delete");
            check(&eng);
        }
    }

    fn actor_cmd(eng: &mut Engine, cmd: Command) {
        run(eng, cmd).expect("actor command");
    }

    fn add_actor(eng: &mut Engine, gid: &str, actor: &str) {
        let mut spec = Map::new();
        spec.insert("actor_id".into(), json!(actor));
        spec.insert("runtime".into(), json!(super::super::RUNTIME));
        actor_cmd(
            eng,
            Command::ActorAdd {
                group_id: gid.into(),
                by: "svc:cowchat".into(),
                spec,
            },
        );
    }

    /// What `register` used to do: scan every group for the actor.
    fn scan_groups_of<'a>(eng: &'a Engine, actor: &str) -> Vec<&'a str> {
        eng.groups()
            .into_iter()
            .filter(|g| g.actor(actor).is_some())
            .map(|g| g.group_id.as_str())
            .collect()
    }

    #[test]
    fn groups_of_an_actor_answer_as_a_scan_would_through_every_kind_of_change() {
        let mut eng = Engine::new(Vec::new(), Limits::default());
        let dir = Directory::default();
        let check = |eng: &Engine, dir: &Directory| {
            for a in ["alice", "bob", "ipc-bot", "nobody"] {
                let got: Vec<&str> = dir
                    .groups_of(eng, a)
                    .into_iter()
                    .map(|g| g.group_id.as_str())
                    .collect();
                assert_eq!(got, scan_groups_of(eng, a), "{a}");
            }
        };
        let r1 = create(&mut eng, "r1", "k1");
        let r2 = create(&mut eng, "r2", "k2");
        // A group that is not a room: its actors count too (the agent-id claim check).
        let ipc = create_ipc_group(&mut eng);
        check(&eng, &dir);
        add_actor(&mut eng, &r1, "alice");
        check(&eng, &dir);
        add_actor(&mut eng, &r2, "alice");
        add_actor(&mut eng, &r2, "bob");
        add_actor(&mut eng, &ipc, "ipc-bot");
        add_actor(&mut eng, &ipc, "alice");
        check(&eng, &dir);
        assert_eq!(dir.groups_of(&eng, "alice").len(), 3);
        // An update keeps the membership; a rename changes nothing about it.
        let mut patch = Map::new();
        patch.insert("title".into(), json!("Alice"));
        actor_cmd(
            &mut eng,
            Command::ActorUpdate {
                group_id: r1.clone(),
                by: "svc:cowchat".into(),
                actor_id: "alice".into(),
                patch,
            },
        );
        rename(&mut eng, &r2, "r2-renamed");
        check(&eng, &dir);
        actor_cmd(
            &mut eng,
            Command::ActorRemove {
                group_id: r2.clone(),
                by: "svc:cowchat".into(),
                actor_id: "alice".into(),
            },
        );
        check(&eng, &dir);
        // A refused add (already a member) changes nothing.
        let mut spec = Map::new();
        spec.insert("actor_id".into(), json!("bob"));
        assert!(run(
            &mut eng,
            Command::ActorAdd {
                group_id: r2.clone(),
                by: "svc:cowchat".into(),
                spec,
            },
        )
        .is_err());
        check(&eng, &dir);
        // A deleted group takes its memberships with it.
        run(
            &mut eng,
            Command::GroupDelete {
                group_id: r2,
                by: "user".into(),
            },
        )
        .expect("delete");
        check(&eng, &dir);
        assert!(dir.groups_of(&eng, "bob").is_empty());
        // A reload (what an import or restart gives): the engine cannot tell what changed.
        let groups: Vec<Group> = eng.groups().into_iter().cloned().collect();
        let eng2 = Engine::new(groups, Limits::default());
        check(&eng2, &dir);
        let fresh = Directory::default();
        check(&eng2, &fresh);
    }

    /// Lookup cost with many rooms (not a test: `cargo test -p convene-daemon -- --ignored
    /// --nocapture directory_lookup_cost`).
    #[test]
    #[ignore]
    fn directory_lookup_cost() {
        const ROOMS: usize = 5000;
        const N: u32 = 200;
        let mut eng = Engine::new(Vec::new(), Limits::default());
        let ids: Vec<String> = (0..ROOMS)
            .map(|i| create(&mut eng, &format!("room-{i}"), "k"))
            .collect();
        let dir = Directory::default();
        let per = |t: std::time::Instant| t.elapsed() / N;
        let t = std::time::Instant::now();
        for _ in 0..N {
            assert!(scan(&eng, "absent").is_none());
        }
        println!(
            "scan, a name no room has (create_room's check): {:?}",
            per(t)
        );
        let t = std::time::Instant::now();
        for _ in 0..N {
            assert!(scan(&eng, "room-2500").is_some());
        }
        println!("scan, a room in the middle: {:?}", per(t));
        let t = std::time::Instant::now();
        assert!(dir.by_name(&eng, "absent").is_none());
        println!(
            "directory, first use (derived from every group): {:?}",
            t.elapsed()
        );
        let t = std::time::Instant::now();
        for _ in 0..N {
            assert!(dir.by_name(&eng, "absent").is_none());
        }
        println!("directory, no group changed since: {:?}", per(t));
        let mut total = std::time::Duration::ZERO;
        for (i, room) in ids.iter().take(N as usize).enumerate() {
            rename(&mut eng, room, &format!("renamed-{i}"));
            let t = std::time::Instant::now();
            assert!(dir.by_name(&eng, "absent").is_none());
            total += t.elapsed();
        }
        println!("directory, one group changed since: {:?}", total / N);
    }
}
