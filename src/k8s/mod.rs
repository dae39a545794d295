//! Kubernetes access: kubeconfig entries for the deployment's cluster and the
//! exec credential plugin protocol `kfaws eks get-token` speaks.

pub mod exec_credential;
pub mod kubeconfig;
