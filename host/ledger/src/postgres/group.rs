//! Group commit for PostgreSQL: the steps' writes (`Store::write_step`,
//! and a message header alone) that queue up while others commit share a
//! transaction, each in a savepoint of its own, so a thousand sessions cost
//! a round trip each and a commit between many, not a transaction each.
//!
//! - **A lone write goes at once.** The first write to find no writer busy
//!   starts one (a task, so a caller that stops waiting never cuts a
//!   transaction others share) and it takes the queue as it finds it: one
//!   write, often.
//! - **Up to [`WRITERS`] writers at a time**, each on a connection of the
//!   pool, so a commit in flight never holds up the next group, and a
//!   server with cores to spare gets concurrent transactions.
//! - **Each write in a savepoint**, sent in the same flight as its
//!   statements. One that fails (or finds its session gone) rolls back to
//!   its savepoint and the others go on; a write that failed in a group is
//!   then run once more alone, so an error another write caused (a lock
//!   wait, a deadlock between groups) is not its own. Should the commit
//!   fail, every write of the group gets that error, as it would have
//!   alone.
//!
//! Order per session is kept: a session's writes are each awaited, so one
//! is never queued while another of its own is in flight.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use deadpool_postgres::Pool;
use tokio::sync::oneshot;
use warden_protocol::{MessageInfo, Millis, Part};

use super::step::{self, Encoded};
use super::{LedgerError, PgClient, Result, Transaction, begin};
use crate::AuditEntry;
use crate::phase::PhaseKind;
use crate::store::{Fence, PartChange, StepWrite, TimelineRow};

/// How many groups may commit at once.
pub const WRITERS: usize = 4;

/// The most writes in one group: each is a savepoint, and PostgreSQL keeps
/// the first 64 of a transaction's subtransactions in shared memory.
pub const GROUP_MOST: usize = 48;

/// A timeline row, owned: the arguments a call started with, and when.
type Row = (Option<serde_json::Value>, Option<Millis>);

/// A step's write, owned, so a writer task can run it.
struct Job {
    header: Option<MessageInfo>,
    parts: Vec<(Part, Option<Row>)>,
    audit: Vec<AuditEntry>,
    marks: Vec<(Millis, PhaseKind)>,
    fence: Option<Fence>,
    encoded: Encoded,
    answer: oneshot::Sender<Result<bool>>,
}

impl Job {
    /// Run this write's statements in `tx` (see [`step::run_in`]).
    async fn run_in(&self, tx: &Transaction<'_>, first: Option<&str>) -> Result<bool> {
        let changes: Vec<PartChange<'_>> = self
            .parts
            .iter()
            .map(|(part, row)| PartChange {
                part,
                timeline: row.as_ref().map(|(started_with, at)| TimelineRow {
                    started_with: started_with.as_ref(),
                    at: *at,
                }),
            })
            .collect();
        let write = StepWrite {
            header: self.header.as_ref(),
            parts: &changes,
            audit: &self.audit,
            marks: &self.marks,
        };
        step::run_in(tx, &write, &self.encoded, self.fence.as_ref(), first).await
    }
}

/// The writers of one store.
pub struct Group {
    pool: Pool,
    name: String,
    state: Mutex<Queue>,
    /// The writes committed in a transaction shared with others, and those
    /// transactions.
    shared: AtomicU64,
    groups: AtomicU64,
    /// Off: each write is a transaction of its own on a connection of the
    /// pool, as before group commit (for a comparison in the same run).
    off: AtomicBool,
}

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    writers: usize,
}

impl Group {
    pub fn new(pool: Pool, name: String) -> Arc<Group> {
        Arc::new(Group {
            pool,
            name,
            state: Mutex::new(Queue::default()),
            shared: AtomicU64::new(0),
            groups: AtomicU64::new(0),
            off: AtomicBool::new(false),
        })
    }

    /// Commit each write alone (`false`), or in groups (the default).
    pub fn set_grouping(&self, on: bool) {
        self.off.store(!on, Ordering::Relaxed);
    }

    /// How many writes were committed in a shared transaction, and in how
    /// many transactions.
    pub fn shared(&self) -> (u64, u64) {
        (
            self.shared.load(Ordering::Relaxed),
            self.groups.load(Ordering::Relaxed),
        )
    }

    /// Write `write` with whatever else is queued; `false` (nothing
    /// written) if its header's session is missing.
    pub async fn write(
        self: &Arc<Group>,
        write: &StepWrite<'_>,
        fence: Option<&Fence>,
    ) -> Result<bool> {
        let encoded = step::encode(write)?;
        let (answer, answered) = oneshot::channel();
        let job = Job {
            header: write.header.cloned(),
            parts: write
                .parts
                .iter()
                .map(|c| {
                    let row = c.timeline.map(|t| (t.started_with.cloned(), t.at));
                    (c.part.clone(), row)
                })
                .collect(),
            audit: write.audit.to_vec(),
            marks: write.marks.to_vec(),
            fence: fence.cloned(),
            encoded,
            answer,
        };
        if self.off.load(Ordering::Relaxed) {
            let mut client = self.pool.get().await.map_err(|e| {
                LedgerError::Unavailable(format!(
                    "the PostgreSQL server of {} cannot be reached ({e})",
                    self.name
                ))
            })?;
            alone(&mut client, job).await;
            return answered.await.unwrap_or_else(|_| {
                Err(LedgerError::Storage("the write was not answered".into()))
            });
        }
        let start = {
            let mut q = self.lock();
            q.jobs.push_back(job);
            let start = q.writers < WRITERS;
            if start {
                q.writers += 1;
            }
            start
        };
        if start {
            tokio::spawn(self.clone().serve());
        }
        answered.await.unwrap_or_else(|_| {
            Err(LedgerError::Storage(format!(
                "the writer of {} stopped before it answered; the write may not have happened",
                self.name
            )))
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Commit groups until the queue is empty.
    async fn serve(self: Arc<Group>) {
        loop {
            let group: Vec<Job> = {
                let mut q = self.lock();
                if q.jobs.is_empty() {
                    q.writers -= 1;
                    return;
                }
                let n = q.jobs.len().min(GROUP_MOST);
                q.jobs.drain(..n).collect()
            };
            let mut client = match self.pool.get().await {
                Ok(c) => c,
                Err(e) => {
                    let e = LedgerError::Unavailable(format!(
                        "the PostgreSQL server of {} cannot be reached ({e})",
                        self.name
                    ));
                    for job in group {
                        let _ = job.answer.send(Err(e.clone()));
                    }
                    continue;
                }
            };
            match group.len() {
                1 => {
                    for job in group {
                        alone(&mut client, job).await;
                    }
                }
                _ => {
                    let landed = together(&mut client, group).await;
                    if landed > 0 {
                        self.shared.fetch_add(landed, Ordering::Relaxed);
                        self.groups.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

/// Run one write in a transaction of its own and answer it.
async fn alone(client: &mut PgClient, job: Job) {
    let done = async {
        let tx = begin(client).await?;
        if !job.run_in(&tx, None).await? {
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }
    .await;
    let _ = job.answer.send(done);
}

/// Run `group` in one transaction, each write in a savepoint, answer each
/// once the transaction has committed, then run alone those that failed.
/// How many committed together.
async fn together(client: &mut PgClient, group: Vec<Job>) -> u64 {
    let mut ran: Vec<(Job, bool)> = Vec::with_capacity(group.len());
    let mut failed: Vec<Job> = Vec::new();
    let mut rest = group.into_iter();
    let committed: Result<()> = async {
        let tx = begin(client).await?;
        for (i, job) in rest.by_ref().enumerate() {
            let savepoint = format!("SAVEPOINT w{i}");
            let result = job.run_in(&tx, Some(&savepoint)).await;
            match result {
                Ok(true) => ran.push((job, true)),
                Ok(false) => {
                    ran.push((job, false));
                    tx.batch_execute(&format!("ROLLBACK TO SAVEPOINT w{i}"))
                        .await?;
                }
                Err(_) => {
                    failed.push(job);
                    // If the savepoint itself never took (the connection
                    // is gone), the transaction is lost, and this is the
                    // error every write of the group gets.
                    tx.batch_execute(&format!("ROLLBACK TO SAVEPOINT w{i}"))
                        .await?;
                }
            }
        }
        tx.commit().await?;
        Ok(())
    }
    .await;
    match committed {
        Ok(()) => {
            let landed = ran.len() as u64;
            for (job, put) in ran {
                let _ = job.answer.send(Ok(put));
            }
            for job in failed {
                alone(client, job).await;
            }
            landed
        }
        Err(e) => {
            for job in ran.into_iter().map(|(j, _)| j).chain(failed).chain(rest) {
                let _ = job.answer.send(Err(e.clone()));
            }
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use warden_protocol::MessageInfo;

    use super::super::PgStore;
    use crate::store::Store;

    /// The session's one message, as of `agent`.
    fn header(first: &MessageInfo, agent: &str) -> MessageInfo {
        let MessageInfo::User(mut u) = first.clone() else {
            unreachable!("a user message")
        };
        u.agent = agent.into();
        MessageInfo::User(u)
    }

    /// Writes that arrive together share transactions, and each reads back
    /// as written: waves of 48 sessions' headers at once, until one wave
    /// was grouped (the first, nearly always).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_at_once_share_transactions_and_each_lands() {
        let store = Arc::new(PgStore::open(&warden_pg_harness::database()).await.unwrap());
        let mut sessions = Vec::new();
        for n in 0..48 {
            let s = crate::contract::session(n);
            store.create_session(&s).await.unwrap();
            sessions.push((s.id.clone(), crate::contract::user(&s.id)));
        }
        for wave in 0..5 {
            let barrier = Arc::new(tokio::sync::Barrier::new(sessions.len()));
            let writers: Vec<_> = sessions
                .iter()
                .map(|(_, first)| {
                    let (store, barrier) = (store.clone(), barrier.clone());
                    let info = header(first, &format!("wave{wave}"));
                    tokio::spawn(async move {
                        barrier.wait().await;
                        store.put_message(&info, None).await
                    })
                })
                .collect();
            for w in writers {
                assert!(w.await.unwrap().unwrap());
            }
            for (id, first) in &sessions {
                let read = store.messages(id).await.unwrap();
                assert_eq!(read.len(), 1);
                assert_eq!(read[0].info, header(first, &format!("wave{wave}")));
            }
            if store.steps.shared().0 > 0 {
                let (shared, groups) = store.steps.shared();
                assert!(shared >= 2 * groups, "a group holds two writes or more");
                return;
            }
        }
        panic!("five waves of 48 writes at once and none shared a transaction");
    }
}
