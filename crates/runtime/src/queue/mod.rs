//! The shared task queue of `agent-ls worker` and `agent-ls enqueue` (docs/scale.md): PGMQ's
//! queue in PostgreSQL (the pgmq crate over tokio-postgres, docs/architecture.md says why),
//! whose visibility timeout is a task's lease, `set_vt` its heartbeat and `read_ct` its
//! attempts, beside two tables of ours: who holds which lease, and each task's one result.

use std::future::Future;
use std::time::{Duration, Instant};

use pgmq::queue::Queue;
use serde::{Deserialize, Serialize};
use tokio_postgres::{Client, NoTls};

use crate::config::DatabaseUrl;

/// The PGMQ queue agent-ls's tasks wait in unless told another (`--queue-name`).
pub const DEFAULT_QUEUE: &str = "agent_ls_tasks";
/// PGMQ's own SQL, installed once per database when its schema is missing.
const PGMQ_SQL: &str = include_str!("pgmq.sql");
/// How long connecting may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a query may take unless the caller says otherwise (`connect_with`): past it the
/// call fails rather than wait on a connection that may be half-open.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long installing may take: PGMQ's SQL, or waiting for another worker's installation.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(120);
/// TCP keepalive and user timeout, unless the URL sets them: a connection whose peer is gone
/// (a half-open one: the database's machine lost, a NAT that forgot it) fails within about
/// a minute, instead of the system's two hours of keepalive or fifteen of retransmissions.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(30);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
const KEEPALIVE_RETRIES: u32 = 3;
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(30);
/// tokio-postgres's default keepalive idle time, which tells that the URL did not set one.
const DEFAULT_KEEPALIVE_IDLE: Duration = Duration::from_secs(2 * 60 * 60);
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
    #[error("queue: no answer within {} ms", .0.as_millis())]
    Timeout(Duration),
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
    /// When the read that leased it was sent: the lease lasts at least until this plus its
    /// length, as PGMQ counts it from when the server ran the read, which is later.
    pub at: Instant,
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
    /// How long each call may take (the database abandons a statement after it too).
    timeout: Duration,
}

/// How a task is given back to the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GiveBack {
    /// At once, and not counted as an attempt: the worker is stopping, the task never failed.
    Stopping,
    /// After `Duration`, counted as an attempt: its run could not be set up or gave no
    /// outcome, which may pass (a git server down, a disk full) but not within milliseconds.
    Retry(Duration),
}

impl TaskQueue {
    /// Connects to the queue `name` (letters, digits and `_`, as PGMQ allows), and installs
    /// PGMQ, the queue and our tables where they are missing; each call may take
    /// `QUERY_TIMEOUT`.
    pub async fn connect(url: &DatabaseUrl, name: &str) -> Result<TaskQueue, QueueError> {
        Self::connect_with(url, name, QUERY_TIMEOUT).await
    }

    /// `connect`, each later call failing past `timeout` (a worker's is a third of its lease,
    /// so that a call hung on a lost connection never outlasts a lease).
    pub async fn connect_with(
        url: &DatabaseUrl,
        name: &str,
        timeout: Duration,
    ) -> Result<TaskQueue, QueueError> {
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
        if config.get_keepalives() && config.get_keepalives_idle() == DEFAULT_KEEPALIVE_IDLE {
            config
                .keepalives_idle(KEEPALIVE_IDLE)
                .keepalives_interval(KEEPALIVE_INTERVAL)
                .keepalives_retries(KEEPALIVE_RETRIES);
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(TCP_USER_TIMEOUT);
        }
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
            timeout,
        };
        tokio::time::timeout(INSTALL_TIMEOUT, queue.install())
            .await
            .map_err(|_| QueueError::Timeout(INSTALL_TIMEOUT))??;
        // The server gives up on a statement when we do: one we stopped waiting for (a lock
        // held elsewhere) would otherwise still run later, say renew a lease its worker has
        // stopped using.
        let ms = timeout.as_millis().max(1);
        queue
            .within(
                queue
                    .client
                    .batch_execute(&format!("SET statement_timeout = {ms}")),
            )
            .await?;
        Ok(queue)
    }

    /// `call`, or `Timeout` once it took longer than this queue's timeout.
    async fn within<T, E: Into<QueueError>>(
        &self,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, QueueError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(done) => done.map_err(Into::into),
            Err(_) => Err(QueueError::Timeout(self.timeout)),
        }
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
        self.within((&self.client).send_batch(
            self.name.as_str(),
            jobs,
            None::<Vec<serde_json::Value>>,
            0i32,
        ))
        .await
    }

    /// Leases the next visible task for `lease` (PGMQ's `read`, `FOR UPDATE SKIP LOCKED`: two
    /// workers never get the same one), and records the lease for `worker`.
    pub async fn lease(&self, lease: Duration, worker: &str) -> Result<Option<Leased>, QueueError> {
        let at = Instant::now();
        let mut got = self
            .within(
                (&self.client).read::<serde_json::Value, serde_json::Value, _, _, _>(
                    self.name.as_str(),
                    secs(lease),
                    1,
                ),
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
        self.within(self.client.execute(
            "INSERT INTO agent_ls_queue_leases (queue, msg_id, task_id, worker, attempt) VALUES ($5, $1, $2, $3, $4)
             ON CONFLICT (queue, msg_id) DO UPDATE SET worker = $3, attempt = $4, leased_at = now(), heartbeat_at = now()",
            &[&m.msg_id, &task_id, &worker, &m.read_ct, &self.name],
        ))
        .await?;
        Ok(Some(Leased {
            msg_id: m.msg_id,
            attempt: m.read_ct,
            at,
            job,
            raw: m.message,
        }))
    }

    /// Renews the lease of the task's `attempt` for another `lease`, counted from when the
    /// server runs this: false when it is no longer ours (it ended, or its lease ran out and
    /// another worker took it, which raised its read count), so the caller stops working on
    /// it. One conditional UPDATE: it never renews another worker's lease.
    pub async fn heartbeat(
        &self,
        msg_id: i64,
        attempt: i32,
        lease: Duration,
    ) -> Result<bool, QueueError> {
        self.within(async {
            let renewed = self
                .client
                .execute(
                    &format!(
                        "UPDATE pgmq.q_{} SET vt = clock_timestamp() + make_interval(secs => $3)
                         WHERE msg_id = $1 AND read_ct = $2",
                        self.name
                    ),
                    &[&msg_id, &attempt, &f64::from(secs(lease))],
                )
                .await?
                == 1;
            if renewed {
                self.client
                    .execute(
                        "UPDATE agent_ls_queue_leases SET heartbeat_at = now() WHERE queue = $2 AND msg_id = $1",
                        &[&msg_id, &self.name],
                    )
                    .await?;
            }
            Ok::<_, QueueError>(renewed)
        })
        .await
    }

    /// Whether the message already has its result (a worker ended it and stopped before
    /// taking it off the queue).
    pub async fn has_result(&self, msg_id: i64) -> Result<bool, QueueError> {
        let row = self
            .within(self.client.query_one(
                "SELECT EXISTS (SELECT 1 FROM agent_ls_queue_results WHERE queue = $2 AND msg_id = $1)",
                &[&msg_id, &self.name],
            ))
            .await?;
        Ok(row.get(0))
    }

    /// Records the task's result, unless it has one already, and archives its message (PGMQ
    /// keeps it in its archive table). Whether this was the result that counted.
    pub async fn finish(&self, msg_id: i64, f: &Finished<'_>) -> Result<bool, QueueError> {
        let inserted = self
            .within(self.client.execute(
                "INSERT INTO agent_ls_queue_results (queue, msg_id, task_id, status, worker, attempts, result, journal)
                 VALUES ($8, $1, $2, $3, $4, $5, $6, $7) ON CONFLICT (queue, msg_id) DO NOTHING",
                &[&msg_id, &f.task_id, &f.status, &f.worker, &f.attempts, f.result, &f.journal, &self.name],
            ))
            .await?;
        self.take_off(msg_id).await?;
        Ok(inserted == 1)
    }

    /// Archives a message that has its result, and forgets its lease.
    pub async fn take_off(&self, msg_id: i64) -> Result<(), QueueError> {
        self.within(async {
            (&self.client)
                .archive(self.name.as_str(), &[msg_id])
                .await?;
            self.client
                .execute(
                    "DELETE FROM agent_ls_queue_leases WHERE queue = $2 AND msg_id = $1",
                    &[&msg_id, &self.name],
                )
                .await?;
            Ok::<_, QueueError>(())
        })
        .await
    }

    /// Gives the task's `attempt` back (`GiveBack` says when it is visible again, and whether
    /// this lease counts as an attempt). Not when its lease ran out and another worker leased
    /// it since (its read count moved on): that worker's lease stands. One conditional UPDATE,
    /// so no lease can be taken between the check and the change. A hand-back that does not
    /// count lowers the read count again: the next lease is this one's number, which is safe
    /// as the worker handing back has stopped its run and its heartbeat first.
    pub async fn release(
        &self,
        msg_id: i64,
        attempt: i32,
        how: GiveBack,
    ) -> Result<(), QueueError> {
        let (after, uncount) = match how {
            GiveBack::Stopping => (0.0, 1i32),
            GiveBack::Retry(after) => (after.as_secs_f64(), 0),
        };
        self.within(async {
            let given = self
                .client
                .execute(
                    &format!(
                        "UPDATE pgmq.q_{} SET vt = clock_timestamp() + make_interval(secs => $3),
                         read_ct = read_ct - $4 WHERE msg_id = $1 AND read_ct = $2",
                        self.name
                    ),
                    &[&msg_id, &attempt, &after, &uncount],
                )
                .await?;
            if given == 1 {
                self.client
                    .execute(
                        "DELETE FROM agent_ls_queue_leases WHERE queue = $2 AND msg_id = $1",
                        &[&msg_id, &self.name],
                    )
                    .await?;
            }
            Ok::<_, QueueError>(())
        })
        .await
    }

    /// How many tasks are still on the queue, leased or not.
    pub async fn pending(&self) -> Result<i64, QueueError> {
        let row = self
            .within(
                self.client
                    .query_one(&format!("SELECT count(*) FROM pgmq.q_{}", self.name), &[]),
            )
            .await?;
        Ok(row.get(0))
    }

    /// Queued (visible, or waiting to be tried again), running (leased) and ended tasks, per
    /// worker.
    pub async fn status(&self) -> Result<Status, QueueError> {
        self.within(self.status_now()).await
    }

    async fn status_now(&self) -> Result<Status, QueueError> {
        let mut s = Status::default();
        let leases = self
            .client
            .query(
                &format!(
                    "SELECT coalesce(l.worker, ''), q.vt > clock_timestamp() AND l.worker IS NOT NULL AS held, count(*)
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
