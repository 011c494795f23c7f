//! The recipes under deploy/ run unchanged: the Kubernetes manifests read into the API's own
//! types with nothing lost, every `agent-ls` command line of the Dockerfile, the manifests
//! and the workflow names a real subcommand and real flags of the real binary, the batch
//! Job's command runs its ConfigMap's tasks, and the workflow's own steps (run, commit, pr)
//! run against a fixture repository with a model server on 127.0.0.1 and a stand-in `gh`.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Container, PodSpec};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use support::git::{FIX_AND_CREATE, git};
use support::model_server::{ModelServer, openai_text};

fn read(relative: &str) -> String {
    std::fs::read_to_string(support::repo(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// Every document of a YAML file, as JSON values.
fn yaml_docs(relative: &str) -> Vec<Value> {
    use serde::Deserialize;
    let text = read(relative);
    serde_yaml_ng::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{relative}: {e}")))
        .collect()
}

/// `doc` as the Kubernetes type `T`, and written back the same: a misspelt or misplaced
/// field (which the API's types would silently drop, as the API server prunes it) fails.
fn typed<T: DeserializeOwned + Serialize>(doc: &Value) -> T {
    let t: T = serde_json::from_value(doc.clone()).unwrap_or_else(|e| panic!("{e}: {doc:#}"));
    let back = serde_json::to_value(&t).unwrap();
    assert_eq!(
        &back, doc,
        "read as the API's type, the manifest lost or changed fields"
    );
    t
}

/// The Dockerfile's last value of an instruction (`ENTRYPOINT`, `CMD`, `USER`, `ENV`...).
fn dockerfile(instruction: &str) -> String {
    let prefix = format!("{instruction} ");
    read("deploy/Dockerfile")
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .next_back()
        .unwrap_or_else(|| panic!("no {instruction} in deploy/Dockerfile"))
        .trim()
        .to_string()
}

/// A JSON-form (exec form) Dockerfile instruction's words.
fn exec_form(instruction: &str) -> Vec<String> {
    serde_json::from_str(&dockerfile(instruction))
        .unwrap_or_else(|e| panic!("{instruction} is not in exec form: {e}"))
}

/// The image's command line: ENTRYPOINT then CMD.
fn image_command() -> Vec<String> {
    let mut words = exec_form("ENTRYPOINT");
    words.extend(exec_form("CMD"));
    words
}

/// A container's command line: its command (else the image's ENTRYPOINT), then its args
/// (else, with no command of its own, the image's CMD), as Kubernetes runs it.
fn container_command(c: &Container) -> Vec<String> {
    match (&c.command, &c.args) {
        (Some(command), args) => command
            .iter()
            .chain(args.iter().flatten())
            .cloned()
            .collect(),
        (None, Some(args)) => exec_form("ENTRYPOINT")
            .into_iter()
            .chain(args.clone())
            .collect(),
        (None, None) => image_command(),
    }
}

fn worker_deployment() -> Deployment {
    let docs = yaml_docs("deploy/k8s/worker-deployment.yaml");
    assert_eq!(docs.len(), 1);
    typed(&docs[0])
}

/// The batch recipe's ConfigMap and Job.
fn batch_job() -> (ConfigMap, Job) {
    let docs = yaml_docs("deploy/k8s/batch-job.yaml");
    assert_eq!(docs.len(), 2);
    (typed(&docs[0]), typed(&docs[1]))
}

fn pod(spec: Option<&PodSpec>) -> &PodSpec {
    spec.expect("a pod spec")
}

/// The image's numeric user and group (`USER uid:gid`).
fn image_user() -> (i64, i64) {
    let user = dockerfile("USER");
    let (uid, gid) = user.split_once(':').expect("USER uid:gid");
    (uid.parse().unwrap(), gid.parse().unwrap())
}

/// What a pod's security context must say: not root, as the image's own user, no privilege
/// to gain, a read-only root whose writable places are volumes.
fn assert_locked_down(spec: &PodSpec, c: &Container) {
    let (uid, gid) = image_user();
    let pod_sc = spec
        .security_context
        .as_ref()
        .expect("a pod securityContext");
    assert_eq!(pod_sc.run_as_non_root, Some(true));
    assert_eq!(pod_sc.run_as_user, Some(uid));
    assert_eq!(pod_sc.run_as_group, Some(gid));
    assert_eq!(spec.automount_service_account_token, Some(false));
    let sc = c
        .security_context
        .as_ref()
        .expect("a container securityContext");
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    let drop = sc.capabilities.as_ref().and_then(|c| c.drop.clone());
    assert_eq!(drop, Some(vec!["ALL".to_string()]));
    // With a read-only root, HOME (config, trust file, caches) and /tmp must be volumes.
    let home = dockerfile("ENV")
        .strip_prefix("HOME=")
        .expect("ENV HOME=...")
        .to_string();
    for place in [home.as_str(), "/tmp"] {
        assert!(mounted(c, place), "{place} is not a volume");
    }
    let resources = c.resources.as_ref().expect("resources");
    for key in ["cpu", "memory"] {
        assert!(
            resources
                .requests
                .as_ref()
                .is_some_and(|r| r.contains_key(key))
        );
        assert!(
            resources
                .limits
                .as_ref()
                .is_some_and(|r| r.contains_key(key))
        );
    }
}

/// Whether `path` is at or below one of the container's volume mounts.
fn mounted(c: &Container, path: &str) -> bool {
    c.volume_mounts
        .iter()
        .flatten()
        .any(|m| Path::new(path).starts_with(&m.mount_path) && m.read_only != Some(true))
}

/// The value that follows `flag` in a command line.
fn after<'a>(words: &'a [String], flag: &str) -> &'a str {
    let i = words
        .iter()
        .position(|w| w == flag)
        .unwrap_or_else(|| panic!("{flag} not in {words:?}"));
    &words[i + 1]
}

#[test]
fn the_worker_deployment_takes_its_queue_and_key_from_a_secret_and_runs_as_non_root() {
    let deployment = worker_deployment();
    let spec = deployment.spec.expect("spec");
    let pod_spec = pod(spec.template.spec.as_ref());
    let [c] = pod_spec.containers.as_slice() else {
        panic!("one container")
    };
    let words = container_command(c);
    assert_eq!(words[..2], ["agent-ls", "worker"]);
    // No --queue on the command line: its URL holds the database password.
    assert!(!words.iter().any(|w| w.starts_with("--queue")), "{words:?}");
    let env: BTreeMap<&str, _> = c
        .env
        .iter()
        .flatten()
        .map(|e| (e.name.as_str(), e))
        .collect();
    for name in ["AGENT_LS_QUEUE", "OPENAI_API_KEY"] {
        let var = env.get(name).unwrap_or_else(|| panic!("no {name}"));
        assert_eq!(
            var.value, None,
            "{name} must not be written in the manifest"
        );
        let secret = var
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.as_ref())
            .unwrap_or_else(|| panic!("{name} is not from a Secret"));
        assert_eq!(secret.name, "agent-ls");
    }
    assert_locked_down(pod_spec, c);
    // The runs' clones and worktrees are written below --out: a volume.
    assert!(mounted(c, after(&words, "--out")));
    // A stopping run is sent SIGTERM and its processes SIGKILL 5 s later: the pod must be
    // given longer than that before Kubernetes kills it.
    let grace = pod_spec
        .termination_grace_period_seconds
        .expect("a grace period");
    assert!(grace > 10, "{grace}");
}

#[test]
fn the_batch_job_is_indexed_and_each_pod_runs_the_task_of_its_index() {
    let (config_map, job) = batch_job();
    let spec = job.spec.expect("spec");
    assert_eq!(spec.completion_mode.as_deref(), Some("Indexed"));
    let pod_spec = pod(spec.template.spec.as_ref());
    assert_eq!(pod_spec.restart_policy.as_deref(), Some("Never"));
    let [c] = pod_spec.containers.as_slice() else {
        panic!("one container")
    };
    assert_locked_down(pod_spec, c);
    let words = container_command(c);
    assert_eq!(words[..2], ["agent-ls", "batch"]);
    assert_eq!(after(&words, "--index"), "$(JOB_COMPLETION_INDEX)");
    assert!(mounted(c, after(&words, "--out")));
    // The tasks file is the ConfigMap's, mounted where the command reads it.
    let tasks_path = Path::new(&words[2]);
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| tasks_path.starts_with(&m.mount_path))
        .expect("the tasks file's folder is mounted");
    let volume = pod_spec
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .expect("the mount's volume");
    let from = volume.config_map.as_ref().expect("a ConfigMap volume");
    assert_eq!(Some(&from.name), config_map.metadata.name.as_ref());
    let key = tasks_path.file_name().unwrap().to_str().unwrap();
    let tasks = config_map
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .expect("the ConfigMap holds the tasks file");
    // One completion a task, and every index is a task.
    let count = tasks.lines().filter(|l| !l.trim().is_empty()).count() as i32;
    assert_eq!(spec.completions, Some(count));
    // A refused file or index fails its index at once: retrying cannot change it.
    let policy = spec.pod_failure_policy.expect("a pod failure policy");
    let fails = policy
        .rules
        .iter()
        .find(|r| r.action == "FailIndex")
        .and_then(|r| r.on_exit_codes.as_ref())
        .expect("a FailIndex rule on exit codes");
    assert!(fails.values.contains(&3));
    // Exit 1 may be a task whose worktree could not be set up (`error`): it gets its retry,
    // and the retry runs it again rather than skipping it for its written result.
    assert!(!fails.values.contains(&1), "{fails:?}");
    assert!(words.iter().any(|w| w == "--retry-failed"), "{words:?}");
    assert_eq!(fails.container_name.as_deref(), Some(c.name.as_str()));
    assert!(spec.backoff_limit_per_index.is_some());
    run_the_jobs_command(&words, tasks, count);
}

/// The Job's command line, as a pod runs it, against the ConfigMap's tasks: the index one
/// past the last is refused (exit 3) naming the file's task count, and with the tasks'
/// repositories pointed at a fixture repository, index 1 runs the second task alone.
fn run_the_jobs_command(words: &[String], tasks: &str, count: i32) {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let repo = support::git::example_repository();
    let server = ModelServer::answering(|_| openai_text(&[FIX_AND_CREATE]));
    let file = dir.path().join("tasks.jsonl");
    let run = |tasks_text: &str, index: i32| -> (Output, PathBuf) {
        std::fs::write(&file, tasks_text).unwrap();
        let out = dir.path().join(format!("results-{index}"));
        let line: Vec<String> = words[1..]
            .iter()
            .map(|w| w.replace("$(JOB_COMPLETION_INDEX)", &index.to_string()))
            .map(|w| {
                if w == words[2] {
                    file.display().to_string()
                } else if w.starts_with("/results/") {
                    out.display().to_string()
                } else {
                    w
                }
            })
            .collect();
        let refs: Vec<&str> = line.iter().map(String::as_str).collect();
        let output = support::agent_ls(&refs, home.path())
            .env("AGENT_LS_MODEL__PROVIDER", "openai")
            .env("AGENT_LS_MODEL__BASE_URL", format!("{}/v1", server.url))
            .env("OPENAI_API_KEY", "test-key")
            .env("AGENT_LS_AGENT__EVALUATE", "false")
            .env("AGENT_LS_AGENT__REVIEW", "off")
            .output()
            .unwrap();
        (output, out)
    };
    let (past, _) = run(tasks, count);
    assert_eq!(past.status.code(), Some(3), "{}", stderr(&past));
    assert!(
        stderr(&past).contains(&format!("the file has {count} task(s)")),
        "{}",
        stderr(&past)
    );
    // The recipe's tasks, their repositories replaced by a fixture repository's URL.
    let url = format!("file://{}", repo.path().display());
    let local: String = tasks
        .lines()
        .map(|l| {
            let mut t: Value = serde_json::from_str(l).unwrap();
            t["repo"] = Value::String(url.clone());
            t.as_object_mut().unwrap().remove("ref");
            format!("{t}\n")
        })
        .collect();
    let (ran, out) = run(&local, 1);
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
    let results = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    let lines: Vec<Value> = results
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let second: Value = serde_json::from_str(tasks.lines().nth(1).unwrap()).unwrap();
    assert_eq!(lines.len(), 1, "{results}");
    assert_eq!(lines[0]["id"], second["id"]);
    assert_eq!(lines[0]["status"], "done");
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every `agent-ls` command line of the recipes, with where it comes from.
fn command_lines() -> Vec<(String, Vec<String>)> {
    let mut lines = vec![("deploy/Dockerfile".to_string(), image_command())];
    let deployment = worker_deployment();
    let spec = deployment.spec.unwrap();
    for c in &pod(spec.template.spec.as_ref()).containers {
        lines.push((
            "deploy/k8s/worker-deployment.yaml".into(),
            container_command(c),
        ));
    }
    let (_, job) = batch_job();
    let spec = job.spec.unwrap();
    for c in &pod(spec.template.spec.as_ref()).containers {
        lines.push(("deploy/k8s/batch-job.yaml".into(), container_command(c)));
    }
    for step in workflow_steps() {
        for words in agent_ls_lines(&step.run) {
            lines.push((format!("deploy/github/agent-ls.yml: {}", step.name), words));
        }
    }
    lines
}

#[test]
fn every_agent_ls_command_line_in_deploy_names_a_real_subcommand_and_its_flags() {
    let lines = command_lines();
    // The image, the worker, the Job, and the workflow's trust, run, commit and pr.
    assert!(lines.len() >= 7, "{lines:?}");
    let home = tempfile::tempdir().unwrap();
    let mut wrong = Vec::new();
    for (from, words) in &lines {
        assert_eq!(words[0], "agent-ls", "{from}: {words:?}");
        let sub = &words[1];
        let out = support::agent_ls(&[sub, "--help"], home.path())
            .output()
            .unwrap();
        if !out.status.success() {
            wrong.push(format!(
                "{from}: `agent-ls {sub} --help` fails: {}",
                stderr(&out)
            ));
            continue;
        }
        let help = String::from_utf8_lossy(&out.stdout);
        for flag in words.iter().filter(|w| w.starts_with("--")) {
            let named = help.match_indices(flag.as_str()).any(|(i, _)| {
                !help[i + flag.len()..].starts_with(|c: char| c.is_alphanumeric() || c == '-')
            });
            if !named {
                wrong.push(format!("{from}: `agent-ls {sub}` has no {flag}"));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A step of the workflow's job that runs a script.
struct Step {
    name: String,
    run: String,
    env: BTreeMap<String, String>,
}

fn workflow() -> Value {
    let docs = yaml_docs("deploy/github/agent-ls.yml");
    assert_eq!(docs.len(), 1);
    docs[0].clone()
}

/// An `env:` block as names and (unexpanded) values.
fn env_block(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), text)
        })
        .collect()
}

/// The steps with a `run:` script, in order.
fn workflow_steps() -> Vec<Step> {
    let wf = workflow();
    let jobs = wf["jobs"].as_object().expect("jobs");
    let [(_, job)] = jobs.iter().collect::<Vec<_>>()[..] else {
        panic!("one job")
    };
    job["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .filter_map(|s| {
            Some(Step {
                name: s["name"].as_str().unwrap_or("").to_string(),
                run: s["run"].as_str()?.to_string(),
                env: env_block(&s["env"]),
            })
        })
        .collect()
}

/// The command lines of a script that start with `agent-ls`, split as the shell would.
fn agent_ls_lines(script: &str) -> Vec<Vec<String>> {
    script
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("agent-ls "))
        .map(|l| shell_words::split(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// The event a workflow run is for.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Event {
    /// The issue #7 labelled `agent`.
    Issue,
    /// The CI workflow's run 99 failed on the default branch.
    FailedRun,
}

/// What GitHub puts for one of the workflow's expressions on `event`. A property the event
/// does not have is the empty string, as on GitHub; an expression the test does not know
/// fails it, so a changed workflow is a changed test.
fn github_value(expr: &str, event: Event) -> String {
    let branch =
        "github.event.issue.number && format('issue-{0}', github.event.issue.number) || 'ci'";
    let value = match (expr, event) {
        ("secrets.OPENAI_API_KEY", _) => "test-key",
        ("github.token", _) => "gh-token",
        ("github.run_id", _) => "4242",
        (e, Event::Issue) if e == branch => "issue-7",
        (e, Event::FailedRun) if e == branch => "ci",
        ("github.event.issue.number", Event::Issue) => "7",
        ("github.event.issue.title", Event::Issue) => "add subtracts",
        ("github.event.issue.body", Event::Issue) => "test_add fails: add(2, 3) gives -1.",
        ("github.event.workflow_run.id", Event::FailedRun) => "99",
        ("github.event.workflow_run.name", Event::FailedRun) => "CI",
        (e, _)
            if e.starts_with("github.event.issue.")
                || e.starts_with("github.event.workflow_run.") =>
        {
            ""
        }
        (e, _) => panic!("the test does not know the expression `{e}`"),
    };
    value.to_string()
}

/// `text` with every `${{ expression }}` replaced as GitHub would on `event`.
fn expand(text: &str, event: Event) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${{") {
        out.push_str(&rest[..start]);
        let end = start
            + rest[start..]
                .find("}}")
                .expect("an expression's closing }}");
        out.push_str(&github_value(rest[start + 3..end].trim(), event));
        rest = &rest[end + 2..];
    }
    out.push_str(rest);
    out
}

/// A folder for PATH with `agent-ls` (the binary under test) and a stand-in `gh` that
/// records each call's arguments in `dir/gh.args`, prints a failed run's log for `gh run
/// view` and a pull request's URL for anything else.
fn tools(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(support::binary(), bin.join("agent-ls")).unwrap();
    let script = format!(
        "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\" >> '{record}'; done\necho == >> '{record}'\nif [ \"$1\" = run ]; then echo 'FAILED test_calc.py::test_add - assert -1 == 5'; else echo https://example.test/pull/7; fi\n",
        record = dir.join("gh.args").display()
    );
    std::fs::write(bin.join("gh"), script).unwrap();
    std::fs::set_permissions(bin.join("gh"), std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// A checkout as actions/checkout leaves it: the example project committed on main, pushed
/// to `origin` (a bare repository on disk, returned), HEAD detached at that commit.
fn checkout() -> (tempfile::TempDir, tempfile::TempDir) {
    let repo = support::git::example_repository();
    let remote = tempfile::tempdir().unwrap();
    git(remote.path(), &["init", "-q", "--bare", "-b", "main"]);
    let p = repo.path();
    git(
        p,
        &["remote", "add", "origin", &remote.path().to_string_lossy()],
    );
    git(p, &["push", "-q", "origin", "main"]);
    git(p, &["checkout", "-q", "--detach", "main"]);
    (repo, remote)
}

/// Runs, in order, the workflow's steps that call agent-ls or gh, each as GitHub runs a
/// `run:` script (`bash --noprofile --norc -eo pipefail`) with the job's and the step's
/// `env:` expanded for `event`. The test adds only the model's address (a server on
/// 127.0.0.1), settings that ask the model as a coder alone, HOME and RUNNER_TEMP.
fn run_workflow(event: Event, repo: &Path, tools_dir: &Path, model: &str) {
    let bin = tools(tools_dir);
    let home = tools_dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let runner_temp = tools_dir.join("runner-temp");
    std::fs::create_dir_all(&runner_temp).unwrap();
    let wf = workflow();
    let job_env = env_block(&wf["jobs"]["agent"]["env"]);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let steps: Vec<Step> = workflow_steps()
        .into_iter()
        .filter(|s| !agent_ls_lines(&s.run).is_empty() || s.run.contains("gh "))
        .collect();
    let names: Vec<&str> = steps.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names.len(), 5, "trust, log, run, commit, pr: {names:?}");
    for step in &steps {
        let script = tools_dir.join("step.sh");
        std::fs::write(&script, &step.run).unwrap();
        let mut cmd = Command::new("bash");
        support::with_default_signals(&mut cmd);
        cmd.args(["--noprofile", "--norc", "-eo", "pipefail"])
            .arg(&script)
            .current_dir(repo)
            .env_clear()
            .env("PATH", &path)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", &home)
            .env("RUNNER_TEMP", &runner_temp)
            .env("AGENT_LS_MODEL__BASE_URL", format!("{model}/v1"))
            .env("AGENT_LS_AGENT__EVALUATE", "false")
            .env("AGENT_LS_AGENT__REVIEW", "off");
        for (k, v) in job_env.iter().chain(&step.env) {
            cmd.env(k, expand(v, event));
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "step {:?} failed: {}\n{}",
            step.name,
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        );
    }
}

/// The workflow on `event`: the run got the event's goal, and the fix reached the remote on
/// the branch `branch` as the bot's commit, with a pull request opened from it onto main.
fn the_workflow_fixes_and_opens_a_pull_request(event: Event, branch: &str, goal: &[&str]) {
    let (repo, remote) = checkout();
    let tools_dir = tempfile::tempdir().unwrap();
    let server = ModelServer::answering(|_| openai_text(&[FIX_AND_CREATE]));
    run_workflow(event, repo.path(), tools_dir.path(), &server.url);
    let asked: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(
        asked
            .iter()
            .any(|body| goal.iter().all(|part| body.contains(part))),
        "no request holds {goal:?}: {asked:?}"
    );
    let calc = git(remote.path(), &["show", &format!("{branch}:calc.py")]);
    assert!(calc.contains("return a + b"), "{calc}");
    let author = git(remote.path(), &["log", "-1", "--format=%an", branch]);
    assert_eq!(author.trim(), "github-actions[bot]");
    let main = git(remote.path(), &["rev-parse", "main"]);
    let parent = git(remote.path(), &["rev-parse", &format!("{branch}~1")]);
    assert_eq!(parent, main, "one commit on main");
    let calls = std::fs::read_to_string(tools_dir.path().join("gh.args")).unwrap();
    let create = calls
        .split("==\n")
        .find(|c| c.starts_with("pr\ncreate\n"))
        .unwrap_or_else(|| panic!("no `gh pr create`: {calls}"));
    let args: Vec<&str> = create.lines().collect();
    let value = |flag: &str| args[args.iter().position(|a| *a == flag).expect(flag) + 1];
    assert_eq!(value("--head"), branch);
    assert_eq!(value("--base"), "main");
    if event == Event::FailedRun {
        assert!(
            calls.starts_with("run\nview\n99\n--log-failed\n"),
            "{calls}"
        );
    }
}

#[test]
fn the_workflow_fixes_a_labelled_issue_and_opens_a_pull_request() {
    the_workflow_fixes_and_opens_a_pull_request(
        Event::Issue,
        "agent/issue-7-4242",
        &[
            "Resolve issue #7: add subtracts",
            "test_add fails: add(2, 3) gives -1.",
        ],
    );
}

#[test]
fn the_workflow_fixes_a_failed_ci_run_from_its_log_and_opens_a_pull_request() {
    the_workflow_fixes_and_opens_a_pull_request(
        Event::FailedRun,
        "agent/ci-4242",
        &[
            "The CI workflow fails on this commit: make it pass",
            "FAILED test_calc.py::test_add - assert -1 == 5",
        ],
    );
}

/// The workflow runs the agent with `--yes` and the repository's code: installs (which run
/// outside the sandbox) are off for the job, the GitHub token reaches only the steps that
/// read the failed run's log and open the pull request, the model's key only the run and the
/// commit, and the checkout leaves no credentials in .git/config.
#[test]
fn the_workflow_gives_each_secret_only_to_the_steps_that_need_it() {
    let wf = workflow();
    let job = &wf["jobs"]["agent"];
    let job_env = env_block(&job["env"]);
    assert_eq!(
        job_env.get("AGENT_LS_TESTER__INSTALL").map(String::as_str),
        Some("false")
    );
    let secret = |v: &String| v.contains("secrets.") || v.contains("github.token");
    assert!(
        !job_env.values().any(secret),
        "a secret in the job's env: {job_env:?}"
    );
    let steps = job["steps"].as_array().expect("steps");
    let checkout = steps
        .iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/checkout@"))
        })
        .expect("a checkout step");
    assert_eq!(checkout["with"]["persist-credentials"], false, "{checkout}");
    let holding = |what: &str| -> Vec<String> {
        workflow_steps()
            .into_iter()
            .filter(|s| s.env.values().any(|v| v.contains(what)))
            .map(|s| s.name)
            .collect()
    };
    assert_eq!(
        holding("github.token"),
        ["Read the failed run's log", "Open the pull request"]
    );
    assert_eq!(
        holding("secrets.OPENAI_API_KEY"),
        ["Run the agent", "Commit"]
    );
    // No `uses:` step gets a secret through its env either.
    for step in steps.iter().filter(|s| s.get("run").is_none()) {
        assert!(!env_block(&step["env"]).values().any(secret), "{step}");
    }
    // The pull request's push gets gh's credentials from git's environment configuration.
    let pr = workflow_steps()
        .into_iter()
        .find(|s| s.name == "Open the pull request")
        .unwrap();
    assert!(
        pr.env.values().any(|v| v == "!gh auth git-credential"),
        "{:?}",
        pr.env
    );
}
