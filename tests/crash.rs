//! The engine under process death: `kill -9` at random moments, Ctrl-C, and
//! two concurrent applies, each against a child process running a real
//! apply (the ignored test `child_apply` below, re-executed from this test
//! binary) over the file-backed world of `common`.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use common::{layered, plan_and_apply, World};
use kfaws::engine::interrupt::{cancel_on_signals, exit_status, STOPPING_CHANGES};
use kfaws::engine::progress::Console;
use kfaws::engine::SharedStore;
use kfaws::state::lock::{self, StateLock};
use kfaws::state::store::StateStore;
use kfaws::state::Status;

const LAYERS: usize = 8;
const WIDTH: usize = 5;
const EXIT_LOCKED: i32 = 3;

/// The child: one `apply` of the layered graph, as the CLI would run it.
/// Driven by the parent tests through `KFAWS_TEST_DIR`; run alone it fails.
#[test]
#[ignore = "entry point of the child process of the tests in this file"]
fn child_apply() {
    let dir = PathBuf::from(std::env::var("KFAWS_TEST_DIR").expect("run by the crash tests"));
    let delay = Duration::from_millis(
        std::env::var("KFAWS_TEST_DELAY_MS")
            .unwrap()
            .parse()
            .unwrap(),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let code = rt.block_on(async move {
        let cancel = cancel_on_signals(STOPPING_CHANGES);
        let world = World::new(&dir.join("world"));
        let state_dir = dir.join("state");
        let _lock = match StateLock::acquire(&state_dir, "ml", "apply") {
            Ok(l) => l,
            Err(e) => {
                eprintln!("{e}");
                return EXIT_LOCKED;
            }
        };
        let store = SharedStore::new(StateStore::open(&state_dir, "ml").unwrap());
        let desired = layered(&world, LAYERS, WIDTH, delay);
        let report = plan_and_apply(
            &world,
            &desired,
            &store,
            false,
            4,
            Arc::new(Console::new()),
            cancel,
        )
        .await;
        if report.interrupted {
            i32::from(exit_status())
        } else if report.succeeded() {
            0
        } else {
            1
        }
    });
    std::process::exit(code);
}

fn spawn_child(dir: &Path, delay_ms: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "child_apply",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("KFAWS_TEST_DIR", dir)
        .env("KFAWS_TEST_DELAY_MS", delay_ms.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for a child; returns its exit code (None if killed by a signal) and stderr.
fn finish(child: Child) -> (Option<i32>, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// After an apply that ran to the end: every resource created exactly once,
/// recorded as created with the token of its only object.
fn assert_converged(dir: &Path) {
    let world = World::new(&dir.join("world"));
    let store = StateStore::open(&dir.join("state"), "ml").unwrap();
    let state = store.state();
    assert_eq!(state.resources.len(), LAYERS * WIDTH);
    for (address, r) in &state.resources {
        assert_eq!(r.status, Status::Created, "{address}");
        assert_eq!(
            world.ever_created(address),
            1,
            "{address} created more than once"
        );
        let live = world.live(address);
        let token = r.idempotency_token.as_deref().unwrap();
        assert!(
            live[0].to_string_lossy().contains(token),
            "{address}: state and world disagree"
        );
    }
}

/// After any stop: everything that exists is in state (nothing is lost track of).
fn assert_nothing_untracked(dir: &Path) {
    let world = World::new(&dir.join("world"));
    let store = StateStore::open(&dir.join("state"), "ml").unwrap();
    for l in 0..LAYERS {
        for w in 0..WIDTH {
            let address = kfaws::address::Address::new(format!("r.l{l}.n{w}")).unwrap();
            for object in world.live(&address) {
                let recorded = store.state().resources.get(&address);
                let token = recorded.and_then(|r| r.idempotency_token.clone());
                assert!(
                    token.is_some_and(|t| object.to_string_lossy().contains(&t)),
                    "{address}: {object:?} exists but the state does not record it"
                );
            }
        }
    }
}

#[test]
fn kill_9_at_20_random_moments_then_reapply_converges_with_each_resource_created_once() {
    let dir = tempfile::tempdir().unwrap();
    let seed = fastrand::u64(..);
    let mut rng = fastrand::Rng::with_seed(seed);
    println!("seed {seed}");
    let mut killed_mid_run = 0;
    for trial in 0..20 {
        let child = spawn_child(dir.path(), 300);
        std::thread::sleep(Duration::from_millis(rng.u64(0..400)));
        let mut child = child;
        let _ = child.kill(); // SIGKILL
        let (code, stderr) = finish(child);
        if code.is_none() {
            killed_mid_run += 1;
        } else {
            assert_eq!(code, Some(0), "trial {trial} (seed {seed}): {stderr}");
        }
        assert_nothing_untracked(dir.path());
        // A killed apply leaves its lock behind; a person breaks it with
        // `kfaws state unlock ID`.
        if let Some(info) = lock::current(&dir.path().join("state"), "ml").unwrap() {
            lock::force_unlock(&dir.path().join("state"), "ml", &info.id.to_string(), false)
                .unwrap();
        }
    }
    assert!(
        killed_mid_run >= 10,
        "only {killed_mid_run} kills landed mid-run (seed {seed})"
    );
    let (code, stderr) = finish(spawn_child(dir.path(), 20));
    assert_eq!(code, Some(0), "final apply (seed {seed}): {stderr}");
    assert_converged(dir.path());
}

#[test]
fn two_concurrent_applies_one_wins_one_is_refused_and_the_state_is_intact() {
    let dir = tempfile::tempdir().unwrap();
    let first = spawn_child(dir.path(), 40);
    let second = spawn_child(dir.path(), 40);
    let (a, a_err) = finish(first);
    let (b, b_err) = finish(second);
    let mut codes = [a, b];
    codes.sort();
    assert_eq!(codes, [Some(0), Some(EXIT_LOCKED)], "{a_err}\n{b_err}");
    let refused = if a == Some(EXIT_LOCKED) { a_err } else { b_err };
    assert!(refused.contains("the state is locked by"), "{refused}");
    assert!(refused.contains("kfaws state unlock"), "{refused}");
    assert_converged(dir.path());
    assert!(lock::current(&dir.path().join("state"), "ml")
        .unwrap()
        .is_none());
}

#[test]
fn ctrl_c_stops_new_work_records_in_flight_calls_and_exits_130() {
    let dir = tempfile::tempdir().unwrap();
    let child = spawn_child(dir.path(), 300);
    std::thread::sleep(Duration::from_millis(400));
    common::signal(child.id(), "INT");
    let (code, stderr) = finish(child);
    assert_eq!(code, Some(130), "{stderr}");
    assert!(stderr.contains("Interrupt received"), "{stderr}");
    let store = StateStore::open(&dir.path().join("state"), "ml").unwrap();
    let state = store.state();
    assert!(
        !state.resources.is_empty(),
        "some work was done before the interrupt"
    );
    assert!(
        state.resources.len() < LAYERS * WIDTH,
        "the interrupt stopped the walk early"
    );
    for (address, r) in &state.resources {
        assert_eq!(
            r.status,
            Status::Created,
            "{address}: in-flight calls finish and are recorded"
        );
    }
    assert_nothing_untracked(dir.path());
    assert!(
        lock::current(&dir.path().join("state"), "ml")
            .unwrap()
            .is_none(),
        "the lock is released"
    );
    let (code, stderr) = finish(spawn_child(dir.path(), 20));
    assert_eq!(code, Some(0), "{stderr}");
    assert_converged(dir.path());
}
