//! The two Availability Zones of the network: zones that offer every node
//! group's instance type, chosen once and then kept.
//!
//! The choice is made before planning, not by CloudFormation's
//! `Fn::GetAZs` (which lists zones whatever they offer, so a node group of
//! an instance type missing from one of them fails only when EKS creates
//! it, long after the network exists). Sources, in order:
//!
//! 1. `options.availability_zones` in kfaws.toml, when set;
//! 2. the zones recorded in the state for the deployment's network (a later
//!    change of the offerings, or a zone that starts offering the type,
//!    must never move the subnets: that would replace them and everything
//!    in them);
//! 3. otherwise: EC2 `DescribeAvailabilityZones` (state `available`, zone
//!    type `availability-zone`, i.e. no Local or Wavelength Zones, which
//!    need an opt-in) intersected with `DescribeInstanceTypeOfferings` (location
//!    type `availability-zone`, filtered to the configured instance types),
//!    sorted by name, the first two.
//!
//! Zones from sources 1 and 2 are checked against the offerings too (a node
//! group added later may use a type one of them lacks). Calls are read-only
//! (EC2 API Reference: DescribeAvailabilityZones,
//! DescribeInstanceTypeOfferings).

use std::collections::{BTreeMap, BTreeSet};

use aws_config::SdkConfig;
use aws_sdk_ec2::types::{Filter, LocationType};

/// How many zones the network stack spans (a public and a private subnet in
/// each; EKS needs subnets in at least two zones, EKS User Guide, "VPC and
/// subnet requirements").
pub const ZONE_COUNT: usize = 2;

/// Zone IDs in which EKS refuses cluster subnets (CreateCluster answers
/// `UnsupportedAvailabilityZoneException`): `use1-az3` (us-east-1),
/// `usw1-az2` (us-west-1), `cac1-az3` (ca-central-1), as eksctl and the
/// Terraform EKS examples exclude them. Zone IDs, not names: names are mapped
/// to IDs per account (EC2 User Guide, "AZ IDs").
pub const EKS_UNSUPPORTED_ZONE_IDS: [&str; 3] = ["use1-az3", "usw1-az2", "cac1-az3"];

/// Where a set of zones came from, for error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `options.availability_zones` in the config.
    Config,
    /// Recorded in the state when the network was created.
    State,
}

/// A node group's instance type, with the config field that sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wanted {
    /// The config field, e.g. `node_groups.cpu.instance_type`.
    pub field: String,
    /// The instance type, e.g. `m5.xlarge`.
    pub instance_type: String,
}

/// What the region offers: usable zones, and the zones offering each type.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Offerings {
    /// The region.
    pub region: String,
    /// Zones in state `available` that need no opt-in.
    pub available: BTreeSet<String>,
    /// Zones of `available` whose zone IDs EKS refuses cluster subnets in
    /// ([`EKS_UNSUPPORTED_ZONE_IDS`]), name → zone ID: never chosen, and
    /// refused when configured.
    pub eks_unsupported: BTreeMap<String, String>,
    /// Instance type → the zones offering it (any state).
    pub by_type: BTreeMap<String, BTreeSet<String>>,
}

/// Why no zones could be chosen, or why the given ones do not fit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZoneError {
    /// An instance type is offered in fewer than two usable zones.
    #[error(
        "{field} = {instance_type:?}: the instance type is offered in {} of region {region} ({}); \
         the network needs {ZONE_COUNT} Availability Zones that offer it (EC2 \
         DescribeInstanceTypeOfferings): choose an instance type offered in at least \
         {ZONE_COUNT} zones, or another region",
        count(.offered_in), list(.offered_in)
    )]
    TooFewZones {
        /// The config field.
        field: String,
        /// The instance type.
        instance_type: String,
        /// The region.
        region: String,
        /// The usable zones that offer it.
        offered_in: Vec<String>,
    },
    /// No zone of the region offers the type at all: most often a
    /// misspelt name (`m5.huge`), or a type this region does not have.
    #[error(
        "{field} = {instance_type:?}: no Availability Zone of region {region} offers this \
         instance type (EC2 DescribeInstanceTypeOfferings lists none): check its name against \
         the EC2 instance types (e.g. \"m5.xlarge\"), or choose a region that has it"
    )]
    NotOffered {
        /// The config field.
        field: String,
        /// The instance type.
        instance_type: String,
        /// The region.
        region: String,
    },
    /// Each type has two zones, but no two zones offer all of them.
    #[error(
        "no {ZONE_COUNT} Availability Zones of region {region} offer every node group's \
         instance type: {}; use instance types offered in common zones, or set \
         options.availability_zones",
        .offers.iter().map(|(w, z)| format!("{} = {:?} in {}", w.field, w.instance_type, list(z))).collect::<Vec<_>>().join("; ")
    )]
    NoCommonZones {
        /// The region.
        region: String,
        /// Each wanted type and the usable zones offering it.
        offers: Vec<(Wanted, Vec<String>)>,
    },
    /// A fixed (configured or recorded) zone does not offer a type, or is not usable.
    #[error(
        "{field} = {instance_type:?} is not offered in Availability Zone {zone} of region \
         {region}, {}; it is offered in {}. {}",
        match .origin { Source::Config => "set in options.availability_zones", Source::State => "where the deployment's network was created" },
        list(.offered_in),
        match .origin {
            Source::Config => "Change options.availability_zones or the instance type.",
            Source::State => "The network's zones are kept for the deployment's life (moving them replaces the subnets and everything in them): choose an instance type offered in the network's zones.",
        }
    )]
    FixedZoneLacksType {
        /// The config field.
        field: String,
        /// The instance type.
        instance_type: String,
        /// The region.
        region: String,
        /// The zone that lacks it.
        zone: String,
        /// Where the zone came from.
        origin: Source,
        /// The usable zones that offer it.
        offered_in: Vec<String>,
    },
    /// A configured zone is one whose zone ID EKS refuses cluster subnets in.
    #[error(
        "options.availability_zones: {zone} is zone ID {zone_id} in this account, in which EKS \
         refuses cluster subnets (UnsupportedAvailabilityZoneException); choose other zones of \
         {region}, or leave options.availability_zones out and kfaws chooses"
    )]
    EksUnsupported {
        /// The region.
        region: String,
        /// The configured zone's name.
        zone: String,
        /// Its zone ID.
        zone_id: String,
    },
    /// An EC2 call failed.
    #[error(
        "cannot list the Availability Zones and instance type offerings of {region}: {message}"
    )]
    Api {
        /// The region.
        region: String,
        /// The SDK's message.
        message: String,
    },
}

fn count(zones: &[String]) -> String {
    match zones.len() {
        0 => "no Availability Zone".into(),
        1 => "1 Availability Zone".into(),
        n => format!("{n} Availability Zones"),
    }
}

fn list(zones: &[String]) -> String {
    if zones.is_empty() {
        "none".into()
    } else {
        zones.join(", ")
    }
}

impl Offerings {
    fn usable_for(&self, instance_type: &str) -> BTreeSet<String> {
        self.by_type
            .get(instance_type)
            .map(|z| z.intersection(&self.available).cloned().collect())
            .unwrap_or_default()
    }
}

/// Chooses the network's zones. `fixed` (configured or recorded zones) are
/// kept if they offer every wanted type; otherwise the first
/// [`ZONE_COUNT`] usable zones, by name, that offer all of them.
///
/// # Errors
/// [`ZoneError`] naming the field, the instance type, the region and the
/// zones that offer it.
pub fn choose(
    wanted: &[Wanted],
    offerings: &Offerings,
    fixed: Option<(&[String], Source)>,
) -> Result<Vec<String>, ZoneError> {
    let region = offerings.region.clone();
    for w in wanted {
        let usable: Vec<String> = offerings.usable_for(&w.instance_type).into_iter().collect();
        if !offerings.by_type.contains_key(&w.instance_type) {
            return Err(ZoneError::NotOffered {
                field: w.field.clone(),
                instance_type: w.instance_type.clone(),
                region,
            });
        }
        if usable.len() < ZONE_COUNT {
            return Err(ZoneError::TooFewZones {
                field: w.field.clone(),
                instance_type: w.instance_type.clone(),
                region,
                offered_in: usable,
            });
        }
    }
    if let Some((zones, source)) = fixed {
        // A recorded zone is the network's, whatever EKS now says: only a
        // configured one is refused here.
        if source == Source::Config {
            if let Some((zone, zone_id)) = zones
                .iter()
                .find_map(|z| offerings.eks_unsupported.get_key_value(z))
            {
                return Err(ZoneError::EksUnsupported {
                    region,
                    zone: zone.clone(),
                    zone_id: zone_id.clone(),
                });
            }
        }
        for w in wanted {
            let usable = offerings.usable_for(&w.instance_type);
            if let Some(zone) = zones.iter().find(|z| !usable.contains(*z)) {
                return Err(ZoneError::FixedZoneLacksType {
                    field: w.field.clone(),
                    instance_type: w.instance_type.clone(),
                    region,
                    zone: zone.clone(),
                    origin: source,
                    offered_in: usable.into_iter().collect(),
                });
            }
        }
        return Ok(zones.to_vec());
    }
    let common: BTreeSet<String> = wanted
        .iter()
        .map(|w| offerings.usable_for(&w.instance_type))
        .reduce(|a, b| a.intersection(&b).cloned().collect())
        .unwrap_or_else(|| offerings.available.clone())
        .into_iter()
        .filter(|z| !offerings.eks_unsupported.contains_key(z))
        .collect();
    if common.len() < ZONE_COUNT {
        return Err(ZoneError::NoCommonZones {
            region,
            offers: wanted
                .iter()
                .map(|w| {
                    let zones = offerings.usable_for(&w.instance_type);
                    (w.clone(), zones.into_iter().collect())
                })
                .collect(),
        });
    }
    Ok(common.into_iter().take(ZONE_COUNT).collect())
}

/// Reads the region's usable zones and where each wanted type is offered.
///
/// # Errors
/// [`ZoneError::Api`] when a call fails.
pub async fn offerings(
    aws: &SdkConfig,
    region: &str,
    instance_types: &BTreeSet<String>,
) -> Result<Offerings, ZoneError> {
    let api = |e: String| ZoneError::Api {
        region: region.to_string(),
        message: e,
    };
    let ec2 = crate::aws::client::<aws_sdk_ec2::Client>(aws);
    let zones = ec2
        .describe_availability_zones()
        .filters(Filter::builder().name("state").values("available").build())
        .send()
        .await
        .map_err(|e| api(super::error_message(&e)))?;
    let mut eks_unsupported = BTreeMap::new();
    let available = zones
        .availability_zones()
        .iter()
        // Availability Zones proper: Local and Wavelength Zones have
        // another zone type and an opt-in status (AvailabilityZone,
        // ZoneType and OptInStatus: "For Availability Zones, this parameter
        // always has the value of opt-in-not-required").
        .filter(|z| {
            z.zone_type().is_none_or(|t| t == "availability-zone")
                && z.opt_in_status()
                    .is_none_or(|s| s.as_str() == "opt-in-not-required")
                && z.state().map(|s| s.as_str()) == Some("available")
        })
        .inspect(|z| {
            if let (Some(name), Some(id)) = (z.zone_name(), z.zone_id()) {
                if EKS_UNSUPPORTED_ZONE_IDS.contains(&id) {
                    eks_unsupported.insert(name.to_string(), id.to_string());
                }
            }
        })
        .filter_map(|z| z.zone_name().map(str::to_string))
        .collect();
    let mut by_type: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut pages = ec2
        .describe_instance_type_offerings()
        .location_type(LocationType::AvailabilityZone)
        .filters(
            Filter::builder()
                .name("instance-type")
                .set_values(Some(instance_types.iter().cloned().collect()))
                .build(),
        )
        .into_paginator()
        .send();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| api(super::error_message(&e)))?;
        for o in page.instance_type_offerings() {
            if let (Some(t), Some(zone)) = (o.instance_type(), o.location()) {
                by_type
                    .entry(t.as_str().to_string())
                    .or_default()
                    .insert(zone.to_string());
            }
        }
    }
    Ok(Offerings {
        region: region.to_string(),
        available,
        eks_unsupported,
        by_type,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offerings(types: &[(&str, &[&str])]) -> Offerings {
        Offerings {
            region: "us-east-1".into(),
            available: ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
                .map(String::from)
                .into(),
            eks_unsupported: BTreeMap::new(),
            by_type: types
                .iter()
                .map(|(t, z)| (t.to_string(), z.iter().map(|s| s.to_string()).collect()))
                .collect(),
        }
    }

    fn wanted(pairs: &[(&str, &str)]) -> Vec<Wanted> {
        pairs
            .iter()
            .map(|(g, t)| Wanted {
                field: format!("node_groups.{g}.instance_type"),
                instance_type: t.to_string(),
            })
            .collect()
    }

    #[test]
    fn the_first_two_usable_zones_offering_every_type_sorted_by_name() {
        let o = offerings(&[
            ("m5.xlarge", &["us-east-1d", "us-east-1b", "us-east-1c"]),
            ("g5.xlarge", &["us-east-1c", "us-east-1d", "us-east-1a"]),
        ]);
        let w = wanted(&[("cpu", "m5.xlarge"), ("gpu", "g5.xlarge")]);
        assert_eq!(choose(&w, &o, None).unwrap(), ["us-east-1c", "us-east-1d"]);
    }

    #[test]
    fn a_configured_zone_eks_refuses_is_named_with_its_zone_id() {
        let mut o = offerings(&[("m5.xlarge", &["us-east-1a", "us-east-1b", "us-east-1e"])]);
        o.available.insert("us-east-1e".into());
        o.eks_unsupported
            .insert("us-east-1e".into(), "use1-az3".into());
        let zones = ["us-east-1a".to_string(), "us-east-1e".to_string()];
        let w = wanted(&[("cpu", "m5.xlarge")]);
        let e = choose(&w, &o, Some((&zones, Source::Config))).unwrap_err();
        assert_eq!(
            e,
            ZoneError::EksUnsupported {
                region: "us-east-1".into(),
                zone: "us-east-1e".into(),
                zone_id: "use1-az3".into(),
            }
        );
        assert!(e.to_string().starts_with(
            "options.availability_zones: us-east-1e is zone ID use1-az3 in this account"
        ));
        // A recorded one is the network's: kept.
        assert_eq!(
            choose(&w, &o, Some((&zones, Source::State))).unwrap(),
            zones
        );
        // Never chosen.
        let mut o = offerings(&[("m5.xlarge", &["us-east-1a", "us-east-1b", "us-east-1c"])]);
        o.eks_unsupported
            .insert("us-east-1a".into(), "use1-az3".into());
        assert_eq!(choose(&w, &o, None).unwrap(), ["us-east-1b", "us-east-1c"]);
    }

    #[test]
    fn zones_that_are_not_usable_do_not_count() {
        // us-east-1e offers the type but is not available (or needs opt-in).
        let o = offerings(&[("m5.xlarge", &["us-east-1a", "us-east-1e"])]);
        let e = choose(&wanted(&[("cpu", "m5.xlarge")]), &o, None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "node_groups.cpu.instance_type = \"m5.xlarge\": the instance type is offered in 1 \
             Availability Zone of region us-east-1 (us-east-1a); the network needs 2 \
             Availability Zones that offer it (EC2 DescribeInstanceTypeOfferings): choose an \
             instance type offered in at least 2 zones, or another region"
        );
    }

    #[test]
    fn a_type_offered_nowhere_says_to_check_its_name() {
        let o = offerings(&[("m5.xlarge", &["us-east-1a", "us-east-1b"])]);
        let e = choose(&wanted(&[("cpu", "m5.huge")]), &o, None).unwrap_err();
        assert!(matches!(e, ZoneError::NotOffered { .. }), "{e:?}");
        assert!(
            e.to_string().starts_with(
                "node_groups.cpu.instance_type = \"m5.huge\": no Availability Zone of region \
                 us-east-1 offers this instance type"
            ) && e.to_string().contains("check its name"),
            "{e}"
        );
    }

    #[test]
    fn a_type_offered_only_in_unusable_zones_counts_none() {
        let o = offerings(&[("m5.xlarge", &["us-east-1e"])]);
        let e = choose(&wanted(&[("cpu", "m5.xlarge")]), &o, None).unwrap_err();
        assert!(
            e.to_string()
                .contains("offered in no Availability Zone of region us-east-1 (none)"),
            "{e}"
        );
    }

    #[test]
    fn types_without_two_common_zones_list_each_type_s_zones() {
        let o = offerings(&[
            ("m5.xlarge", &["us-east-1a", "us-east-1b"]),
            ("g5.xlarge", &["us-east-1b", "us-east-1c"]),
        ]);
        let w = wanted(&[("cpu", "m5.xlarge"), ("gpu", "g5.xlarge")]);
        let e = choose(&w, &o, None).unwrap_err();
        assert!(matches!(e, ZoneError::NoCommonZones { .. }), "{e}");
        assert!(
            e.to_string().contains(
                "node_groups.cpu.instance_type = \"m5.xlarge\" in us-east-1a, us-east-1b; \
                 node_groups.gpu.instance_type = \"g5.xlarge\" in us-east-1b, us-east-1c"
            ),
            "{e}"
        );
    }

    #[test]
    fn recorded_zones_are_kept_even_when_a_fresh_choice_would_differ() {
        // Offerings changed since the network was made: us-east-1a now
        // offers the type, and a fresh choice would be a+c.
        let o = offerings(&[("m5.xlarge", &["us-east-1a", "us-east-1c", "us-east-1d"])]);
        let recorded = ["us-east-1c".to_string(), "us-east-1d".to_string()];
        let w = wanted(&[("cpu", "m5.xlarge")]);
        assert_eq!(choose(&w, &o, None).unwrap(), ["us-east-1a", "us-east-1c"]);
        assert_eq!(
            choose(&w, &o, Some((&recorded, Source::State))).unwrap(),
            recorded
        );
    }

    #[test]
    fn a_fixed_zone_that_lacks_a_type_is_an_error_naming_both() {
        let o = offerings(&[
            ("m5.xlarge", &["us-east-1a", "us-east-1b"]),
            ("g5.xlarge", &["us-east-1b", "us-east-1c"]),
        ]);
        let recorded = ["us-east-1a".to_string(), "us-east-1b".to_string()];
        let w = wanted(&[("cpu", "m5.xlarge"), ("gpu", "g5.xlarge")]);
        let e = choose(&w, &o, Some((&recorded, Source::State))).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "node_groups.gpu.instance_type = \"g5.xlarge\" is not offered in Availability \
                 Zone us-east-1a of region us-east-1, where the deployment's network was \
                 created; it is offered in us-east-1b, us-east-1c."
            ),
            "{e}"
        );
        let e = choose(&w, &o, Some((&recorded, Source::Config))).unwrap_err();
        assert!(
            e.to_string().contains("set in options.availability_zones"),
            "{e}"
        );
    }
}
