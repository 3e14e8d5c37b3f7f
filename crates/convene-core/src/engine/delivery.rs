//! `runtime.delivery` (§6.4): claims and results, appended only by the daemon.

use serde_json::{json, Value};

use super::Ctx;
use crate::command::{ClaimKind, DeliveryState};
use crate::error::{CoreError, ErrorCode};
use crate::event::kinds;
use crate::view::{Change, DeliveryRow};

/// Deterministic delivery id for (source event, actor generation, recipient actor) (§6.4).
pub fn delivery_id(actor_id: &str, generation: u64, source_event_id: &str) -> String {
    format!("delivery:{actor_id}:{generation}:{source_event_id}")
}

/// The actor generation a [`delivery_id`] was made for (actor ids hold no `:`).
pub fn delivery_generation(delivery_id: &str) -> Option<u64> {
    delivery_id.split(':').nth(2)?.parse().ok()
}

pub(super) fn claim(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    actor_id: &str,
    source_event_id: &str,
    transport: &str,
    kind: ClaimKind,
) -> Result<(), CoreError> {
    let g = ctx.group(group_id)?;
    let actor = g
        .actor(actor_id)
        .ok_or_else(|| CoreError::no_actor(actor_id))?;
    let did = delivery_id(actor_id, actor.generation, source_event_id);
    let src = ctx
        .view
        .event(group_id, source_event_id)?
        .ok_or_else(|| CoreError::no_event(source_event_id))?;
    if src.kind != kinds::CHAT_MESSAGE {
        return Err(CoreError::invalid("only chat.message events are delivered")
            .with("field", "source_event_id"));
    }
    if let Some(prev) = ctx.view.delivery(group_id, &did)? {
        let conflict = |why: &str| {
            CoreError::new(ErrorCode::DeliveryConflict, why.to_string())
                .with("delivery_id", did.as_str())
                .with("state", prev.state.as_str())
        };
        match (prev.state.as_str(), kind) {
            // A concurrent claimant treats an active claim as in progress (§6.4).
            ("claimed", _) => return Err(conflict("delivery in progress")),
            // No automatic retry after accepted or ambiguous (§6.4).
            ("accepted" | "ambiguous", ClaimKind::Automatic) => {
                return Err(conflict("no automatic retry after accepted or ambiguous"))
            }
            (
                "ambiguous",
                ClaimKind::Manual {
                    force_ambiguous: false,
                },
            ) => {
                return Err(conflict(
                    "last attempt is ambiguous: pass force_ambiguous to deliver again",
                ))
            }
            _ => {}
        }
    }
    let data = json!({
        "actor_id": actor_id,
        "source_event_id": source_event_id,
        "delivery_id": did,
        "state": "claimed",
        "transport": transport,
        "reason": Value::Null,
    });
    ctx.append(
        group_id,
        kinds::RUNTIME_DELIVERY,
        "system",
        src.scope_key.clone(),
        data,
    )?;
    ctx.out.changes.push(Change::Delivery {
        group_id: group_id.to_string(),
        row: DeliveryRow {
            delivery_id: did,
            actor_id: actor_id.to_string(),
            source_event_id: source_event_id.to_string(),
            state: "claimed".into(),
            transport: transport.to_string(),
        },
    });
    Ok(())
}

pub(super) fn result(
    ctx: &mut Ctx<'_>,
    group_id: &str,
    delivery_id: &str,
    state: DeliveryState,
    reason: Option<String>,
) -> Result<(), CoreError> {
    ctx.group(group_id)?;
    if state == DeliveryState::Claimed {
        return Err(CoreError::invalid(
            "a result must be accepted, failed or ambiguous",
        ));
    }
    let prev = ctx.view.delivery(group_id, delivery_id)?.ok_or_else(|| {
        CoreError::new(
            ErrorCode::EventNotFound,
            format!("no delivery {delivery_id}"),
        )
    })?;
    if prev.state != "claimed" {
        // Exactly one result per claimed attempt (§6.4).
        return Err(CoreError::new(
            ErrorCode::DeliveryConflict,
            "attempt already has its result",
        )
        .with("delivery_id", delivery_id)
        .with("state", prev.state.as_str()));
    }
    let data = json!({
        "actor_id": prev.actor_id,
        "source_event_id": prev.source_event_id,
        "delivery_id": delivery_id,
        "state": state.as_str(),
        "transport": prev.transport,
        "reason": reason,
    });
    let scope = ctx
        .view
        .event(group_id, &prev.source_event_id)?
        .map(|e| e.scope_key)
        .unwrap_or_default();
    ctx.append(group_id, kinds::RUNTIME_DELIVERY, "system", scope, data)?;
    ctx.out.changes.push(Change::Delivery {
        group_id: group_id.to_string(),
        row: DeliveryRow {
            state: state.as_str().into(),
            ..prev
        },
    });
    Ok(())
}
