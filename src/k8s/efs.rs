//! The Amazon EFS CSI driver's rules for the objects that use it, checked
//! before anything is applied (cases C15 and C16).
//!
//! - A PersistentVolume of driver `efs.csi.aws.com` names its file system
//!   in `spec.csi.volumeHandle`: `FileSystemId[:Subpath[:AccessPointId]]`
//!   (aws-efs-csi-driver, docs "Static provisioning" and `parseVolumeId` in
//!   `pkg/driver/node.go`: at most three `:`-separated fields; a subpath is
//!   absolute; the middle field is empty when only an access point is
//!   given). The ids follow the EFS API's patterns: `fs-` and 8 to 40
//!   lowercase hex digits, `fsap-` and 8 to 40
//!   ([FileSystemId](https://docs.aws.amazon.com/efs/latest/ug/API_CreateFileSystem.html#efs-CreateFileSystem-response-FileSystemId),
//!   [AccessPointId](https://docs.aws.amazon.com/efs/latest/ug/API_CreateAccessPoint.html#efs-CreateAccessPoint-response-AccessPointId)).
//! - A StorageClass of provisioner `efs.csi.aws.com` with
//!   `provisioningMode: efs-ap` (dynamic provisioning through access points,
//!   the only mode the driver offers) needs `fileSystemId` and
//!   `directoryPerms`, an octal mode such as `700` (driver docs, "Dynamic
//!   provisioning", StorageClass parameters). Without `directoryPerms` the
//!   driver refuses every claim at provisioning time, long after the apply
//!   succeeded.
//!
//! kfaws itself emits the plain form: `volumeHandle` = the file system id.

use std::sync::LazyLock;

use regex_lite::Regex;
use serde_json::Value;

use super::bundle::{Bundle, Manifest};

/// The driver name (`CSIDriver` object and `spec.csi.driver`).
pub const DRIVER: &str = "efs.csi.aws.com";

static FS_ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new("^fs-[0-9a-f]{8,40}$").expect("a valid pattern"));
static AP_ID: LazyLock<Regex> =
    LazyLock::new(|| Regex::new("^fsap-[0-9a-f]{8,40}$").expect("a valid pattern"));
static PERMS: LazyLock<Regex> =
    LazyLock::new(|| Regex::new("^[0-7]{3,4}$").expect("a valid pattern"));

/// One object that breaks a rule of the driver.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{object} ({origin}): {}: {problem}", field_and_value(.field, .value))]
pub struct EfsError {
    /// `Kind namespace/name`.
    pub object: String,
    /// Where it is written (file, document, line).
    pub origin: String,
    /// The field, as a dotted path.
    pub field: String,
    /// Its value (empty when missing).
    pub value: String,
    /// The rule and its source.
    pub problem: String,
}

fn field_and_value(field: &str, value: &str) -> String {
    if value.is_empty() {
        format!("{field} is missing")
    } else {
        format!("{field} {value:?} is invalid")
    }
}

/// Checks an EFS file system id against the EFS API's pattern.
///
/// # Errors
/// The rule broken, as text.
pub fn check_file_system_id(id: &str) -> Result<(), String> {
    if FS_ID.is_match(id) {
        Ok(())
    } else {
        Err(
            "an EFS file system id is `fs-` and 8 to 40 lowercase hex digits \
             (EFS API reference, CreateFileSystem: FileSystemId)"
                .into(),
        )
    }
}

/// Checks a PersistentVolume `volumeHandle` of the EFS CSI driver:
/// `fs-…[:/path[:fsap-…]]` (see the module docs).
///
/// # Errors
/// The rule broken, as text.
pub fn check_volume_handle(handle: &str) -> Result<(), String> {
    const GRAMMAR: &str = "the EFS CSI driver's volumeHandle is \
        FileSystemId[:Subpath[:AccessPointId]], e.g. fs-0123456789abcdef0, \
        fs-0123456789abcdef0:/data or fs-0123456789abcdef0::fsap-0123456789abcdef0 \
        (aws-efs-csi-driver, static provisioning)";
    let fields: Vec<&str> = handle.split(':').collect();
    if fields.len() > 3 {
        return Err(format!(
            "{} fields separated by `:`, at most 3 allowed; {GRAMMAR}",
            fields.len()
        ));
    }
    check_file_system_id(fields[0]).map_err(|e| format!("{e}; {GRAMMAR}"))?;
    if let Some(path) = fields.get(1) {
        let access_point = fields.get(2).is_some();
        if !(path.starts_with('/') || (path.is_empty() && access_point)) {
            return Err(format!(
                "the subpath {path:?} must be absolute (or empty before an access point); {GRAMMAR}"
            ));
        }
    }
    if let Some(ap) = fields.get(2) {
        if !AP_ID.is_match(ap) {
            return Err(format!(
                "the access point {ap:?} is not `fsap-` and 8 to 40 lowercase hex digits \
                 (EFS API reference, CreateAccessPoint: AccessPointId); {GRAMMAR}"
            ));
        }
    }
    Ok(())
}

fn str_at<'a>(object: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(object, |v, k| v.get(k))
        .and_then(Value::as_str)
}

fn error(m: &Manifest, field: &str, value: &str, problem: String) -> EfsError {
    EfsError {
        object: m.describe(),
        origin: m.origin.to_string(),
        field: field.into(),
        value: value.into(),
        problem,
    }
}

fn check_manifest(m: &Manifest) -> Option<EfsError> {
    match (m.group(), m.kind.as_str()) {
        ("", "PersistentVolume") => {
            if str_at(&m.object, &["spec", "csi", "driver"]) != Some(DRIVER) {
                return None;
            }
            let handle = str_at(&m.object, &["spec", "csi", "volumeHandle"]).unwrap_or("");
            check_volume_handle(handle)
                .err()
                .map(|p| error(m, "spec.csi.volumeHandle", handle, p))
        }
        ("storage.k8s.io", "StorageClass") => {
            if str_at(&m.object, &["provisioner"]) != Some(DRIVER) {
                return None;
            }
            let mode = str_at(&m.object, &["parameters", "provisioningMode"]).unwrap_or("");
            if mode != "efs-ap" {
                return Some(error(
                    m,
                    "parameters.provisioningMode",
                    mode,
                    "the EFS CSI driver provisions through access points only: \
                     set provisioningMode: efs-ap (driver docs, dynamic provisioning)"
                        .into(),
                ));
            }
            let perms = str_at(&m.object, &["parameters", "directoryPerms"]);
            if !perms.is_some_and(|p| PERMS.is_match(p)) {
                return Some(error(
                    m,
                    "parameters.directoryPerms",
                    perms.unwrap_or_default(),
                    "provisioningMode efs-ap needs directoryPerms, the octal mode of each \
                     access point's root directory, e.g. \"700\" (driver docs, dynamic \
                     provisioning); without it every claim fails at provisioning time"
                        .into(),
                ));
            }
            let fs = str_at(&m.object, &["parameters", "fileSystemId"]).unwrap_or("");
            check_file_system_id(fs)
                .err()
                .map(|p| error(m, "parameters.fileSystemId", fs, p))
        }
        _ => None,
    }
}

/// Every object of `bundle` that breaks a rule of the EFS CSI driver.
pub fn check_bundle(bundle: &Bundle) -> Vec<EfsError> {
    bundle.objects.iter().filter_map(check_manifest).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(yaml: &str) -> Bundle {
        Bundle::from_sources("t", [("t.yaml".into(), yaml.to_string())]).unwrap()
    }

    #[test]
    fn volume_handles_follow_the_driver_grammar_case_c16() {
        for ok in [
            "fs-0123abcd",
            "fs-0123456789abcdef0",
            "fs-0123456789abcdef0:/dir1",
            "fs-0123456789abcdef0:/dir1:fsap-0123456789abcdef0",
            "fs-0123456789abcdef0::fsap-0123456789abcdef0",
        ] {
            assert_eq!(check_volume_handle(ok), Ok(()), "{ok}");
        }
        // C16: a 7-digit id, and an `efs:` prefix (four fields).
        let short = check_volume_handle("fs-abc1234:/dir1").unwrap_err();
        assert!(short.contains("8 to 40 lowercase hex digits"), "{short}");
        let prefixed =
            check_volume_handle("efs:fs-0123456789abcdef0::fsap-0123456789abcdef0").unwrap_err();
        assert!(prefixed.starts_with("4 fields"), "{prefixed}");
        assert!(check_volume_handle("fs-0123456789abcdef0:dir").is_err());
        assert!(check_volume_handle("fs-0123456789abcdef0:/d:ap-1").is_err());
        assert!(check_volume_handle("FS-0123456789ABCDEF0").is_err());
    }

    #[test]
    fn an_efs_ap_storage_class_without_directory_perms_is_an_error_case_c15() {
        let errors = check_bundle(&bundle(
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: efs-sc}\n\
             provisioner: efs.csi.aws.com\nparameters:\n  provisioningMode: efs-ap\n  \
             fileSystemId: fs-0123456789abcdef0\n",
        ));
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "parameters.directoryPerms");
        let text = errors[0].to_string();
        assert!(text.starts_with("StorageClass efs-sc (t.yaml"), "{text}");
        assert!(text.contains("needs directoryPerms"), "{text}");
    }

    #[test]
    fn only_objects_of_the_efs_driver_are_checked() {
        let errors = check_bundle(&bundle(
            "apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: gp3}\n\
             provisioner: ebs.csi.aws.com\n---\n\
             apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: a}\n\
             spec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOnce], \
             csi: {driver: ebs.csi.aws.com, volumeHandle: vol-1}}\n---\n\
             apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: b}\n\
             spec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteMany], \
             csi: {driver: efs.csi.aws.com, volumeHandle: 'fs-abc1234:/dir1'}}\n",
        ));
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(errors[0].object, "PersistentVolume b");
        assert_eq!(errors[0].value, "fs-abc1234:/dir1");
    }
}
