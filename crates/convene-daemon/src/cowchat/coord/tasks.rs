//! Tasks: `assign_task`, `update_task`, `list_tasks` (answered as `task_list`). Any member
//! may assign, update or list; an assignee must be a member of the room.

use convene_cowchat::{
    parse, AssignTask, ErrorCode, ListTasks, UpdateTask, WireError, TASK_STATUSES,
};
use serde_json::{json, Map, Value};

use super::super::conn::Session;
use super::state::{self, Task};
use super::{append, check_member, seal};

/// The task, if its room still exists and the caller's key may see it: a task of a room the
/// caller cannot see answers as an unknown one, so its id tells nothing.
fn task(s: &Session, id: &str) -> Result<Task, WireError> {
    let t = s.face.coord.state.lock().tasks.get(id).cloned();
    t.filter(|t| {
        let eng = s.face.d.ledger.engine();
        eng.group(&t.room_id)
            .is_some_and(|g| super::super::rooms::visible(&s.face, &eng, g, &s.principal))
    })
    .ok_or_else(|| WireError::new(ErrorCode::TaskNotFound, format!("no task {id}")))
}

fn check_assignee(s: &Session, room: &str, a: Option<&str>) -> Result<(), WireError> {
    match a {
        Some(a) => check_member(s, room, a)
            .map_err(|e| WireError::new(e.code, format!("assignee {a} is not a member of {room}"))),
        None => Ok(()),
    }
}

/// `assign_task`: a new `pending` task.
pub(in super::super) async fn assign_task(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let a: AssignTask = parse(payload)?;
    a.validate()?;
    let me = s.me().to_string();
    check_member(s, &a.room_id, &me)?;
    let assignee = a.assignee.filter(|x| !x.is_empty());
    check_assignee(s, &a.room_id, assignee.as_deref())?;
    let face = s.face.clone();
    let _one = face.coord.write.lock().await;
    let id = seal::new_id("task");
    let data = json!({
        "task_id": id, "title": a.title, "description": a.description,
        "assignee": assignee, "status": "pending", "created_by": me,
    });
    append(&face, &a.room_id, &me, state::TASK_ASSIGNED, data).await?;
    Ok(task(s, &id)?.value())
}

/// `update_task`: new status, assignee and/or note. The event carries the task's resulting
/// status and assignee, so `task_updated` is complete on its own.
pub(in super::super) async fn update_task(
    s: &mut Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let u: UpdateTask = parse(payload)?;
    u.validate()?;
    if u.status.is_none() && u.assignee.is_none() && u.note.is_none() {
        return Err(WireError::payload("give status, assignee or note"));
    }
    let me = s.me().to_string();
    let face = s.face.clone();
    let _one = face.coord.write.lock().await;
    let t = task(s, &u.task_id)?;
    check_member(s, &t.room_id, &me)?;
    // Only a new assignee must be a member: a task whose assignee left can still be
    // completed, blocked or noted.
    let assignee = match u.assignee {
        Some(a) if a.is_empty() => None,
        Some(a) => {
            check_assignee(s, &t.room_id, Some(&a))?;
            Some(a)
        }
        None => t.assignee.clone(),
    };
    let mut data = json!({
        "task_id": t.task_id, "title": t.title,
        "status": u.status.unwrap_or(t.status.clone()), "assignee": assignee,
    });
    if let Some(n) = u.note {
        data["note"] = json!(n);
    }
    append(&face, &t.room_id, &me, state::TASK_UPDATED, data).await?;
    Ok(task(s, &t.task_id)?.value())
}

/// `list_tasks`: the room's tasks, oldest first, optionally of one status.
pub(in super::super) async fn list_tasks(
    s: &Session,
    payload: Map<String, Value>,
) -> Result<Value, WireError> {
    let l: ListTasks = parse(payload)?;
    if let Some(st) = &l.status {
        if !TASK_STATUSES.contains(&st.as_str()) {
            return Err(WireError::payload(
                "status must be pending, in_progress, completed or blocked",
            ));
        }
    }
    check_member(s, &l.room_id, s.me())?;
    let _settled = s.face.coord.write.lock().await;
    let st = s.face.coord.state.lock();
    let tasks: Vec<Value> = st
        .room_tasks
        .get(&l.room_id)
        .into_iter()
        .flatten()
        .filter_map(|id| st.tasks.get(id))
        .filter(|t| l.status.as_deref().is_none_or(|x| x == t.status))
        .map(Task::value)
        .collect();
    Ok(json!({"room_id": l.room_id, "tasks": tasks}))
}
