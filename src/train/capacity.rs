//! Whether one replica of a PyTorchJob fits on a node of some node group.
//!
//! The scheduler places a pod only on a node whose allocatable resources
//! cover its requests (Kubernetes documentation, "Resource Management for
//! Pods and Containers": "the scheduler ensures that ... the sum of the
//! resource requests of the scheduled containers is less than the capacity
//! of the node"). A replica asking for more than a whole instance of every
//! node group's type can never be placed: its pods stay `Pending` until
//! `--max-runtime`. That case is refused before the job is created. A
//! request below the instance's size may still not fit (the kubelet reserves
//! part of each node, and other pods use some); that is left to the
//! scheduler, whose `Pending` reason kfaws reports while it waits.

use crate::aws::instance_types::InstanceSize;

/// What one replica asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplicaRequest {
    /// `--cpu` as given, e.g. `500m`.
    pub cpu: String,
    /// `--memory` as given, e.g. `2Gi`.
    pub memory: String,
    /// NVIDIA GPUs (`nvidia.com/gpu`): 1 with `--backend nccl`, else 0.
    pub gpus: u32,
}

/// A node group of the deployment and the size of one of its nodes.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeGroupSize {
    /// The group's name in kfaws.toml (`cpu`).
    pub group: String,
    /// Its EC2 instance type.
    pub instance_type: String,
    /// One node's size, when EC2 described the type.
    pub size: Option<InstanceSize>,
}

/// Checks that some node group's instances are at least as large as one
/// replica's request in vCPUs, memory and NVIDIA GPUs. Groups whose size is
/// unknown count as fitting (nothing is refused on a guess).
///
/// # Errors
/// A message naming the request, each group's size, and what to change.
pub fn check_fits(request: &ReplicaRequest, groups: &[NodeGroupSize]) -> Result<(), String> {
    let cpu = super::quantity_value(&request.cpu).unwrap_or(0.0);
    let memory = super::quantity_value(&request.memory).unwrap_or(0.0);
    let fits = |s: &InstanceSize| {
        cpu <= s.vcpus && memory <= s.memory_bytes && request.gpus <= s.nvidia_gpus
    };
    if groups.is_empty() || groups.iter().any(|g| g.size.as_ref().is_none_or(fits)) {
        return Ok(());
    }
    let described: Vec<String> = groups
        .iter()
        .filter_map(|g| {
            let s = g.size.as_ref()?;
            let gpus = match s.nvidia_gpus {
                0 => "no NVIDIA GPU".to_string(),
                n => format!("{n} NVIDIA GPU(s)"),
            };
            Some(format!(
                "{} ({}: {} vCPUs, {} MiB, {gpus})",
                g.group,
                g.instance_type,
                s.vcpus,
                s.memory_bytes / (1024.0 * 1024.0)
            ))
        })
        .collect();
    let asks = match request.gpus {
        0 => format!("--cpu {} and --memory {}", request.cpu, request.memory),
        n => format!(
            "--cpu {}, --memory {} and {n} NVIDIA GPU (--backend nccl)",
            request.cpu, request.memory
        ),
    };
    let change = match request.gpus {
        0 => "ask for less (--cpu, --memory)",
        _ => "ask for less (--cpu, --memory), use --backend gloo on CPU nodes",
    };
    Err(format!(
        "one replica asks for {asks}, more than a whole node of any node group holds: {}; its \
         pods would stay Pending until --max-runtime. {change}, or add a node group with a \
         larger instance type ([node_groups.NAME] instance_type in kfaws.toml, then `kfaws \
         apply`)",
        described.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(name: &str, t: &str, vcpus: f64, mib: f64, gpus: u32) -> NodeGroupSize {
        NodeGroupSize {
            group: name.into(),
            instance_type: t.into(),
            size: Some(InstanceSize {
                vcpus,
                memory_bytes: mib * 1024.0 * 1024.0,
                nvidia_gpus: gpus,
            }),
        }
    }

    fn ask(cpu: &str, memory: &str, gpus: u32) -> ReplicaRequest {
        ReplicaRequest {
            cpu: cpu.into(),
            memory: memory.into(),
            gpus,
        }
    }

    #[test]
    fn a_replica_fits_when_one_group_is_large_enough_in_every_resource() {
        let cpu = group("cpu", "m5.xlarge", 4.0, 16384.0, 0);
        let gpu = group("gpu", "g5.xlarge", 4.0, 16384.0, 1);
        check_fits(&ask("1", "2Gi", 0), std::slice::from_ref(&cpu)).unwrap();
        check_fits(&ask("4", "16Gi", 0), std::slice::from_ref(&cpu)).unwrap();
        check_fits(&ask("500m", "2Gi", 1), &[cpu.clone(), gpu.clone()]).unwrap();
        // Too much memory for one, no GPU on the other: neither holds it.
        let e = check_fits(&ask("1", "20Gi", 1), &[cpu.clone(), gpu]).unwrap_err();
        assert!(e.contains("and 1 NVIDIA GPU (--backend nccl)"), "{e}");
        assert!(
            e.contains("cpu (m5.xlarge: 4 vCPUs, 16384 MiB, no NVIDIA GPU)")
                && e.contains("gpu (g5.xlarge: 4 vCPUs, 16384 MiB, 1 NVIDIA GPU(s))"),
            "{e}"
        );
        let e = check_fits(&ask("1000000", "2Gi", 0), std::slice::from_ref(&cpu)).unwrap_err();
        assert!(
            e.starts_with("one replica asks for --cpu 1000000 and --memory 2Gi, more than"),
            "{e}"
        );
        assert!(e.contains("[node_groups.NAME] instance_type"), "{e}");
        let e = check_fits(&ask("4001m", "1Gi", 0), &[cpu]).unwrap_err();
        assert!(e.contains("4001m"), "{e}");
    }

    #[test]
    fn an_unknown_size_or_no_group_refuses_nothing() {
        let unknown = NodeGroupSize {
            group: "x".into(),
            instance_type: "z9.huge".into(),
            size: None,
        };
        check_fits(&ask("1000000", "1Ei", 8), &[unknown]).unwrap();
        check_fits(&ask("1000000", "1Ei", 8), &[]).unwrap();
    }
}
