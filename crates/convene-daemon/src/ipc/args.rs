//! Typed access to request arguments with structured errors.

use convene_core::CoreError;
use serde_json::{Map, Value};

/// Request arguments.
pub struct Args(pub Map<String, Value>);

impl Args {
    /// A string argument, `None` when absent or null.
    pub fn opt_str(&self, k: &str) -> Result<Option<String>, CoreError> {
        match self.0.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(CoreError::invalid(format!("{k} must be a string")).with("field", k)),
        }
    }

    /// A string argument, "" when absent.
    pub fn str(&self, k: &str) -> Result<String, CoreError> {
        Ok(self.opt_str(k)?.unwrap_or_default())
    }

    /// A required non-empty string argument.
    pub fn req(&self, k: &str) -> Result<String, CoreError> {
        match self.opt_str(k)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            _ => Err(CoreError::invalid(format!("{k} is required")).with("field", k)),
        }
    }

    /// The principal hint (`by`), defaulting to `user` (local trust; see docs/SECURITY.md).
    pub fn by(&self) -> Result<String, CoreError> {
        Ok(self
            .opt_str("by")?
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "user".into()))
    }

    /// A list of strings.
    pub fn str_list(&self, k: &str) -> Result<Option<Vec<String>>, CoreError> {
        match self.0.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| {
                    x.as_str().map(str::to_string).ok_or_else(|| {
                        CoreError::invalid(format!("{k} must be a list of strings"))
                            .with("field", k)
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => {
                Err(CoreError::invalid(format!("{k} must be a list of strings")).with("field", k))
            }
        }
    }

    /// A list of objects.
    pub fn obj_list(&self, k: &str) -> Result<Vec<Value>, CoreError> {
        match self.0.get(k) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(a)) => Ok(a.clone()),
            Some(_) => Err(CoreError::invalid(format!("{k} must be a list")).with("field", k)),
        }
    }

    /// An object argument.
    pub fn obj(&self, k: &str) -> Result<Map<String, Value>, CoreError> {
        match self.0.get(k) {
            None | Some(Value::Null) => Ok(Map::new()),
            Some(Value::Object(m)) => Ok(m.clone()),
            Some(_) => Err(CoreError::invalid(format!("{k} must be an object")).with("field", k)),
        }
    }

    /// A non-negative integer with a default, bounded to `1..=max` when `clamp`.
    pub fn uint(&self, k: &str, default: u64) -> Result<u64, CoreError> {
        match self.0.get(k) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v.as_u64().ok_or_else(|| {
                CoreError::invalid(format!("{k} must be a non-negative integer")).with("field", k)
            }),
        }
    }

    /// A boolean with a default.
    pub fn bool(&self, k: &str, default: bool) -> Result<bool, CoreError> {
        match self.0.get(k) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(CoreError::invalid(format!("{k} must be a boolean")).with("field", k)),
        }
    }

    /// A limit in `1..=max`, default `default`.
    pub fn limit(&self, default: u64, max: u64) -> Result<usize, CoreError> {
        let n = self.uint("limit", default)?;
        if n == 0 || n > max {
            return Err(
                CoreError::invalid(format!("limit must be 1..={max}")).with("field", "limit")
            );
        }
        Ok(n as usize)
    }
}
