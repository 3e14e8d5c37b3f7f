//! Creating a message and its turns: the one path for the web composer and for agents' MCP
//! send/ask/publish. Idempotency (§8.1), dispatch uniqueness (§8.2) and the loop and resource
//! limits (§7) are checked here, before anything is written; a limit that stops a chain is
//! recorded visibly as `routing.loop_stopped`.

use convene_core::{Command, SendArgs};
use convene_groupx::envelope::Correlation;
use convene_groupx::{ids, ErrorCode, GroupxError};
use serde_json::{json, Map};
use tokio::sync::MutexGuard;

use super::room::{command_key, CommandRec, Room, Turn};
use super::Face;

/// Who is asking, as the broker knows it (never from the request body).
pub(super) struct Origin {
    /// Ledger principal of the message: `user` or the agent's id.
    pub by: String,
    /// The source binding: `user:web`, or an agent session's MCP binding.
    pub binding: String,
    /// The caller's retry key.
    pub client_command_id: String,
    /// The payload a retry must repeat.
    pub canonical: String,
    /// `web.message`, `mcp.send`, `mcp.ask`, `mcp.publish`.
    pub command_type: &'static str,
    /// The caller's current turn (agents), which the new turns descend from.
    pub parent: Option<Turn>,
    /// Observers to pair with the targets (§4.3): one Watch Turn each.
    pub observers: Vec<String>,
    /// Set when this message is a supervisor's steer (§6.7).
    pub steer: Option<SteerInfo>,
    /// A forward's original message (§4.2): referenced, never copied.
    pub forwarded: Option<String>,
}

/// What a steer records beside its message.
pub(super) struct SteerInfo {
    /// The worker turn steered.
    pub subject_turn_id: String,
    /// The Watch Turn steering.
    pub watch_turn_id: String,
    /// `nudge` or `interrupt`.
    pub action: &'static str,
    /// Public reason.
    pub reason: String,
}

impl Face {
    /// Appends the message and one queued turn per target in one commit, or answers the
    /// first result of the same command again.
    ///
    /// The room lock is held to validate and to queue the commit, not while it is made:
    /// concurrent senders share one fsync (group commit). What is queued but not folded is in
    /// `Room::pending`, so a retry of it waits for it, its targets' capacity counts it, and
    /// their lanes wait until it is folded (FIFO by seq, §8.3). Call it from a task that
    /// cannot be cancelled: a commit that lands must be folded.
    pub(super) async fn create(
        &self,
        o: Origin,
        targets: Vec<String>,
        content: String,
        reply_to: Option<String>,
    ) -> Result<CommandRec, GroupxError> {
        let key = command_key(&o.binding, &o.client_command_id);
        if let Some(f) = &o.forwarded {
            if self.message_text(f).await.is_none() {
                return Err(GroupxError::new(
                    ErrorCode::InvalidEnvelope,
                    format!("{f} is not a message of this room"),
                )
                .field("forwardedEventId"));
            }
        }
        let rx = {
            let mut room = loop {
                let changed = self.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                let room = self.room.lock().await;
                // Memory and messages share one key space per binding.
                if room.memory.commands.contains_key(&key) {
                    return Err(super::memory::conflict());
                }
                if let Some(c) = room.commands.get(&key) {
                    if c.canonical != o.canonical {
                        return Err(GroupxError::new(
                            ErrorCode::ClientCommandConflict,
                            "this clientCommandId was used for another command",
                        )
                        .field("clientCommandId"));
                    }
                    return Ok(c.clone());
                }
                if !room.pending.contains_key(&key) {
                    break room;
                }
                // The same command is committing: answer what it answers.
                drop(room);
                changed.await;
            };
            let lim = &self.cfg.limits;
            self.check_observers(&o, &targets)?;
            if let Some(st) = &o.steer {
                // Under the lock and counting steers still committing: concurrent steers
                // checked before it all passed the limit together.
                let subject = room.turns.get(&st.subject_turn_id);
                let steers = subject.map_or(0, |t| t.steers as usize)
                    + room
                        .steering
                        .values()
                        .filter(|s| **s == st.subject_turn_id)
                        .count();
                if steers >= lim.steers_per_subject_turn as usize {
                    return Err(GroupxError::new(
                        ErrorCode::SteerLimitReached,
                        format!(
                            "turn {} was steered {} times already",
                            st.subject_turn_id, lim.steers_per_subject_turn
                        ),
                    ));
                }
            }
            if let Some(t) = targets
                .iter()
                .chain(&o.observers)
                .find(|t| room.depth(t) >= lim.queue_per_agent)
            {
                return Err(GroupxError::new(
                    ErrorCode::QueueCapacityReached,
                    format!(
                        "agent:{t} already has {} unfinished turns",
                        lim.queue_per_agent
                    ),
                )
                .field("to"));
            }
            let corr_id = ids::correlation_id();
            let (root, hop) = match &o.parent {
                Some(p) => (p.corr.root_correlation_id.clone(), p.hop + 1),
                None => (corr_id.clone(), 0),
            };
            let everyone: Vec<String> = targets.iter().chain(&o.observers).cloned().collect();
            if !everyone.is_empty() {
                self.check_chain(&mut room, &o, &root, hop, &everyone)
                    .await?;
            }
            let cmds =
                self.create_commands(&room, &o, &corr_id, &root, hop, &targets, content, reply_to);
            let rx = self
                .d
                .ledger
                .submit(Command::All { steps: cmds })
                .await
                .map_err(super::from_core)?;
            room.pending.insert(
                key.clone(),
                targets.iter().chain(&o.observers).cloned().collect(),
            );
            if let Some(st) = &o.steer {
                room.steering
                    .insert(key.clone(), st.subject_turn_id.clone());
            }
            rx
        };
        let res = rx.await;
        let mut room = self.room.lock().await;
        room.pending.remove(&key);
        room.steering.remove(&key);
        let res = match res {
            Ok(Ok(c)) => {
                for (ev, _) in &c.events {
                    room.fold(ev.seq, &ev.id, &ev.kind, &ev.by, &ev.data);
                }
                room.commands
                    .get(&key)
                    .cloned()
                    .ok_or_else(|| GroupxError::new(ErrorCode::StorageError, "command not folded"))
            }
            Ok(Err(e)) => Err(super::from_core(e)),
            Err(_) => Err(GroupxError::new(
                ErrorCode::Unavailable,
                "the ledger stopped",
            )),
        };
        drop(room);
        self.changed.notify_waiters();
        for t in targets.iter().chain(&o.observers) {
            if let Some(w) = self.wake.get(t) {
                w.notify_one();
            }
        }
        res
    }

    /// The agents a `supervision` field names, or `SUPERVISION_PAIR_INVALID` (§4.3). Every
    /// face that takes a supervision pair resolves it here.
    pub(super) fn observers(
        &self,
        sup: Option<&convene_groupx::request::Supervision>,
    ) -> Result<Vec<String>, GroupxError> {
        let Some(sup) = sup else {
            return Ok(Vec::new());
        };
        self.targets(
            &convene_groupx::request::Recipients::Agents(sup.observers.clone()),
            None,
        )
        .map_err(|e| {
            GroupxError::new(ErrorCode::SupervisionPairInvalid, e.message).field("supervision")
        })
    }

    /// §4.3: observers are enabled roster agents, not a worker of this command, not the caller.
    fn check_observers(&self, o: &Origin, targets: &[String]) -> Result<(), GroupxError> {
        let bad =
            |m: String| GroupxError::new(ErrorCode::SupervisionPairInvalid, m).field("supervision");
        if o.observers.is_empty() {
            return Ok(());
        }
        if targets.is_empty() {
            return Err(bad("a supervision pair needs a worker".into()));
        }
        for ob in &o.observers {
            match self.cfg.agent(ob) {
                Some(a) if a.enabled => {}
                _ => {
                    return Err(bad(format!(
                        "agent:{ob} is not an enabled agent of this room"
                    )))
                }
            }
            if targets.contains(ob) {
                return Err(bad(format!(
                    "agent:{ob} cannot be worker and observer of one command"
                )));
            }
            if ob == &o.by {
                return Err(bad("you cannot observe your own command".into()));
            }
        }
        Ok(())
    }

    /// The message and its queued turns.
    #[allow(clippy::too_many_arguments)]
    fn create_commands(
        &self,
        room: &Room,
        o: &Origin,
        corr_id: &str,
        root: &str,
        hop: u64,
        targets: &[String],
        content: String,
        reply_to: Option<String>,
    ) -> Vec<Command> {
        let msg_id = ids::event_id();
        let gx_to: Vec<String> = targets.iter().map(|t| format!("agent:{t}")).collect();
        // A reply chain forms by itself: an agent's message answers its turn's source.
        let reply_to = reply_to.or_else(|| o.parent.as_ref().map(|p| p.source_event_id.clone()));
        let mut gx = json!({"correlationId": corr_id, "rootCorrelationId": root,
            "clientCommandId": o.client_command_id, "canonical": o.canonical,
            "to": gx_to, "binding": o.binding, "commandType": o.command_type});
        if let Some(p) = &o.parent {
            gx["causationId"] = p.turn_id.clone().into();
        }
        if let Some(f) = &o.forwarded {
            gx["forwardedEventId"] = f.clone().into();
        }
        let mut extra = Map::new();
        extra.insert("groupx".into(), gx);
        let mut cmds = vec![Command::Send(SendArgs {
            group_id: self.group_id.clone(),
            by: o.by.clone(),
            text: Some(content),
            to: targets.to_vec(),
            reply_to,
            extra,
            event_id: Some(msg_id.clone()),
            ..SendArgs::default()
        })];
        let mut worker_ids: Vec<String> = Vec::new();
        let turn_type = if o.steer.is_some() {
            "supervision.reroute"
        } else {
            o.command_type
        };
        for t in targets {
            let corr = Correlation {
                correlation_id: corr_id.to_string(),
                root_correlation_id: root.to_string(),
                causation_id: Some(msg_id.clone()),
                to: vec![format!("agent:{t}")],
            };
            let tid = ids::turn_id();
            let mut body = json!({"turnId": tid, "target": format!("agent:{t}"),
                "sourceEventId": msg_id, "queuePosition": room.depth(t), "status": "queued",
                "transport": "structured", "commandType": turn_type, "hopCount": hop});
            if let Some(p) = &o.parent {
                body["parentTurnId"] = p.turn_id.clone().into();
            }
            cmds.push(self.ext("turn.queued", &corr, body));
            worker_ids.push(tid);
        }
        if !o.observers.is_empty() {
            let watch_ids: Vec<String> = o.observers.iter().map(|_| ids::turn_id()).collect();
            let corr = Correlation {
                correlation_id: corr_id.to_string(),
                root_correlation_id: root.to_string(),
                causation_id: Some(msg_id.clone()),
                to: o.observers.iter().map(|t| format!("agent:{t}")).collect(),
            };
            cmds.push(self.ext(
                "supervision.paired",
                &corr,
                json!({"mode": "live_steer", "sourceEventId": msg_id,
                    "workers": targets.iter().map(|t| format!("agent:{t}")).collect::<Vec<_>>(),
                    "observers": o.observers.iter().map(|t| format!("agent:{t}")).collect::<Vec<_>>(),
                    "workerTurnIds": worker_ids, "watchTurnIds": watch_ids}),
            ));
            for (ob, wid) in o.observers.iter().zip(&watch_ids) {
                let corr = Correlation {
                    to: vec![format!("agent:{ob}")],
                    ..corr.clone()
                };
                let mut body = json!({"turnId": wid, "target": format!("agent:{ob}"),
                    "sourceEventId": msg_id, "queuePosition": room.depth(ob), "status": "queued",
                    "transport": "structured", "commandType": "supervision.watch", "hopCount": hop,
                    "subjectTurnIds": worker_ids});
                if let Some(p) = &o.parent {
                    body["parentTurnId"] = p.turn_id.clone().into();
                }
                cmds.push(self.ext("turn.queued", &corr, body));
            }
        }
        if let Some(st) = &o.steer {
            let corr = Correlation {
                correlation_id: corr_id.to_string(),
                root_correlation_id: root.to_string(),
                causation_id: Some(st.watch_turn_id.clone()),
                to: Vec::new(),
            };
            let mut body = json!({"subjectTurnId": st.subject_turn_id, "watchTurnId": st.watch_turn_id,
                "action": st.action, "reason": st.reason, "messageEventId": msg_id,
                "observer": convene_groupx::envelope::actor_id_of(&o.by)});
            if let Some(n) = worker_ids.first() {
                body["newTurnId"] = n.clone().into();
            }
            cmds.push(self.ext("supervision.steered", &corr, body));
        }
        cmds
    }

    /// §6.6 and §7: a synchronous ask may not wait on an ancestor; a chain may not grow past
    /// its hop, turn and per-agent limits. A stopped chain is recorded in the room.
    async fn check_chain(
        &self,
        room: &mut MutexGuard<'_, Room>,
        o: &Origin,
        root: &str,
        hop: u64,
        targets: &[String],
    ) -> Result<(), GroupxError> {
        let lim = &self.cfg.limits;
        if let (Some(p), "mcp.ask") = (&o.parent, o.command_type) {
            let chain = room.ancestors(&p.turn_id);
            if let Some(t) = targets.iter().find(|t| chain.contains(t)) {
                return Err(GroupxError::new(
                    ErrorCode::CausalCycle,
                    format!(
                        "agent:{t} is waiting up this chain; ask would deadlock (use groupx.send)"
                    ),
                )
                .field("to"));
            }
        }
        let (n, per) = room.root_counts(root);
        let stop = if hop > lim.max_hops {
            Some((
                ErrorCode::HopLimitReached,
                format!("hop {hop} is over the limit of {}", lim.max_hops),
            ))
        } else if n + targets.len() > lim.max_turns_per_root {
            Some((
                ErrorCode::RootTurnLimitReached,
                format!(
                    "this chain already has {n} turns; the limit is {}",
                    lim.max_turns_per_root
                ),
            ))
        } else {
            targets
                .iter()
                .find(|t| per.get(*t).copied().unwrap_or(0) >= lim.max_calls_per_agent_per_root)
                .map(|t| {
                    (
                        ErrorCode::RootTurnLimitReached,
                        format!(
                            "agent:{t} was already called {} times in this chain",
                            lim.max_calls_per_agent_per_root
                        ),
                    )
                })
        };
        let Some((code, why)) = stop else {
            return Ok(());
        };
        let corr = Correlation {
            correlation_id: root.to_string(),
            root_correlation_id: root.to_string(),
            causation_id: o.parent.as_ref().map(|p| p.turn_id.clone()),
            to: Vec::new(),
        };
        let body = json!({"errorCode": code.as_str(), "reason": why, "hopCount": hop,
            "requestedBy": convene_groupx::envelope::actor_id_of(&o.by),
            "targets": targets.iter().map(|t| format!("agent:{t}")).collect::<Vec<_>>()});
        self.append(room, vec![self.ext("routing.loop_stopped", &corr, body)])
            .await?;
        Err(GroupxError::new(code, why))
    }
}
