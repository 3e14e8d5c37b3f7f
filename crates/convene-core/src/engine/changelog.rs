//! Which groups the recent revisions changed, so a face keeping an index of groups (the
//! Cowchat room names) can bring it up to date by looking at those groups only.

use std::collections::VecDeque;

/// Most (revision, group) entries kept; an index further behind derives itself again.
pub(super) const CAP: usize = 4096;

/// The groups changed by the commands after revision `start`, oldest first.
#[derive(Debug, Default, Clone)]
pub(super) struct ChangeLog {
    /// Every change after this revision is in `entries`; anything at or before it may not be.
    start: u64,
    entries: VecDeque<(u64, String)>,
}

impl ChangeLog {
    /// An empty log: a reader at `start` or later is complete.
    pub fn new(start: u64) -> Self {
        Self {
            start,
            entries: VecDeque::new(),
        }
    }

    /// The command that made `revision` changed `group_id` (created, updated or deleted it).
    pub fn record(&mut self, revision: u64, group_id: &str) {
        if self.entries.len() == CAP {
            // Entries sharing the dropped one's revision may remain: a reader at that
            // revision saw them all, one before it may miss this one.
            if let Some((r, _)) = self.entries.pop_front() {
                self.start = r;
            }
        }
        self.entries.push_back((revision, group_id.to_string()));
    }

    /// The groups changed after `since` (a group may come more than once); `None` when the
    /// log does not reach back that far.
    pub fn since(&self, since: u64) -> Option<impl Iterator<Item = &str>> {
        if since < self.start {
            return None;
        }
        // Revisions increase along the log: skip the prefix at or before `since`.
        let skip = self.entries.partition_point(|(r, _)| *r <= since);
        Some(self.entries.range(skip..).map(|(_, g)| g.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn since(log: &ChangeLog, rev: u64) -> Option<Vec<&str>> {
        log.since(rev).map(Iterator::collect)
    }

    #[test]
    fn answers_only_for_revisions_it_fully_covers() {
        let mut log = ChangeLog::new(10);
        assert_eq!(since(&log, 9), None, "before the log began");
        assert_eq!(since(&log, 10), Some(vec![]));
        log.record(11, "a");
        log.record(12, "b");
        log.record(12, "c");
        assert_eq!(since(&log, 10), Some(vec!["a", "b", "c"]));
        assert_eq!(since(&log, 11), Some(vec!["b", "c"]));
        assert_eq!(since(&log, 12), Some(vec![]));
    }

    #[test]
    fn a_full_log_drops_its_oldest_revision_and_says_so() {
        let mut log = ChangeLog::new(0);
        for i in 0..CAP as u64 {
            log.record(i + 1, "g");
        }
        assert_eq!(since(&log, 0).map(|v| v.len()), Some(CAP));
        log.record(CAP as u64 + 1, "new");
        assert_eq!(since(&log, 0), None, "entry of revision 1 is gone");
        assert_eq!(since(&log, 1).map(|v| v.len()), Some(CAP));
        assert_eq!(since(&log, CAP as u64).unwrap(), vec!["new"]);
    }
}
