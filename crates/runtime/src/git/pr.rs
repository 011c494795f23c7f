//! Pushing a run's branch and opening its pull request: `git push` to `git.remote` as the
//! user's own git (their credential helpers and ssh, never a prompt), then `gh pr create`
//! (or `glab mr create` for a GitLab remote) when the tool is on PATH; without one, the push
//! command and the compare URL to open it by hand.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{GitError, Repo, bounded};

#[derive(Debug, thiserror::Error)]
pub enum PrError {
    #[error("HEAD is detached: a pull request needs a branch (`git switch -c agent/<name>`)")]
    Detached,
    #[error(
        "you are on {0}, the default branch of {1}: a pull request needs a branch of its own (`git switch -c agent/<name>`, then `agent-ls pr`)"
    )]
    DefaultBranch(String, String),
    #[error("the run's commit {commit} is not on the current branch {branch}")]
    NotOnBranch { commit: String, branch: String },
    #[error("there is no remote `{0}` (git.remote); add one with `git remote add {0} <url>`")]
    NoRemote(String),
    #[error("`git push` failed: {0}\npush by hand with: {1}")]
    Push(String, String),
    #[error("`{tool} {verb}` failed: {output}")]
    Tool {
        tool: String,
        verb: String,
        output: String,
    },
    #[error(transparent)]
    Git(#[from] GitError),
}

/// Where a remote is hosted, as far as its URL tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    GitHub { base: String },
    GitLab { base: String },
    Other,
}

/// The host and project page of a remote URL in the GitHub or GitLab forms
/// (`https://host/owner/repo(.git)`, `git@host:owner/repo(.git)`, `ssh://git@host/...`).
pub fn host_of(url: &str) -> Host {
    let url = url.trim();
    let (host, path) = if let Some(rest) = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .or_else(|| url.strip_prefix("ssh://"))
        .or_else(|| url.strip_prefix("git://"))
    {
        let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
        match rest.split_once('/') {
            Some((h, p)) => (h.split(':').next().unwrap_or(h).to_string(), p.to_string()),
            None => return Host::Other,
        }
    } else if let Some((user_host, path)) = url.split_once(':')
        && !url.contains("://")
        && user_host.contains('@')
    {
        let host = user_host.rsplit_once('@').map_or(user_host, |(_, h)| h);
        (host.to_string(), path.to_string())
    } else {
        return Host::Other;
    };
    let path = path.trim_end_matches('/').trim_end_matches(".git");
    if path.split('/').filter(|p| !p.is_empty()).count() < 2 {
        return Host::Other;
    }
    let base = format!("https://{host}/{path}");
    if host == "github.com" || host.starts_with("github.") {
        Host::GitHub { base }
    } else if host == "gitlab.com" || host.starts_with("gitlab.") {
        Host::GitLab { base }
    } else {
        Host::Other
    }
}

/// The page that compares `branch` with `base` and offers to open the request.
pub fn compare_url(host: &Host, base_branch: &str, branch: &str) -> Option<String> {
    match host {
        Host::GitHub { base } => Some(format!("{base}/compare/{base_branch}...{branch}?expand=1")),
        Host::GitLab { base } => Some(format!(
            "{base}/-/merge_requests/new?merge_request[source_branch]={branch}&merge_request[target_branch]={base_branch}"
        )),
        Host::Other => None,
    }
}

/// The remote's URL (`git remote get-url`).
pub fn remote_url(repo: &Repo, remote: &str) -> Result<String, PrError> {
    match repo
        .git(None)
        .run(&["remote", "get-url", "--", remote], None)
    {
        Ok(out) => Ok(String::from_utf8_lossy(&out).trim().to_string()),
        Err(GitError::Failed { .. }) => Err(PrError::NoRemote(remote.to_string())),
        Err(e) => Err(e.into()),
    }
}

/// The remote's default branch: what `refs/remotes/<remote>/HEAD` names, else what the remote
/// itself says (`ls-remote --symref`), else `main`.
pub fn default_branch(repo: &Repo, remote: &str) -> String {
    let local = format!("refs/remotes/{remote}/HEAD");
    if let Ok(out) = repo
        .git(None)
        .run(&["symbolic-ref", "-q", "--short", &local], None)
    {
        let name = String::from_utf8_lossy(&out).trim().to_string();
        if let Some(b) = name.strip_prefix(&format!("{remote}/")) {
            return b.to_string();
        }
    }
    let asked = repo
        .user_git(false)
        .run(&["ls-remote", "--symref", "--", remote, "HEAD"], None);
    if let Ok(out) = asked {
        let text = String::from_utf8_lossy(&out);
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("ref: refs/heads/")
                && let Some((b, _)) = rest.split_once('\t')
            {
                return b.to_string();
            }
        }
    }
    "main".into()
}

/// What `agent-ls pr` is about to do, checked before anything leaves the machine.
#[derive(Debug, Clone)]
pub struct Plan {
    pub remote: String,
    pub url: String,
    pub host: Host,
    pub branch: String,
    pub base: String,
}

impl Plan {
    /// The command that pushes the branch, as the user would type it.
    pub fn push_command(&self) -> String {
        format!("git push --set-upstream {} {}", self.remote, self.branch)
    }
}

/// Checks that a pull request can be made of the run's `commit` from the current branch.
pub fn plan(repo: &Repo, remote: &str, commit: &str) -> Result<Plan, PrError> {
    let branch = super::commit::current_branch(repo).ok_or(PrError::Detached)?;
    let url = remote_url(repo, remote)?;
    let base = default_branch(repo, remote);
    if branch == base {
        return Err(PrError::DefaultBranch(branch, remote.to_string()));
    }
    let on = repo
        .git(None)
        .status(&["merge-base", "--is-ancestor", commit, "HEAD"], None)?;
    if on.0 != Some(0) {
        return Err(PrError::NotOnBranch {
            commit: commit.to_string(),
            branch,
        });
    }
    Ok(Plan {
        remote: remote.to_string(),
        host: host_of(&url),
        url,
        branch,
        base,
    })
}

/// Pushes the branch to the remote as the user's git: their credential helpers and ssh, the
/// pre-push hook unless `no_verify`; never a prompt.
pub fn push(repo: &Repo, plan: &Plan, no_verify: bool) -> Result<(), PrError> {
    let refspec = format!("refs/heads/{0}:refs/heads/{0}", plan.branch);
    let mut args = vec!["push", "--porcelain", "--set-upstream"];
    if no_verify {
        args.push("--no-verify");
    }
    args.extend(["--", plan.remote.as_str(), refspec.as_str()]);
    let (code, out, err) = repo.user_git(!no_verify).status(&args, None)?;
    if code != Some(0) {
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&err),
            String::from_utf8_lossy(&out)
        );
        return Err(PrError::Push(said.trim().to_string(), plan.push_command()));
    }
    Ok(())
}

/// The tool that opens requests on the remote's host, when one is on PATH.
pub fn tool(host: &Host) -> Option<(&'static str, PathBuf)> {
    let name = match host {
        Host::GitLab { .. } => "glab",
        _ => "gh",
    };
    which(name).map(|p| (name, p))
}

fn which(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Opens the request with `gh pr create` or `glab mr create`: what the tool printed (the
/// request's URL).
pub fn open(
    repo: &Repo,
    plan: &Plan,
    (name, program): (&str, &Path),
    title: &str,
    body: &str,
) -> Result<String, PrError> {
    let mut cmd = Command::new(program);
    cmd.current_dir(&repo.top)
        .env("GH_PROMPT_DISABLED", "1")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("NO_COLOR", "1");
    let verb = if name == "glab" {
        cmd.args([
            "mr",
            "create",
            "--yes",
            "--title",
            title,
            "--description",
            body,
        ])
        .args([
            "--source-branch",
            &plan.branch,
            "--target-branch",
            &plan.base,
        ]);
        "mr create"
    } else {
        cmd.args(["pr", "create", "--title", title, "--body", body])
            .args(["--base", &plan.base, "--head", &plan.branch]);
        "pr create"
    };
    crate::child::start_clean(&mut cmd);
    let (code, out, err) = bounded(cmd, &format!("{name} {verb}"), None)?;
    let printed = String::from_utf8_lossy(&out).trim().to_string();
    if code != Some(0) {
        return Err(PrError::Tool {
            tool: name.to_string(),
            verb: verb.to_string(),
            output: format!("{printed}\n{}", String::from_utf8_lossy(&err))
                .trim()
                .to_string(),
        });
    }
    Ok(printed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_urls_give_their_compare_pages() {
        let gh = host_of("git@github.com:owner/repo.git");
        assert_eq!(
            compare_url(&gh, "main", "agent/x").as_deref(),
            Some("https://github.com/owner/repo/compare/main...agent/x?expand=1")
        );
        let https = host_of("https://user@github.com/owner/repo");
        assert_eq!(
            https,
            Host::GitHub {
                base: "https://github.com/owner/repo".into()
            }
        );
        let gl = host_of("ssh://git@gitlab.com/group/sub/repo.git");
        assert_eq!(
            compare_url(&gl, "main", "b").as_deref(),
            Some(
                "https://gitlab.com/group/sub/repo/-/merge_requests/new?merge_request[source_branch]=b&merge_request[target_branch]=main"
            )
        );
        assert_eq!(host_of("/srv/git/repo.git"), Host::Other);
        assert_eq!(host_of("https://example.org/a/b.git"), Host::Other);
    }
}
