"""Every EFS file system has a local directory that stands in for its contents.

AWS: an EFS file system is a shared POSIX directory tree that every mount
target exposes; it starts empty at CreateFileSystem, and DeleteFileSystem
"permanently deletes the file system ... you can't access any contents of the
deleted file system" (https://docs.aws.amazon.com/efs/latest/ug/API_CreateFileSystem.html,
https://docs.aws.amazon.com/efs/latest/ug/API_DeleteFileSystem.html).

moto 5.2.5 keeps the file system's description only. Here the file system
``fs-x`` is the directory ``<root>/fs-x`` with ``root = <work dir>/efs``
(``GET /_kfaws/efs/local-root`` answers it): created empty on CreateFileSystem
(or on first use, ``fs_dir``), removed on DeleteFileSystem. The local runners
(SageMaker ``FileSystemDataSource``, the PyTorchJob runner of the harness) use
it where AWS would mount the file system.

Local-only: access points, POSIX users and ``ro`` mounts are not enforced.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from moto.efs.models import EFSBackend

from ._common import wrap
from ._local import work_dir

_FS_ID = re.compile(r"fs-[0-9a-f]{8,40}")


def root() -> Path:
    """``<work dir>/efs``: the parent of every file system's directory."""
    path = work_dir() / "efs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def fs_dir(file_system_id: str) -> Path:
    """The directory of ``file_system_id`` (created if missing); ValueError for a malformed id."""
    if not _FS_ID.fullmatch(file_system_id or ""):
        raise ValueError(f"{file_system_id!r} is not an EFS file system id (fs-<hex>)")
    path = root() / file_system_id
    path.mkdir(parents=True, exist_ok=True)
    return path


def apply() -> None:
    # Creates the work dir now, which also removes those of emulators that are gone.
    root()

    def make_create(original):
        def create_file_system(self, *args, **kwargs):
            fs = original(self, *args, **kwargs)
            fs_dir(fs.file_system_id)
            return fs

        return create_file_system

    def make_delete(original):
        def delete_file_system(self, file_system_id):
            result = original(self, file_system_id)
            if _FS_ID.fullmatch(file_system_id or ""):
                shutil.rmtree(root() / file_system_id, ignore_errors=True)
            return result

        return delete_file_system

    wrap(EFSBackend, "create_file_system", make_create)
    wrap(EFSBackend, "delete_file_system", make_delete)
