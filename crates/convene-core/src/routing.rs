//! Recipient tokens, audience domains and materialization (CCCS §5).

use crate::error::CoreError;
use crate::model::{Group, Role};

/// The human recipient's canonical token.
pub const USER: &str = "user";

/// Which audience a recipient list addresses (§5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audience {
    /// Only the human user.
    Human,
    /// Actors and actor selectors.
    Agents,
}

/// Normalizes tokens: trims, maps `@user` to `user`, drops duplicates, keeps order.
pub fn normalize(to: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(to.len());
    for raw in to {
        let t = raw.trim();
        if t.is_empty() {
            continue;
        }
        let t = if t == "@user" { USER } else { t };
        if !out.iter().any(|x| x == t) {
            out.push(t.to_string());
        }
    }
    out
}

/// True for `@all`, `@peers`, `@foreman`.
pub fn is_broadcast_selector(t: &str) -> bool {
    matches!(t, "@all" | "@peers" | "@foreman")
}

/// Classifies a normalized, non-empty list; rejects a mixed list (§5.2) and unknown selectors.
pub fn audience(to: &[String]) -> Result<Audience, CoreError> {
    let has_user = to.iter().any(|t| t == USER);
    let has_agent = to.iter().any(|t| t != USER);
    for t in to {
        if t.starts_with('@') && !is_broadcast_selector(t) {
            return Err(
                CoreError::invalid(format!("unknown selector: {t}")).with("token", t.as_str())
            );
        }
    }
    match (has_user, has_agent) {
        (true, true) => Err(CoreError::invalid(
            "recipient list mixes the human user with agent recipients; send separate messages",
        )
        .with("reason", "mixed_audience")),
        (true, false) => Ok(Audience::Human),
        _ => Ok(Audience::Agents),
    }
}

/// Materializes an empty list to the group's default (§5.1, §5.3), then validates it.
/// Actor ids must name actors of the group.
pub fn materialize(group: &Group, to: &[String]) -> Result<(Vec<String>, Audience), CoreError> {
    let mut to = normalize(to);
    if to.is_empty() {
        to.push(group.settings.default_send_to.selector().to_string());
    }
    let aud = audience(&to)?;
    if aud == Audience::Agents {
        for t in &to {
            if !t.starts_with('@') && group.actor(t).is_none() {
                return Err(CoreError::no_actor(t));
            }
        }
    }
    Ok((to, aud))
}

/// Expands tokens to concrete recipients (actor ids, or `user`), in group order.
/// Internal assistants are reached only by explicit id (§5.1).
pub fn expand(group: &Group, to: &[String]) -> Vec<String> {
    if to.iter().any(|t| t == USER) {
        return vec![USER.to_string()];
    }
    let mut out = Vec::new();
    for a in &group.actors {
        let hit = to.iter().any(|t| match t.as_str() {
            "@all" => !a.internal,
            "@peers" => !a.internal && a.role == Role::Peer,
            "@foreman" => !a.internal && a.role == Role::Foreman,
            id => id == a.id,
        });
        if hit {
            out.push(a.id.clone());
        }
    }
    out
}

/// The stored `to` tokens of a message's `data` (empty when absent or malformed).
pub fn recipients_of(data: &serde_json::Value) -> Vec<String> {
    data.get("to")
        .and_then(serde_json::Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// True when `actor_id` is a recipient of `to` in `group`.
pub fn addresses(group: &Group, to: &[String], actor_id: &str) -> bool {
    expand(group, to).iter().any(|x| x == actor_id)
}
