//! Tests against the local AWS emulator: a deployment in an account of its
//! own, SDK clients for that account, the emulator's call log, and an
//! inventory of everything a deployment could leave behind in any service
//! ([`Account::leftovers`]).
//!
//! Run under `tests/emulator/with_emulator.sh` (`make test` does).

use std::path::PathBuf;
use std::sync::OnceLock;

use base64::Engine as _;

use super::apiserver::{ApiServer, Options};

use assert_cmd::Command;
use aws_config::SdkConfig;
use aws_sdk_cloudformation::config::Credentials;

/// The emulator's endpoint.
///
/// # Panics
/// Outside `with_emulator.sh`.
pub fn endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL").expect(
        "these tests need the local AWS emulator: run them under \
         tests/emulator/with_emulator.sh (make test does)",
    )
}

/// A fresh 12-digit account id: the emulator serves each access key id of
/// 12 digits as its own account.
pub fn fresh_account() -> String {
    format!("{:012}", fastrand::u64(100_000_000_000..999_999_999_999))
}

/// Calls the emulator's control API (`/_kfaws/...`); returns the body.
///
/// # Panics
/// When the call fails.
pub fn control(path: &str, method: &str, body: &str) -> String {
    let url = format!(
        "{}/{path}",
        std::env::var("KFAWS_EMULATOR_CONTROL").expect("run under with_emulator.sh")
    );
    let mut cmd = std::process::Command::new("curl");
    cmd.args([
        "-fsS",
        "-X",
        method,
        &url,
        "-H",
        "content-type: application/json",
    ]);
    if !body.is_empty() {
        cmd.args(["-d", body]);
    }
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{url}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// An AWS account of the emulator, with clients for it in us-east-1.
pub struct Account {
    /// The account id (also the access key id).
    pub id: String,
    /// The SDK configuration for it.
    pub sdk: SdkConfig,
}

impl Account {
    /// Clients for account `id`.
    pub async fn new(id: &str) -> Self {
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(aws_config::Region::new("us-east-1"))
            .endpoint_url(endpoint())
            .credentials_provider(Credentials::new(id, "test", None, None, "test"))
            .load()
            .await;
        Self {
            id: id.to_string(),
            sdk,
        }
    }

    /// EC2.
    pub fn ec2(&self) -> aws_sdk_ec2::Client {
        aws_sdk_ec2::Client::new(&self.sdk)
    }

    /// IAM.
    pub fn iam(&self) -> aws_sdk_iam::Client {
        aws_sdk_iam::Client::new(&self.sdk)
    }

    /// S3, path-style as the emulator needs.
    pub fn s3(&self) -> aws_sdk_s3::Client {
        kfaws::aws::bucket::client(&self.sdk)
    }

    /// CloudFormation.
    pub fn cloudformation(&self) -> aws_sdk_cloudformation::Client {
        aws_sdk_cloudformation::Client::new(&self.sdk)
    }

    /// EKS.
    pub fn eks(&self) -> aws_sdk_eks::Client {
        aws_sdk_eks::Client::new(&self.sdk)
    }

    /// Operations that reached the emulator in this account, with how
    /// many times each was called (faulted calls included).
    pub fn calls(&self) -> Vec<(String, String, u64)> {
        let body = control(&format!("calls?account_id={}", self.id), "GET", "");
        let calls: serde_json::Value = serde_json::from_str(&body).unwrap();
        calls
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["service"].as_str().unwrap_or_default().to_string(),
                    c["operation"].as_str().unwrap_or_default().to_string(),
                    c["calls"].as_u64().unwrap_or_default(),
                )
            })
            .collect()
    }

    /// The mutating operations (Create*, Put*, Delete*, Update*, ...) that
    /// reached the emulator in this account. CloudFormation's
    /// DetectStackResourceDrift reads: it records a drift status and
    /// changes no resource.
    pub fn mutating_calls(&self) -> Vec<String> {
        const READ: [&str; 5] = [
            "Describe",
            "Get",
            "List",
            "Head",
            "DetectStackResourceDrift",
        ];
        self.calls()
            .into_iter()
            .filter(|(_, op, _)| !READ.iter().any(|r| op.starts_with(r)))
            .map(|(service, op, n)| format!("{service}:{op} x{n}"))
            .collect()
    }

    /// EFS file systems (`fs-...`), through curl's SigV4 signing: the
    /// workspace does not compile the EFS SDK for one listing.
    pub fn efs_file_systems(&self) -> Vec<String> {
        let out = std::process::Command::new("curl")
            .args([
                "-fsS",
                "--aws-sigv4",
                "aws:amz:us-east-1:elasticfilesystem",
                "-u",
                &format!("{}:test", self.id),
                &format!("{}/2015-02-01/file-systems", endpoint()),
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "DescribeFileSystems: {out:?}");
        let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        body["FileSystems"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| f["FileSystemId"].as_str().map(str::to_string))
            .collect()
    }

    /// Everything in the account that a deployment creates or causes,
    /// as `kind id`: VPCs, subnets, internet and NAT gateways, VPC
    /// endpoints, network interfaces, security groups, route tables, Elastic
    /// IPs, IAM roles and OIDC providers, EKS clusters and node groups, EFS
    /// file systems, buckets and stacks not `DELETE_COMPLETE`, SageMaker
    /// endpoints, endpoint configs and models. The region's
    /// default VPC (with its subnets, default security group and main route
    /// table) and AWS service roles are left out: the account comes with them.
    pub async fn leftovers(&self) -> Vec<String> {
        let mut found = Vec::new();
        let ec2 = self.ec2();
        let default_vpcs: Vec<String> = ec2
            .describe_vpcs()
            .send()
            .await
            .unwrap()
            .vpcs()
            .iter()
            .filter(|v| v.is_default() == Some(true))
            .filter_map(|v| v.vpc_id().map(str::to_string))
            .collect();
        let ours = |vpc: Option<&str>| vpc.is_some_and(|v| !default_vpcs.iter().any(|d| d == v));
        let mut add = |kind: &str, ids: Vec<String>| {
            found.extend(ids.into_iter().map(|id| format!("{kind} {id}")));
        };
        let vpcs = ec2.describe_vpcs().send().await.unwrap();
        add(
            "vpc",
            vpcs.vpcs()
                .iter()
                .filter(|v| ours(v.vpc_id()))
                .filter_map(|v| v.vpc_id().map(str::to_string))
                .collect(),
        );
        let subnets = ec2.describe_subnets().send().await.unwrap();
        add(
            "subnet",
            subnets
                .subnets()
                .iter()
                .filter(|s| ours(s.vpc_id()))
                .filter_map(|s| s.subnet_id().map(str::to_string))
                .collect(),
        );
        let igws = ec2.describe_internet_gateways().send().await.unwrap();
        add(
            "internet gateway",
            igws.internet_gateways()
                .iter()
                .filter(|g| !g.attachments().iter().any(|a| !ours(a.vpc_id())))
                .filter_map(|g| g.internet_gateway_id().map(str::to_string))
                .collect(),
        );
        let nats = ec2.describe_nat_gateways().send().await.unwrap();
        add(
            "NAT gateway",
            nats.nat_gateways()
                .iter()
                .filter(|n| n.state().map(|s| s.as_str()) != Some("deleted"))
                .filter_map(|n| n.nat_gateway_id().map(str::to_string))
                .collect(),
        );
        let endpoints = ec2.describe_vpc_endpoints().send().await.unwrap();
        add(
            "VPC endpoint",
            endpoints
                .vpc_endpoints()
                .iter()
                .filter(|e| {
                    !matches!(
                        e.state()
                            .map(|s| s.as_str().to_ascii_lowercase())
                            .as_deref(),
                        Some("deleted")
                    )
                })
                .filter_map(|e| e.vpc_endpoint_id().map(str::to_string))
                .collect(),
        );
        let enis = ec2.describe_network_interfaces().send().await.unwrap();
        add(
            "network interface",
            enis.network_interfaces()
                .iter()
                .filter_map(|n| n.network_interface_id().map(str::to_string))
                .collect(),
        );
        let groups = ec2.describe_security_groups().send().await.unwrap();
        add(
            "security group",
            groups
                .security_groups()
                .iter()
                .filter(|g| g.group_name() != Some("default"))
                .filter_map(|g| g.group_id().map(str::to_string))
                .collect(),
        );
        let tables = ec2.describe_route_tables().send().await.unwrap();
        add(
            "route table",
            tables
                .route_tables()
                .iter()
                .filter(|t| !t.associations().iter().any(|a| a.main() == Some(true)))
                .filter_map(|t| t.route_table_id().map(str::to_string))
                .collect(),
        );
        let eips = ec2.describe_addresses().send().await.unwrap();
        add(
            "Elastic IP",
            eips.addresses()
                .iter()
                .filter_map(|a| a.allocation_id().or(a.public_ip()).map(str::to_string))
                .collect(),
        );
        let iam = self.iam();
        let roles = iam.list_roles().send().await.unwrap();
        add(
            "IAM role",
            roles
                .roles()
                .iter()
                .filter(|r| !r.path().starts_with("/aws-service-role/"))
                .map(|r| r.role_name().to_string())
                .collect(),
        );
        let oidc = iam.list_open_id_connect_providers().send().await.unwrap();
        add(
            "OIDC provider",
            oidc.open_id_connect_provider_list()
                .iter()
                .filter_map(|p| p.arn().map(str::to_string))
                .collect(),
        );
        let eks = self.eks();
        let clusters = eks.list_clusters().send().await.unwrap();
        for cluster in clusters.clusters() {
            add("EKS cluster", vec![cluster.clone()]);
            let groups = eks
                .list_nodegroups()
                .cluster_name(cluster)
                .send()
                .await
                .unwrap();
            add(
                "EKS node group",
                groups
                    .nodegroups()
                    .iter()
                    .map(|g| format!("{cluster}/{g}"))
                    .collect(),
            );
        }
        found.extend(
            self.efs_file_systems()
                .into_iter()
                .map(|f| format!("EFS file system {f}")),
        );
        let buckets = self.s3().list_buckets().send().await.unwrap();
        found.extend(
            buckets
                .buckets()
                .iter()
                .filter_map(|b| b.name())
                .map(|b| format!("bucket {b}")),
        );
        let stacks = self
            .cloudformation()
            .describe_stacks()
            .send()
            .await
            .unwrap();
        found.extend(
            stacks
                .stacks()
                .iter()
                .filter(|s| s.stack_status().map(|s| s.as_str()) != Some("DELETE_COMPLETE"))
                .filter_map(|s| s.stack_name())
                .map(|s| format!("stack {s}")),
        );
        // What `kfaws endpoint deploy` creates.
        let sm = self.sagemaker();
        let endpoints = sm.list_endpoints().send().await.unwrap();
        found.extend(endpoints.endpoints().iter().map(|e| {
            format!(
                "sagemaker endpoint {}",
                e.endpoint_name().unwrap_or_default()
            )
        }));
        let configs = sm.list_endpoint_configs().send().await.unwrap();
        found.extend(configs.endpoint_configs().iter().map(|c| {
            format!(
                "sagemaker endpoint config {}",
                c.endpoint_config_name().unwrap_or_default()
            )
        }));
        let models = sm.list_models().send().await.unwrap();
        found.extend(
            models
                .models()
                .iter()
                .map(|m| format!("sagemaker model {}", m.model_name().unwrap_or_default())),
        );
        found
    }

    /// SageMaker.
    pub fn sagemaker(&self) -> aws_sdk_sagemaker::Client {
        aws_sdk_sagemaker::Client::new(&self.sdk)
    }

    /// Writes `body` to `s3://bucket/key` (a new version in a versioned bucket).
    pub async fn put_object(&self, bucket: &str, key: &str, body: &[u8]) {
        self.s3()
            .put_object()
            .bucket(bucket)
            .key(key)
            .body(body.to_vec().into())
            .send()
            .await
            .unwrap();
    }

    /// Moves `s3://bucket/from` to `s3://bucket/to` (copy, then delete):
    /// how the tests make an object disappear and later put it back.
    pub async fn move_object(&self, bucket: &str, from: &str, to: &str) {
        let s3 = self.s3();
        s3.copy_object()
            .bucket(bucket)
            .key(to)
            .copy_source(format!("{bucket}/{from}"))
            .send()
            .await
            .unwrap();
        s3.delete_object()
            .bucket(bucket)
            .key(from)
            .send()
            .await
            .unwrap();
    }
}

/// A deployment in a temporary directory, in an account of its own.
pub struct Deployment {
    /// Holds kfaws.toml and the state.
    pub dir: tempfile::TempDir,
    /// The account.
    pub account: String,
    /// The deployment name.
    pub name: String,
    /// The API server of its EKS cluster, started by the first `apply`.
    cluster: OnceLock<ApiServer>,
}

impl Deployment {
    /// A deployment named `e2eNNNNNNNN` in us-east-1 with `extra` appended to
    /// its kfaws.toml.
    pub fn new(extra: &str) -> Self {
        let _ = endpoint();
        let account = fresh_account();
        // Bucket names derived from it are global across the emulator's accounts: 90,000
        // names made two of a run's few hundred deployments collide now and then (a test then
        // met "already exists in another AWS account"); 90 million do not.
        let name = format!("e2e{}", fastrand::u32(10_000_000..99_999_999));
        let dir = tempfile::tempdir().unwrap();
        let d = Self {
            dir,
            account,
            name,
            cluster: OnceLock::new(),
        };
        d.write_config(extra);
        d
    }

    /// Rewrites kfaws.toml with `extra` after the name and region.
    pub fn write_config(&self, extra: &str) {
        std::fs::write(
            self.dir.path().join("kfaws.toml"),
            format!("name = \"{}\"\nregion = \"us-east-1\"\n{extra}", self.name),
        )
        .unwrap();
    }

    /// The API server the deployment's EKS cluster answers (a
    /// `kfaws-testenv` whose token webhook accepts tokens for this cluster
    /// name, checked against the emulator's STS), registered with the
    /// emulator for every cluster of the account; started on first use.
    /// Each deployment has its own: the profile's cluster-scoped objects
    /// (StorageClass `efs-sc`, PersistentVolume `efs-pv`, ...) have fixed
    /// names.
    pub fn cluster(&self) -> &ApiServer {
        self.cluster.get_or_init(|| {
            let server = ApiServer::start(&Options {
                eks: Some((endpoint(), self.name.clone())),
            });
            self.set_cluster_endpoint(&server, &server.ready.endpoint);
            server
        })
    }

    /// Makes the emulator answer DescribeCluster for this account's
    /// clusters with `endpoint` and the CA of `server` (the harness's
    /// endpoint, or one where nothing listens).
    pub fn set_cluster_endpoint(&self, server: &ApiServer, endpoint: &str) {
        let ca = base64::engine::general_purpose::STANDARD.encode(server.ca_pem());
        let body = serde_json::json!({
            "endpoint": endpoint,
            "certificate_authority_data": ca,
            "account_id": self.account,
        });
        control("eks/cluster-endpoint", "PUT", &body.to_string());
    }

    /// Asserts that a command stopped by [`Deployment::interrupt_when`]
    /// exited 130 less than `within` after the interrupt, and that its
    /// standard output says `says` (its `Interrupted: ADDRESS: …` line) and
    /// no "failed after". Returns that output.
    pub fn assert_stopped(
        out: &std::process::Output,
        took: std::time::Duration,
        within: std::time::Duration,
        says: &str,
    ) -> String {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(out.status.code(), Some(130), "{stdout}");
        assert!(
            took < within,
            "stopped {took:?} after the interrupt, not within {within:?}: {stdout}"
        );
        assert!(
            stdout.contains(says) && !stdout.contains("failed after"),
            "{stdout}"
        );
        stdout
    }

    /// After an update of `address` was interrupted: lets the emulator
    /// finish it at once, applies `address` again, and asserts that the
    /// update's call `operation` was made once in all and that the entry
    /// keeps no unfinished update.
    pub fn resume_interrupted_update(&self, address: &str, operation: &str) {
        self.lifecycle(r#"{"scale": 0}"#);
        self.stdout(&["apply", "--auto-approve", "--target", address]);
        assert_eq!(self.calls(operation), 1, "{operation} is called once");
        let entry = self.state()["resources"][address].clone();
        assert!(entry.get("updating").is_none(), "{entry}");
    }

    /// `kfaws ARGS` in the deployment's directory and account. An `apply`
    /// first starts the cluster's API server ([`Deployment::cluster`]).
    pub fn kfaws(&self, args: &[&str]) -> Command {
        Command::from_std(self.process(args))
    }

    /// Starts `kfaws ARGS` with its output piped, polls `reached` every
    /// 100 ms (the `state` it waits for, e.g. a cluster's `UPDATING`, at most
    /// 60 s), lets 1 s more pass, then sends the first Ctrl-C (SIGINT): the
    /// command's output and how long after the interrupt it ended.
    pub async fn interrupt_when<F, Fut>(
        &self,
        args: &[&str],
        state: &str,
        reached: F,
    ) -> (std::process::Output, std::time::Duration)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        use std::time::{Duration, Instant};
        let child = self
            .process(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while !reached().await {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "never reached {state}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let interrupted = Instant::now();
        super::signal(child.id(), "INT");
        let out = child.wait_with_output().unwrap();
        (out, interrupted.elapsed())
    }

    /// [`Deployment::kfaws`] as a plain process, for a test that reads its
    /// output while it runs.
    pub fn process(&self, args: &[&str]) -> std::process::Command {
        if args.first() == Some(&"apply") {
            self.cluster();
        }
        let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("kfaws"));
        cmd.current_dir(self.dir.path())
            .env("AWS_ACCESS_KEY_ID", &self.account)
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("KFAWS_NAME")
            .env_remove("KFAWS_CONFIG")
            .args(args);
        cmd
    }

    /// Standard output of a successful `kfaws ARGS`.
    pub fn stdout(&self, args: &[&str]) -> String {
        let out = self
            .kfaws(args)
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        String::from_utf8(out).unwrap()
    }

    /// Standard output of `kfaws plan --detailed-exitcode`, which must exit
    /// 2: the plan has changes.
    pub fn planned_changes(&self) -> String {
        let out = self
            .kfaws(&["plan", "--detailed-exitcode"])
            .assert()
            .code(2)
            .get_output()
            .stdout
            .clone();
        String::from_utf8(out).unwrap()
    }

    /// Standard output then standard error of `kfaws ARGS`, which must exit 1: a failed
    /// apply or destroy says a resource's error in its progress lines, on standard output.
    pub fn fails_with_output(&self, args: &[&str]) -> String {
        let assert = self.kfaws(args).assert().code(1);
        let out = assert.get_output();
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// Standard error of `kfaws ARGS`, which must exit 1.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self
            .kfaws(args)
            .assert()
            .code(1)
            .get_output()
            .stderr
            .clone();
        String::from_utf8(out).unwrap()
    }

    /// Runs each of `commands`, asserting that it exits 1 with a standard
    /// error holding every string of `present` and none of `absent`.
    pub fn each_fails(&self, commands: &[&[&str]], present: &[&str], absent: &[&str]) {
        for command in commands {
            let err = self.fails(command);
            assert!(
                present.iter().all(|p| err.contains(p)) && !absent.iter().any(|a| err.contains(a)),
                "{command:?}: {err}"
            );
        }
    }

    /// The ARN of the deployment's EKS cluster (DescribeCluster).
    pub async fn cluster_arn(&self) -> String {
        aws_sdk_eks::Client::new(&self.sdk().await)
            .describe_cluster()
            .name(&self.name)
            .send()
            .await
            .unwrap()
            .cluster()
            .unwrap()
            .arn()
            .unwrap()
            .to_string()
    }

    /// Clients for the deployment's account.
    pub async fn aws(&self) -> Account {
        Account::new(&self.account).await
    }

    /// `kfaws ARGS` as a child process not waited for (to kill it).
    pub fn spawn(&self, args: &[&str]) -> std::process::Child {
        if args.first() == Some(&"apply") {
            self.cluster();
        }
        std::process::Command::new(assert_cmd::cargo::cargo_bin("kfaws"))
            .args(args)
            .current_dir(self.dir.path())
            .env("AWS_ACCESS_KEY_ID", &self.account)
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("KFAWS_NAME")
            .env_remove("KFAWS_CONFIG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap()
    }

    /// SDK configuration for this account on the emulator.
    pub async fn sdk(&self) -> SdkConfig {
        self.aws().await.sdk
    }

    /// Sets this account's lifecycle latencies (`{"scale": ..., "durations": {...}}`).
    pub fn lifecycle(&self, settings: &str) {
        control(
            &format!("lifecycle?account_id={}", self.account),
            "PUT",
            settings,
        );
    }

    /// Calls of `operation` that reached moto in this account (not faulted).
    pub fn calls(&self, operation: &str) -> u64 {
        let calls: serde_json::Value = serde_json::from_str(&control(
            &format!("calls?account_id={}", self.account),
            "GET",
            "",
        ))
        .unwrap();
        calls
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["operation"] == operation)
            .map(|c| c["calls"].as_u64().unwrap() - c["faulted"].as_u64().unwrap())
            .sum()
    }

    /// The state file.
    pub fn state_file(&self) -> PathBuf {
        self.dir
            .path()
            .join(".kfaws")
            .join(&self.name)
            .join("state.json")
    }

    /// The state as JSON.
    pub fn state(&self) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.state_file()).unwrap()).unwrap()
    }

    /// Removes, with `kfaws state unlock ID`, the state lock a killed
    /// kfaws left behind, if it left one.
    pub fn unlock_after_kill(&self) {
        let lock = self
            .dir
            .path()
            .join(".kfaws")
            .join(&self.name)
            .join("state.lock");
        if let Ok(text) = std::fs::read_to_string(&lock) {
            let info: serde_json::Value = serde_json::from_str(&text).unwrap();
            self.kfaws(&["state", "unlock", info["id"].as_str().unwrap()])
                .assert()
                .success();
        }
    }

    /// A stack output recorded in the state (`kfaws output`).
    pub fn output(&self, address: &str, key: &str) -> String {
        self.stdout(&["output", &format!("{address}.{key}")])
            .trim()
            .trim_matches('"')
            .to_string()
    }

    /// Name and status of every stack not `DELETE_COMPLETE`, sorted.
    pub async fn live_stacks(&self) -> Vec<(String, String)> {
        let out = self
            .aws()
            .await
            .cloudformation()
            .describe_stacks()
            .send()
            .await
            .unwrap();
        let mut stacks: Vec<(String, String)> = out
            .stacks()
            .iter()
            .filter(|s| s.stack_status().map(|s| s.as_str()) != Some("DELETE_COMPLETE"))
            .map(|s| {
                (
                    s.stack_name().unwrap_or_default().to_string(),
                    s.stack_status()
                        .map(|s| s.as_str().to_string())
                        .unwrap_or_default(),
                )
            })
            .collect();
        stacks.sort();
        stacks
    }

    /// Names of the stacks not `DELETE_COMPLETE`, sorted.
    pub async fn live_stack_names(&self) -> Vec<String> {
        self.live_stacks()
            .await
            .into_iter()
            .map(|(n, _)| n)
            .collect()
    }
}
