//! URL redaction: a database URL's password never shows where the URL is printed or
//! serialized; and what a secret looks like by its value, whatever variable holds it.

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

/// Whether `value` looks like a key or a token by itself, whatever its name: one word of 20
/// to 512 characters drawn from several kinds (letters of both cases, digits, `-_+/=.`) with
/// little repetition. Paths, URLs, lists (`:`, `,`, `;`), words and plain hex (a commit id)
/// do not.
pub fn looks_like_secret(value: &str) -> bool {
    let len = value.chars().count();
    if !(20..=512).contains(&len)
        || value.starts_with(['/', '~', '.'])
        || value.contains("://")
        || value
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, ':' | ',' | ';'))
        || value.chars().all(|c| c.is_ascii_hexdigit())
    {
        return false;
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_+/=.".contains(c))
    {
        return false;
    }
    let kinds = [
        value.chars().any(|c| c.is_ascii_lowercase()),
        value.chars().any(|c| c.is_ascii_uppercase()),
        value.chars().any(|c| c.is_ascii_digit()),
    ]
    .iter()
    .filter(|k| **k)
    .count();
    kinds >= 2 && value.chars().any(|c| c.is_ascii_digit()) && entropy(value) >= 3.5
}

/// Shannon entropy of `value`'s characters, in bits per character.
fn entropy(value: &str) -> f64 {
    let mut counts = std::collections::HashMap::new();
    for c in value.chars() {
        *counts.entry(c).or_insert(0u32) += 1;
    }
    let n = value.chars().count() as f64;
    counts
        .values()
        .map(|&k| {
            let p = f64::from(k) / n;
            -p * p.log2()
        })
        .sum()
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
    fn a_secret_is_known_by_its_value() {
        for secret in [
            "sk-proj-4fQ9zX2LmN8pR7tV1wY3bC6d",
            "ghp_a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "xoxb-2048-4096-Zk9Qw8Er7Ty6Ui5Op4",
        ] {
            assert!(looks_like_secret(secret), "{secret}");
        }
        for plain in [
            "/usr/local/bin:/usr/bin",
            "https://api.example.com/v1",
            "en_US.UTF-8",
            "3f5b00c1a2b3c4d5e6f708192a3b4c5d6e7f8091",
            "xterm-256color",
            "hello world this is text",
            "aaaaaaaaaaaaaaaaaaaaaaaa1",
        ] {
            assert!(!looks_like_secret(plain), "{plain}");
        }
    }

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
