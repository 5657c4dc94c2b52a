//! Instances made ahead of their call (`prepare_instances`): each call still
//! gets an instance nothing has run in, under its own time limit and
//! observer, with its grants as they resolve when it runs.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use warden_core::Config;
use warden_core::tool::{CallContext, CallObserver, ToolDef, ToolSource};
use warden_runtime::WasmHost;
use warden_runtime::prepared::{MAX_PREPARED, PreparedStats};

use crate::common::*;

/// Records what a call told its observer.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl CallObserver for Recorder {
    fn progress(&self, title: Option<String>, _: Value) {
        self.seen
            .lock()
            .unwrap()
            .push(format!("progress {title:?}"));
    }
    async fn ask(&self, permission: String, _: Vec<String>, _: Value) -> Result<(), String> {
        self.seen.lock().unwrap().push(format!("ask {permission}"));
        Ok(())
    }
}

async fn host(env: &Env, policy: &str, grants: Value) -> WasmHost {
    let config = Config::parse(
        &json!({"builtins": false, "prepare_instances": policy,
                "plugins": [Env::fixtures_plugin(grants)]})
        .to_string(),
    )
    .unwrap();
    WasmHost::load(&config.plugin_set(), Some(env.data().join("cache")), None)
        .await
        .unwrap()
}

fn ctx(directory: &Path, call: &str) -> CallContext {
    CallContext {
        session_id: "ses_prep".into(),
        message_id: "msg_prep".into(),
        call_id: call.into(),
        agent: "build".into(),
        directory: directory.display().to_string(),
    }
}

/// A host that makes every instance ahead, its plugin granted `data` (in
/// the working directory) read-only, and its `read_path` tool.
async fn reading_data(env: &Env) -> (WasmHost, ToolDef) {
    let host = host(
        env,
        "always",
        json!({"dirs": [{"path": "data", "mode": "ro"}]}),
    )
    .await;
    let read = tool(&host, "read_path");
    (host, read)
}

fn tool(host: &WasmHost, id: &str) -> ToolDef {
    host.tools().into_iter().find(|t| t.id == id).unwrap()
}

/// Wait until `made` instances have been made ahead (they are made in the
/// background after a call).
async fn made(host: &WasmHost, made: u64) -> PreparedStats {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let stats = host.prepared_stats();
        if stats.made >= made {
            return stats;
        }
        assert!(
            Instant::now() < until,
            "still {stats:?}, waiting for {made} made"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn call(
    host: &WasmHost,
    t: &ToolDef,
    c: &CallContext,
    args: Value,
) -> Result<String, String> {
    host.execute(t, c, &args.to_string(), Arc::new(Recorder::default()))
        .await
        .map(|o| o.output)
        .map_err(|e| e.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_call_takes_an_instance_made_ahead_in_which_nothing_has_run() {
    let env = Env::new();
    let host = host(&env, "always", json!({})).await;
    let counter = tool(&host, "counter");
    let (a, b) = (env.root.path().join("a"), env.root.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let first = "call number 1 in this instance".to_string();

    // The first call makes its own; one for the next call in `a` follows.
    assert_eq!(
        call(&host, &counter, &ctx(&a, "1"), json!({})).await,
        Ok(first.clone())
    );
    made(&host, 1).await;
    // A call in another directory does not take `a`'s.
    assert_eq!(
        call(&host, &counter, &ctx(&b, "2"), json!({})).await,
        Ok(first.clone())
    );
    let stats = made(&host, 2).await;
    assert_eq!(
        stats,
        PreparedStats {
            made: 2,
            taken: 0,
            dropped: 0
        }
    );
    // Each later call takes the one made for its directory: still a fresh
    // instance (the static counter starts at 0 in each).
    for (i, dir) in [&a, &b, &a].into_iter().enumerate() {
        assert_eq!(
            call(&host, &counter, &ctx(dir, "n"), json!({})).await,
            Ok(first.clone())
        );
        let stats = made(&host, 3 + i as u64).await;
        assert_eq!(stats.taken, 1 + i as u64);
    }
    assert_eq!(host.prepared_stats().dropped, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_instance_runs_under_its_calls_time_limit_and_observer() {
    let env = Env::new();
    let dir = env.project();
    let host = host(
        &env,
        "always",
        json!({"timeout_ms": 1000, "dirs": [{"path": ".", "mode": "rw"}]}),
    )
    .await;
    let sleep = tool(&host, "sleep");
    assert!(
        call(&host, &sleep, &ctx(&dir, "1"), json!({"ms": 1}))
            .await
            .is_ok()
    );
    made(&host, 1).await;
    // Made more than a time limit before its call: the limit counts from the call.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(
        call(&host, &sleep, &ctx(&dir, "2"), json!({"ms": 300})).await,
        Ok("slept 300 ms".into())
    );
    assert_eq!(host.prepared_stats().taken, 1);
    // ...and it still stops a call that runs past it.
    made(&host, 2).await;
    let late = call(&host, &sleep, &ctx(&dir, "3"), json!({"ms": 3000})).await;
    assert!(
        late.unwrap_err()
            .contains("ran past its time limit of 1000 ms")
    );
    assert_eq!(host.prepared_stats().taken, 2);

    // Progress and questions go to the observer of the call that takes it.
    made(&host, 3).await;
    let ask = tool(&host, "ask_then_write");
    let recorder = Arc::new(Recorder::default());
    let target = dir.join("allowed.txt");
    let out = host
        .execute(
            &ask,
            &ctx(&dir, "4"),
            &json!({"permission": "p", "pattern": "*", "path": target.display().to_string()})
                .to_string(),
            recorder.clone(),
        )
        .await
        .unwrap();
    assert_eq!(
        out.output,
        format!("allowed and wrote {}", target.display())
    );
    assert_eq!(host.prepared_stats().taken, 3);
    assert_eq!(
        *recorder.seen.lock().unwrap(),
        vec!["progress Some(\"asking\")".to_string(), "ask p".to_string()]
    );
}

/// A grant that resolves elsewhere by the time of the call (here a link
/// in the working directory re-pointed) is not served from an instance
/// made with the old one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_instance_whose_grants_now_resolve_elsewhere_is_dropped() {
    let env = Env::new();
    let dir = env.project();
    for (sub, text) in [("one", "first"), ("two", "second")] {
        std::fs::create_dir_all(dir.join(sub)).unwrap();
        std::fs::write(dir.join(sub).join("f.txt"), text).unwrap();
    }
    std::os::unix::fs::symlink("one", dir.join("data")).unwrap();
    let (host, read) = reading_data(&env).await;
    let path = |sub: &str| json!({"path": dir.join(sub).join("f.txt").display().to_string()});
    assert_eq!(
        call(&host, &read, &ctx(&dir, "1"), path("one")).await,
        Ok("first".into())
    );
    made(&host, 1).await;

    std::fs::remove_file(dir.join("data")).unwrap();
    std::os::unix::fs::symlink("two", dir.join("data")).unwrap();
    assert_eq!(
        call(&host, &read, &ctx(&dir, "2"), path("two")).await,
        Ok("second".into())
    );
    let stats = host.prepared_stats();
    assert_eq!((stats.taken, stats.dropped), (0, 1));
    // The one made after that call is for the new target, and is taken.
    made(&host, 2).await;
    assert!(
        call(&host, &read, &ctx(&dir, "3"), path("one"))
            .await
            .unwrap_err()
            .contains("cannot read")
    );
    assert_eq!(host.prepared_stats().taken, 1);
}

/// A granted directory removed and made again under the same path is a new
/// directory: the instance made with the old one open is not used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_instance_whose_directory_was_replaced_is_dropped() {
    let env = Env::new();
    let dir = env.project();
    let data = dir.join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("f.txt"), "old").unwrap();
    let (host, read) = reading_data(&env).await;
    let path = json!({"path": data.join("f.txt").display().to_string()});
    assert_eq!(
        call(&host, &read, &ctx(&dir, "1"), path.clone()).await,
        Ok("old".into())
    );
    made(&host, 1).await;

    std::fs::remove_dir_all(&data).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("f.txt"), "new").unwrap();
    assert_eq!(
        call(&host, &read, &ctx(&dir, "2"), path).await,
        Ok("new".into())
    );
    let stats = host.prepared_stats();
    assert_eq!((stats.taken, stats.dropped), (0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_a_bounded_number_are_kept_and_never_means_none() {
    let env = Env::new();
    let host = host(&env, "always", json!({})).await;
    let counter = tool(&host, "counter");
    let dirs: Vec<_> = (0..=MAX_PREPARED)
        .map(|i| {
            let d = env.root.path().join(format!("d{i}"));
            std::fs::create_dir_all(&d).unwrap();
            d
        })
        .collect();
    for (i, d) in dirs.iter().enumerate() {
        call(&host, &counter, &ctx(d, "c"), json!({}))
            .await
            .unwrap();
        made(&host, (i as u64 + 1).min(MAX_PREPARED as u64)).await;
    }
    // One more directory than the bound: none was made for the last, and
    // none was dropped to make room.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        host.prepared_stats(),
        PreparedStats {
            made: MAX_PREPARED as u64,
            taken: 0,
            dropped: 0
        }
    );
    call(&host, &counter, &ctx(&dirs[MAX_PREPARED], "c"), json!({}))
        .await
        .unwrap();
    assert_eq!(host.prepared_stats().taken, 0);
    // A call that takes one frees its place for the next one.
    call(&host, &counter, &ctx(&dirs[0], "c"), json!({}))
        .await
        .unwrap();
    assert_eq!(host.prepared_stats().taken, 1);
    made(&host, MAX_PREPARED as u64 + 1).await;

    let never = self::host(&env, "never", json!({})).await;
    let counter = tool(&never, "counter");
    for _ in 0..3 {
        call(&never, &counter, &ctx(&dirs[0], "c"), json!({}))
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(never.prepared_stats(), PreparedStats::default());
}
