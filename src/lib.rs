//! kfaws: Kubeflow on AWS, planned, applied and destroyed from one binary.
//!
//! Data flows one way (see `DESIGN.md`): config → profile → desired graph →
//! refresh against state → plan → executor → state and outputs.

pub mod address;
pub mod aws;
pub mod config;
pub mod engine;
pub mod graph;
pub mod image;
pub mod k8s;
pub mod naming;
pub mod plan;
pub mod profiles;
pub mod resource;
pub mod sagemaker;
pub mod state;
pub mod train;
