//! The order a bundle is applied in (pure: no API call).
//!
//! 1. CustomResourceDefinitions, then a wait until each is `Established`
//!    and served by discovery (case C8: a CRD and its instances in one stream).
//! 2. Namespaces.
//! 3. Everything no webhook of the bundle intercepts, including the
//!    webhooks' backends (the Service a webhook's `clientConfig.service`
//!    names and the Deployments whose pod labels that Service selects).
//! 4. Per webhook configuration of the bundle whose webhooks call a backend
//!    in the bundle: a wait until the backend is ready (Deployments
//!    `Available`, the Service has a ready endpoint), then the configuration.
//! 5. The objects those webhooks intercept, once every webhook intercepting
//!    them has a ready backend (case C7).
//!
//! Interception follows the [admission webhook matching rules](https://kubernetes.io/docs/reference/access-authn-authz/extensible-admission-controllers/#matching-requests-rules):
//! `rules` (operations CREATE/UPDATE, apiGroups, apiVersions, resources,
//! scope), `namespaceSelector` and `objectSelector`. Where the bundle cannot
//! tell (labels of a namespace outside the bundle, `matchConditions`, or
//! `matchPolicy: Equivalent` which may match other versions), an object
//! counts as intercepted: waiting for a ready backend is the safe side.
//! Webhooks never intercept webhook configurations (the API server exempts
//! them), and CRDs and Namespaces go first regardless.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use serde_json::Value;

use super::bundle::Bundle;
use super::discovery::{is_crd, Target};
use super::object::{GroupKind, ObjectRef};

/// A webhook configuration of the bundle and what its webhooks need before
/// the objects they intercept may be applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    /// Position in the targets of the Validating/MutatingWebhookConfiguration.
    pub configuration: usize,
    /// Names of its webhooks that call a backend in the bundle.
    pub webhooks: Vec<String>,
    /// The backend Services (in the bundle).
    pub services: Vec<ObjectRef>,
    /// The Deployments behind those Services (in the bundle).
    pub deployments: Vec<ObjectRef>,
}

/// The apply order of a bundle: positions into the resolved targets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Phases {
    /// CustomResourceDefinitions.
    pub crds: Vec<usize>,
    /// Namespaces.
    pub namespaces: Vec<usize>,
    /// Objects no bundle webhook intercepts, and the webhooks' backends.
    pub main: Vec<usize>,
    /// Webhook configurations whose webhooks call backends in the bundle.
    pub gates: Vec<Gate>,
    /// Intercepted objects and the gates (positions in `gates`) they wait for.
    pub intercepted: Vec<(usize, Vec<usize>)>,
}

fn is_webhook_configuration(gk: &GroupKind) -> bool {
    gk.group == "admissionregistration.k8s.io"
        && (gk.kind == "ValidatingWebhookConfiguration"
            || gk.kind == "MutatingWebhookConfiguration")
}

/// One webhook's matching criteria.
struct Matcher {
    rules: Vec<Value>,
    exact: bool,
    namespace_selector: Option<Selector>,
    object_selector: Option<Selector>,
}

fn selector(v: &Value) -> Option<Selector> {
    if v.is_null() {
        return None;
    }
    let ls: LabelSelector = serde_json::from_value(v.clone()).ok()?;
    // An unparseable selector is the API server's to reject; treat it as
    // matching everything (the safe side) meanwhile.
    Selector::try_from(ls).ok()
}

fn contains(list: &Value, want: &str) -> bool {
    list.as_array().is_some_and(|l| {
        l.iter()
            .any(|x| x.as_str() == Some("*") || x.as_str() == Some(want))
    })
}

impl Matcher {
    fn new(webhook: &Value) -> Self {
        Self {
            rules: webhook["rules"].as_array().cloned().unwrap_or_default(),
            exact: webhook["matchPolicy"].as_str() == Some("Exact"),
            namespace_selector: selector(&webhook["namespaceSelector"]),
            object_selector: selector(&webhook["objectSelector"]),
        }
    }

    /// Whether the webhook may intercept a create or update of `target`;
    /// `ns_labels` are the labels of its namespace when the bundle knows them.
    fn intercepts(
        &self,
        target: &Target,
        labels: &BTreeMap<String, String>,
        ns_labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let r = &target.resource;
        let namespaced = target.object.namespace.is_some();
        let rule_matches = self.rules.iter().any(|rule| {
            let ops = &rule["operations"];
            let op = contains(ops, "CREATE") || contains(ops, "UPDATE");
            let scope = match rule["scope"].as_str().unwrap_or("*") {
                "Cluster" => !namespaced,
                "Namespaced" => namespaced,
                _ => true,
            };
            let resources = rule["resources"].as_array().is_some_and(|l| {
                l.iter()
                    .filter_map(Value::as_str)
                    .any(|x| x == "*" || x == "*/*" || x == r.plural)
            });
            op && scope
                && resources
                && contains(&rule["apiGroups"], &r.group)
                && (!self.exact || contains(&rule["apiVersions"], &r.version))
        });
        if !rule_matches {
            return false;
        }
        if let Some(sel) = &self.object_selector {
            if !sel.matches(labels) {
                return false;
            }
        }
        // namespaceSelector applies to namespaced objects (against their
        // namespace's labels) and to Namespaces themselves.
        let is_namespace = target.object.gk == GroupKind::new("", "Namespace");
        if let (Some(sel), true) = (&self.namespace_selector, namespaced || is_namespace) {
            let own;
            let ns = if is_namespace {
                own = labels.clone();
                Some(&own)
            } else {
                ns_labels
            };
            if let Some(ns) = ns {
                if !sel.matches(ns) {
                    return false;
                }
            }
        }
        // matchConditions (CEL, evaluated by the API server) can only narrow
        // the match further; ignoring them errs on the waiting side.
        true
    }
}

fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Orders a resolved bundle into phases (see the module docs).
/// `objects[i]` is the JSON object of `targets[i]`, labels included.
pub fn plan(bundle: &Bundle, targets: &[Target], objects: &[Value]) -> Phases {
    let mut phases = Phases::default();
    let by_ref: BTreeMap<&ObjectRef, usize> = targets
        .iter()
        .enumerate()
        .map(|(i, t)| (&t.object, i))
        .collect();
    let ns_labels: BTreeMap<String, BTreeMap<String, String>> = targets
        .iter()
        .enumerate()
        .filter(|(_, t)| t.object.gk == GroupKind::new("", "Namespace"))
        .map(|(i, t)| {
            let mut labels = string_map(&objects[i]["metadata"]["labels"]);
            // Set by the API server on every namespace since Kubernetes 1.21.
            labels.insert("kubernetes.io/metadata.name".into(), t.object.name.clone());
            (t.object.name.clone(), labels)
        })
        .collect();

    // Webhooks calling a Service of the bundle, grouped by configuration.
    let mut matchers: Vec<(usize, Matcher)> = Vec::new();
    let mut backends: BTreeSet<usize> = BTreeSet::new();
    for (pos, t) in targets.iter().enumerate() {
        if !is_webhook_configuration(&t.object.gk) {
            continue;
        }
        let mut gate = Gate {
            configuration: pos,
            webhooks: Vec::new(),
            services: Vec::new(),
            deployments: Vec::new(),
        };
        let webhooks = objects[pos]["webhooks"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut gate_matchers = Vec::new();
        for wh in &webhooks {
            let svc = &wh["clientConfig"]["service"];
            let (Some(ns), Some(name)) = (svc["namespace"].as_str(), svc["name"].as_str()) else {
                continue;
            };
            let svc_ref = ObjectRef {
                gk: GroupKind::new("", "Service"),
                namespace: Some(ns.to_string()),
                name: name.to_string(),
            };
            let Some(&svc_pos) = by_ref.get(&svc_ref) else {
                continue;
            };
            gate.webhooks
                .push(wh["name"].as_str().unwrap_or("").to_string());
            backends.insert(svc_pos);
            if !gate.services.contains(&svc_ref) {
                gate.services.push(svc_ref);
            }
            let svc_selector = string_map(&objects[svc_pos]["spec"]["selector"]);
            for (dpos, d) in targets.iter().enumerate() {
                let pod_labels =
                    string_map(&objects[dpos]["spec"]["template"]["metadata"]["labels"]);
                let selects = !svc_selector.is_empty()
                    && svc_selector
                        .iter()
                        .all(|(k, v)| pod_labels.get(k) == Some(v));
                if d.object.gk == GroupKind::new("apps", "Deployment")
                    && d.object.namespace.as_deref() == Some(ns)
                    && selects
                {
                    backends.insert(dpos);
                    if !gate.deployments.contains(&d.object) {
                        gate.deployments.push(d.object.clone());
                    }
                }
            }
            gate_matchers.push(Matcher::new(wh));
        }
        if gate.webhooks.is_empty() {
            continue;
        }
        let g = phases.gates.len();
        phases.gates.push(gate);
        matchers.extend(gate_matchers.into_iter().map(|m| (g, m)));
    }

    let gated: BTreeSet<usize> = phases.gates.iter().map(|g| g.configuration).collect();
    for (pos, t) in targets.iter().enumerate() {
        let m = &bundle.objects[t.index];
        if is_crd(m) {
            phases.crds.push(pos);
            continue;
        }
        if t.object.gk == GroupKind::new("", "Namespace") {
            phases.namespaces.push(pos);
            continue;
        }
        if gated.contains(&pos) {
            continue;
        }
        if backends.contains(&pos) || is_webhook_configuration(&t.object.gk) {
            phases.main.push(pos);
            continue;
        }
        let labels = string_map(&objects[pos]["metadata"]["labels"]);
        let ns = t.object.namespace.as_ref().and_then(|n| ns_labels.get(n));
        let mut gates: Vec<usize> = matchers
            .iter()
            .filter(|(_, m)| m.intercepts(t, &labels, ns))
            .map(|(g, _)| *g)
            .collect();
        gates.dedup();
        if gates.is_empty() {
            phases.main.push(pos);
        } else {
            phases.intercepted.push((pos, gates));
        }
    }
    phases
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::k8s::discovery::{resolve, Served};
    use kube::core::ApiResource;

    fn served() -> Served {
        let mut s = Served::default();
        for (g, k, p, namespaced) in [
            ("", "Namespace", "namespaces", false),
            ("", "ConfigMap", "configmaps", true),
            ("", "Secret", "secrets", true),
            ("", "Service", "services", true),
            ("apps", "Deployment", "deployments", true),
            (
                "admissionregistration.k8s.io",
                "ValidatingWebhookConfiguration",
                "validatingwebhookconfigurations",
                false,
            ),
            (
                "apiextensions.k8s.io",
                "CustomResourceDefinition",
                "customresourcedefinitions",
                false,
            ),
        ] {
            s.insert(
                ApiResource {
                    group: g.into(),
                    version: "v1".into(),
                    api_version: if g.is_empty() {
                        "v1".into()
                    } else {
                        format!("{g}/v1")
                    },
                    kind: k.into(),
                    plural: p.into(),
                },
                namespaced,
            );
        }
        s
    }

    const WEBHOOK: &str = "
apiVersion: v1
kind: Namespace
metadata: {name: guarded, labels: {guard: \"on\"}}
---
apiVersion: v1
kind: Namespace
metadata: {name: free}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: guard, namespace: guarded}
spec:
  selector: {matchLabels: {app: guard}}
  template:
    metadata: {labels: {app: guard}}
    spec: {containers: [{name: g, image: guard}]}
---
apiVersion: v1
kind: Service
metadata: {name: guard, namespace: guarded}
spec: {selector: {app: guard}, ports: [{port: 443}]}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: guard}
webhooks:
- name: guard.example.com
  clientConfig: {service: {namespace: guarded, name: guard}}
  rules: [{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}]
  namespaceSelector: {matchLabels: {guard: \"on\"}}
  objectSelector: {matchExpressions: [{key: skip, operator: DoesNotExist}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: checked, namespace: guarded}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: opted-out, namespace: guarded, labels: {skip: \"yes\"}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: elsewhere, namespace: free}
---
apiVersion: v1
kind: Secret
metadata: {name: not-a-configmap, namespace: guarded}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: unknown-namespace, namespace: outside}
";

    fn phases_of(text: &str) -> (Vec<String>, Phases) {
        let b = Bundle::from_sources("t", [(PathBuf::from("t.yaml"), text.to_string())]).unwrap();
        let targets = resolve(&b, &served()).unwrap();
        let objects: Vec<Value> = targets
            .iter()
            .map(|t| b.objects[t.index].object.clone())
            .collect();
        let names = targets.iter().map(|t| t.object.to_string()).collect();
        (names, plan(&b, &targets, &objects))
    }

    fn names(all: &[String], positions: impl IntoIterator<Item = usize>) -> Vec<String> {
        positions.into_iter().map(|p| all[p].clone()).collect()
    }

    #[test]
    fn webhook_gates_only_what_it_intercepts_and_never_its_backend() {
        let (all, p) = phases_of(WEBHOOK);
        assert_eq!(
            names(&all, p.namespaces.clone()),
            ["Namespace guarded", "Namespace free"]
        );
        assert_eq!(
            names(&all, p.main.clone()),
            [
                "Deployment guarded/guard",
                "Service guarded/guard",
                "ConfigMap guarded/opted-out",
                "ConfigMap free/elsewhere",
                "Secret guarded/not-a-configmap"
            ]
        );
        assert_eq!(p.gates.len(), 1);
        assert_eq!(
            all[p.gates[0].configuration],
            "ValidatingWebhookConfiguration guard"
        );
        assert_eq!(p.gates[0].webhooks, ["guard.example.com"]);
        assert_eq!(
            p.gates[0].deployments[0].to_string(),
            "Deployment guarded/guard"
        );
        assert_eq!(
            names(&all, p.intercepted.iter().map(|(pos, _)| *pos)),
            [
                "ConfigMap guarded/checked",
                "ConfigMap outside/unknown-namespace"
            ],
            "a namespace outside the bundle may match the selector: the safe side is to wait"
        );
    }

    #[test]
    fn crds_and_namespaces_go_first_and_webhooks_elsewhere_gate_nothing() {
        let text = "
apiVersion: v1
kind: ConfigMap
metadata: {name: c, namespace: ns}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: external}
webhooks:
- name: external.example.com
  clientConfig: {service: {namespace: elsewhere, name: svc}}
  rules: [{apiGroups: [\"*\"], apiVersions: [\"*\"], operations: [\"*\"], resources: [\"*\"]}]
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: ws.x.test}
spec: {group: x.test, scope: Namespaced, names: {kind: W, plural: ws}, versions: [{name: v1, served: true, storage: true}]}
---
apiVersion: v1
kind: Namespace
metadata: {name: ns}
";
        let (all, p) = phases_of(text);
        assert_eq!(
            names(&all, p.crds.clone()),
            ["CustomResourceDefinition ws.x.test"]
        );
        assert_eq!(names(&all, p.namespaces.clone()), ["Namespace ns"]);
        assert_eq!(
            names(&all, p.main.clone()),
            ["ConfigMap ns/c", "ValidatingWebhookConfiguration external"]
        );
        assert!(p.gates.is_empty() && p.intercepted.is_empty());
    }
}
