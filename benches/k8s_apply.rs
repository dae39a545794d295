//! `make bench`: applying a 500-object manifest bundle with kfaws against
//! `kubectl apply --server-side` (the kubectl built with the test API server,
//! tests/apiserver) on the same real kube-apiserver, as a ratio (DESIGN.md §5,
//! target ≥ 5× faster).
//!
//! Bundle: 4 namespaces and 496 namespaced objects (ConfigMaps, Secrets,
//! ServiceAccounts, headless Services, Roles, RoleBindings), generated. Each
//! round applies a fresh copy (new namespace names) with each tool, then
//! re-applies the unchanged copies. kubectl's discovery cache is warmed
//! first, in favour of kubectl; kfaws runs its discovery in every apply.
//! Medians of 3 rounds.

#[path = "../tests/common/apiserver.rs"]
mod apiserver;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kfaws::k8s::{Applier, ApplyOptions, Bundle, Outcome};

const OBJECTS: usize = 500;
const NAMESPACES: usize = 4;
const ROUNDS: usize = 3;

fn generate(prefix: &str) -> String {
    let mut docs = Vec::with_capacity(OBJECTS);
    for n in 0..NAMESPACES {
        docs.push(format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {prefix}-{n}\n"
        ));
    }
    let mut i = 0;
    while docs.len() < OBJECTS {
        let ns = format!("{prefix}-{}", i % NAMESPACES);
        docs.push(match i % 6 {
            0 => format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: config-{i}\n  namespace: {ns}\n  labels: {{app: bench}}\ndata:\n  index: \"{i}\"\n  mode: fast\n"
            ),
            1 => format!(
                "apiVersion: v1\nkind: Secret\nmetadata:\n  name: secret-{i}\n  namespace: {ns}\ntype: Opaque\nstringData:\n  token: token-{i}\n"
            ),
            2 => format!("apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: sa-{i}\n  namespace: {ns}\n"),
            3 => format!(
                "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc-{i}\n  namespace: {ns}\nspec:\n  clusterIP: None\n  selector: {{app: app-{i}}}\n  ports:\n  - port: 80\n    targetPort: 8080\n"
            ),
            4 => format!(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata:\n  name: role-{i}\n  namespace: {ns}\nrules:\n- apiGroups: [\"\"]\n  resources: [configmaps]\n  verbs: [get, list]\n"
            ),
            _ => format!(
                "apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: binding-{i}\n  namespace: {ns}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: Role\n  name: role-{}\nsubjects:\n- kind: ServiceAccount\n  name: sa-{}\n  namespace: {ns}\n",
                i - 1,
                i - 3
            ),
        });
        i += 1;
    }
    docs.join("---\n")
}

fn kubectl_apply(env: &apiserver::TestEnv, home: &Path, file: &Path) -> Duration {
    let t0 = Instant::now();
    let out = Command::new(env.kubectl())
        .args(["apply", "--server-side", "-f"])
        .arg(file)
        .env("KUBECONFIG", &env.ready.kubeconfig)
        .env("HOME", home)
        .output()
        .expect("run kubectl");
    let took = t0.elapsed();
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

async fn kfaws_apply(applier: &Applier, bundle: &Bundle, want: Outcome) -> Duration {
    let t0 = Instant::now();
    let report = applier
        .apply(bundle)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let took = t0.elapsed();
    assert_eq!(report.objects.len(), OBJECTS);
    assert!(
        report.objects.iter().all(|(_, o)| *o == want),
        "expected every object {want:?}"
    );
    took
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let env = apiserver::env();
    let work = tempfile::tempdir().expect("temp dir");
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let client = rt.block_on(env.client());
    let applier = Applier::new(client.clone());
    let resend = Applier::with_options(
        client,
        ApplyOptions {
            skip_unchanged: false,
            ..ApplyOptions::default()
        },
    );

    // Warm kubectl's discovery cache (under HOME/.kube/cache).
    let status = Command::new(env.kubectl())
        .args(["api-resources"])
        .env("KUBECONFIG", &env.ready.kubeconfig)
        .env("HOME", work.path())
        .output()
        .expect("kubectl api-resources");
    assert!(status.status.success());

    let (mut k_fresh, mut f_fresh, mut k_again, mut f_resend, mut f_skip) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        let kfile = work.path().join(format!("kubectl-{round}.yaml"));
        std::fs::write(&kfile, generate(&format!("bench-kubectl-{round}"))).expect("write bundle");
        let bundle = Bundle::from_sources(
            &format!("bench-{round}"),
            [(
                format!("kfaws-{round}.yaml").into(),
                generate(&format!("bench-kfaws-{round}")),
            )],
        )
        .expect("generated bundle parses");

        k_fresh.push(kubectl_apply(env, work.path(), &kfile));
        f_fresh.push(rt.block_on(kfaws_apply(&applier, &bundle, Outcome::Created)));
        k_again.push(kubectl_apply(env, work.path(), &kfile));
        f_resend.push(rt.block_on(kfaws_apply(&resend, &bundle, Outcome::Unchanged)));
        f_skip.push(rt.block_on(kfaws_apply(&applier, &bundle, Outcome::Skipped)));
    }
    let (k_fresh, f_fresh, k_again, f_resend, f_skip) = (
        median(k_fresh),
        median(f_fresh),
        median(k_again),
        median(f_resend),
        median(f_skip),
    );
    let ratio = |k: Duration, f: Duration| k.as_secs_f64() / f.as_secs_f64();
    println!(
        "manifest apply, {OBJECTS} objects, median of {ROUNDS} rounds, same kube-apiserver ({}):",
        env.ready.kubernetes_version
    );
    println!(
        "  first apply:   kubectl apply --server-side {:>7.3}s   kfaws {:>7.3}s   kfaws is {:.1}x faster",
        k_fresh.as_secs_f64(),
        f_fresh.as_secs_f64(),
        ratio(k_fresh, f_fresh)
    );
    println!(
        "  re-apply:      kubectl apply --server-side {:>7.3}s   kfaws {:>7.3}s   kfaws is {:.1}x faster (every object sent)",
        k_again.as_secs_f64(),
        f_resend.as_secs_f64(),
        ratio(k_again, f_resend)
    );
    println!(
        "  re-apply:      kubectl apply --server-side {:>7.3}s   kfaws {:>7.3}s   kfaws is {:.1}x faster (unchanged objects skipped, the default)",
        k_again.as_secs_f64(),
        f_skip.as_secs_f64(),
        ratio(k_again, f_skip)
    );
    println!(
        "  (target: >= 5x; kfaws uses {} concurrent requests)",
        ApplyOptions::default().concurrency
    );
    env.stop();
}
