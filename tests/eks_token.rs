//! EKS authentication end to end: the AWS emulator's EKS cluster is a real
//! kube-apiserver (`tests/apiserver`) whose token webhook checks
//! `kfaws eks get-token` tokens against the emulator's STS, the way EKS's
//! aws-iam-authenticator checks them against AWS STS.
//!
//! Run under `tests/emulator/with_emulator.sh` (`make test` does, and exports
//! `KFAWS_TESTENV_BIN`).

#[path = "common/apiserver.rs"]
mod apiserver;

use std::collections::BTreeMap;
use std::process::Command as StdCommand;
use std::time::{Duration, SystemTime};

use apiserver::{ApiServer, Options};
use assert_cmd::Command;
use aws_sdk_eks::config::Credentials;
use base64::Engine as _;
use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use predicates::prelude::PredicateBooleanExt as _;
use serde_json::json;

fn endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL").expect(
        "these tests need the local AWS emulator: run them under \
         tests/emulator/with_emulator.sh (make test does)",
    )
}

fn new_account() -> String {
    format!("{:012}", fastrand::u64(500_000_000_000..599_999_999_999))
}

async fn sdk(account: &str) -> aws_config::SdkConfig {
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(endpoint())
        .credentials_provider(Credentials::new(account, "test", None, None, "test"))
        .load()
        .await
}

/// Creates EKS cluster `name` in `account` (in a VPC with two subnets) and
/// points the account's clusters at `server`; returns DescribeCluster's
/// endpoint and CA.
async fn emulated_cluster(account: &str, name: &str, server: &ApiServer) -> (String, String) {
    let config = sdk(account).await;
    let ec2 = aws_sdk_ec2::Client::new(&config);
    let vpc = ec2
        .create_vpc()
        .cidr_block("10.60.0.0/16")
        .send()
        .await
        .unwrap();
    let vpc_id = vpc.vpc().unwrap().vpc_id().unwrap();
    let mut subnets = Vec::new();
    for (cidr, az) in [
        ("10.60.1.0/24", "us-east-1a"),
        ("10.60.2.0/24", "us-east-1b"),
    ] {
        let s = ec2
            .create_subnet()
            .vpc_id(vpc_id)
            .cidr_block(cidr)
            .availability_zone(az)
            .send()
            .await
            .unwrap();
        subnets.push(s.subnet().unwrap().subnet_id().unwrap().to_string());
    }
    let eks = aws_sdk_eks::Client::new(&config);
    eks.create_cluster()
        .name(name)
        .role_arn(format!("arn:aws:iam::{account}:role/eks-cluster"))
        .resources_vpc_config(
            aws_sdk_eks::types::VpcConfigRequest::builder()
                .set_subnet_ids(Some(subnets))
                .build(),
        )
        .send()
        .await
        .unwrap();

    let ca = base64::engine::general_purpose::STANDARD.encode(server.ca_pem());
    let body = json!({
        "endpoint": server.ready.endpoint,
        "certificate_authority_data": ca,
        "account_id": account,
    });
    let out = StdCommand::new("curl")
        .args(["-sS", "--fail-with-body", "-X", "PUT", "--data-binary"])
        .arg(body.to_string())
        .arg(format!("{}/_kfaws/eks/cluster-endpoint", endpoint()))
        .output()
        .expect("curl runs (make deps installs it)");
    assert!(
        out.status.success(),
        "registering the API server: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    let described = eks.describe_cluster().name(name).send().await.unwrap();
    let cluster = described.cluster().unwrap();
    (
        cluster.endpoint().unwrap().to_string(),
        cluster
            .certificate_authority()
            .and_then(|c| c.data())
            .unwrap()
            .to_string(),
    )
}

/// A kube client for `server` (the cluster's endpoint and CA as DescribeCluster
/// answered them) that sends `token`.
async fn client_with_token(server: &str, ca_data: &str, token: &str) -> kube::Client {
    let kubeconfig: Kubeconfig = serde_saphyr::from_str(
        &json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "eks", "cluster": {"server": server, "certificate-authority-data": ca_data}}],
            "users": [{"name": "eks", "user": {"token": token}}],
            "contexts": [{"name": "eks", "context": {"cluster": "eks", "user": "eks"}}],
            "current-context": "eks",
        })
        .to_string(),
    )
    .unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

/// `kfaws eks get-token` in `account`; returns the ExecCredential.
fn get_token(account: &str, cluster: &str) -> serde_json::Value {
    let out = Command::cargo_bin("kfaws")
        .unwrap()
        .env("AWS_ACCESS_KEY_ID", account)
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("KUBERNETES_EXEC_INFO")
        .args([
            "eks",
            "get-token",
            "--cluster-name",
            cluster,
            "--region",
            "us-east-1",
        ])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    serde_json::from_slice(&out).expect("get-token prints JSON")
}

/// The HTTP status the API server answers `token` with for a namespace list.
async fn list_status(server: &str, ca: &str, token: &str) -> u16 {
    let client = client_with_token(server, ca, token).await;
    match Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
    {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(e) => panic!("not an API answer: {e}"),
    }
}

/// Replaces one hex digit of the token URL's X-Amz-Signature.
fn tamper(token: &str) -> String {
    let mut url = kfaws::aws::token::decode(token).unwrap();
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| {
            let v = if k == "X-Amz-Signature" {
                let flipped = if v.starts_with('0') { '1' } else { '0' };
                format!("{flipped}{}", &v[1..])
            } else {
                v.into_owned()
            };
            (k.into_owned(), v)
        })
        .collect();
    url.query_pairs_mut().clear().extend_pairs(pairs);
    kfaws::aws::token::encode(&url)
}

#[tokio::test]
async fn get_token_authenticates_the_cluster_creator_and_refuses_tampered_expired_and_foreign_tokens(
) {
    let cluster = format!("e2e-{}", fastrand::u32(10_000..99_999));
    let server = ApiServer::start(&Options {
        eks: Some((endpoint(), cluster.clone())),
    });
    let account = new_account();
    let (api, ca) = emulated_cluster(&account, &cluster, &server).await;
    assert_eq!(
        api, server.ready.endpoint,
        "DescribeCluster answers the real API server"
    );

    let credential = get_token(&account, &cluster);
    assert_eq!(credential["kind"], "ExecCredential");
    assert_eq!(
        credential["apiVersion"],
        "client.authentication.k8s.io/v1beta1"
    );
    let token = credential["status"]["token"].as_str().unwrap().to_string();
    let expires = chrono::DateTime::parse_from_rfc3339(
        credential["status"]["expirationTimestamp"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    let left = expires.to_utc() - chrono::Utc::now();
    assert!(
        left > chrono::Duration::minutes(13) && left <= chrono::Duration::minutes(14),
        "expires in {left}"
    );

    // Authenticated as the creator's ARN, in system:masters: it may list namespaces.
    let client = client_with_token(&api, &ca, &token).await;
    let review = Api::<SelfSubjectReview>::all(client.clone())
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap_or_else(|e| panic!("{e}; webhook log:\n{}", server.log("token_webhook")));
    let user = review.status.unwrap().user_info.unwrap();
    assert_eq!(
        user.username.as_deref(),
        Some(format!("arn:aws:sts::{account}:user/moto").as_str())
    );
    assert!(user.groups.unwrap().contains(&"system:masters".to_string()));
    assert_eq!(list_status(&api, &ca, &token).await, 200);

    // One character of the signature changed: STS refuses it, so does the API server.
    assert_eq!(list_status(&api, &ca, &tamper(&token)).await, 401);

    // Signed 16 minutes ago with the right key: expired.
    let old = kfaws::aws::token::presign(
        &url::Url::parse(&endpoint()).unwrap(),
        &cluster,
        "us-east-1",
        Credentials::new(&account, "test", None, None, "test"),
        SystemTime::now() - Duration::from_secs(16 * 60),
    )
    .unwrap();
    assert_eq!(
        list_status(&api, &ca, &kfaws::aws::token::encode(&old)).await,
        401
    );

    // Made for another cluster: the signed x-k8s-aws-id differs, STS refuses.
    let other = get_token(&account, "another-cluster")["status"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(list_status(&api, &ca, &other).await, 401);

    // A principal of another account: not the creator, not mapped.
    let stranger = get_token(&new_account(), &cluster)["status"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(list_status(&api, &ca, &stranger).await, 401);

    let log = server.log("token_webhook");
    assert!(
        !log.contains(&token[token.len() - 30..]),
        "the webhook log holds no token"
    );
    assert!(log.contains("SignatureDoesNotMatch"), "{log}");
    assert!(log.contains("expired"), "{log}");
    assert!(log.contains("knows no creator"), "{log}");
}

#[tokio::test]
async fn kubeconfig_from_the_state_lists_namespaces_through_the_exec_plugin() {
    // The exec plugin inherits this process's credentials (with_emulator.sh's
    // default account), so the cluster lives there, under a unique name.
    let account = std::env::var("AWS_ACCESS_KEY_ID").expect("with_emulator.sh sets it");
    let cluster = format!("e2e-kc-{}", fastrand::u32(10_000..99_999));
    let server = ApiServer::start(&Options {
        eks: Some((endpoint(), cluster.clone())),
    });
    let (api, ca) = emulated_cluster(&account, &cluster, &server).await;

    // The state as `kfaws apply` leaves it once eks.cluster is created.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("kfaws.toml"),
        format!("name = \"{cluster}\"\nregion = \"us-east-1\"\n"),
    )
    .unwrap();
    let mut store =
        kfaws::state::store::StateStore::open(&dir.path().join(".kfaws"), &cluster).unwrap();
    let arn = format!("arn:aws:eks:us-east-1:{account}:cluster/{cluster}");
    let outputs = BTreeMap::from([
        ("name".to_string(), json!(cluster)),
        ("arn".to_string(), json!(arn)),
        ("endpoint".to_string(), json!(api)),
        ("certificate_authority_data".to_string(), json!(ca)),
    ]);
    store
        .write(|s| {
            s.region = Some("us-east-1".into());
            s.account_id = Some(account.clone());
            s.resources.insert(
                kfaws::address::Address::new("eks.cluster").unwrap(),
                kfaws::state::ResourceState {
                    kind: "aws_eks_cluster".into(),
                    status: kfaws::state::Status::Created,
                    physical_id: Some(cluster.clone()),
                    idempotency_token: None,
                    spec: json!({}),
                    spec_hash: kfaws::state::spec_hash(&json!({})),
                    outputs,
                    dependencies: vec![],
                    updating: None,
                    inputs_hash: None,
                    updated_at: chrono::Utc::now(),
                },
            );
        })
        .unwrap();

    // Another context in the file must survive.
    let path = dir.path().join("kube").join("config");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(
        &path,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: other\n  cluster:\n    server: https://127.0.0.1:1\n\
         users:\n- name: other\n  user:\n    token: t0\ncontexts:\n- name: other\n  context:\n    cluster: other\n    user: other\n\
         current-context: other\n",
    )
    .unwrap();
    // A --region other than the state's is refused before anything is written.
    let before = std::fs::read(&path).unwrap();
    Command::cargo_bin("kfaws")
        .unwrap()
        .current_dir(dir.path())
        .env_remove("KFAWS_NAME")
        .env_remove("KFAWS_CONFIG")
        .args(["--region", "eu-west-1", "kubeconfig", "--kubeconfig"])
        .arg(&path)
        .assert()
        .code(1)
        .stderr(predicates::str::contains(format!(
            "--region eu-west-1: the EKS cluster of deployment \"{cluster}\" is in region \
             us-east-1 (recorded in its state)"
        )));
    assert_eq!(std::fs::read(&path).unwrap(), before, "nothing was written");
    for region in ["", "not-a-region"] {
        Command::cargo_bin("kfaws")
            .unwrap()
            .current_dir(dir.path())
            .env_remove("KFAWS_NAME")
            .env_remove("KFAWS_CONFIG")
            .args(["--region", region, "kubeconfig", "--kubeconfig"])
            .arg(&path)
            .assert()
            .code(1)
            .stderr(predicates::str::contains(format!(
                "--region {region:?} is not an AWS Region kfaws knows"
            )));
    }
    assert_eq!(std::fs::read(&path).unwrap(), before, "nothing was written");
    // With credentials of the cluster's account: no warning; with another
    // account's, a warning naming both (the file is written either way).
    let other = new_account();
    for (id, warned) in [(&other, true), (&account, false), (&account, false)] {
        let out = Command::cargo_bin("kfaws")
            .unwrap()
            .current_dir(dir.path())
            .env_remove("KFAWS_NAME")
            .env_remove("KFAWS_CONFIG")
            .env_remove("AWS_PROFILE")
            .env("AWS_ACCESS_KEY_ID", id)
            .args(["kubeconfig", "--kubeconfig"])
            .arg(&path)
            .assert()
            .success();
        let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
        assert_eq!(
            stderr.contains(&format!(
                "Warning: the credentials of the AWS SDK's default chain are for account {other} \
                 (arn:aws:"
            )) && stderr.contains(&format!(
                "but the cluster is in account {account}: kubectl will be refused (401 \
                 Unauthorized)"
            )),
            warned,
            "{stderr}"
        );
    }
    let kubeconfig = Kubeconfig::read_from(&path).unwrap();
    assert_eq!(kubeconfig.current_context.as_deref(), Some(arn.as_str()));
    let mut contexts: Vec<&str> = kubeconfig
        .contexts
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    contexts.sort();
    assert_eq!(contexts, [arn.as_str(), "other"]);

    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let namespaces = Api::<Namespace>::all(client)
        .list(&ListParams::default())
        .await
        .unwrap_or_else(|e| panic!("{e}; webhook log:\n{}", server.log("token_webhook")));
    assert!(
        namespaces
            .items
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some("kube-system")),
        "{:?}",
        namespaces
            .items
            .iter()
            .map(|n| &n.metadata.name)
            .collect::<Vec<_>>()
    );
}

#[test]
fn an_undefined_profile_is_refused_by_kubeconfig_and_named_by_get_token() {
    let dir = tempfile::tempdir().unwrap();
    let aws_config = dir.path().join("aws-config");
    std::fs::write(&aws_config, "[profile dev]\nregion = us-east-1\n").unwrap();
    let kubeconfig = dir.path().join("kube-config");
    // `kfaws ARGS` whose profile files define only `dev`, with AWS_PROFILE
    // `env_profile` (keys in the environment removed with it: a profile is
    // then the only source).
    let kfaws = |env_profile: Option<&str>, args: &[&str]| {
        let mut cmd = Command::cargo_bin("kfaws").unwrap();
        cmd.current_dir(dir.path())
            .env("AWS_CONFIG_FILE", &aws_config)
            .env("AWS_SHARED_CREDENTIALS_FILE", dir.path().join("none"))
            .args(args);
        if let Some(p) = env_profile {
            cmd.env("AWS_PROFILE", p)
                .env_remove("AWS_ACCESS_KEY_ID")
                .env_remove("AWS_SECRET_ACCESS_KEY");
        }
        cmd
    };
    let undefined = |from: &str| {
        predicates::str::contains(format!(
            "profile \"nope\" (from {from}) is defined in neither"
        ))
    };
    let write = ["--name", "ml", "kubeconfig", "--kubeconfig", "kube-config"];
    kfaws(None, &[&["--aws-profile", "nope"][..], &write].concat())
        .assert()
        .code(1)
        .stderr(
            undefined("--aws-profile")
                .and(predicates::str::contains("profiles defined: dev"))
                .and(predicates::str::contains("nothing was written")),
        );
    assert!(!kubeconfig.exists());
    // The same for AWS_PROFILE, which the kubeconfig would record as well.
    kfaws(Some("nope"), &write)
        .assert()
        .code(1)
        .stderr(undefined("AWS_PROFILE").and(predicates::str::contains("unset AWS_PROFILE")));
    assert!(!kubeconfig.exists());
    // kubectl's plugin call names the undefined profile too, whichever selected it (a
    // kubeconfig records AWS_PROFILE in its exec env).
    let token = ["eks", "get-token", "--cluster-name", "ml"];
    kfaws(None, &[&["--aws-profile", "nope"][..], &token].concat())
        .assert()
        .code(1)
        .stderr(undefined("--aws-profile"));
    kfaws(Some("nope"), &token)
        .assert()
        .code(1)
        .stderr(undefined("AWS_PROFILE"));
}
