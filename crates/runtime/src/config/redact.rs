//! URL redaction: a database URL's password never shows where the URL is printed or
//! serialized.

use std::fmt;

use serde::{Deserialize, Serialize, Serializer};

/// A database URL whose password is shown as `<redacted>` wherever it is printed or
/// serialized; `expose` gives it whole, for the one place that connects.
#[derive(Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct DatabaseUrl(String);

impl DatabaseUrl {
    pub fn new(url: impl Into<String>) -> Self {
        DatabaseUrl(url.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with its password (`user:PASSWORD@`, or a `password=` parameter) replaced.
    pub fn redacted(&self) -> String {
        redact_url(&self.0)
    }
}

/// `url` with the password of its `user:password@` part and of any `password=` parameter
/// replaced by `<redacted>`.
pub fn redact_url(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme) = out.find("://") {
        let rest = scheme + 3;
        let end = out[rest..].find(['/', '?']).map_or(out.len(), |i| rest + i);
        if let Some(at) = out[rest..end].rfind('@').map(|i| rest + i)
            && let Some(colon) = out[rest..at].find(':').map(|i| rest + i)
        {
            out.replace_range(colon + 1..at, "<redacted>");
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=<redacted>"),
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl Serialize for DatabaseUrl {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.redacted())
    }
}

#[cfg(test)]
mod url_tests {
    use super::*;

    #[test]
    fn a_urls_password_is_redacted_wherever_it_is() {
        assert_eq!(
            redact_url("postgres://team:s3cr%40t@db.example:5432/mem?sslmode=disable"),
            "postgres://team:<redacted>@db.example:5432/mem?sslmode=disable"
        );
        assert_eq!(
            redact_url("postgresql://db/mem?user=team&password=s3cret"),
            "postgresql://db/mem?user=team&password=<redacted>"
        );
        assert_eq!(
            redact_url("postgres://team@db/mem"),
            "postgres://team@db/mem"
        );
        let url = DatabaseUrl::new("postgres://a:b@h/d");
        assert_eq!(
            format!("{url:?} {url}"),
            "postgres://a:<redacted>@h/d postgres://a:<redacted>@h/d"
        );
        assert_eq!(url.expose(), "postgres://a:b@h/d");
    }
}
