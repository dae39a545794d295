//! `make bench`: `kfaws apply` and `kfaws destroy` of the vanilla profile
//! against the local AWS emulator with its lifecycle latencies on, each
//! measured side by side in one run (DESIGN.md §5, issue "vanilla profile on
//! AWS"):
//!
//! - wall time ÷ critical path under the emulator's configured latencies
//!   (the fastest any client could be: it includes kfaws's polling
//!   granularity, process start, planning and state writes);
//! - wall time ÷ critical path of the durations kfaws measured per resource
//!   in the same run (isolates the walk's own scheduling from polling);
//! - wall time at the default parallelism ÷ wall time at `--parallelism 1`.
//!
//! The `k8s.*` bundles are applied to a real kube-apiserver
//! (`tests/apiserver`, one per deployment, registered as the account's EKS
//! cluster endpoint); they have no emulated latency, so in the "configured"
//! critical path they count with the time kfaws measured for them.
//!
//! Run under `tests/emulator/with_emulator.sh` (the Makefile does) with
//! `KFAWS_TESTENV_BIN`. The kfaws binary must be built (`cargo build
//! --bins`); `KFAWS_BIN` overrides its path.

#[path = "../tests/common/apiserver.rs"]
mod apiserver;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use kfaws::address::Address;
use kfaws::graph::Dag;

/// Lifecycle scale: real durations × this (EKS cluster 600 s → 30 s, node
/// group 180 s → 9 s, stacks 30 s → 1.5 s).
const SCALE: f64 = 0.05;

fn kfaws_bin() -> PathBuf {
    if let Ok(p) = std::env::var("KFAWS_BIN") {
        return p.into();
    }
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into());
    Path::new(&target).join("debug").join("kfaws")
}

fn control(method: &str, path: &str, body: &str) -> String {
    let base = std::env::var("KFAWS_EMULATOR_CONTROL")
        .expect("run under tests/emulator/with_emulator.sh (make bench does)");
    let out = Command::new("curl")
        .args([
            "-sS",
            "-f",
            "-X",
            method,
            "-d",
            body,
            &format!("{base}{path}"),
        ])
        .output()
        .expect("curl runs");
    assert!(out.status.success(), "{method} {path}: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

/// The emulator's effective transition time for the resource at `address`
/// in `account` (the lifecycle table of tests/emulator/README.md); for the
/// Kubernetes bundles, which the emulator does not delay, what kfaws measured.
fn configured(
    effective: &serde_json::Value,
    measured: &BTreeMap<Address, Duration>,
    address: &Address,
    destroy: bool,
) -> Duration {
    let phase = if destroy { "delete" } else { "create" };
    let key = match address.as_str() {
        a if a.starts_with("stack.") => format!("cloudformation.stack.{phase}"),
        "eks.cluster" => format!("eks.cluster.{phase}"),
        a if a.starts_with("eks.nodegroup.") => format!("eks.nodegroup.{phase}"),
        a if a.starts_with("k8s.") => return measured.get(address).copied().unwrap_or_default(),
        _ => return Duration::ZERO,
    };
    Duration::from_secs_f64(effective[&key].as_f64().unwrap_or(0.0))
}

struct Run {
    wall: Duration,
    measured: BTreeMap<Address, Duration>,
}

/// Runs `kfaws ARGS` in `dir` as `account`, timing it and collecting each
/// resource's "ADDRESS: created|destroyed after N.Ns" progress line.
fn run(dir: &Path, account: &str, args: &[&str]) -> Run {
    let t0 = Instant::now();
    let out = Command::new(kfaws_bin())
        .current_dir(dir)
        .env("AWS_ACCESS_KEY_ID", account)
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .args(args)
        .output()
        .expect("kfaws runs");
    let wall = t0.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kfaws {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut measured = BTreeMap::new();
    for line in stdout.lines() {
        // "<timestamp> <address>: created after 1.2s"
        let Some((head, secs)) = line.rsplit_once(" after ") else {
            continue;
        };
        let Some(secs) = secs.strip_suffix('s').and_then(|s| s.parse::<f64>().ok()) else {
            continue;
        };
        let Some(address) = head
            .split_whitespace()
            .find_map(|w| w.strip_suffix(':'))
            .and_then(|a| Address::new(a).ok())
        else {
            continue;
        };
        measured.insert(address, Duration::from_secs_f64(secs));
    }
    Run { wall, measured }
}

fn graph(state_file: &Path) -> Dag {
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state_file).expect("state written")).expect("json");
    let resources = state["resources"].as_object().expect("resources");
    Dag::new(resources.iter().map(|(a, r)| {
        let deps = r["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| d.as_str())
            .filter(|d| resources.contains_key(*d))
            .map(|d| Address::new(d).expect("valid"))
            .collect::<Vec<_>>();
        (Address::new(a).expect("valid"), deps)
    }))
    .expect("a DAG")
}

struct Figures {
    apply: Run,
    destroy: Run,
    apply_cp: (Duration, Duration),
    destroy_cp: (Duration, Duration),
}

/// Apply then destroy a fresh deployment in a fresh account at `parallelism`.
fn deploy(parallelism: &str) -> Figures {
    let account = format!("{:012}", fastrand::u64(500_000_000_000..600_000_000_000));
    control(
        "PUT",
        &format!("/lifecycle?account_id={account}"),
        &format!("{{\"scale\": {SCALE}}}"),
    );
    let effective: serde_json::Value = serde_json::from_str(&control(
        "GET",
        &format!("/lifecycle?account_id={account}"),
        "",
    ))
    .expect("json");
    let effective = &effective["effective_seconds"];
    let dir = tempfile::tempdir().expect("tempdir");
    let name = format!("bench{}", &account[8..]);
    let endpoint = std::env::var("AWS_ENDPOINT_URL").expect("run under with_emulator.sh");
    let cluster = apiserver::ApiServer::start(&apiserver::Options {
        eks: Some((endpoint, name.clone())),
    });
    let registration = serde_json::json!({
        "endpoint": cluster.ready.endpoint,
        "certificate_authority_data":
            base64::engine::general_purpose::STANDARD.encode(cluster.ca_pem()),
        "account_id": account,
    });
    control("PUT", "/eks/cluster-endpoint", &registration.to_string());
    std::fs::write(
        dir.path().join("kfaws.toml"),
        format!("name = \"{name}\"\nregion = \"us-east-1\"\n"),
    )
    .expect("config");
    let p = ["--parallelism", parallelism];
    let apply = run(
        dir.path(),
        &account,
        &[&["apply", "--auto-approve"][..], &p].concat(),
    );
    let dag = graph(&dir.path().join(".kfaws").join(&name).join("state.json"));
    let cp = |measured: &BTreeMap<Address, Duration>, destroy: bool| {
        (
            dag.critical_path(|a| configured(effective, measured, a, destroy))
                .total,
            dag.critical_path(|a| measured.get(a).copied().unwrap_or_default())
                .total,
        )
    };
    let apply_cp = cp(&apply.measured, false);
    let destroy = run(
        dir.path(),
        &account,
        &[&["destroy", "--auto-approve"][..], &p].concat(),
    );
    let destroy_cp = cp(&destroy.measured, true);
    Figures {
        apply,
        destroy,
        apply_cp,
        destroy_cp,
    }
}

fn main() {
    let secs = |d: Duration| d.as_secs_f64();
    println!("vanilla profile against the emulator, lifecycle scale {SCALE}");
    let wide = deploy("10");
    let serial = deploy("1");
    for (what, run, (configured, measured), serial_run) in [
        ("apply", &wide.apply, wide.apply_cp, &serial.apply),
        ("destroy", &wide.destroy, wide.destroy_cp, &serial.destroy),
    ] {
        println!(
            "{what:<8} wall {:>6.1} s | critical path: configured {:>6.1} s, measured {:>6.1} s | \
             wall/configured {:.3} (target ≤ 1.05) | wall/measured {:.3} | \
             parallelism 10 vs 1: {:.1} s / {:.1} s = {:.3}",
            secs(run.wall),
            secs(configured),
            secs(measured),
            secs(run.wall) / secs(configured),
            secs(run.wall) / secs(measured),
            secs(run.wall),
            secs(serial_run.wall),
            secs(run.wall) / secs(serial_run.wall),
        );
    }
}
