//! Identifiers the broker mints: time-ordered UUIDs with a readable prefix.

/// A new id `<prefix>_<uuid v7, simple>`: sortable by creation time, unique without a registry.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// `evt_…`: a message event id the broker assigns before the commit.
pub fn event_id() -> String {
    new_id("evt")
}

/// `turn_…`
pub fn turn_id() -> String {
    new_id("turn")
}

/// `corr_…`
pub fn correlation_id() -> String {
    new_id("corr")
}

/// `att_…`: one dispatch attempt of a turn.
pub fn attempt_id() -> String {
    new_id("att")
}

#[cfg(test)]
mod tests {
    #[test]
    fn ids_are_prefixed_and_distinct() {
        let (a, b) = (super::turn_id(), super::turn_id());
        assert!(a.starts_with("turn_") && a.len() == 37, "{a}");
        assert_ne!(a, b);
    }
}
