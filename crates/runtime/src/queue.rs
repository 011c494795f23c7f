//! The shared task queue of `agent-ls worker` and `agent-ls enqueue` (docs/scale.md): PGMQ's
//! queue in PostgreSQL (the pgmq crate over tokio-postgres, docs/architecture.md says why),
//! whose visibility timeout is a task's lease, `set_vt` its heartbeat and `read_ct` its
//! attempts, beside two tables of ours: who holds which lease, and each task's one result.

use std::time::Duration;

use pgmq::queue::Queue;
use serde::{Deserialize, Serialize};
use tokio_postgres::{Client, NoTls};

use crate::config::DatabaseUrl;

/// The PGMQ queue agent-ls's tasks wait in unless told another (`--queue-name`).
pub const DEFAULT_QUEUE: &str = "agent_ls_tasks";
/// PGMQ's own SQL, installed once per database when its schema is missing.
const PGMQ_SQL: &str = include_str!("queue/pgmq.sql");
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The advisory lock the installation takes, so two workers starting together install once
/// ("agentlsq" in ASCII; memory's migrations take another).
const INSTALL_LOCK: i64 = 0x6167_656e_746c_7371;

/// Our tables: the lease each running task is under (for `batch status`), and the one result
/// of each message (its primary key makes a task end exactly once, whichever worker ends it).
const TABLES: &str = "
CREATE TABLE IF NOT EXISTS agent_ls_queue_leases (
    queue TEXT NOT NULL,
    msg_id BIGINT NOT NULL,
    task_id TEXT NOT NULL,
    worker TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    leased_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, msg_id)
);
CREATE TABLE IF NOT EXISTS agent_ls_queue_results (
    queue TEXT NOT NULL,
    msg_id BIGINT NOT NULL,
    task_id TEXT NOT NULL,
    status TEXT NOT NULL,
    worker TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    result JSONB NOT NULL,
    journal TEXT,
    finished_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, msg_id)
);
CREATE INDEX IF NOT EXISTS agent_ls_queue_results_task ON agent_ls_queue_results (queue, task_id);
";

#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("queue {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("queue: {0}")]
    Postgres(#[from] tokio_postgres::Error),
    #[error("queue: {0}")]
    Pgmq(#[from] pgmq::PgmqError),
}

/// What a message carries: one line of a tasks file, and whether the queue's owner trusted it
/// to name endpoints and commands (`enqueue --trusted`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    pub task: serde_json::Value,
    #[serde(default)]
    pub trusted: bool,
}

/// A task a worker holds the lease of.
#[derive(Debug, Clone)]
pub struct Leased {
    pub msg_id: i64,
    /// This is the task's n-th lease (PGMQ's `read_ct`), from 1.
    pub attempt: i32,
    /// The message's body; `None` when it is not a `Job` (written by something else).
    pub job: Option<Job>,
    /// The body as it was, for the result of one that is not a `Job`.
    pub raw: serde_json::Value,
}

/// One task's final result.
#[derive(Debug, Clone)]
pub struct Finished<'a> {
    pub task_id: &'a str,
    pub status: &'a str,
    pub worker: &'a str,
    pub attempts: i32,
    pub result: &'a serde_json::Value,
    pub journal: Option<&'a str>,
}

/// The queue's counts, as `agent-ls batch status` shows them.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Status {
    pub queued: i64,
    pub running: i64,
    pub done: i64,
    pub failed: i64,
    /// Per worker: its running, done and failed tasks.
    pub workers: std::collections::BTreeMap<String, WorkerCounts>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct WorkerCounts {
    pub running: i64,
    pub done: i64,
    pub failed: i64,
}

/// One connection to the queue's database. tokio-postgres pipelines the queries of every task
/// of a worker over it, so a worker holds one connection however many tasks it runs.
pub struct TaskQueue {
    client: Client,
    /// The PGMQ queue's name (its tables are `pgmq.q_<name>` and `pgmq.a_<name>`).
    name: String,
}

impl TaskQueue {
    /// Connects to the queue `name` (letters, digits and `_`, as PGMQ allows), and installs
    /// PGMQ, the queue and our tables where they are missing.
    pub async fn connect(url: &DatabaseUrl, name: &str) -> Result<TaskQueue, QueueError> {
        let shown = url.redacted();
        let err = |reason: String| QueueError::Connect {
            url: shown.clone(),
            reason,
        };
        let mut config: tokio_postgres::Config = url
            .expose()
            .parse()
            .map_err(|e: tokio_postgres::Error| err(format!("not a PostgreSQL URL: {e}")))?;
        let valid = !name.is_empty()
            && name.len() <= 40
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(err(format!(
                "the queue name {name:?} must be 1 to 40 ASCII letters, digits or '_'"
            )));
        }
        config.connect_timeout(CONNECT_TIMEOUT);
        if config.get_application_name().is_none() {
            config.application_name("agent-ls queue");
        }
        let (client, connection) = tokio::time::timeout(CONNECT_TIMEOUT, config.connect(NoTls))
            .await
            .map_err(|_| err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())))?
            .map_err(|e| err(format!("cannot connect: {e}")))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!("queue: the PostgreSQL connection ended: {e}");
            }
        });
        let queue = TaskQueue {
            client,
            name: name.to_ascii_lowercase(),
        };
        queue.install().await?;
        Ok(queue)
    }

    /// PGMQ's SQL (when its schema is missing), the queue and our tables, under an advisory
    /// lock so concurrent first starts install once.
    async fn install(&self) -> Result<(), QueueError> {
        self.client
            .execute("SELECT pg_advisory_lock($1)", &[&INSTALL_LOCK])
            .await?;
        let done = self.install_locked().await;
        let unlocked = self
            .client
            .execute("SELECT pg_advisory_unlock($1)", &[&INSTALL_LOCK])
            .await;
        done?;
        unlocked?;
        Ok(())
    }

    async fn install_locked(&self) -> Result<(), QueueError> {
        let present: bool = self
            .client
            .query_one("SELECT to_regclass('pgmq.meta') IS NOT NULL", &[])
            .await?
            .get(0);
        if !present {
            self.client.batch_execute(PGMQ_SQL).await?;
        }
        let exists: bool = self
            .client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pgmq.meta WHERE queue_name = $1)",
                &[&self.name],
            )
            .await?
            .get(0);
        if !exists {
            (&self.client).create(self.name.as_str()).await?;
        }
        self.client.batch_execute(TABLES).await?;
        Ok(())
    }

    /// Puts the jobs on the queue; their message ids.
    pub async fn enqueue(&self, jobs: &[Job]) -> Result<Vec<i64>, QueueError> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let ids = (&self.client)
            .send_batch(
                self.name.as_str(),
                jobs,
                None::<Vec<serde_json::Value>>,
                0i32,
            )
            .await?;
        Ok(ids)
    }

    /// Leases the next visible task for `lease` (PGMQ's `read`, `FOR UPDATE SKIP LOCKED`: two
    /// workers never get the same one), and records the lease for `worker`.
    pub async fn lease(&self, lease: Duration, worker: &str) -> Result<Option<Leased>, QueueError> {
        let mut got = (&self.client)
            .read::<serde_json::Value, serde_json::Value, _, _, _>(
                self.name.as_str(),
                secs(lease),
                1,
            )
            .await?;
        let Some(m) = got.pop() else { return Ok(None) };
        let job = serde_json::from_value::<Job>(m.message.clone()).ok();
        let task_id = job
            .as_ref()
            .and_then(|j| j.task.get("id"))
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_string();
        self.client
            .execute(
                "INSERT INTO agent_ls_queue_leases (queue, msg_id, task_id, worker, attempt) VALUES ($5, $1, $2, $3, $4)
                 ON CONFLICT (queue, msg_id) DO UPDATE SET worker = $3, attempt = $4, leased_at = now(), heartbeat_at = now()",
                &[&m.msg_id, &task_id, &worker, &m.read_ct, &self.name],
            )
            .await?;
        Ok(Some(Leased {
            msg_id: m.msg_id,
            attempt: m.read_ct,
            job,
            raw: m.message,
        }))
    }

    /// Renews the lease of the task's `attempt` for another `lease`: false when it is no
    /// longer ours (it ended, or its lease ran out and another worker took it, which raised
    /// its read count), so the caller stops working on it.
    pub async fn heartbeat(
        &self,
        msg_id: i64,
        attempt: i32,
        lease: Duration,
    ) -> Result<bool, QueueError> {
        // PGMQ's set_vt, then the read count says whose lease it renewed: another worker's
        // (which it renews itself anyway) means ours ran out.
        let renewed = (&self.client)
            .set_vt::<serde_json::Value, serde_json::Value, _, _, _>(
                self.name.as_str(),
                &[msg_id],
                secs(lease),
            )
            .await?
            .iter()
            .any(|m| m.read_ct == attempt);
        if renewed {
            self.client
                .execute(
                    "UPDATE agent_ls_queue_leases SET heartbeat_at = now() WHERE queue = $2 AND msg_id = $1",
                    &[&msg_id, &self.name],
                )
                .await?;
        }
        Ok(renewed)
    }

    /// Whether the message already has its result (a worker ended it and stopped before
    /// taking it off the queue).
    pub async fn has_result(&self, msg_id: i64) -> Result<bool, QueueError> {
        let row = self
            .client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM agent_ls_queue_results WHERE queue = $2 AND msg_id = $1)",
                &[&msg_id, &self.name],
            )
            .await?;
        Ok(row.get(0))
    }

    /// Records the task's result, unless it has one already, and archives its message (PGMQ
    /// keeps it in its archive table). Whether this was the result that counted.
    pub async fn finish(&self, msg_id: i64, f: &Finished<'_>) -> Result<bool, QueueError> {
        let inserted = self
            .client
            .execute(
                "INSERT INTO agent_ls_queue_results (queue, msg_id, task_id, status, worker, attempts, result, journal)
                 VALUES ($8, $1, $2, $3, $4, $5, $6, $7) ON CONFLICT (queue, msg_id) DO NOTHING",
                &[&msg_id, &f.task_id, &f.status, &f.worker, &f.attempts, f.result, &f.journal, &self.name],
            )
            .await?;
        self.take_off(msg_id).await?;
        Ok(inserted == 1)
    }

    /// Archives a message that has its result, and forgets its lease.
    pub async fn take_off(&self, msg_id: i64) -> Result<(), QueueError> {
        (&self.client)
            .archive(self.name.as_str(), &[msg_id])
            .await?;
        self.client
            .execute(
                "DELETE FROM agent_ls_queue_leases WHERE queue = $2 AND msg_id = $1",
                &[&msg_id, &self.name],
            )
            .await?;
        Ok(())
    }

    /// Gives the task's `attempt` back at once (to be tried again, or because this worker is
    /// stopping): any worker may lease it now. Not when its lease ran out and another worker
    /// leased it since (its read count moved on): that worker's lease stands. The check and
    /// PGMQ's `set_vt` are two statements; a lease taken between them is shown again, and at
    /// worst the task runs twice with its one result still counted once.
    pub async fn release(&self, msg_id: i64, attempt: i32) -> Result<(), QueueError> {
        let ours = self
            .client
            .query_opt(
                &format!(
                    "SELECT 1 FROM pgmq.q_{} WHERE msg_id = $1 AND read_ct = $2",
                    self.name
                ),
                &[&msg_id, &attempt],
            )
            .await?
            .is_some();
        if !ours {
            return Ok(());
        }
        (&self.client)
            .set_vt::<serde_json::Value, serde_json::Value, _, _, _>(
                self.name.as_str(),
                &[msg_id],
                0i32,
            )
            .await?;
        self.client
            .execute(
                "DELETE FROM agent_ls_queue_leases WHERE queue = $2 AND msg_id = $1",
                &[&msg_id, &self.name],
            )
            .await?;
        Ok(())
    }

    /// How many tasks are still on the queue, leased or not.
    pub async fn pending(&self) -> Result<i64, QueueError> {
        let row = self
            .client
            .query_one(&format!("SELECT count(*) FROM pgmq.q_{}", self.name), &[])
            .await?;
        Ok(row.get(0))
    }

    /// Queued (visible), running (leased) and ended tasks, per worker.
    pub async fn status(&self) -> Result<Status, QueueError> {
        let mut s = Status::default();
        let leases = self
            .client
            .query(
                &format!(
                    "SELECT coalesce(l.worker, ''), q.vt > clock_timestamp() AS held, count(*)
                     FROM pgmq.q_{} q LEFT JOIN agent_ls_queue_leases l
                     ON l.queue = $1 AND l.msg_id = q.msg_id
                     GROUP BY 1, 2",
                    self.name
                ),
                &[&self.name],
            )
            .await?;
        for row in leases {
            let (worker, held, n): (String, bool, i64) = (row.get(0), row.get(1), row.get(2));
            if held {
                s.running += n;
                s.workers.entry(worker).or_default().running += n;
            } else {
                s.queued += n;
            }
        }
        let ended = self
            .client
            .query(
                "SELECT worker, status = 'done', count(*) FROM agent_ls_queue_results WHERE queue = $1 GROUP BY 1, 2",
                &[&self.name],
            )
            .await?;
        for row in ended {
            let (worker, done, n): (String, bool, i64) = (row.get(0), row.get(1), row.get(2));
            let w = s.workers.entry(worker).or_default();
            if done {
                s.done += n;
                w.done += n;
            } else {
                s.failed += n;
                w.failed += n;
            }
        }
        Ok(s)
    }
}

/// Whole seconds of a lease, at least one (PGMQ counts in seconds).
fn secs(d: Duration) -> i32 {
    d.as_secs().clamp(1, i32::MAX as u64) as i32
}
