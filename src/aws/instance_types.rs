//! What one node of an EC2 instance type holds: vCPUs, memory and NVIDIA
//! GPUs (EC2 API Reference, DescribeInstanceTypes: `VCpuInfo.DefaultVCpus`,
//! `MemoryInfo.SizeInMiB`, `GpuInfo.Gpus[].Count` with `Manufacturer`).
//! Read-only; used to refuse a PyTorchJob whose replicas no node group can
//! hold ([`crate::train::capacity`]).

use std::collections::BTreeMap;

use aws_config::SdkConfig;

/// One instance type's size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct InstanceSize {
    /// vCPUs (`VCpuInfo.DefaultVCpus`).
    pub vcpus: f64,
    /// Memory in bytes (`MemoryInfo.SizeInMiB` × 1 MiB).
    pub memory_bytes: f64,
    /// NVIDIA GPUs (the `Count` of `GpuInfo.Gpus` whose `Manufacturer` is NVIDIA).
    pub nvidia_gpus: u32,
}

/// The sizes of `types`, by name. A type EC2 does not know is absent from
/// the answer (DescribeInstanceTypes refuses the call with
/// `InvalidInstanceType`, reported as an error).
///
/// # Errors
/// The failed call's `Code: message`.
pub async fn sizes(
    sdk: &SdkConfig,
    types: &[String],
) -> Result<BTreeMap<String, InstanceSize>, String> {
    let ec2 = crate::aws::client::<aws_sdk_ec2::Client>(sdk);
    let mut sizes = BTreeMap::new();
    // DescribeInstanceTypes takes at most 100 names per call.
    for chunk in types.chunks(100) {
        let out = ec2
            .describe_instance_types()
            .set_instance_types(Some(
                chunk
                    .iter()
                    .map(|t| aws_sdk_ec2::types::InstanceType::from(t.as_str()))
                    .collect(),
            ))
            .send()
            .await
            .map_err(|e| format!("EC2 DescribeInstanceTypes: {}", super::error_message(&e)))?;
        for info in out.instance_types() {
            let Some(name) = info.instance_type() else {
                continue;
            };
            let nvidia_gpus = info
                .gpu_info()
                .map(|g| {
                    g.gpus()
                        .iter()
                        .filter(|d| {
                            d.manufacturer()
                                .is_some_and(|m| m.eq_ignore_ascii_case("NVIDIA"))
                        })
                        .map(|d| u32::try_from(d.count().unwrap_or(0)).unwrap_or(0))
                        .sum()
                })
                .unwrap_or(0);
            sizes.insert(
                name.as_str().to_string(),
                InstanceSize {
                    vcpus: f64::from(
                        info.v_cpu_info()
                            .and_then(|v| v.default_v_cpus())
                            .unwrap_or(0),
                    ),
                    memory_bytes: info
                        .memory_info()
                        .and_then(|m| m.size_in_mib())
                        .unwrap_or(0) as f64
                        * 1024.0
                        * 1024.0,
                    nvidia_gpus,
                },
            );
        }
    }
    Ok(sizes)
}
