"""EFS file systems and mount targets pass through creating and deleting.

AWS: LifeCycleState is creating, then available; deleting, then gone.
CreateMountTarget needs an available file system
(IncorrectFileSystemLifeCycleState, HTTP 409), and DeleteFileSystem refuses
while any mount target, even one being deleted, remains (FileSystemInUse).
https://docs.aws.amazon.com/efs/latest/ug/API_FileSystemDescription.html
https://docs.aws.amazon.com/efs/latest/ug/API_CreateMountTarget.html
https://docs.aws.amazon.com/efs/latest/ug/API_DeleteFileSystem.html

moto 5.2.5 makes both available at once and deletes them at once. Durations:
``efs.filesystem.create|delete``, ``efs.mounttarget.create|delete``.
Resources made by a CloudFormation stack are left to the stack's duration.
"""

from __future__ import annotations

from moto.efs.exceptions import EFSError
from moto.efs.models import EFSBackend

from ..lifecycle import LIFECYCLE
from ._common import argument, in_cloudformation, wrap


class IncorrectFileSystemLifeCycleState(EFSError):
    code = 409

    def __init__(self, file_system_id: str, state: str):
        super().__init__(
            "IncorrectFileSystemLifeCycleState",
            f"File system '{file_system_id}' is in life cycle state '{state}', not 'available'.",
        )


def _make_available(resource) -> None:
    if resource.life_cycle_state == "creating":
        resource.life_cycle_state = "available"


def _seconds(backend, key: str) -> float:
    return 0.0 if in_cloudformation() else LIFECYCLE.duration(key, backend.account_id)


def apply() -> None:
    def make_create_file_system(original):
        def create_file_system(self, *args, **kwargs):
            fs = original(self, *args, **kwargs)
            seconds = _seconds(self, "efs.filesystem.create")
            if seconds > 0:
                fs.life_cycle_state = "creating"
                LIFECYCLE.schedule(seconds, lambda: _make_available(fs))
            return fs

        return create_file_system

    def make_delete_file_system(original):
        def delete_file_system(self, file_system_id):
            fs = self.file_systems_by_id.get(file_system_id)
            seconds = _seconds(self, "efs.filesystem.delete")
            if fs is None or seconds <= 0 or fs.number_of_mount_targets > 0:
                return original(self, file_system_id)
            if fs.life_cycle_state != "deleting":
                fs.life_cycle_state = "deleting"
                LIFECYCLE.schedule(
                    seconds,
                    lambda: self.file_systems_by_id.get(file_system_id) is fs and original(self, file_system_id),
                )

        return delete_file_system

    def make_create_mount_target(original):
        def create_mount_target(self, *args, **kwargs):
            file_system_id = argument(original, "file_system_id", (self, *args), kwargs)
            fs = self.file_systems_by_id.get(file_system_id)
            if fs is not None and fs.life_cycle_state != "available":
                raise IncorrectFileSystemLifeCycleState(file_system_id, fs.life_cycle_state)
            mount_target = original(self, *args, **kwargs)
            seconds = _seconds(self, "efs.mounttarget.create")
            if seconds > 0:
                mount_target.life_cycle_state = "creating"
                LIFECYCLE.schedule(seconds, lambda: _make_available(mount_target))
            return mount_target

        return create_mount_target

    def make_delete_mount_target(original):
        def delete_mount_target(self, mount_target_id):
            mount_target = self.mount_targets_by_id.get(mount_target_id)
            seconds = _seconds(self, "efs.mounttarget.delete")
            if mount_target is None or seconds <= 0:
                return original(self, mount_target_id)
            if mount_target.life_cycle_state != "deleting":
                mount_target.life_cycle_state = "deleting"
                LIFECYCLE.schedule(
                    seconds,
                    lambda: self.mount_targets_by_id.get(mount_target_id) is mount_target
                    and original(self, mount_target_id),
                )

        return delete_mount_target

    wrap(EFSBackend, "create_file_system", make_create_file_system)
    wrap(EFSBackend, "delete_file_system", make_delete_file_system)
    wrap(EFSBackend, "create_mount_target", make_create_mount_target)
    wrap(EFSBackend, "delete_mount_target", make_delete_mount_target)
