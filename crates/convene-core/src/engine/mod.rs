//! The engine: validates commands against the current state and turns them into events
//! and projection changes. It does no I/O: reads go through [`LedgerView`], and the caller
//! (the store's single writer) persists the [`Outcome`] in one transaction.

mod changelog;
mod chat;
mod delivery;
mod groups;
mod import;
mod undo;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

use crate::command::Command;
use crate::error::CoreError;
use crate::event::{format_ts, new_event_id, Event, ENVELOPE_V};
use crate::model::Group;
use crate::view::{Change, LedgerView};

pub use chat::{
    automatic_targets, delivery_targets, drives, im_eligible, insight_len, transport_for,
    MAX_INSIGHT_CHARS,
};
pub use delivery::{delivery_generation, delivery_id};
pub use import::IMPORT_SETTLED;

/// Limits the engine enforces on content (frame limits belong to the faces).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Max bytes of `chat.message` text.
    pub max_text_bytes: usize,
    /// Max attachments + refs per message.
    pub max_attachments: usize,
    /// Max recipients per message.
    pub max_recipients: usize,
    /// Max actors per group.
    pub max_actors: usize,
    /// Idempotency window for `client_id` (seconds).
    pub idempotency_window_s: i64,
    /// Max bytes of a `client_id`.
    pub max_client_id_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_text_bytes: 256 * 1024,
            max_attachments: 64,
            max_recipients: 256,
            max_actors: 256,
            idempotency_window_s: 300,
            max_client_id_bytes: 128,
        }
    }
}

/// What one command produced.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Events to append, in order (each already has `seq`, `ts`, `id`).
    pub events: Vec<Event>,
    /// Projection changes to write in the same transaction.
    pub changes: Vec<Change>,
    /// For an idempotent duplicate: the original event, and no new events.
    pub existing: Option<Event>,
    /// The events record history (an import), not new traffic: nothing is delivered for
    /// them (their deliveries, if any, are in the history itself).
    pub replayed: bool,
}

impl Outcome {
    /// The first event appended (the one the command is about).
    pub fn primary(&self) -> Option<&Event> {
        self.existing.as_ref().or_else(|| self.events.first())
    }
}

/// Engine state: every group with its actors and settings. Ledger contents live in the store.
#[derive(Debug, Default, Clone)]
pub struct Engine {
    groups: HashMap<String, Group>,
    limits: Limits,
    revision: u64,
    changes: changelog::ChangeLog,
}

/// Source of [`Engine::revision`] values, shared by every engine of the process, so an engine
/// reloaded from the store never repeats a revision an earlier one had.
static REVISIONS: AtomicU64 = AtomicU64::new(1);

fn next_revision() -> u64 {
    REVISIONS.fetch_add(1, Ordering::Relaxed)
}

/// Per-command context: the state being changed, the view, the clock and the output.
pub(crate) struct Ctx<'a> {
    pub groups: &'a mut HashMap<String, Group>,
    pub view: &'a dyn LedgerView,
    pub limits: &'a Limits,
    pub now: time::OffsetDateTime,
    pub out: Outcome,
}

impl Ctx<'_> {
    /// Now as an envelope timestamp.
    pub fn ts(&self) -> String {
        format_ts(self.now)
    }

    /// A group or `group_not_found`.
    pub fn group(&self, group_id: &str) -> Result<&Group, CoreError> {
        if group_id.is_empty() {
            return Err(CoreError::invalid("missing group_id").with("field", "group_id"));
        }
        self.groups
            .get(group_id)
            .ok_or_else(|| CoreError::no_group(group_id))
    }

    /// Appends one event to a group: assigns `id`, `ts` and the next `seq`.
    pub fn append(
        &mut self,
        group_id: &str,
        kind: &str,
        by: &str,
        scope_key: String,
        data: Value,
    ) -> Result<Event, CoreError> {
        self.append_with_id(group_id, kind, by, scope_key, data, None)
    }

    /// [`Ctx::append`] with an id a face minted (a time-ordered UUID, so never a repeat).
    pub fn append_with_id(
        &mut self,
        group_id: &str,
        kind: &str,
        by: &str,
        scope_key: String,
        data: Value,
        id: Option<String>,
    ) -> Result<Event, CoreError> {
        let ts = self.ts();
        let g = self
            .groups
            .get_mut(group_id)
            .ok_or_else(|| CoreError::no_group(group_id))?;
        g.last_seq += 1;
        let ev = Event {
            v: ENVELOPE_V,
            id: id.unwrap_or_else(new_event_id),
            ts,
            seq: g.last_seq,
            kind: kind.to_string(),
            group_id: group_id.to_string(),
            scope_key,
            by: by.to_string(),
            data,
        };
        self.out.events.push(ev.clone());
        Ok(ev)
    }

    /// Records the group's current snapshot as a change.
    pub fn upsert(&mut self, group_id: &str) {
        if let Some(g) = self.groups.get(group_id) {
            self.out
                .changes
                .retain(|c| !matches!(c, Change::GroupUpsert(x) if x.group_id == group_id));
            self.out
                .changes
                .push(Change::GroupUpsert(Box::new(g.clone())));
        }
    }

    /// The scope for an event by `by` in `group_id`.
    pub fn scope_for(&self, group_id: &str, by: &str) -> String {
        match self.groups.get(group_id) {
            Some(g) => g
                .actor(by)
                .map(|a| a.default_scope_key.clone())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| g.active_scope_key.clone()),
            None => String::new(),
        }
    }

    /// Checks that `by` may write to the group: a privileged principal or a member actor.
    pub fn check_principal(&self, group_id: &str, by: &str) -> Result<(), CoreError> {
        if is_privileged(by) || by.starts_with("svc:") {
            return Ok(());
        }
        if by.is_empty() {
            return Err(CoreError::invalid("missing principal (by)").with("field", "by"));
        }
        let g = self.group(group_id)?;
        if g.actor(by).is_some() {
            Ok(())
        } else {
            Err(CoreError::denied(format!(
                "principal {by} is not a member of group {group_id}"
            ))
            .with("by", by))
        }
    }
}

/// `user` and `system` may act on behalf of anyone in a group.
pub fn is_privileged(by: &str) -> bool {
    by == "user" || by == "system"
}

impl Engine {
    /// An engine over the given groups.
    pub fn new(groups: Vec<Group>, limits: Limits) -> Self {
        let revision = next_revision();
        Self {
            groups: groups
                .into_iter()
                .map(|g| (g.group_id.clone(), g))
                .collect(),
            limits,
            revision,
            changes: changelog::ChangeLog::new(revision),
        }
    }

    /// Changes whenever a group is created, changed (settings, actors, state…) or deleted,
    /// and never comes back: what a face derives from groups may be cached per revision.
    /// Appending events does not change it.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The groups created, changed or deleted after revision `since` (of this engine or an
    /// earlier one), oldest first, a group possibly more than once: a face's index of groups
    /// taken at `since` is current once it looked at these. `None` when the engine cannot
    /// tell (`since` is too old or from before a reload):
    /// derive the index from [`groups`](Self::groups) again.
    pub fn changed_since(&self, since: u64) -> Option<impl Iterator<Item = &str>> {
        self.changes.since(since)
    }

    /// A group by id.
    pub fn group(&self, group_id: &str) -> Option<&Group> {
        self.groups.get(group_id)
    }

    /// All groups, in creation order.
    pub fn groups(&self) -> Vec<&Group> {
        let mut v: Vec<&Group> = self.groups.values().collect();
        v.sort_by(|a, b| {
            a.created_at
                .cmp(&b.created_at)
                .then(a.group_id.cmp(&b.group_id))
        });
        v
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Validates `cmd` and produces its events and changes, updating the in-memory state.
    /// On error nothing has changed.
    pub fn execute(
        &mut self,
        view: &dyn LedgerView,
        cmd: Command,
        now: time::OffsetDateTime,
    ) -> Result<Outcome, CoreError> {
        let undo = undo::Undo::of(&self.groups, &cmd);
        let mut ctx = Ctx {
            groups: &mut self.groups,
            view,
            limits: &self.limits,
            now,
            out: Outcome::default(),
        };
        let res = Self::dispatch(&mut ctx, cmd);
        // Every group change is persisted through a GroupUpsert or GroupDelete; a refused
        // command changes no group (its changes are put back below), so it keeps the revision.
        if res.is_ok() {
            let mut touched = false;
            for c in &ctx.out.changes {
                let gid = match c {
                    Change::GroupUpsert(g) => &g.group_id,
                    Change::GroupDelete(g) => g,
                    _ => continue,
                };
                if !touched {
                    self.revision = next_revision();
                    touched = true;
                }
                self.changes.record(self.revision, gid);
            }
        }
        if let Err(e) = res {
            // Undo `seq` reservations of a command that failed after appending, then put back
            // any group it changed.
            for ev in &ctx.out.events {
                if let Some(g) = ctx.groups.get_mut(&ev.group_id) {
                    g.last_seq = g.last_seq.min(ev.seq.saturating_sub(1));
                }
            }
            undo.restore(&mut self.groups);
            return Err(e);
        }
        Ok(ctx.out)
    }

    fn dispatch(ctx: &mut Ctx<'_>, cmd: Command) -> Result<(), CoreError> {
        match cmd {
            Command::GroupCreate {
                by,
                title,
                topic,
                settings,
            } => {
                let gid = groups::create(ctx, &by, title, topic, None)?;
                // One command, one commit: a group is never seen without its settings.
                if !settings.is_empty() {
                    groups::settings(ctx, &gid, &by, settings)?;
                }
            }
            Command::GroupUpdate {
                group_id,
                by,
                patch,
            } => groups::update(ctx, &group_id, &by, patch)?,
            Command::GroupSettingsUpdate {
                group_id,
                by,
                patch,
            } => groups::settings(ctx, &group_id, &by, patch)?,
            Command::GroupSetState {
                group_id,
                by,
                state,
            } => groups::set_state(ctx, &group_id, &by, &state)?,
            Command::GroupDelete { group_id, by } => groups::delete(ctx, &group_id, &by)?,
            Command::Attach { group_id, by, url } => groups::attach(ctx, &group_id, &by, &url)?,
            Command::DetachScope {
                group_id,
                by,
                scope_key,
            } => groups::detach(ctx, &group_id, &by, &scope_key)?,
            Command::ActorAdd { group_id, by, spec } => {
                groups::actor_add(ctx, &group_id, &by, spec)?
            }
            Command::ActorUpdate {
                group_id,
                by,
                actor_id,
                patch,
            } => groups::actor_update(ctx, &group_id, &by, &actor_id, patch)?,
            Command::ActorRemove {
                group_id,
                by,
                actor_id,
            } => groups::actor_remove(ctx, &group_id, &by, &actor_id)?,
            Command::Send(args) => chat::send(ctx, args)?,
            Command::Relay(args) => chat::relay(ctx, args)?,
            Command::MailRead {
                group_id,
                by,
                actor_id,
                event_id,
            } => chat::mail_read(ctx, &group_id, &by, &actor_id, &event_id)?,
            Command::CancelReplyRequest {
                group_id,
                by,
                source_event_id,
            } => chat::cancel(ctx, &group_id, &by, &source_event_id)?,
            Command::DeliveryClaim {
                group_id,
                actor_id,
                source_event_id,
                transport,
                kind,
            } => delivery::claim(
                ctx,
                &group_id,
                &actor_id,
                &source_event_id,
                &transport,
                kind,
            )?,
            Command::DeliveryResult {
                group_id,
                delivery_id,
                state,
                reason,
            } => delivery::result(ctx, &group_id, &delivery_id, state, reason)?,
            Command::Notify { group_id, by, data } => chat::notify(ctx, &group_id, &by, data)?,
            Command::Reaction {
                group_id,
                by,
                event_id,
                emoji,
            } => chat::reaction(ctx, &group_id, &by, &event_id, &emoji)?,
            Command::AppendExtension {
                group_id,
                by,
                kind,
                data,
            } => chat::extension(ctx, &group_id, &by, &kind, data)?,
            Command::Import { group_id, events } => import::import(ctx, &group_id, events)?,
            Command::All { steps } => {
                for step in steps {
                    if !matches!(step, Command::Send(_) | Command::AppendExtension { .. }) {
                        return Err(CoreError::invalid(
                            "an all-or-nothing command holds only sends and extension events",
                        ));
                    }
                    Self::dispatch(ctx, step)?;
                }
            }
        }
        Ok(())
    }
}

/// A string field of a JSON object.
pub(crate) fn get_str<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    m.get(key).and_then(Value::as_str)
}
