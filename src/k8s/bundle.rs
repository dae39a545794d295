//! Manifest bundles: a multi-document YAML stream (one file, or every
//! `*.yaml`/`*.yml` file of a directory in name order) parsed strictly into
//! Kubernetes objects.
//!
//! Strict means: a duplicate key in any mapping is an error with its file,
//! line and column (case C22: two `apiVersion:` keys would otherwise let the
//! last one win silently); a document without `apiVersion`, `kind` or
//! `metadata.name` is an error naming its file, document number and line;
//! the same object twice in one bundle is an error naming both places.
//! Empty documents (`---` separators, comment-only documents) are skipped.
//!
//! The YAML crate is `serde-saphyr`: it is actively maintained (`serde_yaml`
//! is deprecated and unmaintained since 2024), pure Rust, refuses duplicate
//! keys by default (`DuplicateKeyPolicy::Error`) reporting the key's line and
//! column, caps alias expansion against "billion laughs" documents, and
//! is already in the dependency tree as kube-client's YAML parser, so it
//! costs no extra compile. Like kubectl's YAML 1.1 reader, it reads unquoted
//! `yes`/`no`/`on`/`off`/`y`/`n` as booleans: quote such strings.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde_json::Value;
use serde_saphyr::Spanned;

use crate::naming::DNS1123_SUBDOMAIN;

/// Where an object was written: its file, its 1-based document number among
/// the file's non-empty documents, and the line its document starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// The file (or the label given to [`Bundle::from_sources`]).
    pub file: PathBuf,
    /// 1-based number of the document among the non-empty documents of the file.
    pub document: usize,
    /// 1-based line of the document's first key.
    pub line: u64,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} document {} (line {})",
            self.file.display(),
            self.document,
            self.line
        )
    }
}

/// One object of a bundle, as written, with the fields every object must have.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// Where it was written.
    pub origin: Origin,
    /// `apiVersion`, e.g. `apps/v1` or `v1`.
    pub api_version: String,
    /// `kind`, e.g. `Deployment`.
    pub kind: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace` as written (absent for cluster-scoped objects, and
    /// for namespaced ones that rely on the default namespace).
    pub namespace: Option<String>,
    /// The whole object as a JSON value (a JSON object).
    pub object: Value,
}

impl Manifest {
    /// The API group: the part of `apiVersion` before `/`, empty for the core group.
    pub fn group(&self) -> &str {
        self.api_version
            .split_once('/')
            .map(|(g, _)| g)
            .unwrap_or("")
    }

    /// The version: the part of `apiVersion` after `/`, all of it for the core group.
    pub fn version(&self) -> &str {
        self.api_version
            .split_once('/')
            .map(|(_, v)| v)
            .unwrap_or(&self.api_version)
    }

    /// `Kind namespace/name` or `Kind name`, as written.
    pub fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }
}

/// A named set of objects applied, pruned and destroyed together. The name
/// becomes the name of the ApplySet parent object (see [`super::applyset`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    /// The bundle's name, a DNS-1123 subdomain.
    pub name: String,
    /// The objects in source order.
    pub objects: Vec<Manifest>,
}

/// Why a bundle could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// The bundle name is not a valid Kubernetes object name.
    #[error("bundle name {name:?} is invalid: it names the ApplySet parent object, a {}: {} ({}); {problem}", DNS1123_SUBDOMAIN.what, DNS1123_SUBDOMAIN.text, DNS1123_SUBDOMAIN.source)]
    InvalidName {
        /// The name.
        name: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A file or directory could not be read.
    #[error("cannot read manifests from {}: {source}", path.display())]
    Read {
        /// The path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A directory holds no `*.yaml`/`*.yml` file.
    #[error("{} holds no *.yaml or *.yml file", path.display())]
    NoFiles {
        /// The directory.
        path: PathBuf,
    },
    /// The files hold no object (empty, or only comments and `---`): an
    /// empty bundle would apply nothing and prune what an earlier apply of
    /// it made.
    #[error("{} holds no Kubernetes object (it is empty or only comments); name the manifests to apply", path.display())]
    NoObjects {
        /// The file or directory.
        path: PathBuf,
    },
    /// A mapping has the same key twice.
    #[error("{}:{line}:{column}: duplicate key {key} in a mapping; every key may appear once (YAML 1.2 §3.2.1.1) -- remove one of them", file.display())]
    DuplicateKey {
        /// The file.
        file: PathBuf,
        /// The key, when it is a scalar.
        key: String,
        /// 1-based line of the second occurrence.
        line: u64,
        /// 1-based column of the second occurrence.
        column: u64,
    },
    /// The text is not valid YAML.
    #[error("{}{}: invalid YAML: {message}", file.display(), position.map(|(l, c)| format!(":{l}:{c}")).unwrap_or_default())]
    Syntax {
        /// The file.
        file: PathBuf,
        /// 1-based line and column, when known.
        position: Option<(u64, u64)>,
        /// The parser's message.
        message: String,
    },
    /// A document is not a Kubernetes object.
    #[error("{origin}: not a Kubernetes object: {problem}")]
    NotAnObject {
        /// Where.
        origin: Origin,
        /// What is missing or wrong.
        problem: String,
    },
    /// An object carries fields only the API server sets on a live object
    /// (an object exported with `kubectl get -o yaml`).
    #[error(
        "{origin}: {object} has metadata.{} set: the API server sets {them} on a live object, \
         and server-side apply takes {them} as a precondition that fails (as in an object \
         exported with `kubectl get -o yaml`); remove {them} (and creationTimestamp, \
         managedFields and status)",
        fields.join(" and metadata."),
        them = if fields.len() == 1 { "it" } else { "them" }
    )]
    ServerSet {
        /// `Kind namespace/name`.
        object: String,
        /// Where.
        origin: Origin,
        /// The fields set, e.g. `uid`.
        fields: Vec<&'static str>,
    },
    /// The same object appears twice.
    #[error("{object} appears twice, in {first} and in {second}; keep one")]
    Duplicate {
        /// `Kind namespace/name`.
        object: String,
        /// The first place.
        first: Origin,
        /// The second place.
        second: Origin,
    },
}

impl Bundle {
    /// Reads a bundle from a file, or from every `*.yaml`/`*.yml` file
    /// directly in a directory, in name order.
    ///
    /// # Errors
    /// [`BundleError`]: unreadable path, empty directory, no object at all,
    /// invalid name, or any parse error of [`Bundle::from_sources`].
    pub fn from_path(name: &str, path: &Path) -> Result<Self, BundleError> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).map_err(|source| BundleError::Read {
                path: p.to_path_buf(),
                source,
            })
        };
        let meta = std::fs::metadata(path).map_err(|source| BundleError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut sources = Vec::new();
        if meta.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|source| BundleError::Read {
                path: path.to_path_buf(),
                source,
            })?;
            let mut files = Vec::new();
            for entry in entries {
                let entry = entry.map_err(|source| BundleError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                let p = entry.path();
                let yaml = matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"));
                if yaml && p.is_file() {
                    files.push(p);
                }
            }
            files.sort();
            if files.is_empty() {
                return Err(BundleError::NoFiles {
                    path: path.to_path_buf(),
                });
            }
            for f in files {
                let text = read(&f)?;
                sources.push((f, text));
            }
        } else {
            sources.push((path.to_path_buf(), read(path)?));
        }
        let bundle = Self::from_sources(name, sources)?;
        if bundle.objects.is_empty() {
            return Err(BundleError::NoObjects {
                path: path.to_path_buf(),
            });
        }
        Ok(bundle)
    }

    /// Parses a bundle from `(file label, YAML text)` pairs, in order.
    ///
    /// # Errors
    /// [`BundleError`]: invalid bundle name, YAML syntax, duplicate keys,
    /// documents that are not objects, the same object twice.
    pub fn from_sources(
        name: &str,
        sources: impl IntoIterator<Item = (PathBuf, String)>,
    ) -> Result<Self, BundleError> {
        if let Some(problem) = DNS1123_SUBDOMAIN.violation(name) {
            return Err(BundleError::InvalidName {
                name: name.to_string(),
                problem,
            });
        }
        let mut objects = Vec::new();
        for (file, text) in sources {
            objects.extend(parse_stream(&file, &text)?);
        }
        let mut seen: BTreeMap<(String, String, Option<String>, String), Origin> = BTreeMap::new();
        for m in &objects {
            let key = (
                m.group().to_string(),
                m.kind.clone(),
                m.namespace.clone(),
                m.name.clone(),
            );
            if let Some(first) = seen.get(&key) {
                return Err(BundleError::Duplicate {
                    object: m.describe(),
                    first: first.clone(),
                    second: m.origin.clone(),
                });
            }
            seen.insert(key, m.origin.clone());
        }
        Ok(Self {
            name: name.to_string(),
            objects,
        })
    }
}

/// Parses one YAML stream into manifests.
fn parse_stream(file: &Path, text: &str) -> Result<Vec<Manifest>, BundleError> {
    // The parser's default budget (1,024 documents, 250,000 nodes) guards
    // untrusted input; a Kubeflow release's `kustomize build` output is
    // larger (thousands of documents, CRDs with large schemas) and is the
    // user's own file, so allow what such a release needs, still bounded.
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_documents: 100_000,
            max_nodes: 50_000_000,
            max_events: 200_000_000,
        },
    };
    let docs: Vec<Spanned<Value>> = serde_saphyr::from_str_multiple_with_options(text, options)
        .map_err(|e| yaml_error(file, &e))?;
    docs.into_iter()
        .enumerate()
        .map(|(i, doc)| {
            let origin = Origin {
                file: file.to_path_buf(),
                document: i + 1,
                line: doc.referenced.line(),
            };
            manifest(origin, doc.value)
        })
        .collect()
}

fn yaml_error(file: &Path, e: &serde_saphyr::Error) -> BundleError {
    let position = e.location().map(|l| (l.line(), l.column()));
    let mut inner = e;
    while let serde_saphyr::Error::WithSnippet { error, .. } = inner {
        inner = error;
    }
    if let serde_saphyr::Error::DuplicateMappingKey { key, location } = inner {
        return BundleError::DuplicateKey {
            file: file.to_path_buf(),
            key: key
                .as_deref()
                .map(|k| format!("{k:?}"))
                .unwrap_or_else(|| "(a complex key)".into()),
            line: location.line(),
            column: location.column(),
        };
    }
    // The crate's Display renders a source snippet; keep only its first line.
    let message = e.to_string();
    let message = message.lines().next().unwrap_or_default().to_string();
    BundleError::Syntax {
        file: file.to_path_buf(),
        position,
        message,
    }
}

fn manifest(origin: Origin, object: Value) -> Result<Manifest, BundleError> {
    let bad = |problem: String| BundleError::NotAnObject {
        origin: origin.clone(),
        problem,
    };
    let Value::Object(map) = &object else {
        return Err(bad(format!(
            "the document is a {}, not a mapping",
            type_name(&object)
        )));
    };
    let string_field = |key: &str| -> Result<String, BundleError> {
        match map.get(key) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(Value::String(_)) | None => Err(bad(format!("{key} is missing"))),
            Some(v) => Err(bad(format!(
                "{key} must be a string, not a {}",
                type_name(v)
            ))),
        }
    };
    let api_version = string_field("apiVersion")?;
    let kind = string_field("kind")?;
    if kind == "List" {
        return Err(bad(
            "kind List is not supported; write its items as separate documents".into(),
        ));
    }
    let metadata = match map.get("metadata") {
        Some(Value::Object(m)) => m,
        Some(v) => {
            return Err(bad(format!(
                "metadata must be a mapping, not a {}",
                type_name(v)
            )))
        }
        None => return Err(bad("metadata is missing".into())),
    };
    let name = match metadata.get("name") {
        Some(Value::String(s)) if !s.is_empty() => s.clone(),
        Some(Value::String(_)) | None if metadata.contains_key("generateName") => {
            return Err(bad(
                "metadata.generateName is not supported: a generated name cannot be applied twice \
                 or pruned; give metadata.name"
                    .into(),
            ))
        }
        Some(Value::String(_)) | None => return Err(bad("metadata.name is missing".into())),
        Some(v) => {
            return Err(bad(format!(
                "metadata.name must be a string, not a {}",
                type_name(v)
            )))
        }
    };
    let namespace = match metadata.get("namespace") {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::String(_)) | Some(Value::Null) | None => None,
        Some(v) => {
            return Err(bad(format!(
                "metadata.namespace must be a string, not a {}",
                type_name(v)
            )))
        }
    };
    // Fields the API server sets on a live object. Server-side apply takes
    // `uid` and `resourceVersion` as preconditions on that object (Kubernetes
    // API reference, ObjectMeta), so a manifest exported from a cluster
    // (`kubectl get -o yaml`) would conflict (409) on every apply, or create
    // nothing. `null` and empty values, as some generators write, are absent.
    let fields: Vec<&'static str> = ["uid", "resourceVersion"]
        .into_iter()
        .filter(|k| !matches!(metadata.get(*k), None | Some(Value::Null)))
        .filter(|k| metadata.get(*k) != Some(&Value::String(String::new())))
        .collect();
    let manifest = Manifest {
        origin,
        api_version,
        kind,
        name,
        namespace,
        object,
    };
    if !fields.is_empty() {
        return Err(BundleError::ServerSet {
            object: manifest.describe(),
            origin: manifest.origin,
            fields,
        });
    }
    Ok(manifest)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "sequence",
        Value::Object(_) => "mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Bundle, BundleError> {
        Bundle::from_sources("test", [(PathBuf::from("t.yaml"), text.to_string())])
    }

    #[test]
    fn a_release_sized_bundle_of_thousands_of_documents_parses() {
        let doc = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm-N, namespace: ns}\ndata: {k: v}\n";
        let text: Vec<String> = (0..3000)
            .map(|i| doc.replace("cm-N", &format!("cm-{i}")))
            .collect();
        let b = parse(&text.join("---\n")).unwrap();
        assert_eq!(b.objects.len(), 3000);
    }

    #[test]
    fn a_file_with_no_object_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("kf.yaml");
        for text in ["", "# nothing yet\n---\n---\n"] {
            std::fs::write(&file, text).unwrap();
            let err = Bundle::from_path("kf", &file).unwrap_err().to_string();
            assert!(
                err.ends_with(
                    "kf.yaml holds no Kubernetes object (it is empty or only comments); \
                               name the manifests to apply"
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn empty_server_set_fields_as_generators_write_them_are_accepted() {
        let b = parse(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  creationTimestamp: null\n  \
             uid: null\n  resourceVersion: \"\"\n",
        )
        .unwrap();
        assert_eq!(b.objects.len(), 1);
    }

    #[test]
    fn several_documents_with_empty_ones_skipped() {
        let b = parse(
            "---\n# only a comment\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n\
             ---\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n  namespace: a\n",
        )
        .unwrap();
        assert_eq!(b.objects.len(), 2);
        assert_eq!(b.objects[0].describe(), "Namespace a");
        assert_eq!(b.objects[1].describe(), "Deployment a/d");
        assert_eq!(b.objects[1].group(), "apps");
        assert_eq!(b.objects[1].version(), "v1");
        assert_eq!(b.objects[0].group(), "");
        assert_eq!(b.objects[0].version(), "v1");
        assert_eq!(b.objects[1].origin.document, 2);
        assert_eq!(b.objects[1].origin.line, 10);
    }

    #[test]
    fn duplicate_api_version_is_an_error_with_its_line() {
        let err = parse(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: ConfigMap\n\
             apiVersion: v2\nmetadata:\n  name: b\n",
        )
        .unwrap_err();
        match &err {
            BundleError::DuplicateKey { key, line, .. } => {
                assert_eq!(key, "\"apiVersion\"");
                assert_eq!(*line, 8);
            }
            other => panic!("expected a duplicate key error, got {other}"),
        }
        assert!(err.to_string().starts_with("t.yaml:8:"), "{err}");
    }

    #[test]
    fn duplicate_key_in_a_nested_mapping_is_an_error() {
        let err = parse(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels:\n    x: \"1\"\n    x: \"2\"\n",
        )
        .unwrap_err();
        assert!(
            matches!(err, BundleError::DuplicateKey { line: 7, .. }),
            "{err}"
        );
    }

    #[test]
    fn missing_fields_name_the_document() {
        for (text, want) in [
            (
                "kind: ConfigMap\nmetadata:\n  name: a\n",
                "apiVersion is missing",
            ),
            ("apiVersion: v1\nmetadata:\n  name: a\n", "kind is missing"),
            ("apiVersion: v1\nkind: ConfigMap\n", "metadata is missing"),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  labels: {}\n",
                "metadata.name is missing",
            ),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  generateName: x-\n",
                "generateName",
            ),
            (
                "apiVersion: 1\nkind: ConfigMap\nmetadata:\n  name: a\n",
                "apiVersion must be a string",
            ),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  uid: 1234-5678\n  \
                 resourceVersion: \"999\"\n",
                "ConfigMap a has metadata.uid and metadata.resourceVersion set: the API server sets them",
            ),
            (
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  resourceVersion: \"1\"\n",
                "ConfigMap a has metadata.resourceVersion set: the API server sets it",
            ),
            ("- a\n- b\n", "not a mapping"),
        ] {
            let text =
                format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ok\n---\n{text}");
            let err = parse(&text).unwrap_err();
            let msg = err.to_string();
            assert!(msg.contains("t.yaml document 2 (line 6)"), "{msg}");
            assert!(msg.contains(want), "{msg} should contain {want}");
        }
    }

    #[test]
    fn the_same_object_twice_is_an_error_naming_both_places() {
        let doc = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  namespace: ns\n";
        let err = parse(&format!("{doc}---\n{doc}")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("ConfigMap ns/a appears twice"), "{msg}");
        assert!(
            msg.contains("document 1") && msg.contains("document 2"),
            "{msg}"
        );
    }

    #[test]
    fn yaml_syntax_errors_carry_a_position() {
        let err = parse("apiVersion: v1\nkind: [unclosed\n").unwrap_err();
        assert!(
            matches!(
                err,
                BundleError::Syntax {
                    position: Some(_),
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn bundle_names_follow_the_object_name_rule() {
        let err = Bundle::from_sources("Bad_Name", Vec::<(PathBuf, String)>::new()).unwrap_err();
        assert!(err.to_string().contains("DNS-1123 subdomain"), "{err}");
    }

    #[test]
    fn unquoted_on_and_yes_are_booleans_as_kubectl_reads_them() {
        let b = parse(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  x: on\n  y: yes\n",
        )
        .unwrap();
        assert_eq!(b.objects[0].object["data"]["x"], true);
        assert_eq!(b.objects[0].object["data"]["y"], true);
    }
}
