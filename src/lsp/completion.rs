//! `textDocument/inlineCompletion` (LSP 3.18) from a fill-in-the-middle model
//! (docs/completion.md). The session is asked only for a snapshot (the document's buffer,
//! O(1) to clone, and the configuration's `[completion]`); the context is built on a
//! blocking thread and the model is asked on the request's own task, so `didChange` costs
//! nothing more. One model request per document: a newer request for it cancels the older
//! one, which answers an empty list, and `$/cancelRequest` drops the request's task (and its
//! HTTP call) and answers `-32800`. An answer is returned only if the document still has the
//! version it was asked for. Files outside the workspace, protected and secret files are
//! never sent.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio_util::sync::CancellationToken;
use tower_lsp_server::ls_types::{
    Command, InlineCompletionItem, InlineCompletionParams, InlineCompletionResponse, Range, Uri,
};

use super::convert;
use super::ext;
use super::next_edit::{self, NextEdits};
use super::session::SessionHandle;
use agent_ls_core::completion::{self as fim, Budget, Cache, Context};
use agent_ls_core::repomap::tags::Tags;
use agent_ls_core::text::{Buffer, Encoding, to_char_index, to_position};
use agent_ls_runtime::completion::Completer;
use agent_ls_runtime::config::CompletionConfig;

/// Documents over this size give no tags or snippets to other files' requests.
const MAX_OTHER_FILE: usize = 256 * 1024;
/// Other open documents looked at for one request.
const MAX_OTHER_FILES: usize = 20;
/// The most documents' tags, and suggestions counted as partly accepted, kept at once.
const MAX_KEPT: usize = 256;

/// Inline completion's state, shared by its requests.
#[derive(Default)]
pub struct Completions {
    /// The model request in flight per document: its number and how to cancel it.
    inflight: Mutex<HashMap<Uri, (u64, CancellationToken)>>,
    next_id: AtomicU64,
    cache: Mutex<Cache>,
    /// Suggestions already counted as partly accepted.
    partial: Mutex<HashSet<u64>>,
    completer: Mutex<Option<Built>>,
    /// Other documents' tags by URI and version, parsed once per version.
    tags: Mutex<HashMap<Uri, Versioned>>,
    /// The next-edit suggestions (`completion.next_edit`).
    pub next: Arc<NextEdits>,
}

/// A document's tags and the version they were read from.
type Versioned = (i32, Arc<Tags>);

struct Built {
    config: CompletionConfig,
    hosts: BTreeSet<String>,
    completer: Arc<Completer>,
}

/// What the session hands a request: the document, its neighbours, and the settings.
struct Snapshot {
    buffer: Buffer,
    encoding: Encoding,
    root: Option<PathBuf>,
    config: CompletionConfig,
    hosts: BTreeSet<String>,
    others: Vec<(Uri, Buffer)>,
}

type Answer = tower_lsp_server::jsonrpc::Result<Option<InlineCompletionResponse>>;

fn empty() -> Answer {
    Ok(Some(InlineCompletionResponse::Array(Vec::new())))
}

/// The relative path of `uri` in `root`, when it is a file there that may be sent.
pub fn sendable(root: &Path, uri: &Uri) -> Option<String> {
    let path = uri.to_file_path()?;
    let rel = path.strip_prefix(root).ok()?.to_str()?.replace('\\', "/");
    let protected = agent_ls_runtime::trust::protected::reason(&rel).is_some()
        || agent_ls_runtime::trust::protected::secret(&rel).is_some();
    (!protected).then_some(rel)
}

impl Completions {
    /// Answers one request: the model's suggestion at the cursor, and the next-edit
    /// prediction when one lies at or below the cursor's line (`next_edit.rs`).
    pub async fn answer(&self, session: &SessionHandle, params: InlineCompletionParams) -> Answer {
        let uri = params.text_document_position.text_document.uri.clone();
        let line = params.text_document_position.position.line;
        self.next_edit(session, &uri, line, true).await;
        let mut items = match self.fim(session, params).await? {
            Some(InlineCompletionResponse::Array(items)) => items,
            Some(InlineCompletionResponse::List(list)) => list.items,
            None => Vec::new(),
        };
        items.extend(self.next_edit(session, &uri, line, false).await);
        Ok(Some(InlineCompletionResponse::Array(items)))
    }

    /// With `start`, starts a next-edit prediction from the document's recent edits (when
    /// they are newer than the last one's); without, the prediction as an inline item.
    async fn next_edit(
        &self,
        session: &SessionHandle,
        uri: &Uri,
        line: u32,
        start: bool,
    ) -> Option<InlineCompletionItem> {
        let u = uri.clone();
        let found = session.query(move |s| {
            let buffer = s.document(&u)?.clone();
            let c = &s.config().config.completion;
            let on = c.is_on() && c.next_edit;
            let root = s.workspace_root().cloned().filter(|_| on)?;
            Some((buffer, s.encoding(), root, s.recent_edits(&u)))
        });
        let (buffer, encoding, root, (count, edits)) = found.await.ok().flatten()?;
        let path = sendable(&root, uri)?;
        if start {
            let uri = uri.clone();
            let asked = next_edit::Asked {
                uri,
                root,
                path,
                buffer,
                count,
                edits,
            };
            self.next.predict(session, asked);
            return None;
        }
        self.next.item(uri, &buffer, encoding, line)
    }

    /// The fill-in-the-middle model's suggestion at the cursor (see the file's comment).
    async fn fim(&self, session: &SessionHandle, params: InlineCompletionParams) -> Answer {
        let started = Instant::now();
        let uri = params.text_document_position.text_document.uri.clone();
        let pos = convert::position_from_lsp(params.text_document_position.position);
        let Some(snap) = snapshot(session, &uri).await else {
            return empty();
        };
        let Some(root) = snap.root.clone().filter(|_| snap.config.is_on()) else {
            return empty();
        };
        let Some(path) = sendable(&root, &uri) else {
            return empty();
        };
        let Some(completer) = self.completer(session, &snap).await else {
            return empty();
        };
        let version = snap.buffer.version();
        let rope = snap.buffer.rope().into_owned();
        let Ok(cursor) = to_char_index(&rope, pos, snap.encoding) else {
            return empty();
        };
        let budget = Budget::of(completer.context_bytes());
        let (prefix, suffix) = fim::around(&rope, cursor, budget);
        let doc = uri.as_str().to_string();
        let at = convert::position_to_lsp(to_position(&rope, cursor, snap.encoding));
        let range = Range::new(at, at);
        // This request supersedes the document's older one, whoever answers it.
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let cancel = CancellationToken::new();
        if let Some((_, older)) = lock(&self.inflight).insert(uri.clone(), (id, cancel.clone())) {
            older.cancel();
        }
        let _done = Finished {
            owner: self,
            uri: uri.clone(),
            id,
        };
        let hit = lock(&self.cache).get(&doc, &prefix, &suffix);
        if let Some(hit) = hit {
            let mut partial = lock(&self.partial);
            if partial.len() > MAX_KEPT {
                partial.clear();
            }
            if hit.typed > 0 && partial.insert(hit.id) {
                record(&root, "partial", hit.id, None);
            }
            return Ok(Some(item(hit.rest, range, hit.id)));
        }
        let asked = Asked {
            root,
            path,
            prefix,
            suffix,
            budget,
            others: snap.others,
        };
        let Some(text) = self.ask(&completer, &asked, &cancel).await else {
            return empty();
        };
        // A document that moved on while the model answered gets nothing: the answer was
        // for text that is no longer there.
        let now = session
            .query(move |s| s.document(&uri).map(|b| b.version()))
            .await
            .ok()
            .flatten();
        if now != Some(version) || cancel.is_cancelled() {
            return empty();
        }
        lock(&self.cache).put(&doc, &asked.prefix, &asked.suffix, &text, id);
        let latency = started.elapsed().as_millis() as u64;
        record(&asked.root, "shown", id, Some(latency));
        Ok(Some(item(text, range, id)))
    }

    /// The model's suggestion for `asked`, cut; `None` when there is none or a newer
    /// request cancelled this one.
    async fn ask(
        &self,
        completer: &Completer,
        asked: &Asked,
        cancel: &CancellationToken,
    ) -> Option<String> {
        let Asked {
            root,
            path,
            prefix,
            suffix,
            budget,
            ..
        } = asked;
        let budget = *budget;
        let others: Vec<(String, Uri, Buffer)> = asked
            .others
            .iter()
            .filter_map(|(u, b)| Some((sendable(root, u)?, u.clone(), b.clone())))
            .collect();
        let kept = self.tags_of(&others);
        let (p, s, at_path) = (prefix.clone(), suffix.clone(), path.clone());
        let built =
            tokio::task::spawn_blocking(move || context(at_path, p, s, others, kept, budget.other));
        let (cx, parsed) = built.await.ok()?;
        {
            // Bounded: documents closed long ago leave their tags behind otherwise.
            let mut tags = lock(&self.tags);
            if tags.len() > MAX_KEPT {
                tags.clear();
            }
            tags.extend(parsed);
        }
        let raw = tokio::select! {
            _ = cancel.cancelled() => return None,
            r = completer.complete(&cx) => r,
        };
        let raw = raw
            .map_err(|e| tracing::warn!("inline completion: {e}"))
            .ok()?;
        fim::finish(&raw, prefix, suffix, fim::stop_words(completer.family()))
    }

    /// `agent-ls.completionAccepted {"id": N}`.
    pub fn accepted(&self, root: Option<&Path>, id: u64) {
        if let Some(root) = root {
            record(root, "accepted", id, None);
        }
    }

    /// The completer for the configuration in force, built again when it changed.
    async fn completer(&self, session: &SessionHandle, snap: &Snapshot) -> Option<Arc<Completer>> {
        {
            let built = lock(&self.completer);
            if let Some(b) = built.as_ref()
                && b.config == snap.config
                && b.hosts == snap.hosts
            {
                return Some(b.completer.clone());
            }
        }
        let config = session.query(|s| s.config().config.clone()).await.ok()?;
        let completer = Arc::new(Completer::from_config(&config)?);
        *lock(&self.completer) = Some(Built {
            config: snap.config.clone(),
            hosts: snap.hosts.clone(),
            completer: completer.clone(),
        });
        Some(completer)
    }

    /// The tags kept of the other open documents, for the version each has now.
    fn tags_of(&self, others: &[(String, Uri, Buffer)]) -> Vec<Option<Arc<Tags>>> {
        let kept = lock(&self.tags);
        others
            .iter()
            .map(|(_, u, b)| {
                kept.get(u)
                    .filter(|(v, _)| *v == b.version())
                    .map(|(_, t)| t.clone())
            })
            .collect()
    }
}

/// What one model request is asked with.
struct Asked {
    root: PathBuf,
    path: String,
    prefix: String,
    suffix: String,
    budget: Budget,
    others: Vec<(Uri, Buffer)>,
}

/// Forgets the request's in-flight entry when it ends, unless a newer one took its place.
struct Finished<'a> {
    owner: &'a Completions,
    uri: Uri,
    id: u64,
}

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        let mut map = lock(&self.owner.inflight);
        if map.get(&self.uri).is_some_and(|(id, _)| *id == self.id) {
            map.remove(&self.uri);
        }
    }
}

fn item(text: String, range: Range, id: u64) -> InlineCompletionResponse {
    InlineCompletionResponse::Array(vec![InlineCompletionItem {
        insert_text: text,
        filter_text: None,
        range: Some(range),
        command: Some(Command {
            title: "accepted".into(),
            command: ext::COMPLETION_ACCEPTED_COMMAND.into(),
            arguments: Some(vec![serde_json::json!({ "id": id })]),
        }),
        insert_text_format: None,
    }])
}

async fn snapshot(session: &SessionHandle, uri: &Uri) -> Option<Snapshot> {
    let uri = uri.clone();
    session
        .query(move |s| {
            let buffer = s.document(&uri)?.clone();
            let loaded = &s.config().config;
            let others = s
                .documents()
                .filter(|(u, b)| **u != uri && b.len_bytes() <= MAX_OTHER_FILE)
                .take(MAX_OTHER_FILES)
                .map(|(u, b)| (u.clone(), b.clone()))
                .collect();
            Some(Snapshot {
                buffer,
                encoding: s.encoding(),
                root: s.workspace_root().cloned(),
                config: loaded.completion.clone(),
                hosts: loaded.workspace_hosts.clone(),
                others,
            })
        })
        .await
        .ok()
        .flatten()
}

/// The context of one request: the text around the cursor, the signatures the code near it
/// names from the other open files' tags, and the window of each most like it; with the
/// tags parsed now, to keep for their documents' versions.
fn context(
    path: String,
    prefix: String,
    suffix: String,
    others: Vec<(String, Uri, Buffer)>,
    kept: Vec<Option<Arc<Tags>>>,
    budget: usize,
) -> (Context, Vec<(Uri, Versioned)>) {
    let near = format!("{}{}", tail(&prefix, 600), head(&suffix, 200));
    let texts: Vec<(String, String)> = others
        .iter()
        .map(|(p, _, b)| (p.clone(), b.text()))
        .collect();
    let mut parsed = Vec::new();
    let tags: Vec<Arc<Tags>> = others
        .iter()
        .zip(kept)
        .zip(&texts)
        .map(|(((p, u, b), kept), (_, text))| {
            kept.unwrap_or_else(|| {
                let lang = agent_ls_core::syntax::Lang::of(p, text);
                let t = Arc::new(
                    lang.and_then(|l| agent_ls_core::repomap::tags::extract(l, text))
                        .unwrap_or_default(),
                );
                parsed.push((u.clone(), (b.version(), t.clone())));
                t
            })
        })
        .collect();
    let mut snippets = fim::named_definitions(
        &near,
        &path,
        texts
            .iter()
            .zip(&tags)
            .map(|((p, _), t)| (p.as_str(), t.as_ref())),
        budget / 2,
    );
    let used: usize = snippets.iter().map(|s| s.text.len()).sum();
    let pairs = texts.iter().map(|(p, t)| (p.as_str(), t.as_str()));
    snippets.extend(fim::similar_snippets(
        &near,
        pairs,
        budget.saturating_sub(used),
    ));
    let cx = Context {
        path,
        prefix,
        suffix,
        snippets,
    };
    (cx, parsed)
}

fn tail(s: &str, max: usize) -> &str {
    let mut start = s.len().saturating_sub(max);
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

fn head(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn record(root: &Path, kind: &'static str, id: u64, latency: Option<u64>) {
    let root = root.to_path_buf();
    tokio::task::spawn_blocking(move || {
        agent_ls_runtime::journal::completion_event(&root, kind, id, latency)
    });
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
