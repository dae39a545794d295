//! Plan output: Terraform-style text for people, JSON for machines.
//!
//! The text is a contract users script against, like Terraform's: one block
//! per change with the symbol (`+` create, `~` update, `-/+` replace, `-`
//! delete, `<=` read), and the summary line
//! `Plan: N to add, M to change, K to destroy.`

use std::fmt::Write;

use serde_json::{json, Value};

use super::{Action, Change, Plan};
use crate::resource::Detail;

fn headline(c: &Change) -> String {
    let what = match c.action {
        Action::Create if c.resume_token.is_some() => "will be created (resuming)",
        Action::Create if c.import.is_some() => "will be imported",
        Action::Create => "will be created",
        Action::Update if c.kept => "will be kept and recorded as created again",
        Action::Update => "will be updated in place",
        Action::Replace => "must be replaced",
        Action::Delete if c.gone => "will be removed from the state (already gone)",
        Action::Delete => "will be destroyed",
        Action::Read => "will be read during apply",
        Action::NoOp => "is up to date",
    };
    format!("  # {} {what}", c.address)
}

/// The symbol of a resource change inside a resource, from CloudFormation's
/// `ResourceChange.Action` (`Add`, `Modify`, `Remove`; a modification with
/// `Replacement: True` replaces).
fn detail_symbol(d: &Detail) -> &str {
    match (d.action.as_str(), d.replacement.as_deref()) {
        ("Add", _) => "+",
        ("Modify", Some("True")) => "-/+",
        ("Modify", _) => "~",
        ("Remove", _) => "-",
        // A wait before the calls (an EKS operation in progress).
        ("Wait", _) => "...",
        (other, _) => other,
    }
}

/// How a [`crate::plan::FieldChange::sensitive`] value is shown (also by `kfaws state show`).
pub const SENSITIVE: &str = "(sensitive value)";

fn value(v: &Option<Value>) -> String {
    match v {
        Some(v) => v.to_string(),
        None => "(unset)".into(),
    }
}

/// The lines of one field's change, `(path, before, after)`: where both
/// values are objects only the keys that differ are shown, each as
/// `field.key` and descended into the same way (Terraform's nested diff),
/// so one role's edited trust policy does not print every role's.
/// With `recorded` (the value at the last apply, where known) each line
/// also says whether that part changed outside kfaws (its value now is not
/// the recorded one); `None` where it is not known.
fn nested(
    path: &str,
    before: Option<&Value>,
    after: Option<&Value>,
    recorded: Option<Option<&Value>>,
    out: &mut Vec<Line>,
) {
    if let (Some(Value::Object(b)), Some(Value::Object(a))) = (before, after) {
        let keys: std::collections::BTreeSet<&String> = b.keys().chain(a.keys()).collect();
        for key in keys {
            let (old, new) = (b.get(key), a.get(key));
            if old != new {
                let was = recorded.map(|r| r.and_then(|v| v.get(key)));
                nested(&format!("{path}.{key}"), old, new, was, out);
            }
        }
        return;
    }
    out.push(Line {
        path: path.to_string(),
        before: before.cloned(),
        after: after.cloned(),
        drifted: recorded.map(|was| was != before),
        recorded: recorded.flatten().cloned(),
    });
}

/// One line of a field's change ([`nested`]).
struct Line {
    path: String,
    before: Option<Value>,
    after: Option<Value>,
    drifted: Option<bool>,
    /// The value at the last apply, where known.
    recorded: Option<Value>,
}

/// For two lists of strings or numbers holding different elements: the
/// elements only `before` has and those only `after` has, each in its
/// list's order (a list of policy ARNs reads as what is detached and what
/// is attached). `None` for anything else, or a change of order alone.
fn list_change<'a>(
    before: Option<&'a Value>,
    after: Option<&'a Value>,
) -> Option<(Vec<&'a Value>, Vec<&'a Value>)> {
    let (Some(Value::Array(b)), Some(Value::Array(a))) = (before, after) else {
        return None;
    };
    let scalar = |v: &Value| v.is_string() || v.is_number();
    if !b.iter().all(scalar) || !a.iter().all(scalar) {
        return None;
    }
    let gone: Vec<&Value> = b.iter().filter(|v| !a.contains(v)).collect();
    let new: Vec<&Value> = a.iter().filter(|v| !b.contains(v)).collect();
    (!gone.is_empty() || !new.is_empty()).then_some((gone, new))
}

/// Writes one field line, `      ~ path: before -> after` and its notes; a
/// list of scalars whose elements differ is written element by element
/// (`- removed`, `+ added`) under `      ~ path:`. With `drifted_from`, the
/// list at the last apply of a field changed outside kfaws, each element
/// says which way it drifted: `+ v  # removed outside kfaws` for one the
/// last apply had that is gone now (apply puts it back), `- v  # added
/// outside kfaws` for one present now that the last apply did not have
/// (apply takes it away); an element only the config adds or drops has no
/// note.
fn field_line(
    out: &mut String,
    path: &str,
    before: Option<&Value>,
    after: Option<&Value>,
    drifted_from: Option<&Value>,
    notes: &[&str],
) {
    let notes: String = notes.iter().map(|n| format!("  # {n}")).collect();
    if let Some((gone, new)) = list_change(before, after) {
        let had = |v: &Value| {
            drifted_from
                .and_then(Value::as_array)
                .map(|was| was.contains(v))
        };
        let _ = writeln!(out, "      ~ {path}:{notes}");
        for v in gone {
            let note = match had(v) {
                Some(false) => "  # added outside kfaws",
                _ if path == crate::k8s::resource::EDITED => "  # apply undoes this edit",
                _ => "",
            };
            let _ = writeln!(out, "          - {v}{note}");
        }
        for v in new {
            let note = match had(v) {
                Some(true) => "  # removed outside kfaws",
                _ => "",
            };
            let _ = writeln!(out, "          + {v}{note}");
        }
        return;
    }
    let _ = writeln!(
        out,
        "      ~ {path}: {} -> {}{notes}",
        value(&before.cloned()),
        value(&after.cloned())
    );
}

/// The note on [`Plan::refreshes`]: fields changed outside kfaws that
/// already match the configuration, before the plan's changes (as
/// Terraform puts its "changed outside of Terraform" note first).
fn refreshes(plan: &Plan, out: &mut String) {
    let mut any = false;
    for c in plan.refreshes() {
        if !any {
            out.push_str(
                "Changed outside kfaws since the last apply, already as the configuration wants \
                 (nothing is called for these; apply records the live values in the state):\n",
            );
            any = true;
        }
        let _ = writeln!(out, "\n  # {} ({})", c.address, c.kind);
        for f in &c.refreshed {
            if f.sensitive {
                let _ = writeln!(
                    out,
                    "      ~ {}: {SENSITIVE}  # changed outside kfaws",
                    f.field
                );
                continue;
            }
            let mut lines = Vec::new();
            nested(
                &f.field,
                f.before.as_ref(),
                f.after.as_ref(),
                None,
                &mut lines,
            );
            for l in lines {
                field_line(
                    out,
                    &l.path,
                    l.before.as_ref(),
                    l.after.as_ref(),
                    None,
                    &["changed outside kfaws"],
                );
            }
        }
    }
    if any {
        out.push('\n');
    }
}

/// The note on [`Change::reordered`]: resources whose new order apply records without a call.
fn reorders(plan: &Plan, out: &mut String) {
    let reordered: Vec<&str> = plan
        .changes
        .iter()
        .filter(|c| c.reordered)
        .map(|c| c.address.as_str())
        .collect();
    if !reordered.is_empty() {
        let _ = writeln!(
            out,
            "Resources that only order {} (created before, deleted after; nothing of theirs is \
             an input) were added or removed: apply records the new order in the state, without \
             applying {} again.\n",
            reordered.join(", "),
            if reordered.len() == 1 { "it" } else { "them" }
        );
    }
}

/// The plan as text: changed resources, then the summary line.
pub fn human(plan: &Plan) -> String {
    let mut out = String::new();
    let changes: Vec<&Change> = plan
        .changes
        .iter()
        .filter(|c| c.action != Action::NoOp)
        .collect();
    refreshes(plan, &mut out);
    reorders(plan, &mut out);
    if !plan.has_changes() && plan.destroy {
        // Terraform's words for an empty destroy plan.
        out.push_str(
            "No changes. No objects need to be destroyed: the state records none \
             (never applied, or already destroyed).\n",
        );
    } else if !plan.has_changes() {
        out.push_str("No changes. The infrastructure matches the configuration.\n");
    } else {
        out.push_str("kfaws will perform the following actions:\n");
    }
    // Updates that run only if a dependency's outputs change come last, one
    // line each: a change to one stack can make every dependant one, and a
    // block each would bury the change itself.
    let (maybe, changes): (Vec<&Change>, Vec<&Change>) = changes
        .into_iter()
        .partition(|c| c.action == Action::Update && c.conditional);
    for c in changes {
        out.push('\n');
        out.push_str(&headline(c));
        out.push('\n');
        let _ = writeln!(
            out,
            "{:>3} {} ({})\n      reason: {}",
            c.action.symbol(),
            c.address,
            c.kind,
            c.reason
        );
        for f in &c.fields {
            if f.sensitive {
                let mut notes = String::new();
                if f.drift {
                    notes.push_str("  # changed outside kfaws");
                }
                if f.forces_replacement {
                    notes.push_str("  # forces replacement");
                }
                let side = |v: &Option<Value>| match v {
                    Some(_) => SENSITIVE,
                    None => "(unset)",
                };
                let _ = writeln!(
                    out,
                    "      ~ {}: {} -> {}{notes}",
                    f.field,
                    side(&f.before),
                    side(&f.after)
                );
                continue;
            }
            let mut lines = Vec::new();
            let recorded = f.recorded.as_ref().map(Some);
            nested(
                &f.field,
                f.before.as_ref(),
                f.after.as_ref(),
                recorded,
                &mut lines,
            );
            for l in lines {
                let mut notes = Vec::new();
                let drifted = f.drift && l.drifted.unwrap_or(true);
                if drifted {
                    notes.push("changed outside kfaws");
                }
                if f.forces_replacement {
                    notes.push("forces replacement");
                }
                field_line(
                    &mut out,
                    &l.path,
                    l.before.as_ref(),
                    l.after.as_ref(),
                    // The entries of `edited` are edits, not things added: they get
                    // their own note.
                    l.recorded
                        .as_ref()
                        .filter(|_| drifted && l.path != crate::k8s::resource::EDITED),
                    &notes,
                );
            }
        }
        if !c.details.is_empty() {
            out.push_str("      resource changes:\n");
        }
        for d in &c.details {
            let _ = write!(out, "      {:>3} {} ({})", detail_symbol(d), d.name, d.kind);
            if let Some(r) = &d.replacement {
                let _ = write!(out, "  # replacement: {r}");
            }
            if let Some(c) = &d.condition {
                let _ = write!(out, "  # if condition {c} holds");
            }
            if let Some(n) = &d.note {
                let _ = write!(out, "  # {n}");
            }
            out.push('\n');
        }
    }
    if !maybe.is_empty() {
        out.push_str(
            "\n  # re-checked after their dependencies' changes, updated in place only if a \
             dependency's outputs change (known after apply):\n",
        );
    }
    for c in maybe {
        // The reason's first clause names the dependency.
        let why = c
            .reason
            .split_once("; ")
            .map_or(c.reason.as_str(), |(w, _)| w);
        let _ = writeln!(out, "  ~ {} ({})  # {why}", c.address, c.kind);
    }
    let s = plan.summary();
    if plan.has_changes() {
        out.push_str("\nPlan: ");
        if s.import > 0 {
            let _ = write!(out, "{} to import, ", s.import);
        }
        let _ = write!(
            out,
            "{} to add, {} to change, {} to destroy",
            s.add, s.change, s.destroy
        );
        if s.forget > 0 {
            let _ = write!(
                out,
                ", {} to remove from the state (already gone)",
                s.forget
            );
        }
        if s.keep > 0 {
            let _ = write!(out, ", {} to keep (recorded as created again)", s.keep);
        }
        if s.conditional > 0 {
            let _ = write!(
                out,
                "; {} more to re-apply if a dependency's outputs change",
                s.conditional
            );
        }
        out.push_str(".\n");
        // Said only where the plan deletes a bucket (a delete's preview lists it): a plan
        // deleting none loses nothing by the flag.
        let empties_a_bucket = plan.changes.iter().any(|c| {
            c.details
                .iter()
                .any(|d| d.kind == "AWS::S3::Bucket" && d.action == "Remove")
        });
        if plan.delete_options.force_destroy_buckets && empties_a_bucket {
            out.push_str(
                "\n--force-destroy-buckets: every S3 bucket this plan deletes is emptied first; its \
                 object versions and delete markers are deleted and cannot be recovered.\n",
            );
        }
    }
    out
}

/// The plan as JSON: the [`Plan`] document plus its summary.
pub fn json(plan: &Plan) -> Value {
    let mut v = serde_json::to_value(plan).expect("a plan serializes");
    // A hash over sensitive fields is as guessable as they are ([`FieldChange::hide`]).
    for (change, json) in plan.changes.iter().zip(
        v["changes"]
            .as_array_mut()
            .expect("changes serialize as a list"),
    ) {
        if change.sensitive {
            json.as_object_mut()
                .expect("a change serializes as an object")
                .remove("spec_hash");
        }
    }
    v["summary"] = json!(plan.summary());
    v
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::address::Address;
    use crate::config::{ConfigFile, Overrides};
    use crate::plan::{FieldChange, PLAN_FORMAT_VERSION};

    /// A change of kind `fake` at `address`, with nothing else to it.
    pub(crate) fn change(address: &str, action: Action) -> Change {
        Change {
            address: Address::new(address).unwrap(),
            kind: "fake".into(),
            action,
            reason: "because".into(),
            drift: false,
            fields: vec![],
            dependencies: vec![],
            spec_hash: None,
            resume_token: None,
            details: vec![],
            conditional: false,
            refreshed: vec![],
            reordered: false,
            import: None,
            gone: false,
            kept: false,
            released: Vec::new(),
            sensitive: false,
        }
    }

    /// A plan of `changes` for deployment `ml` in us-east-1.
    pub(crate) fn plan(changes: Vec<Change>) -> Plan {
        let config = ConfigFile::parse(
            std::path::Path::new("k"),
            "name = \"ml\"\nregion = \"us-east-1\"",
        )
        .unwrap()
        .resolve(&Overrides::default(), None)
        .unwrap();
        Plan {
            format_version: PLAN_FORMAT_VERSION,
            destroy: false,
            config,
            state_serial: 3,
            state_lineage: uuid::Uuid::nil(),
            targets: vec![],
            account_id: None,
            delete_options: Default::default(),
            changes,
        }
    }

    #[test]
    fn a_destroy_that_empties_buckets_says_so() {
        let mut storage = change("s", Action::Delete);
        storage.details.push(crate::resource::Detail {
            action: "Remove".into(),
            name: "bucket-1".into(),
            kind: "AWS::S3::Bucket".into(),
            replacement: None,
            condition: None,
            note: Some("emptied first".into()),
        });
        let mut p = plan(vec![storage]);
        assert!(!human(&p).contains("--force-destroy-buckets"));
        p.delete_options.force_destroy_buckets = true;
        assert!(human(&p).contains("--force-destroy-buckets: every S3 bucket this plan deletes"));
        // A delete of no bucket.
        let mut other = plan(vec![change("n", Action::Delete)]);
        other.delete_options.force_destroy_buckets = true;
        assert!(!human(&other).contains("--force-destroy-buckets"));
        let nothing = plan(vec![change("s", Action::NoOp)]);
        let mut nothing_forced = nothing.clone();
        nothing_forced.delete_options.force_destroy_buckets = true;
        assert_eq!(human(&nothing_forced), human(&nothing));
    }

    #[test]
    fn summary_line_counts_replace_as_add_and_destroy() {
        let mut replace = change("c", Action::Replace);
        replace.fields.push(FieldChange {
            sensitive: false,
            field: "cidr".into(),
            before: Some(json!("10.0.0.0/16")),
            after: Some(json!("10.1.0.0/16")),
            forces_replacement: true,
            drift: false,
            recorded: None,
        });
        let p = plan(vec![
            change("a", Action::Create),
            change("b", Action::Update),
            replace,
            change("d", Action::Delete),
            change("e", Action::NoOp),
        ]);
        let text = human(&p);
        assert!(
            text.ends_with("Plan: 2 to add, 1 to change, 2 to destroy.\n"),
            "{text}"
        );
        assert!(text.contains("  + a (fake)"), "{text}");
        assert!(text.contains("  ~ b (fake)"), "{text}");
        assert!(text.contains("-/+ c (fake)"), "{text}");
        assert!(text.contains("  - d (fake)"), "{text}");
        assert!(
            text.contains("~ cidr: \"10.0.0.0/16\" -> \"10.1.0.0/16\"  # forces replacement"),
            "{text}"
        );
        assert!(!text.contains(" e "), "no-ops are not listed: {text}");
    }

    #[test]
    fn resource_changes_are_listed_under_their_resource() {
        let mut update = change("stack.network", Action::Update);
        let detail = |action: &str, name: &str, replacement: Option<&str>| Detail {
            action: action.into(),
            name: name.into(),
            kind: "AWS::EC2::Thing".into(),
            replacement: replacement.map(Into::into),
            condition: None,
            note: None,
        };
        update.details = vec![
            detail("Add", "Added", None),
            detail("Modify", "Changed", Some("False")),
            detail("Modify", "Replaced", Some("True")),
            detail("Remove", "Removed", None),
        ];
        let text = human(&plan(vec![update]));
        let expected = "      resource changes:\n\
            \x20       + Added (AWS::EC2::Thing)\n\
            \x20       ~ Changed (AWS::EC2::Thing)  # replacement: False\n\
            \x20     -/+ Replaced (AWS::EC2::Thing)  # replacement: True\n\
            \x20       - Removed (AWS::EC2::Thing)\n";
        assert!(text.contains(expected), "{text}");
    }

    #[test]
    fn a_changed_object_field_shows_only_the_keys_that_differ() {
        let mut update = change("stack.iam", Action::Update);
        update.fields.push(FieldChange {
            sensitive: false,
            field: "trust".into(),
            before: Some(json!({"ClusterRole": {"service": "eks.amazonaws.com"},
                "NodeRole": {"service": "ec2.amazonaws.com", "other_statements": [1]}})),
            after: Some(json!({"ClusterRole": {"service": "eks.amazonaws.com"},
                "NodeRole": {"service": "ec2.amazonaws.com"}, "New": "x"})),
            drift: true,
            forces_replacement: false,
            recorded: None,
        });
        let text = human(&plan(vec![update]));
        assert!(
            text.contains("~ trust.New: (unset) -> \"x\"  # changed outside kfaws\n"),
            "{text}"
        );
        assert!(
            text.contains("~ trust.NodeRole.other_statements: [1] -> (unset)"),
            "{text}"
        );
        assert!(!text.contains("ClusterRole"), "{text}");
    }

    #[test]
    fn a_changed_list_of_names_shows_what_goes_and_what_comes() {
        let mut update = change("stack.iam", Action::Update);
        update.fields.push(FieldChange {
            sensitive: false,
            field: "policies".into(),
            before: Some(json!({"NodeRole": {"managed": ["Admin", "ECR", "Worker"]}})),
            after: Some(json!({"NodeRole": {"managed": ["ECR", "Worker", "CNI"]}})),
            drift: true,
            forces_replacement: false,
            recorded: None,
        });
        let text = human(&plan(vec![update]));
        assert!(
            text.contains(
                "      ~ policies.NodeRole.managed:  # changed outside kfaws\n\
                 \x20         - \"Admin\"\n\
                 \x20         + \"CNI\"\n"
            ),
            "{text}"
        );
        // Order alone, or lists of objects, print whole.
        let mut reordered = change("s", Action::Update);
        reordered.fields.push(FieldChange {
            sensitive: false,
            field: "order".into(),
            before: Some(json!(["a", "b"])),
            after: Some(json!(["b", "a"])),
            drift: false,
            forces_replacement: false,
            recorded: None,
        });
        let text = human(&plan(vec![reordered]));
        assert!(
            text.contains("~ order: [\"a\",\"b\"] -> [\"b\",\"a\"]\n"),
            "{text}"
        );
    }

    #[test]
    fn each_element_of_a_drifted_list_says_which_way_it_drifted() {
        let mut update = change("k8s.efs-storage", Action::Update);
        // Live: `sc` deleted and `stray` added outside kfaws; the config
        // drops `old` and adds `new`, which are no drift.
        update.fields.push(FieldChange {
            sensitive: false,
            field: "objects".into(),
            before: Some(json!(["old", "pv", "stray"])),
            after: Some(json!(["new", "pv", "sc"])),
            forces_replacement: false,
            drift: true,
            recorded: Some(json!(["old", "pv", "sc"])),
        });
        let text = human(&plan(vec![update]));
        assert!(
            text.contains(
                "      ~ objects:  # changed outside kfaws\n\
                 \x20         - \"old\"\n\
                 \x20         - \"stray\"  # added outside kfaws\n\
                 \x20         + \"new\"\n\
                 \x20         + \"sc\"  # removed outside kfaws\n"
            ),
            "{text}"
        );
    }

    /// The entries of a bundle's `edited` are edits made outside kfaws, not things added:
    /// each says apply undoes it, none is called "added".
    #[test]
    fn the_edits_of_a_bundle_are_not_called_added() {
        let mut update = change("k8s.efs-csi", Action::Update);
        let edit =
            "ServiceAccount kube-system/sa: metadata.annotations[eks.amazonaws.com/role-arn]";
        update.fields.push(FieldChange {
            sensitive: false,
            field: crate::k8s::resource::EDITED.into(),
            before: Some(json!([edit])),
            after: Some(json!([])),
            forces_replacement: false,
            drift: true,
            recorded: Some(json!([])),
        });
        let text = human(&plan(vec![update]));
        assert!(
            text.contains(&format!(
                "      ~ edited:  # changed outside kfaws\n          - {}  # apply undoes this edit\n",
                json!(edit)
            )),
            "{text}"
        );
    }

    #[test]
    fn only_the_keys_changed_outside_kfaws_are_marked_so() {
        let mut update = change("stack.iam", Action::Update);
        update.fields.push(FieldChange {
            sensitive: false,
            field: "parameters".into(),
            before: Some(json!({"A": "edited", "B": "1"})),
            after: Some(json!({"A": "a", "B": "2"})),
            forces_replacement: false,
            drift: true,
            recorded: Some(json!({"A": "a", "B": "1"})),
        });
        let text = human(&plan(vec![update]));
        assert!(
            text.contains("~ parameters.A: \"edited\" -> \"a\"  # changed outside kfaws\n"),
            "{text}"
        );
        assert!(
            text.contains("~ parameters.B: \"1\" -> \"2\"\n"),
            "the config's own change is not drift: {text}"
        );
    }

    #[test]
    fn no_changes_says_so() {
        let p = plan(vec![change("a", Action::NoOp)]);
        assert_eq!(
            human(&p),
            "No changes. The infrastructure matches the configuration.\n"
        );
    }

    #[test]
    fn an_empty_destroy_plan_says_nothing_needs_destroying_not_that_the_config_matches() {
        let mut p = plan(vec![]);
        p.destroy = true;
        let text = human(&p);
        assert!(
            text.starts_with("No changes. No objects need to be destroyed"),
            "{text}"
        );
        assert!(!text.contains("matches the configuration"), "{text}");
    }

    #[test]
    fn fields_changed_outside_kfaws_to_the_desired_value_are_noted_before_the_changes() {
        let mut refreshed = change("eks.cluster", Action::NoOp);
        refreshed.refreshed.push(FieldChange {
            sensitive: false,
            field: "kubernetes_version".into(),
            before: Some(json!("1.33")),
            after: Some(json!("1.34")),
            forces_replacement: false,
            drift: true,
            recorded: None,
        });
        let alone = human(&plan(vec![refreshed.clone()]));
        assert!(
            alone.starts_with("Changed outside kfaws since the last apply"),
            "{alone}"
        );
        assert!(
            alone.contains(
                "  # eks.cluster (fake)\n      ~ kubernetes_version: \"1.33\" -> \"1.34\"  \
                 # changed outside kfaws\n"
            ),
            "{alone}"
        );
        assert!(
            alone.ends_with("No changes. The infrastructure matches the configuration.\n"),
            "{alone}"
        );
        let with_changes = human(&plan(vec![refreshed.clone(), change("b", Action::Update)]));
        let note = with_changes.find("# eks.cluster").unwrap();
        let actions = with_changes.find("kfaws will perform").unwrap();
        assert!(note < actions, "{with_changes}");
        assert!(with_changes.ends_with("Plan: 0 to add, 1 to change, 0 to destroy.\n"));
        // Also when a dependency's change makes it a conditional update.
        let mut conditional = refreshed;
        conditional.action = Action::Update;
        conditional.conditional = true;
        let text = human(&plan(vec![conditional, change("b", Action::Update)]));
        assert!(
            text.starts_with("Changed outside kfaws since the last apply"),
            "{text}"
        );
        // It is listed after the updates that will happen, on one line
        // saying the update may not happen.
        let will = text.find("  # b will be updated in place\n").unwrap();
        let may = text
            .find(
                "\n  # re-checked after their dependencies' changes, updated in place only if \
                 a dependency's outputs change (known after apply):\n  ~ eks.cluster (fake)  \
                 # because\n",
            )
            .unwrap_or_else(|| panic!("{text}"));
        assert!(will < may, "{text}");
    }

    #[test]
    fn a_create_that_re_attaches_reads_as_an_import() {
        let mut import = change("eks.nodegroup.big", Action::Create);
        import.import = Some("arn:aws:eks:us-east-1:1:nodegroup/c/big/x".into());
        let text = human(&plan(vec![import, change("b", Action::Create)]));
        assert!(
            text.contains("  # eks.nodegroup.big will be imported\n"),
            "{text}"
        );
        assert!(
            text.ends_with("Plan: 1 to import, 1 to add, 0 to change, 0 to destroy.\n"),
            "{text}"
        );
    }

    #[test]
    fn a_kept_resource_reads_as_kept_not_as_an_update() {
        let mut kept = change("eks.nodegroup.cpu", Action::Update);
        kept.kept = true;
        let text = human(&plan(vec![kept, change("stack.iam", Action::Update)]));
        assert!(
            text.contains("  # eks.nodegroup.cpu will be kept and recorded as created again\n")
                && text.contains("  # stack.iam will be updated in place\n"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "Plan: 0 to add, 1 to change, 0 to destroy, 1 to keep (recorded as created \
                 again).\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_delete_of_something_already_gone_reads_as_removed_from_the_state() {
        let mut gone = change("stack.efs", Action::Delete);
        gone.gone = true;
        assert_eq!(gone.step(), crate::plan::Step::Forget);
        let text = human(&plan(vec![gone, change("stack.iam", Action::Delete)]));
        assert!(
            text.contains("  # stack.efs will be removed from the state (already gone)\n")
                && text.contains("  # stack.iam will be destroyed\n"),
            "{text}"
        );
        assert!(
            text.ends_with(
                "Plan: 0 to add, 0 to change, 1 to destroy, 1 to remove from the state (already \
                 gone).\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn json_carries_changes_and_summary() {
        let p = plan(vec![change("a", Action::Create)]);
        let v = json(&p);
        assert_eq!(v["changes"][0]["action"], "create");
        assert_eq!(v["summary"]["add"], 1);
        assert_eq!(v["state_serial"], 3);
    }
}
