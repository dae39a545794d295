//! In-process resources for engine tests: a "world" kept in a directory, so
//! that it outlives a child process killed with SIGKILL, with the semantics
//! the engine relies on from real services:
//!
//! - create is idempotent per token: the object file is named after the
//!   address and token and created with `O_EXCL`, so creating it is atomic
//!   and a second create with the same token re-attaches;
//! - delete of a missing object succeeds; deleted objects move to
//!   `deleted/` so tests can count every object ever created;
//! - delays and failures on demand, read from `faults.json` in the world so
//!   a child process sees them too.

#![allow(dead_code)] // each test binary uses part of this module

pub mod apiserver;
pub mod aws;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kfaws::address::Address;
use kfaws::config::{Config, ConfigFile, Overrides};
use kfaws::engine::progress::Progress;
use kfaws::engine::{execute, ApplyReport, ExecOptions, SharedStore};
use kfaws::plan::{make_plan, Handles, Plan, PlanRequest};
use kfaws::resource::{Applied, Inputs, Observed, Provider, Resource, ResourceError};
use kfaws::state::{ResourceState, State};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// Sends signal `name` (`INT`, `TERM`, ...) to process `pid`, as a terminal's
/// Ctrl-C or a CI runner's cancel would.
///
/// # Panics
/// If `kill` cannot be run or fails.
pub fn signal(pid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} {pid}: {status}");
}

/// Sends signal `name` to process group `pgid`, as a terminal's Ctrl-C signals
/// every process of its foreground group (the child must have been spawned as
/// the leader of its own group: `CommandExt::process_group(0)`).
pub fn signal_group(pgid: u32, name: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{name}"), "--".to_string(), format!("-{pgid}")])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{name} -- -{pgid}: {status}");
}

/// Fault injection, persisted in the world directory.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Faults {
    /// Addresses whose create fails.
    pub fail_create: BTreeSet<String>,
    /// Addresses whose create never returns (until the timeout).
    pub hang_create: BTreeSet<String>,
    /// Addresses whose create is refused before anything is made
    /// ([`ResourceError::unchanged`]: another holds the name).
    #[serde(default)]
    pub refuse_create: BTreeSet<String>,
    /// Addresses whose delete is refused before anything is deleted
    /// ([`ResourceError::refused`]: something still uses it).
    #[serde(default)]
    pub refuse_delete: BTreeSet<String>,
}

/// The world: objects that "exist", by file.
#[derive(Debug, Clone)]
pub struct World {
    pub dir: PathBuf,
}

fn key(address: &Address) -> String {
    address.as_str().replace('.', "_")
}

impl World {
    pub fn new(dir: &Path) -> Self {
        fs::create_dir_all(dir.join("objects")).unwrap();
        fs::create_dir_all(dir.join("deleted")).unwrap();
        Self {
            dir: dir.to_path_buf(),
        }
    }

    pub fn faults(&self) -> Faults {
        fs::read(self.dir.join("faults.json"))
            .map(|b| serde_json::from_slice(&b).unwrap())
            .unwrap_or_default()
    }

    pub fn set_faults(&self, f: &Faults) {
        fs::write(self.dir.join("faults.json"), serde_json::to_vec(f).unwrap()).unwrap();
    }

    fn object(&self, address: &Address, token: &str) -> PathBuf {
        self.dir
            .join("objects")
            .join(format!("{}--{token}.json", key(address)))
    }

    /// Live objects of `address`.
    pub fn live(&self, address: &Address) -> Vec<PathBuf> {
        self.list("objects", address)
    }

    /// Every object ever created for `address`, live or deleted.
    pub fn ever_created(&self, address: &Address) -> usize {
        self.list("objects", address).len() + self.list("deleted", address).len()
    }

    fn list(&self, sub: &str, address: &Address) -> Vec<PathBuf> {
        let prefix = format!("{}--", key(address));
        let mut v: Vec<PathBuf> = fs::read_dir(self.dir.join(sub))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&prefix)
            })
            .collect();
        v.sort();
        v
    }

    /// Changes a live object's spec behind kfaws' back.
    pub fn tamper(&self, address: &Address, field: &str, value: Value) {
        let path = self.live(address).pop().expect("object exists");
        let mut obj: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        obj["spec"][field] = value;
        fs::write(&path, serde_json::to_vec(&obj).unwrap()).unwrap();
    }

    /// Deletes a live object behind kfaws' back.
    pub fn remove_out_of_band(&self, address: &Address) {
        for p in self.live(address) {
            fs::remove_file(p).unwrap();
        }
    }
}

/// A resource living in the world.
pub struct TestResource {
    pub address: Address,
    pub deps: Vec<Address>,
    pub spec: Value,
    pub delay: Duration,
    pub world: World,
    pub timeout: Duration,
}

impl TestResource {
    pub fn new(world: &World, address: &str, deps: &[&str], delay: Duration) -> Self {
        Self {
            address: Address::new(address).unwrap(),
            deps: deps.iter().map(|d| Address::new(*d).unwrap()).collect(),
            spec: json!({"size": 1, "label": address}),
            delay,
            world: world.clone(),
            timeout: Duration::from_secs(30),
        }
    }
}

fn read_object(path: &Path) -> Option<Value> {
    fs::read(path)
        .ok()
        .map(|b| serde_json::from_slice(&b).unwrap())
}

#[async_trait]
impl Resource for TestResource {
    fn address(&self) -> &Address {
        &self.address
    }
    fn kind(&self) -> &'static str {
        "test_object"
    }
    fn dependencies(&self) -> Vec<Address> {
        self.deps.clone()
    }
    fn spec(&self) -> Value {
        self.spec.clone()
    }
    fn replace_fields(&self) -> &[&str] {
        &["size"]
    }
    fn estimate(&self) -> Duration {
        self.delay
    }
    fn timeout(&self) -> Duration {
        self.timeout
    }

    async fn read(&self, recorded: Option<&ResourceState>) -> Result<Observed, ResourceError> {
        let Some(token) = recorded.and_then(|r| r.idempotency_token.as_deref()) else {
            return Ok(Observed::Gone);
        };
        match read_object(&self.world.object(&self.address, token)) {
            Some(obj) => Ok(Observed::Present {
                physical_id: Some(token.to_string()),
                spec: obj["spec"].as_object().cloned().unwrap_or_default(),
                outputs: BTreeMap::from([("id".to_string(), json!(token))]),
            }),
            None => Ok(Observed::Gone),
        }
    }

    async fn create(&self, token: &str, inputs: &Inputs) -> Result<Applied, ResourceError> {
        let faults = self.world.faults();
        tokio::time::sleep(self.delay / 2).await;
        if faults.hang_create.contains(self.address.as_str()) {
            std::future::pending::<()>().await;
        }
        if faults.fail_create.contains(self.address.as_str()) {
            return Err(ResourceError::msg("injected failure"));
        }
        if faults.refuse_create.contains(self.address.as_str()) {
            return Err(ResourceError::refused(
                "injected refusal: the name is taken",
            ));
        }
        let inputs: BTreeMap<String, Value> = inputs
            .0
            .iter()
            .map(|(a, o)| (a.to_string(), o.get("id").cloned().unwrap_or(Value::Null)))
            .collect();
        for d in &self.deps {
            if !inputs.contains_key(d.as_str()) {
                return Err(ResourceError::msg(format!("dependency {d} has no outputs")));
            }
        }
        let path = self.world.object(&self.address, token);
        let body = json!({"spec": self.spec, "inputs": inputs});
        // Create-if-absent with its content in one step (write a temporary
        // file, hard-link it into place), as a service applies a client
        // token atomically.
        let tmp = self
            .world
            .dir
            .join(format!("tmp-{token}-{}", std::process::id()));
        fs::write(&tmp, serde_json::to_vec(&body).unwrap()).unwrap();
        let linked = fs::hard_link(&tmp, &path);
        fs::remove_file(&tmp).unwrap();
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(ResourceError::msg(e.to_string())),
        }
        // Waiting until the object is "usable".
        tokio::time::sleep(self.delay / 2).await;
        Ok(Applied {
            physical_id: token.to_string(),
            outputs: BTreeMap::from([("id".to_string(), json!(token))]),
        })
    }

    async fn update(&self, recorded: &ResourceState, _: &Inputs) -> Result<Applied, ResourceError> {
        let token = recorded.idempotency_token.as_deref().unwrap();
        let path = self.world.object(&self.address, token);
        let mut obj = read_object(&path).ok_or_else(|| ResourceError::msg("gone"))?;
        obj["spec"] = self.spec.clone();
        fs::write(&path, serde_json::to_vec(&obj).unwrap()).unwrap();
        tokio::time::sleep(self.delay).await;
        Ok(Applied {
            physical_id: token.to_string(),
            outputs: BTreeMap::from([("id".to_string(), json!(token))]),
        })
    }

    async fn delete(&self, recorded: &ResourceState) -> Result<(), ResourceError> {
        tokio::time::sleep(self.delay).await;
        if self
            .world
            .faults()
            .refuse_delete
            .contains(self.address.as_str())
        {
            return Err(ResourceError::refused("injected refusal: still in use"));
        }
        let Some(token) = recorded.idempotency_token.as_deref() else {
            return Ok(());
        };
        let path = self.world.object(&self.address, token);
        let to = self
            .world
            .dir
            .join("deleted")
            .join(path.file_name().unwrap());
        match fs::rename(&path, &to) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ResourceError::msg(e.to_string())),
        }
    }
}

/// Recreates handles for recorded test objects.
pub struct TestProvider(pub World);

impl Provider for TestProvider {
    fn handle_for(&self, address: &Address, recorded: &ResourceState) -> Option<Arc<dyn Resource>> {
        (recorded.kind == "test_object").then(|| {
            Arc::new(TestResource {
                address: address.clone(),
                deps: recorded.dependencies.clone(),
                spec: recorded.spec.clone(),
                delay: Duration::ZERO,
                world: self.0.clone(),
                timeout: Duration::from_secs(30),
            }) as Arc<dyn Resource>
        })
    }
}

/// A layered graph: `width` resources per layer, each depending on one or
/// two resources of the layer above.
pub fn layered(
    world: &World,
    layers: usize,
    width: usize,
    delay: Duration,
) -> Vec<Arc<dyn Resource>> {
    let mut out: Vec<Arc<dyn Resource>> = Vec::new();
    for l in 0..layers {
        for w in 0..width {
            let name = format!("r.l{l}.n{w}");
            let deps: Vec<String> = if l == 0 {
                vec![]
            } else {
                let mut d = vec![format!("r.l{}.n{w}", l - 1)];
                if w + 1 < width {
                    d.push(format!("r.l{}.n{}", l - 1, w + 1));
                }
                d
            };
            let deps: Vec<&str> = deps.iter().map(String::as_str).collect();
            out.push(Arc::new(TestResource::new(world, &name, &deps, delay)));
        }
    }
    out
}

/// The config every engine test plans with.
pub fn config() -> Config {
    ConfigFile::parse(
        Path::new("kfaws.toml"),
        "name = \"ml\"\nregion = \"us-east-1\"",
    )
    .unwrap()
    .resolve(&Overrides::default(), None)
    .unwrap()
}

/// Plans `desired` against `state`, handles for recorded objects from the world.
pub async fn plan(
    world: &World,
    desired: &[Arc<dyn Resource>],
    state: &State,
    destroy: bool,
    targets: &[Address],
) -> (Plan, Handles) {
    make_plan(PlanRequest {
        config: &config(),
        desired,
        provider: &TestProvider(world.clone()),
        state,
        destroy,
        targets,
        replace: &[],
        parallelism: 10,
        delete_options: Default::default(),
    })
    .await
    .unwrap()
}

/// Plans against the store's state and applies the plan, as `kfaws apply`
/// (or `destroy`) does.
pub async fn plan_and_apply(
    world: &World,
    desired: &[Arc<dyn Resource>],
    store: &SharedStore,
    destroy: bool,
    parallelism: usize,
    progress: Arc<dyn Progress>,
    cancel: CancellationToken,
) -> ApplyReport {
    let state = store.read(Clone::clone);
    let (plan, handles) = plan(world, desired, &state, destroy, &[]).await;
    execute(
        &plan,
        &handles,
        store.clone(),
        &ExecOptions { parallelism },
        progress,
        cancel,
    )
    .await
    .unwrap()
}
