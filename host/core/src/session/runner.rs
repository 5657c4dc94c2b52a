//! One runner per session. A second caller for a session that is already
//! running joins the running loop and gets its result; cancelling goes
//! through the runner. (Across processes, the ledger's runner lease keeps
//! the same promise; see `Core::run`.)

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use warden_protocol::{MessageWithParts, SessionId};

use crate::error::{CoreError, Result};

/// What every caller of a run receives.
pub type Shared = std::result::Result<MessageWithParts, Arc<CoreError>>;

struct Running {
    cancel: CancellationToken,
    done: watch::Receiver<Option<Shared>>,
}

/// The runners of this process.
#[derive(Clone, Default)]
pub struct Runners {
    map: Arc<Mutex<HashMap<SessionId, Running>>>,
    /// Sessions cancelled since their prompt last looked.
    aborted: Arc<Mutex<std::collections::HashSet<SessionId>>>,
}

impl Runners {
    /// Run `start` for the session unless a run is already going, then wait
    /// for whichever run it is. The run continues even if every caller goes
    /// away; only [`Runners::cancel`] stops it.
    pub async fn ensure_running<F, Fut>(&self, session: &SessionId, start: F) -> Shared
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: Future<Output = Result<MessageWithParts>> + Send + 'static,
    {
        let mut rx = {
            let mut map = self.lock();
            match map.get(session) {
                Some(r) => r.done.clone(),
                None => {
                    let cancel = CancellationToken::new();
                    let (tx, rx) = watch::channel(None);
                    map.insert(
                        session.clone(),
                        Running {
                            cancel: cancel.clone(),
                            done: rx.clone(),
                        },
                    );
                    let fut = start(cancel);
                    let runners = self.clone();
                    let session = session.clone();
                    tokio::spawn(async move {
                        let result = match AssertUnwindSafe(fut).catch_unwind().await {
                            Ok(r) => r.map_err(Arc::new),
                            Err(panic) => {
                                let what = panic
                                    .downcast_ref::<String>()
                                    .cloned()
                                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                                    .unwrap_or_else(|| "unknown panic".into());
                                Err(Arc::new(CoreError::Internal(format!(
                                    "the session loop panicked: {what}"
                                ))))
                            }
                        };
                        runners.lock().remove(&session);
                        let _ = tx.send(Some(result));
                    });
                    rx
                }
            }
        };
        loop {
            if let Some(result) = rx.borrow_and_update().clone() {
                return result;
            }
            if rx.changed().await.is_err() {
                return Err(Arc::new(CoreError::Internal(
                    "the session runner went away".into(),
                )));
            }
        }
    }

    /// Cancel the session's run; `false` if none is going.
    pub fn cancel(&self, session: &SessionId) -> bool {
        match self.lock().get(session) {
            Some(r) => {
                r.cancel.cancel();
                self.aborted
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(session.clone());
                true
            }
            None => false,
        }
    }

    /// Whether the session was cancelled since this was last asked.
    pub fn take_aborted(&self, session: &SessionId) -> bool {
        self.aborted
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(session)
    }

    /// Whether this process is running the session.
    pub fn is_running(&self, session: &SessionId) -> bool {
        self.lock().contains_key(session)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Running>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}
