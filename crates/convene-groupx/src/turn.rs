//! The Turn state machine (§5) and the delivery-certainty projection of its attempt (§2.1).
//!
//! ```text
//! queued -> dispatching -> running -> completed | failed | cancelled | interrupted
//! queued -> cancelled | failed
//! dispatching | running -> cancelling -> completed | cancelled | failed | interrupted
//! ```
//! A terminal turn never changes again; a retry is a new turn. Certainty only grows:
//! `not_delivered` → `unknown` (the prompt is about to be written) → `delivered` (the agent
//! showed it started); it is never lowered.

use serde::{Deserialize, Serialize};

/// Where a turn is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnStatus {
    /// Accepted, waiting in its agent's lane.
    Queued,
    /// The prompt is being handed to the agent.
    Dispatching,
    /// The agent is working on it.
    Running,
    /// Cancel was asked after dispatch; the agent has not settled yet.
    Cancelling,
    /// The agent finished; its response is in the room.
    Completed,
    /// The turn failed (see its error code).
    Failed,
    /// Cancelled before or during its run.
    Cancelled,
    /// The broker lost track of a dispatched turn (e.g. it restarted); it is not re-run.
    Interrupted,
}

impl TurnStatus {
    /// Wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Dispatching => "dispatching",
            Self::Running => "running",
            Self::Cancelling => "cancelling",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Interrupted => "interrupted",
        }
    }

    /// Whether nothing can change the turn any more.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Cancelled | Self::Interrupted
        )
    }
}

/// How far the attempt went towards the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Nothing has been sent to the agent.
    Prepared,
    /// The prompt call was about to be made (persisted before it is).
    PromptInvoked,
    /// The agent showed it started.
    NativeStarted,
    /// Settled.
    Terminal,
}

/// What the broker can prove about delivery of the prompt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Certainty {
    /// Provably never handed to the agent.
    NotDelivered,
    /// Maybe handed over.
    Unknown,
    /// The agent has it.
    Delivered,
}

/// What happens to a turn (each is one durable event, except `CancelRequested` on a queued
/// turn, which the broker turns into `Cancelled`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnEvent {
    /// `turn.dispatched`: persisted before the prompt is written.
    Dispatched,
    /// `turn.started`: the agent showed it is working.
    Started,
    /// `turn.cancelling`: cancel intent on a dispatched turn.
    CancelRequested,
    /// `turn.completed`
    Completed,
    /// `turn.failed`
    Failed,
    /// `turn.cancelled`
    Cancelled,
    /// `turn.interrupted`
    Interrupted,
}

/// A transition the machine does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("turn in state {from:?} cannot take {event:?}")]
pub struct TransitionError {
    /// State before.
    pub from: TurnStatus,
    /// The refused event.
    pub event: TurnEvent,
}

/// What a restarted broker does with a turn it finds unfinished (§5, last paragraph).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recovery {
    /// Already terminal.
    Nothing,
    /// Never handed over: put it back in its lane.
    Requeue,
    /// Never handed over and cancel was asked: settle `cancelled`.
    Cancel,
    /// Handed over (or maybe): settle `interrupted`; never a second native run.
    Interrupt,
}

/// One turn's state and its attempt's delivery projection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnState {
    /// Status.
    pub status: TurnStatus,
    /// Attempt phase.
    pub phase: Phase,
    /// Attempt delivery certainty.
    pub certainty: Certainty,
}

impl Default for TurnState {
    fn default() -> Self {
        Self::new()
    }
}

impl TurnState {
    /// A queued turn.
    pub fn new() -> Self {
        Self {
            status: TurnStatus::Queued,
            phase: Phase::Prepared,
            certainty: Certainty::NotDelivered,
        }
    }

    /// Applies one event, or refuses it and changes nothing.
    pub fn apply(&mut self, event: TurnEvent) -> Result<(), TransitionError> {
        use TurnStatus as S;
        let refuse = Err(TransitionError {
            from: self.status,
            event,
        });
        let next = match (self.status, event) {
            (s, _) if s.is_terminal() => return refuse,
            (S::Queued, TurnEvent::Dispatched) => {
                self.phase = Phase::PromptInvoked;
                self.raise(Certainty::Unknown);
                S::Dispatching
            }
            (S::Dispatching, TurnEvent::Started) => {
                self.phase = Phase::NativeStarted;
                self.raise(Certainty::Delivered);
                S::Running
            }
            // Progress can be reported after cancel was asked; the intent stays.
            (S::Cancelling, TurnEvent::Started) => {
                self.phase = Phase::NativeStarted;
                self.raise(Certainty::Delivered);
                S::Cancelling
            }
            (S::Dispatching | S::Running, TurnEvent::CancelRequested) => S::Cancelling,
            (S::Dispatching | S::Running | S::Cancelling, TurnEvent::Completed) => {
                self.raise(Certainty::Delivered);
                S::Completed
            }
            (S::Queued | S::Dispatching | S::Running | S::Cancelling, TurnEvent::Failed) => {
                S::Failed
            }
            (S::Queued | S::Dispatching | S::Running | S::Cancelling, TurnEvent::Cancelled) => {
                S::Cancelled
            }
            (S::Dispatching | S::Running | S::Cancelling, TurnEvent::Interrupted) => S::Interrupted,
            _ => return refuse,
        };
        self.status = next;
        if next.is_terminal() {
            self.phase = Phase::Terminal;
        }
        Ok(())
    }

    fn raise(&mut self, c: Certainty) {
        self.certainty = self.certainty.max(c);
    }

    /// What a restarted broker must do with this turn.
    pub fn recovery(&self) -> Recovery {
        match (self.status, self.certainty) {
            (s, _) if s.is_terminal() => Recovery::Nothing,
            (TurnStatus::Queued, _) => Recovery::Requeue,
            (TurnStatus::Cancelling, Certainty::NotDelivered) => Recovery::Cancel,
            _ => Recovery::Interrupt,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn any_event() -> impl Strategy<Value = TurnEvent> {
        prop_oneof![
            Just(TurnEvent::Dispatched),
            Just(TurnEvent::Started),
            Just(TurnEvent::CancelRequested),
            Just(TurnEvent::Completed),
            Just(TurnEvent::Failed),
            Just(TurnEvent::Cancelled),
            Just(TurnEvent::Interrupted),
        ]
    }

    #[test]
    fn the_happy_path_and_its_projection() {
        let mut t = TurnState::new();
        assert_eq!(t.recovery(), Recovery::Requeue);
        t.apply(TurnEvent::Dispatched).unwrap();
        assert_eq!(
            (t.phase, t.certainty),
            (Phase::PromptInvoked, Certainty::Unknown)
        );
        assert_eq!(t.recovery(), Recovery::Interrupt);
        t.apply(TurnEvent::Started).unwrap();
        t.apply(TurnEvent::Completed).unwrap();
        assert_eq!(t.status, TurnStatus::Completed);
        assert_eq!(t.phase, Phase::Terminal);
        assert!(t.apply(TurnEvent::Started).is_err());
    }

    #[test]
    fn a_queued_turn_cannot_be_interrupted_or_completed() {
        for e in [
            TurnEvent::Interrupted,
            TurnEvent::Completed,
            TurnEvent::Started,
        ] {
            assert!(TurnState::new().apply(e).is_err(), "{e:?}");
        }
    }

    proptest! {
        /// §5: terminal states never return to running; certainty never goes back; a refused
        /// event changes nothing; a restart re-runs only what was provably never delivered.
        #[test]
        fn turn_machine_invariants(events in proptest::collection::vec(any_event(), 0..12)) {
            let mut t = TurnState::new();
            let mut terminal_at = None;
            for (i, e) in events.into_iter().enumerate() {
                let before = t;
                match t.apply(e) {
                    Ok(()) => {
                        prop_assert!(!before.status.is_terminal());
                        prop_assert!(t.certainty >= before.certainty);
                        if t.status.is_terminal() {
                            prop_assert!(terminal_at.is_none());
                            terminal_at = Some(i);
                            prop_assert_eq!(t.phase, Phase::Terminal);
                        }
                    }
                    Err(_) => prop_assert_eq!(t, before),
                }
                if t.recovery() == Recovery::Requeue {
                    prop_assert_eq!(t.certainty, Certainty::NotDelivered);
                }
            }
        }
    }
}
