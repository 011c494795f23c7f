//! Go's coverage from `go test` itself: a listing run (`-json`) says which top-level tests
//! ran and failed, then each chosen test runs alone (`-run '^TestX$'` in its package) with
//! `-coverpkg=./...` (so callees in the module's other packages count) and a profile of its
//! own (`-coverprofile`), whose blocks with a count become the lines it ran.

use std::path::Path;

use agent_ls_core::locate::TestLines;
use tokio_util::sync::CancellationToken;

use super::run::{Lines, LocateError, Probe, coverage_run, own_file, probe_each, sample};
use crate::config::Config;

/// `go test`'s flags that take their value as the next word.
const VALUED: &[&str] = &[
    "-tags",
    "-timeout",
    "-ldflags",
    "-gcflags",
    "-mod",
    "-p",
    "-parallel",
    "-cpu",
    "-exec",
];

/// `go test`'s arguments (after `go test`) for a test command that is one; `None` else.
pub(super) fn runner(argv: &[String]) -> Option<Vec<String>> {
    let first = argv.first()?;
    let base = first.rsplit('/').next().unwrap_or(first);
    (base == "go" && argv.get(1).is_some_and(|a| a == "test")).then(|| argv[2..].to_vec())
}

/// The listing run, then each chosen test alone under coverage.
pub(super) async fn trace(
    root: &Path,
    config: &Config,
    args: &[String],
    cancel: &CancellationToken,
) -> Result<Vec<TestLines>, LocateError> {
    let (flags, packages) = split_args(args);
    let mut listing = words(&["go", "test", "-json"]);
    listing.extend(flags.iter().cloned());
    listing.extend(packages);
    let (result, output) = coverage_run(root, config, listing, Vec::new(), cancel).await?;
    let listed = parse_listing(&output);
    if listed.is_empty() {
        let why = "`go test -json` listed no test".to_string();
        return Err(LocateError::NoRecord(why, result.report));
    }
    let dir = root.join(".agent-ls").join("locate");
    let profile = |i: usize| dir.join(format!("go-{i}.out"));
    let probes = listed
        .into_iter()
        .map(|(package, test, failed)| Probe {
            test: format!("{package}.{test}"),
            group: package.clone(),
            failed,
            argv: {
                let mut argv = words(&["go", "test", "-count=1"]);
                argv.push(format!("-run=^{test}$"));
                argv.push("-coverpkg=./...".to_string());
                argv.extend(flags.iter().cloned());
                argv.push(package);
                argv
            },
            env: Vec::new(),
        })
        .collect();
    let mut chosen = sample(probes);
    // The profile's place is known only once the sample has its order.
    for (i, p) in chosen.iter_mut().enumerate() {
        let at = profile(i).to_string_lossy().into_owned();
        p.argv.insert(4, format!("-coverprofile={at}"));
    }
    let module = crate::tests_run::go_module(root).unwrap_or_default();
    probe_each(root, config, chosen, cancel, &|i| {
        std::fs::read_to_string(profile(i))
            .map(|text| parse_profile(&text, &module, root))
            .unwrap_or_default()
    })
    .await
}

fn words(w: &[&str]) -> Vec<String> {
    w.iter().map(|s| s.to_string()).collect()
}

/// The user's flags that shape the build (`-tags`, `-race`, …), without those the coverage
/// runs set or that change the output (`-v`, `-json`, `-run`, `-count`, `-cover…`); and the
/// packages.
fn split_args(args: &[String]) -> (Vec<String>, Vec<String>) {
    let (mut flags, mut packages) = (Vec::new(), Vec::new());
    let ours = ["-v", "-json", "-run", "-count", "-cover", "-failfast"];
    let mut words = args.iter();
    while let Some(a) = words.next() {
        if !a.starts_with('-') {
            packages.push(a.clone());
            continue;
        }
        let name = a.split('=').next().unwrap_or(a).replacen("--", "-", 1);
        let value = (!a.contains('=') && (VALUED.contains(&name.as_str()) || name == "-run"))
            .then(|| words.next())
            .flatten();
        if ours
            .iter()
            .any(|o| name == *o || name.starts_with("-cover"))
        {
            continue;
        }
        flags.push(a.clone());
        flags.extend(value.cloned());
    }
    (flags, packages)
}

/// The top-level tests `go test -json` reported passing or failing: package, name, failed.
fn parse_listing(output: &str) -> Vec<(String, String, bool)> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Event {
        action: String,
        package: Option<String>,
        test: Option<String>,
    }
    output
        .lines()
        .filter(|l| l.starts_with('{'))
        .filter_map(|l| serde_json::from_str::<Event>(l).ok())
        .filter(|e| e.action == "pass" || e.action == "fail")
        .filter_map(|e| {
            let test = e.test.filter(|t| !t.contains('/'))?;
            Some((e.package?, test, e.action == "fail"))
        })
        .collect()
}

/// The lines a coverage profile's blocks with a count cover, by workspace file: a block is
/// `module/dir/file.go:startLine.col,endLine.col statements count`. Files outside the
/// module (another module's) are not the project's own.
fn parse_profile(text: &str, module: &str, root: &Path) -> Lines {
    let mut lines = Lines::new();
    let prefix = format!("{module}/");
    for block in text.lines().filter(|l| !l.starts_with("mode:")) {
        let Some((place, rest)) = block.rsplit_once(':') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let (Some(span), Some(_), Some(count)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        if count == "0" {
            continue;
        }
        let Some(rel) = place.strip_prefix(&prefix) else {
            continue;
        };
        let line = |s: &str| s.split('.').next().and_then(|n| n.parse::<u32>().ok());
        let Some((Some(first), Some(last))) = span.split_once(',').map(|(a, b)| (line(a), line(b)))
        else {
            continue;
        };
        if own_file(root, &root.join(rel)).is_some() {
            lines
                .entry(rel.to_string())
                .or_default()
                .extend(first..=last);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_profiles_counted_blocks_are_the_modules_lines() {
        let profile = "mode: set\nexample.com/shop/rules/rules.go:4.27,6.2 1 1\nexample.com/shop/pricing/pricing.go:11.2,11.12 1 0\nexample.com/shop/pricing/pricing.go:8.15,10.3 1 1\nother.org/lib/x.go:1.1,2.2 1 1\n";
        let lines = parse_profile(profile, "example.com/shop", Path::new("/ws"));
        let got: Vec<(&str, Vec<u32>)> = lines
            .iter()
            .map(|(p, l)| (p.as_str(), l.iter().copied().collect()))
            .collect();
        assert_eq!(
            got,
            [
                ("pricing/pricing.go", vec![8, 9, 10]),
                ("rules/rules.go", vec![4, 5, 6])
            ]
        );
    }

    #[test]
    fn the_listing_and_the_users_flags_are_read() {
        let out = "{\"Action\":\"run\",\"Package\":\"m/cart\",\"Test\":\"TestBulk\"}\n{\"Action\":\"fail\",\"Package\":\"m/cart\",\"Test\":\"TestBulk\"}\n{\"Action\":\"pass\",\"Package\":\"m/cart\",\"Test\":\"TestBulk/sub\"}\n{\"Action\":\"pass\",\"Package\":\"m/cart\",\"Test\":\"TestSmall\"}\n{\"Action\":\"fail\",\"Package\":\"m/cart\"}\n";
        assert_eq!(
            parse_listing(out),
            [
                ("m/cart".into(), "TestBulk".into(), true),
                ("m/cart".into(), "TestSmall".into(), false)
            ]
        );
        let args = words(&[
            "-v",
            "-tags",
            "integration",
            "-run",
            "X",
            "-race",
            "./...",
            "-coverprofile=c.out",
        ]);
        assert_eq!(
            split_args(&args),
            (words(&["-tags", "integration", "-race"]), words(&["./..."]))
        );
        assert_eq!(
            runner(&words(&["go", "test", "./..."])),
            Some(words(&["./..."]))
        );
        assert_eq!(runner(&words(&["go", "vet"])), None);
    }
}
