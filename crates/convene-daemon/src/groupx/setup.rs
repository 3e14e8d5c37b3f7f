//! Local agent setup (§10.6): `GET /api/setup` shows the config file's roster as an editable
//! draft with the agent CLIs found on PATH; `POST /api/setup` validates a draft with the very
//! rules of [`Config::from_text`] and writes the file atomically. The running runtime keeps the
//! roster it started with (no hot swap of sessions or bindings): the answer says
//! `restartRequired`, and the next start loads the new roster.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use convene_groupx::{ErrorCode, GroupxError};
use hyper::body::Incoming;
use hyper::{Method, Request, Response};
use serde_json::{json, Map, Value};

use super::config::{AgentConfig, AssistantConfig, Config, ConfigError};
use super::http::{body, error, json as reply, Body};
use super::Face;

/// The route.
pub(super) const ROUTE: &str = "/api/setup";

/// A native agent CLI the setup page offers (the spec's five drivers).
struct Known {
    id: &'static str,
    name: &'static str,
    driver: &'static str,
    /// Program names to look for, preferred first (the first found is offered).
    programs: &'static [&'static str],
    args: &'static [&'static str],
    mode: Option<&'static str>,
}

const KNOWN: &[Known] = &[
    Known {
        id: "codex",
        name: "Codex",
        driver: "codex",
        programs: &["codex"],
        args: &["app-server"],
        mode: None,
    },
    Known {
        id: "claude",
        name: "Claude",
        driver: "acp",
        // Claude Code speaks ACP through an adapter (renamed from claude-code-acp).
        programs: &["claude-agent-acp", "claude-code-acp"],
        args: &[],
        mode: None,
    },
    Known {
        id: "gemini",
        name: "Gemini",
        driver: "acp",
        programs: &["gemini"],
        args: &["--experimental-acp"],
        mode: None,
    },
    Known {
        id: "kimi",
        name: "Kimi",
        driver: "acp",
        programs: &["kimi"],
        args: &["acp"],
        // §2: Kimi's session mode is set to auto before the first prompt.
        mode: Some("auto"),
    },
    Known {
        id: "hermes",
        name: "Hermes",
        driver: "acp",
        programs: &["hermes"],
        args: &["--yolo", "acp"],
        mode: Some("dont_ask"),
    },
];

/// Where `program` would be found on PATH (or at its own path when it has a `/`), without
/// running it: an executable regular file.
fn which(program: &str, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &Path| {
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let p = PathBuf::from(program);
        return runnable(&p).then_some(p);
    }
    std::env::split_paths(path_var?)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(program))
        .find(|p| runnable(p))
}

/// The five drivers with what detection found on this process's PATH.
fn drivers() -> Vec<Value> {
    let path_var = std::env::var_os("PATH");
    KNOWN
        .iter()
        .map(|k| {
            let found = k
                .programs
                .iter()
                .find_map(|p| which(p, path_var.as_deref()).map(|at| (*p, at)));
            let program = found.as_ref().map_or(k.programs[0], |(p, _)| *p);
            let mut command = vec![program.to_string()];
            command.extend(k.args.iter().map(|a| a.to_string()));
            let mut v = json!({"driver": k.driver, "id": k.id, "name": k.name, "command": command,
                "detected": found.is_some()});
            if let Some((_, at)) = found {
                v["path"] = json!(at);
            }
            if let Some(m) = k.mode {
                v["mode"] = json!(m);
            }
            v
        })
        .collect()
}

/// The path shown and written: the file itself when it exists (through symlinks).
fn real_path(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

fn snapshot(face: &Face) -> Value {
    let path = &face.cfg.path;
    let (agents, assistant, restart_required, file_error) = match Config::load(path) {
        Ok(c) => (
            c.agents,
            c.assistant,
            c.runtime_key != face.cfg.runtime_key,
            None,
        ),
        // A file broken since start: show the running roster, and say why.
        Err(e) => (
            face.cfg.agents.clone(),
            face.cfg.assistant.clone(),
            true,
            Some(e.to_string()),
        ),
    };
    let mut v = json!({
        "configPath": real_path(path),
        "exists": path.exists(),
        "running": true,
        "restartRequired": restart_required,
        "serverPort": face.addr.map(|a| a.port()),
        "storagePath": face.home,
        "drivers": drivers(),
        "draft": {"agents": agents},
    });
    if let Some(a) = assistant {
        // The optional top-level assistant card (§10.6), defaults spelled out.
        let mut card = json!(a);
        card["name"] = json!(a.display_name());
        v["draft"]["assistant"] = card;
    }
    if let Some(e) = file_error {
        v["fileError"] = json!(e);
    }
    v
}

fn invalid(msg: impl Into<String>, field: &str) -> GroupxError {
    GroupxError::new(ErrorCode::InvalidEnvelope, msg).field(field)
}

/// Saves are one at a time: each reads the file it rewrites.
static SAVING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Replaces the file's `agents` with `agents` (and its assistant card: `None` keeps it,
/// `Some(None)` removes it), keeping everything else (the limits) as it is, after the loader's
/// own validation of the whole new file.
fn save(
    path: &Path,
    agents: &[AgentConfig],
    assistant: Option<Option<AssistantConfig>>,
) -> Result<PathBuf, GroupxError> {
    let _one = SAVING.lock().unwrap_or_else(|p| p.into_inner());
    let target = real_path(path);
    let mut doc = match std::fs::read_to_string(&target) {
        Ok(t) if t.trim().is_empty() => Map::new(),
        Ok(t) => match serde_json::from_str::<Value>(&t) {
            Ok(Value::Object(m)) => m,
            _ => {
                let why = "is not a JSON object; fix or remove it first (its limits would be lost)";
                let msg = format!("{} {why}", target.display());
                return Err(invalid(msg, "configPath"));
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Map::new(),
        Err(e) => {
            return Err(GroupxError::new(
                ErrorCode::StorageError,
                format!("{}: {e}", target.display()),
            ))
        }
    };
    doc.insert(
        "agents".into(),
        serde_json::to_value(agents)
            .map_err(|e| GroupxError::new(ErrorCode::StorageError, e.to_string()))?,
    );
    match assistant {
        None => {}
        Some(None) => {
            doc.remove("assistant");
        }
        Some(Some(a)) => {
            doc.insert(
                "assistant".into(),
                serde_json::to_value(a)
                    .map_err(|e| GroupxError::new(ErrorCode::StorageError, e.to_string()))?,
            );
        }
    }
    let mut text = serde_json::to_string_pretty(&Value::Object(doc))
        .map_err(|e| GroupxError::new(ErrorCode::StorageError, e.to_string()))?;
    text.push('\n');
    match Config::from_text(&target, &text) {
        Ok(_) => {}
        Err(ConfigError::Invalid(_, inv)) => {
            let field = match inv.agent {
                Some(i) => format!("agents[{i}].{}", inv.field),
                None => inv.field.to_string(),
            };
            return Err(invalid(inv.message, &field));
        }
        Err(e) => return Err(invalid(e.to_string(), "configPath")),
    }
    write_atomic(&target, text.as_bytes()).map_err(|e| {
        GroupxError::new(
            ErrorCode::StorageError,
            format!("{}: {e}", target.display()),
        )
    })?;
    tracing::info!(path = %target.display(), agents = agents.len(), "groupx: setup saved the roster (applies at the next start)");
    Ok(target)
}

/// Temp file in the same directory, fsync, rename over, fsync the directory: a reader (or a
/// crash) sees the old file or the new one, never a part. Keeps the old file's permissions
/// (the env may hold keys); a new file is owner-only.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "groupx.json".into());
    let tmp = dir.join(format!(".{name}.setup-{}.tmp", std::process::id()));
    let mode = std::fs::metadata(path).map_or(0o600, |m| m.permissions().mode() & 0o777);
    let _ = std::fs::remove_file(&tmp);
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

async fn post(face: Arc<Face>, req: Request<Incoming>) -> Result<Value, GroupxError> {
    let b = body(req).await?;
    let draft = convene_groupx::setup::parse_draft(&b)?;
    let assistant = match draft.assistant {
        None => None,
        Some(None) => Some(None),
        Some(Some(mut m)) => {
            m.retain(|_, v| !v.is_null());
            let a: AssistantConfig = serde_json::from_value(Value::Object(m))
                .map_err(|e| invalid(e.to_string(), "assistant"))?;
            Some(Some(a))
        }
    };
    let mut agents = Vec::new();
    for (i, m) in draft.agents.into_iter().enumerate() {
        let a: AgentConfig = serde_json::from_value(Value::Object(m))
            .map_err(|e| invalid(e.to_string(), &format!("agents[{i}]")))?;
        agents.push(a);
    }
    let path = face.cfg.path.clone();
    // A blocking task runs to its end even if the client hangs up: no half-done save.
    let target = tokio::task::spawn_blocking(move || save(&path, &agents, assistant))
        .await
        .map_err(|e| GroupxError::new(ErrorCode::Unavailable, e.to_string()))??;
    Ok(json!({"saved": true, "restartRequired": true, "configPath": target}))
}

/// `GET|POST /api/setup`.
pub(super) async fn route(face: Arc<Face>, req: Request<Incoming>) -> Response<Body> {
    match *req.method() {
        Method::GET => {
            let f = face.clone();
            match tokio::task::spawn_blocking(move || snapshot(&f)).await {
                Ok(v) => reply(200, &v),
                Err(e) => error(&GroupxError::new(ErrorCode::Unavailable, e.to_string())),
            }
        }
        Method::POST => match post(face, req).await {
            Ok(v) => reply(200, &v),
            Err(e) => error(&e),
        },
        ref m => error(&GroupxError::new(
            ErrorCode::MethodNotAllowed,
            format!("{m} is not allowed on {ROUTE}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_finds_only_executable_files_on_path() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let exe = d.path().join("gemini");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let plain = d.path().join("kimi");
        std::fs::write(&plain, "").unwrap();
        std::fs::create_dir(d.path().join("hermes")).unwrap();
        let path = std::env::join_paths(["/nonexistent".into(), d.path().to_path_buf()]).unwrap();
        assert_eq!(which("gemini", Some(&path)), Some(exe.clone()));
        assert_eq!(which("kimi", Some(&path)), None, "not executable");
        assert_eq!(which("hermes", Some(&path)), None, "a directory");
        assert_eq!(which(exe.to_str().unwrap(), None), Some(exe));
        assert_eq!(which("gemini", None), None);
    }

    #[test]
    fn save_keeps_limits_and_validates_with_the_loader_rules() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("groupx.json");
        std::fs::write(&p, r#"{"agents":[],"limits":{"queuePerAgent":3}}"#).unwrap();
        let a = |id: &str| AgentConfig {
            id: id.into(),
            name: String::new(),
            driver: "acp".into(),
            command: vec!["x".into()],
            cwd: None,
            enabled: true,
            mode: None,
            identity: None,
            env: Default::default(),
        };
        save(&p, &[a("one")], None).unwrap();
        let c = Config::load(&p).unwrap();
        assert_eq!(c.limits.queue_per_agent, 3);
        assert_eq!(c.agents, vec![a("one")]);
        let e = save(&p, &[a("one"), a("one")], None).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents[1].id"));
        let e = save(&p, &[a("__assistant__")], None).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("agents[0].id"));
        assert_eq!(
            Config::load(&p).unwrap().agents,
            vec![a("one")],
            "a refused save writes nothing"
        );
        let leftovers: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "no temp file left behind");
    }
}
