//! Helpers shared by the store's integration tests.

use convene_core::{Command, Engine};

/// Executes `cmd` in a transaction of `w` and applies its outcome; commits, or rolls back
/// when `commit` is false.
pub fn run(
    w: &mut convene_store::Writer,
    eng: &mut Engine,
    cmd: Command,
    commit: bool,
) -> convene_core::Outcome {
    let tx = w.begin().unwrap();
    let out = {
        let view = convene_store::WriterView::new(&tx);
        eng.execute(&view, cmd, time::OffsetDateTime::now_utc())
            .unwrap()
    };
    convene_store::apply(&tx, &out).unwrap();
    if commit {
        tx.commit().unwrap();
    } else {
        tx.rollback().unwrap();
    }
    out
}
