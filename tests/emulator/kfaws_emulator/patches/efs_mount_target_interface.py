"""EFS CreateMountTarget: the mount target's network interface is in use and managed by EFS.

AWS: a mount target is "an NFS endpoint that lives in your VPC" with a
network interface that EFS creates and manages: DescribeNetworkInterfaces
shows it `in-use`, `RequesterManaged` true, described as "EFS mount target
for fs-… (fsmt-…)", and it goes with the mount target (DeleteMountTarget)
-- "Managing mount targets", Amazon EFS User Guide
(https://docs.aws.amazon.com/efs/latest/ug/accessing-fs.html), and
"Requester-managed network interfaces", Amazon EC2 User Guide
(https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/requester-managed-eni.html).

moto 5.2.5 creates the interface `available`, not requester-managed, with
no description: a detached interface anyone may delete, which a client
surveying the VPC takes for something left behind.
"""

from __future__ import annotations

from moto.efs.models import EFSBackend

from ._common import wrap


def apply() -> None:
    def make_create_mount_target(original):
        def create_mount_target(self, file_system_id, *args, **kwargs):
            mount_target = original(self, file_system_id, *args, **kwargs)
            eni = self.ec2_backend.get_network_interface(mount_target.network_interface_id)
            eni.status = "in-use"
            eni.requester_managed = True
            eni.description = f"EFS mount target for {file_system_id} ({mount_target.mount_target_id})"
            return mount_target

        return create_mount_target

    wrap(EFSBackend, "create_mount_target", make_create_mount_target)
