//! The shared task queue's own speed (docs/scale.md "Workers on a shared queue"): tasks per
//! second handed out to 1, 4 and 16 workers, each on its own connection as a worker process
//! is, with no-op tasks: a lease (PGMQ's read), then the result recorded and the message
//! archived, as `agent-ls worker` does around every run; no model and no `agent-ls run`. Plus
//! a heartbeat's round trip. Needs a server: run `scripts/postgres start`, then
//! `AGENT_LS_TEST_POSTGRES_URL=$(scripts/postgres url) cargo bench --bench queue`. Each run
//! uses queues of its own (`bench_<pid>_<workers>`), left in the database.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_ls_runtime::config::DatabaseUrl;
use agent_ls_runtime::queue::{Finished, Job, TaskQueue};

/// Tasks per measurement.
const TASKS: usize = 2_000;
const LEASE: Duration = Duration::from_secs(60);

fn jobs(n: usize) -> Vec<Job> {
    (0..n)
        .map(|i| Job {
            task: serde_json::json!({"id": format!("t{i}"), "repo": ".", "goal": "nothing"}),
            trusted: false,
        })
        .collect()
}

/// One worker: leases and ends tasks until none is left; how many it ended.
async fn drain(queue: TaskQueue, name: String) -> usize {
    let result = serde_json::json!({"status": "done"});
    let mut ended = 0;
    while let Some(l) = queue.lease(LEASE, &name).await.expect("lease") {
        let f = Finished {
            task_id: "t",
            status: "done",
            worker: &name,
            attempts: l.attempt,
            result: &result,
            journal: None,
        };
        assert!(queue.finish(l.msg_id, &f).await.expect("finish"));
        ended += 1;
    }
    ended
}

/// Tasks per second handed out to `workers` workers.
async fn measure(url: &DatabaseUrl, workers: usize) -> f64 {
    let name = format!("bench_{}_{workers}", std::process::id());
    let setup = TaskQueue::connect(url, &name).await.expect("connect");
    setup.enqueue(&jobs(TASKS)).await.expect("enqueue");
    let mut queues = Vec::new();
    for _ in 0..workers {
        queues.push(TaskQueue::connect(url, &name).await.expect("connect"));
    }
    let started = Instant::now();
    let handles: Vec<_> = queues
        .into_iter()
        .enumerate()
        .map(|(i, q)| tokio::spawn(drain(q, format!("w{i}"))))
        .collect();
    let mut ended = 0;
    for h in handles {
        ended += h.await.expect("a worker");
    }
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(ended, TASKS, "every task once");
    assert_eq!(setup.pending().await.expect("pending"), 0);
    TASKS as f64 / secs
}

/// The median round trip of a heartbeat (PGMQ's set_vt) on a leased task.
async fn heartbeat(url: &DatabaseUrl) -> Duration {
    let name = format!("bench_{}_beat", std::process::id());
    let q = Arc::new(TaskQueue::connect(url, &name).await.expect("connect"));
    q.enqueue(&jobs(1)).await.expect("enqueue");
    let l = q.lease(LEASE, "w").await.expect("lease").expect("a task");
    let mut times = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        assert!(q.heartbeat(l.msg_id, l.attempt, LEASE).await.expect("beat"));
        times.push(t.elapsed());
    }
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let Ok(url) = std::env::var("AGENT_LS_TEST_POSTGRES_URL") else {
        println!(
            "queue: skipped, AGENT_LS_TEST_POSTGRES_URL is not set (scripts/postgres start, then AGENT_LS_TEST_POSTGRES_URL=$(scripts/postgres url))"
        );
        return;
    };
    let url = DatabaseUrl::new(url);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        println!(
            "queue: {TASKS} no-op tasks, each leased, its result recorded and archived, by workers on their own connections"
        );
        for workers in [1, 4, 16] {
            let rate = measure(&url, workers).await;
            println!("queue: {workers:>2} worker(s): {rate:>7.0} tasks/s handed out");
        }
        let beat = heartbeat(&url).await;
        println!(
            "queue: heartbeat (set_vt): {:.2} ms median",
            beat.as_secs_f64() * 1e3
        );
    });
}
