//! Conversions between LSP types and the core's plain types. Encoding math itself lives in
//! `text::position`; this file only maps one shape onto the other.

use std::path::PathBuf;

use tower_lsp_server::ls_types::{
    self as lsp, InitializeParams, PositionEncodingKind, TextDocumentContentChangeEvent, Uri,
};

use agent_ls_core::text::{Encoding, Position, Range, TextChange};

pub fn position_from_lsp(p: lsp::Position) -> Position {
    Position::new(p.line, p.character)
}

pub fn position_to_lsp(p: Position) -> lsp::Position {
    lsp::Position::new(p.line, p.character)
}

pub fn range_from_lsp(r: lsp::Range) -> Range {
    Range::new(position_from_lsp(r.start), position_from_lsp(r.end))
}

pub fn change_from_lsp(c: TextDocumentContentChangeEvent) -> TextChange {
    TextChange {
        range: c.range.map(range_from_lsp),
        text: c.text,
    }
}

/// The encoding for this session, from `general.positionEncodings` (UTF-16 when absent).
pub fn negotiate_encoding(params: &InitializeParams) -> Encoding {
    let offered = params
        .capabilities
        .general
        .as_ref()
        .and_then(|g| g.position_encodings.as_ref());
    match offered {
        Some(kinds) => Encoding::negotiate(kinds.iter().map(PositionEncodingKind::as_str)),
        None => Encoding::Utf16,
    }
}

pub fn encoding_to_lsp(encoding: Encoding) -> PositionEncodingKind {
    match encoding {
        Encoding::Utf8 => PositionEncodingKind::UTF8,
        Encoding::Utf16 => PositionEncodingKind::UTF16,
        Encoding::Utf32 => PositionEncodingKind::UTF32,
    }
}

/// The workspace root: the first workspace folder, else the deprecated `rootUri`.
#[allow(deprecated)]
pub fn workspace_root(params: &InitializeParams) -> Option<PathBuf> {
    params
        .workspace_folders
        .as_ref()
        .and_then(|folders| folders.first())
        .map(|f| &f.uri)
        .or(params.root_uri.as_ref())
        .and_then(path_from_uri)
}

pub fn path_from_uri(uri: &Uri) -> Option<PathBuf> {
    uri.to_file_path().map(|p| p.into_owned())
}
