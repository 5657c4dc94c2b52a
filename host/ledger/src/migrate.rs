//! Moving a whole ledger from one backend to another (SQLite to PostgreSQL
//! and back): every session, whole, with its own ids, sequence numbers and
//! times, one session per transaction at the target.
//!
//! **Idempotent, and checked.** A session already at the target is not
//! written again: it is *verified* — read from both sides and compared —
//! and a difference stops the migration with an error naming the session
//! (the target has a session of that id with other contents: someone wrote
//! to it, or it is another ledger's). So a migration cut short can be run
//! again, and a finished one run again proves the copy. Leases are not
//! moved: run it with no warden using either ledger.

use warden_protocol::SessionId;

use super::LedgerError;
use super::store::Store;

/// What happened to one session, as the migration goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Copied to the target.
    Copied { session: SessionId },
    /// Already at the target, and the same there.
    Verified { session: SessionId },
    /// Gone from the source between listing and reading it (deleted meanwhile).
    Vanished { session: SessionId },
}

/// One step of `total`, numbered from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub done: usize,
    pub total: usize,
    pub step: Step,
}

/// What a migration did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Migrated {
    pub copied: usize,
    pub verified: usize,
    pub vanished: usize,
}

/// Copy every session of `from` into `to`, oldest first, telling
/// `progress` after each; see the module's doc for sessions already there.
pub async fn migrate(
    from: &dyn Store,
    to: &dyn Store,
    progress: &mut (dyn FnMut(Progress) + Send),
) -> Result<Migrated, LedgerError> {
    let mut sessions = from.sessions().await?;
    sessions.reverse();
    let total = sessions.len();
    let mut out = Migrated::default();
    for (i, info) in sessions.iter().enumerate() {
        let id = &info.id;
        let step = match from.export_session(id).await? {
            None => {
                out.vanished += 1;
                Step::Vanished {
                    session: id.clone(),
                }
            }
            Some(export) => {
                if to.import_session(&export).await? {
                    out.copied += 1;
                    Step::Copied {
                        session: id.clone(),
                    }
                } else {
                    let there = to.export_session(id).await?;
                    if there.as_ref() != Some(&export) {
                        return Err(LedgerError::Storage(format!(
                            "session {id} is already in {} with other contents than in {}; move it aside (or migrate into an empty ledger) and run the migration again",
                            to.name(),
                            from.name()
                        )));
                    }
                    out.verified += 1;
                    Step::Verified {
                        session: id.clone(),
                    }
                }
            }
        };
        progress(Progress {
            done: i + 1,
            total,
            step,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Place, fill};
    use warden_protocol::MessageId;

    /// Everything the interface reads of every session, for comparing ledgers.
    async fn everything(store: &dyn Store) -> Vec<String> {
        let mut out = vec![format!("{:?}", store.sessions().await.unwrap())];
        for s in store.sessions().await.unwrap() {
            out.push(format!(
                "{:?}\n{:?}\n{:?}\n{:?}\n{:?}",
                store.export_session(&s.id).await.unwrap(),
                store.messages(&s.id).await.unwrap(),
                store.part_events(&s.id).await.unwrap(),
                store.audit_trail(&s.id).await.unwrap(),
                store.phases(&s.id).await.unwrap(),
            ));
        }
        out
    }

    /// SQLite → PostgreSQL → SQLite: all three read the same, session by
    /// session; running it again verifies instead of copying; a session the
    /// target holds with other contents stops it, naming the session.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_ledger_moves_to_postgres_and_back_unchanged() {
        let (first, middle, last) = (Place::sqlite(), Place::postgres(), Place::sqlite());
        let (a, b, c) = (first.open().await, middle.open().await, last.open().await);
        let mut ids = Vec::new();
        for n in 1..=3 {
            ids.push(fill(&*a, n).await);
        }
        let mut steps = Vec::new();
        let there = migrate(&*a, &*b, &mut |p| steps.push(p)).await.unwrap();
        assert_eq!(
            there,
            Migrated {
                copied: 3,
                verified: 0,
                vanished: 0
            }
        );
        // Oldest first, numbered.
        assert_eq!(
            steps,
            ids.iter()
                .enumerate()
                .map(|(i, id)| Progress {
                    done: i + 1,
                    total: 3,
                    step: Step::Copied {
                        session: id.clone()
                    },
                })
                .collect::<Vec<_>>()
        );
        migrate(&*b, &*c, &mut |_| {}).await.unwrap();
        let want = everything(&*a).await;
        assert_eq!(want.len(), 4);
        assert_eq!(everything(&*b).await, want);
        assert_eq!(everything(&*c).await, want);

        let again = migrate(&*a, &*b, &mut |_| {}).await.unwrap();
        assert_eq!(
            again,
            Migrated {
                copied: 0,
                verified: 3,
                vanished: 0
            }
        );
        assert_eq!(everything(&*b).await, want);

        // The target's copy changes: the next run refuses, naming it.
        b.mark_phases(
            &ids[1],
            None::<&MessageId>,
            &[(99, crate::phase::PhaseKind::FirstToken)],
            None,
        )
        .await
        .unwrap();
        match migrate(&*a, &*b, &mut |_| {}).await {
            Err(LedgerError::Storage(m)) => {
                assert!(
                    m.contains(&format!("session {} is already in", ids[1])),
                    "{m}"
                );
                assert!(!m.contains("password"), "{m}");
            }
            other => panic!("expected a refused migration, got {other:?}"),
        }
    }
}
