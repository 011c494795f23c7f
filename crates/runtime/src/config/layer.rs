//! Layers of settings (files, environment, client settings): each read and validated on its
//! own, then merged, with the source of every value kept.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::policy::SECRET_KEYS;
use super::schema::Config;
use serde::Deserialize;

/// Environment variables `AGENT_LS_<SECTION>__<KEY>` set configuration keys.
const ENV_PREFIX: &str = "AGENT_LS_";

/// Where a layer, and so a value, came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Default,
    UserFile(PathBuf),
    WorkspaceFile(PathBuf),
    Env(String),
    InitializationOptions,
    ClientSettings,
}

impl Source {
    fn may_hold_secrets(&self) -> bool {
        matches!(self, Source::Default | Source::UserFile(_) | Source::Env(_))
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Default => f.write_str("default"),
            Source::UserFile(p) => write!(f, "user file {}", p.display()),
            Source::WorkspaceFile(p) => write!(f, "workspace file {}", p.display()),
            Source::Env(var) => write!(f, "environment variable {var}"),
            Source::InitializationOptions => f.write_str("LSP initializationOptions"),
            Source::ClientSettings => f.write_str("LSP workspace/didChangeConfiguration"),
        }
    }
}

/// A problem with one layer, naming where it is so the user can fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub source: Source,
    pub line: Option<usize>,
    pub key: Option<String>,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid configuration in {}", self.source)?;
        if let Some(line) = self.line {
            write!(f, " at line {line}")?;
        }
        if let Some(key) = &self.key {
            write!(f, ", key `{key}`")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ConfigError {}

/// One layer of settings, already validated on its own.
#[derive(Debug, Clone)]
pub struct Layer {
    pub source: Source,
    pub(super) table: toml::Table,
}

pub fn user_config_path() -> Option<PathBuf> {
    let base = match std::env::var_os("XDG_CONFIG_HOME") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(std::env::var_os("HOME")?).join(".config"),
    };
    Some(base.join("agent-ls").join("config.toml"))
}

/// The largest configuration file read: a hostile workspace's huge file costs no memory.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

pub(super) fn read_file_layer(
    source: Source,
    path: &Path,
) -> Result<Option<Layer>, Vec<ConfigError>> {
    use std::io::Read;
    let error = |line: Option<usize>, message: String| {
        Err(vec![ConfigError {
            source: source.clone(),
            line,
            key: None,
            message,
        }])
    };
    let mut bytes = Vec::new();
    let read =
        std::fs::File::open(path).and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes));
    match read {
        Ok(_) if bytes.len() as u64 > MAX_FILE_BYTES => error(
            None,
            format!(
                "the file is over {MAX_FILE_BYTES} bytes, the most a configuration file may be"
            ),
        ),
        Ok(_) => match String::from_utf8(bytes) {
            Ok(text) => parse_toml_layer(source, &text).map(Some),
            Err(e) => {
                let valid = &e.as_bytes()[..e.utf8_error().valid_up_to()];
                let line = memchr::memchr_iter(b'\n', valid).count() + 1;
                error(Some(line), "the file is not UTF-8 text".into())
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => error(None, format!("cannot read the file: {e}")),
    }
}

/// Parses and validates one TOML file's text.
pub fn parse_toml_layer(source: Source, text: &str) -> Result<Layer, Vec<ConfigError>> {
    let error_at = |span: Option<std::ops::Range<usize>>, key: Option<String>, message: String| {
        let line = span.map(|s| line_of(text, s.start));
        ConfigError {
            source: source.clone(),
            line,
            key: key.or_else(|| line.and_then(|l| key_on_line(text, l))),
            message,
        }
    };
    if let Some((line, depth)) = too_deep_key(text) {
        return Err(vec![ConfigError {
            source,
            line: Some(line),
            key: None,
            message: format!(
                "a key nests {depth} tables deep here; at most {MAX_KEY_DEPTH} are allowed"
            ),
        }]);
    }
    let table: toml::Table = toml::from_str(text)
        .map_err(|e| vec![error_at(e.span(), None, e.message().to_string())])?;
    let deserializer = toml::Deserializer::parse(text)
        .map_err(|e| vec![error_at(e.span(), None, e.message().to_string())])?;
    if let Err(e) = serde_path_to_error::deserialize::<_, Config>(deserializer) {
        let key = Some(e.path().to_string()).filter(|k| k != ".");
        let inner = e.into_inner();
        return Err(vec![error_at(
            inner.span(),
            key,
            inner.message().to_string(),
        )]);
    }
    finish_layer(source, table, Some(text))
}

/// Refuses secrets where they may not come from; otherwise wraps the table as a layer.
fn finish_layer(
    source: Source,
    mut table: toml::Table,
    text: Option<&str>,
) -> Result<Layer, Vec<ConfigError>> {
    if !source.may_hold_secrets() {
        let mut found = Vec::new();
        strip_secrets("", &mut table, &mut found);
        if !found.is_empty() {
            // The whole layer is refused: a secret committed to a workspace is a mistake worth
            // fixing, and silently using the rest could hide it.
            return Err(found
                .into_iter()
                .map(|key| ConfigError {
                    source: source.clone(),
                    line: text.and_then(|t| line_of_key(t, &key)),
                    message: format!(
                        "secrets are read only from the environment or the user file ({}); remove it here",
                        user_config_path()
                            .map(|p| p.display().to_string())
                            .unwrap_or_else(|| "$XDG_CONFIG_HOME/agent-ls/config.toml".into())
                    ),
                    key: Some(key),
                })
                .collect());
        }
    }
    Ok(Layer { source, table })
}

fn strip_secrets(prefix: &str, table: &mut toml::Table, found: &mut Vec<String>) {
    let keys: Vec<String> = table.keys().cloned().collect();
    for key in keys {
        let path = join_key(prefix, &key);
        if SECRET_KEYS.contains(&key.as_str()) {
            table.remove(&key);
            found.push(path);
        } else if let Some(toml::Value::Table(inner)) = table.get_mut(&key) {
            strip_secrets(&path, inner, found);
        }
    }
}

/// One `AGENT_LS_SECTION__KEY=value` variable as a layer; other variables are not config.
pub(super) fn env_layer(name: &str, value: &str) -> Result<Option<Layer>, Vec<ConfigError>> {
    let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
        return Ok(None);
    };
    if !rest.contains("__") {
        return Ok(None);
    }
    let source = Source::Env(name.to_string());
    let path: Vec<String> = rest.split("__").map(|p| p.to_ascii_lowercase()).collect();
    // A value is read as TOML when it parses as one (numbers, booleans, arrays), else as a string.
    let parsed = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let mut table = toml::Table::new();
    insert_path(&mut table, &path, parsed);
    validate_table(&source, &table)?;
    finish_layer(source, table, None).map(Some)
}

/// The client's settings as a layer. Clients may wrap them in an `agent-ls` section.
pub fn json_layer(source: Source, value: &serde_json::Value) -> Result<Layer, Vec<ConfigError>> {
    let value = value
        .get("agent-ls")
        .or_else(|| value.get("agentLs"))
        .unwrap_or(value);
    let table = match json_to_toml(value) {
        Some(toml::Value::Table(t)) => t,
        None => toml::Table::new(),
        Some(other) => {
            return Err(vec![ConfigError {
                source,
                line: None,
                key: None,
                message: format!("expected an object of settings, got {}", other.type_str()),
            }]);
        }
    };
    validate_table(&source, &table)?;
    finish_layer(source, table, None)
}

fn validate_table(source: &Source, table: &toml::Table) -> Result<(), Vec<ConfigError>> {
    let value = toml::Value::Table(table.clone());
    serde_path_to_error::deserialize::<_, Config>(value)
        .map(|_| ())
        .map_err(|e| {
            vec![ConfigError {
                source: source.clone(),
                line: None,
                key: Some(e.path().to_string()).filter(|k| k != "."),
                message: e.into_inner().message().to_string(),
            }]
        })
}

/// JSON null means "not set", so it is dropped rather than turned into a value.
fn json_to_toml(value: &serde_json::Value) -> Option<toml::Value> {
    use serde_json::Value as J;
    Some(match value {
        J::Null => return None,
        J::Bool(b) => toml::Value::Boolean(*b),
        J::Number(n) => match n.as_i64() {
            Some(i) => toml::Value::Integer(i),
            None => toml::Value::Float(n.as_f64()?),
        },
        J::String(s) => toml::Value::String(s.clone()),
        J::Array(items) => toml::Value::Array(items.iter().filter_map(json_to_toml).collect()),
        J::Object(map) => toml::Value::Table(
            map.iter()
                .filter_map(|(k, v)| Some((k.clone(), json_to_toml(v)?)))
                .collect(),
        ),
    })
}

pub(super) fn merge(layers: &[Layer]) -> (Config, BTreeMap<String, Source>) {
    let mut merged = toml::Table::new();
    let mut origins = BTreeMap::new();
    for layer in layers {
        flatten("", &layer.table, &mut |key, _| {
            origins.insert(key.to_string(), layer.source.clone());
        });
        deep_merge(&mut merged, &layer.table);
    }
    // Each layer was validated alone and keys only ever replace keys, so the union is valid too;
    // should that ever fail, the defaults are the safe answer.
    let config = Config::deserialize(toml::Value::Table(merged)).unwrap_or_default();
    (config, origins)
}

fn deep_merge(into: &mut toml::Table, from: &toml::Table) {
    for (key, value) in from {
        match (into.get_mut(key), value) {
            (Some(toml::Value::Table(a)), toml::Value::Table(b)) => deep_merge(a, b),
            _ => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}

pub(super) fn flatten(prefix: &str, table: &toml::Table, f: &mut dyn FnMut(&str, &toml::Value)) {
    for (key, value) in table {
        let path = join_key(prefix, key);
        match value {
            toml::Value::Table(inner) => flatten(&path, inner, f),
            _ => f(&path, value),
        }
    }
}

pub(super) fn join_key(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_string()
    } else {
        format!("{prefix}.{key}")
    }
}

fn insert_path(table: &mut toml::Table, path: &[String], value: toml::Value) {
    match path {
        [] => {}
        [last] => {
            table.insert(last.clone(), value);
        }
        [first, rest @ ..] => {
            let entry = table
                .entry(first.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            if let toml::Value::Table(inner) = entry {
                insert_path(inner, rest, value);
            }
        }
    }
}

/// 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The deepest dotted key a configuration file may use. Ours nest four deep at most; the
/// limit is far above that and below the depth where the TOML parser gives up without saying
/// where (about 85).
const MAX_KEY_DEPTH: usize = 32;

/// The first line whose table header or dotted key nests deeper than [`MAX_KEY_DEPTH`], with
/// its depth. Dots inside quoted keys do not count.
fn too_deep_key(text: &str) -> Option<(usize, usize)> {
    text.lines().enumerate().find_map(|(i, line)| {
        let line = line.trim_start();
        let key = if line.starts_with('[') {
            line.trim_start_matches('[')
        } else {
            line
        };
        let (mut depth, mut quote) = (1, None);
        for c in key.chars() {
            match (quote, c) {
                (None, '"' | '\'') => quote = Some(c),
                (Some(q), c) if c == q => quote = None,
                (None, '.') => depth += 1,
                (None, '=' | ']' | '#') => break,
                _ => {}
            }
        }
        (depth > MAX_KEY_DEPTH).then_some((i + 1, depth))
    })
}

/// The dotted key assigned on a 1-based line, with the table header above it.
fn key_on_line(text: &str, line: usize) -> Option<String> {
    let lines: Vec<&str> = text.lines().collect();
    let this = lines.get(line.checked_sub(1)?)?.trim();
    let header = |l: &str| {
        let l = l.trim();
        (l.starts_with('[') && !l.starts_with("[["))
            .then(|| l.trim_matches(|c| c == '[' || c == ']').trim().to_string())
    };
    if let Some(h) = header(this) {
        return Some(h);
    }
    let key = this.split_once('=')?.0.trim().trim_matches('"').to_string();
    let section = lines[..line - 1].iter().rev().find_map(|l| header(l));
    Some(match section {
        Some(s) => format!("{s}.{key}"),
        None => key,
    })
}

/// The 1-based line where a dotted key is assigned, found by scanning for its last segment.
fn line_of_key(text: &str, key: &str) -> Option<usize> {
    (1..=text.lines().count()).find(|&l| key_on_line(text, l).as_deref() == Some(key))
}
