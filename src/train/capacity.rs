//! Whether one replica of a PyTorchJob fits on a node of some node group,
//! and whether the node groups at their `max_size` hold all its replicas.
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
//! scheduler, whose `Pending` reason kfaws reports while it waits. Likewise a
//! world larger than all nodes at `max_size` could hold, counting only each
//! instance's size, can never run all its ranks, and is refused.

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
    /// The most nodes the group scales to (`scaling.max_size` as applied),
    /// when the state records it.
    pub max_size: Option<u32>,
}

/// Checks that the node groups can hold a job of `workers` replicas: some
/// group's instances are at least as large as one replica's request in
/// vCPUs, memory and NVIDIA GPUs, and all groups together, every node at
/// its `max_size`, hold `workers` replicas (a node holds as many as each of
/// its vCPUs, memory and GPUs divide into; the kubelet's reservation and
/// other pods leave fewer, so passing does not promise room). A group whose
/// size or `max_size` is unknown counts as fitting (nothing is refused on a
/// guess).
///
/// # Errors
/// A message naming the request, each group's size (or its room in
/// replicas), and what to change.
pub fn check_fits(
    request: &ReplicaRequest,
    workers: u32,
    groups: &[NodeGroupSize],
) -> Result<(), String> {
    let cpu = super::quantity_value(&request.cpu).unwrap_or(0.0);
    let memory = super::quantity_value(&request.memory).unwrap_or(0.0);
    let fits = |s: &InstanceSize| {
        cpu <= s.vcpus && memory <= s.memory_bytes && request.gpus <= s.nvidia_gpus
    };
    if groups.is_empty() || groups.iter().any(|g| g.size.as_ref().is_none_or(fits)) {
        return check_room(request, (cpu, memory), workers, groups);
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
        0 => "Ask for less (--cpu, --memory)",
        _ => "Ask for less (--cpu, --memory), use --backend gloo on CPU nodes",
    };
    Err(format!(
        "one replica asks for {asks}, more than a whole node of any node group holds: {}; its \
         pods would stay Pending until --max-runtime. {change}, or add a node group with a \
         larger instance type ([node_groups.NAME] instance_type in kfaws.toml, then `kfaws \
         apply`)",
        described.join(", ")
    ))
}

/// How many replicas one node of `size` holds: the fewest of what its
/// vCPUs, memory and NVIDIA GPUs each divide into (`cpu` in cores and
/// `memory` in bytes, both positive as `--cpu` and `--memory` are checked).
fn per_node(size: &InstanceSize, (cpu, memory): (f64, f64), gpus: u32) -> u64 {
    // The small tolerance keeps 4 / 0.5 at 8 whatever the rounding of 0.5.
    let divide = |have: f64, ask: f64| match ask > 0.0 {
        true => (have / ask + 1e-9).floor() as u64,
        false => u64::MAX,
    };
    let by_gpu = match gpus {
        0 => u64::MAX,
        n => u64::from(size.nvidia_gpus / n),
    };
    divide(size.vcpus, cpu)
        .min(divide(size.memory_bytes, memory))
        .min(by_gpu)
}

/// The second half of [`check_fits`]: all groups at `max_size` hold
/// `workers` replicas.
fn check_room(
    request: &ReplicaRequest,
    ask: (f64, f64),
    workers: u32,
    groups: &[NodeGroupSize],
) -> Result<(), String> {
    if groups.is_empty() {
        return Ok(());
    }
    let mut room: u64 = 0;
    let mut described = Vec::new();
    for g in groups {
        let (Some(size), Some(max)) = (g.size.as_ref(), g.max_size) else {
            return Ok(());
        };
        let each = per_node(size, ask, request.gpus);
        room = room.saturating_add(each.saturating_mul(u64::from(max)));
        described.push(format!(
            "{} ({}): {each} per node × max_size {max}",
            g.group, g.instance_type
        ));
    }
    if room >= u64::from(workers) {
        return Ok(());
    }
    let gpus = match request.gpus {
        0 => String::new(),
        n => format!(" and {n} NVIDIA GPU"),
    };
    Err(format!(
        "--workers {workers}: the node groups hold at most {room} replica(s) of --cpu {} and \
         --memory {}{gpus} with every node at max_size ({}), fewer once the kubelet's \
         reservation and other pods take their share; the replicas beyond that would stay \
         Pending, and the job waits for all its ranks until --max-runtime. Ask for fewer \
         --workers or less per replica (--cpu, --memory), or raise max_size ([node_groups.NAME] \
         max_size in kfaws.toml, then `kfaws apply`)",
        request.cpu,
        request.memory,
        described.join("; ")
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
            max_size: Some(4),
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
        check_fits(&ask("1", "2Gi", 0), 1, std::slice::from_ref(&cpu)).unwrap();
        check_fits(&ask("4", "16Gi", 0), 1, std::slice::from_ref(&cpu)).unwrap();
        check_fits(&ask("500m", "2Gi", 1), 1, &[cpu.clone(), gpu.clone()]).unwrap();
        // Too much memory for one, no GPU on the other: neither holds it.
        let e = check_fits(&ask("1", "20Gi", 1), 1, &[cpu.clone(), gpu]).unwrap_err();
        assert!(e.contains("and 1 NVIDIA GPU (--backend nccl)"), "{e}");
        assert!(
            e.contains("cpu (m5.xlarge: 4 vCPUs, 16384 MiB, no NVIDIA GPU)")
                && e.contains("gpu (g5.xlarge: 4 vCPUs, 16384 MiB, 1 NVIDIA GPU(s))"),
            "{e}"
        );
        let e = check_fits(&ask("1000000", "2Gi", 0), 1, std::slice::from_ref(&cpu)).unwrap_err();
        assert!(
            e.starts_with("one replica asks for --cpu 1000000 and --memory 2Gi, more than"),
            "{e}"
        );
        assert!(e.contains("[node_groups.NAME] instance_type"), "{e}");
        let e = check_fits(&ask("4001m", "1Gi", 0), 1, &[cpu]).unwrap_err();
        assert!(e.contains("4001m"), "{e}");
    }

    #[test]
    fn an_unknown_size_or_no_group_refuses_nothing() {
        let unknown = NodeGroupSize {
            group: "x".into(),
            instance_type: "z9.huge".into(),
            size: None,
            max_size: Some(1),
        };
        check_fits(&ask("1000000", "1Ei", 8), 1, &[unknown]).unwrap();
        check_fits(&ask("1000000", "1Ei", 8), 1, &[]).unwrap();
        // Nor does a group whose max_size the state does not record.
        let unbounded = NodeGroupSize {
            max_size: None,
            ..group("cpu", "m5.xlarge", 4.0, 16384.0, 0)
        };
        check_fits(&ask("1", "2Gi", 0), 999, &[unbounded]).unwrap();
    }

    #[test]
    fn a_world_larger_than_every_node_at_max_size_holds_is_refused() {
        // m5.xlarge: 4 vCPUs and 16 GiB; max_size 4 in group().
        let cpu = group("cpu", "m5.xlarge", 4.0, 16384.0, 0);
        let gpu = group("gpu", "g5.xlarge", 4.0, 16384.0, 1);
        // 1 vCPU each: 4 per node, 16 in the group.
        check_fits(&ask("1", "2Gi", 0), 16, std::slice::from_ref(&cpu)).unwrap();
        let e = check_fits(&ask("1", "2Gi", 0), 17, std::slice::from_ref(&cpu)).unwrap_err();
        assert!(
            e.starts_with("--workers 17: the node groups hold at most 16 replica(s) of --cpu 1")
                && e.contains("cpu (m5.xlarge): 4 per node × max_size 4")
                && e.contains("raise max_size"),
            "{e}"
        );
        // Memory limits first: 6Gi fits twice in 16 GiB; 500m divides 4 vCPUs exactly 8 times.
        let e = check_fits(&ask("1", "6Gi", 0), 9, std::slice::from_ref(&cpu)).unwrap_err();
        assert!(
            e.contains("at most 8 replica(s)") && e.contains("2 per node"),
            "{e}"
        );
        check_fits(&ask("500m", "1Gi", 0), 32, std::slice::from_ref(&cpu)).unwrap();
        // The groups add up: a CPU replica runs on either group's nodes.
        check_fits(&ask("1", "2Gi", 0), 32, &[cpu.clone(), gpu.clone()]).unwrap();
        // A GPU replica only where a GPU is: one per g5.xlarge.
        let e = check_fits(&ask("1", "2Gi", 1), 5, &[cpu, gpu]).unwrap_err();
        assert!(
            e.contains("at most 4 replica(s) of --cpu 1 and --memory 2Gi and 1 NVIDIA GPU")
                && e.contains("cpu (m5.xlarge): 0 per node")
                && e.contains("gpu (g5.xlarge): 1 per node"),
            "{e}"
        );
    }
}
