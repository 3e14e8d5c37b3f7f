//! Content-addressed attachment store (§8): bytes live at `<home>/blobs/<sha256>`; a message
//! refers to them by the stable path `blobs/<sha256>`, resolvable through `blob_get`.

use std::path::PathBuf;

use base64::Engine as _;
use convene_core::{CoreError, ErrorCode};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Largest blob accepted over IPC (base64 must also fit the request frame).
pub const MAX_BLOB_BYTES: usize = 3 * 1024 * 1024;

/// The blob directory.
pub struct Blobs {
    dir: PathBuf,
}

fn sha_of_path(path: &str) -> Option<&str> {
    let h = path.strip_prefix("blobs/")?;
    (h.len() == 64
        && h.chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()))
    .then_some(h)
}

impl Blobs {
    /// A store under `dir` (created).
    pub fn open(dir: PathBuf) -> std::io::Result<Self> {
        std::fs::create_dir_all(&dir)?;
        Ok(Self { dir })
    }

    /// Stores bytes; returns an attachment reference.
    pub fn put(&self, bytes: &[u8], name: &str, mime: &str) -> Result<Value, CoreError> {
        if bytes.len() > MAX_BLOB_BYTES {
            return Err(CoreError::new(
                ErrorCode::LimitExceeded,
                format!("blob exceeds {MAX_BLOB_BYTES} bytes"),
            )
            .with("limit", MAX_BLOB_BYTES as u64));
        }
        let sha = hex::encode(Sha256::digest(bytes));
        let target = self.dir.join(&sha);
        if !target.exists() {
            // Write-then-rename so a reader never sees a partial blob.
            let tmp = self.dir.join(format!(".{sha}.{}", std::process::id()));
            std::fs::write(&tmp, bytes)
                .and_then(|_| std::fs::rename(&tmp, &target))
                .map_err(|e| CoreError::storage(format!("blob write: {e}")))?;
        }
        let mut v = json!({"kind": "file", "path": format!("blobs/{sha}"), "sha256": sha, "bytes": bytes.len()});
        if !name.is_empty() {
            v["title"] = json!(name);
        }
        if !mime.is_empty() {
            v["mime_type"] = json!(mime);
        }
        Ok(v)
    }

    /// Stores base64 content.
    pub fn put_b64(&self, b64: &str, name: &str, mime: &str) -> Result<Value, CoreError> {
        if b64.len() > MAX_BLOB_BYTES / 3 * 4 + 4 {
            return Err(CoreError::new(
                ErrorCode::LimitExceeded,
                format!("blob exceeds {MAX_BLOB_BYTES} bytes"),
            ));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|e| {
                CoreError::invalid(format!("content_b64: {e}")).with("field", "content_b64")
            })?;
        self.put(&bytes, name, mime)
    }

    /// Reads a blob by its stable path.
    pub fn get(&self, path: &str) -> Result<Vec<u8>, CoreError> {
        let sha = sha_of_path(path).ok_or_else(|| {
            CoreError::invalid("path must be blobs/<sha256>").with("field", "path")
        })?;
        std::fs::read(self.dir.join(sha)).map_err(|_| {
            CoreError::new(ErrorCode::EventNotFound, format!("no blob at {path}"))
                .with("path", path)
        })
    }

    /// Reads a blob as base64 with its metadata: whole when `offset` is `None` (refused as
    /// `limit_exceeded` when it is longer than `chunk`, so nobody takes a part for the whole),
    /// else the up to `chunk` bytes from `offset` (`has_more`, `next_offset` say what is left).
    pub fn get_b64(&self, path: &str, offset: Option<u64>, chunk: u64) -> Result<Value, CoreError> {
        let bytes = self.get(path)?;
        let sha = hex::encode(Sha256::digest(&bytes));
        let total = bytes.len() as u64;
        if chunk == 0 {
            return Err(CoreError::invalid("length must be at least 1").with("field", "length"));
        }
        let Some(off) = offset else {
            if total > chunk {
                return Err(CoreError::new(
                    ErrorCode::LimitExceeded,
                    format!("blob of {total} bytes exceeds one answer ({chunk} bytes): read it in parts with offset"),
                )
                .with("reason", "answer_too_large")
                .with("bytes", total)
                .with("max_bytes", chunk));
            }
            return Ok(
                json!({"path": path, "sha256": sha, "bytes": total, "offset": 0, "has_more": false,
                "content_b64": base64::engine::general_purpose::STANDARD.encode(&bytes)}),
            );
        };
        if off > total {
            return Err(CoreError::invalid(format!(
                "offset {off} is past the blob's {total} bytes"
            ))
            .with("field", "offset"));
        }
        let end = off.saturating_add(chunk).min(total);
        // Both bounds are within `bytes.len()` (checked above), so the casts are lossless.
        let part = &bytes[off as usize..end as usize];
        let mut v = json!({"path": path, "sha256": sha, "bytes": total, "offset": off,
            "part_bytes": part.len(), "has_more": end < total,
            "content_b64": base64::engine::general_purpose::STANDARD.encode(part)});
        if end < total {
            v["next_offset"] = json!(end);
        }
        Ok(v)
    }

    /// Checks attachments point at stored blobs and fills in `sha256` and `bytes`.
    pub fn check_attachments(&self, items: Vec<Value>) -> Result<Vec<Value>, CoreError> {
        items
            .into_iter()
            .enumerate()
            .map(|(i, mut it)| {
                let path = it
                    .get("path")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let bad = |m: &str| {
                    CoreError::invalid(format!("attachments[{i}]: {m}"))
                        .with("field", "attachments")
                        .with("reason", "invalid_attachments")
                };
                let sha = sha_of_path(&path)
                    .ok_or_else(|| bad("path must be blobs/<sha256> from blob_put"))?
                    .to_string();
                let meta =
                    std::fs::metadata(self.dir.join(&sha)).map_err(|_| bad("no such blob"))?;
                if let Some(given) = it.get("sha256").and_then(Value::as_str) {
                    if given != sha {
                        return Err(bad("sha256 does not match the blob"));
                    }
                }
                if let Value::Object(m) = &mut it {
                    m.entry("sha256").or_insert(json!(sha));
                    m.entry("bytes").or_insert(json!(meta.len()));
                }
                Ok(it)
            })
            .collect()
    }
}
