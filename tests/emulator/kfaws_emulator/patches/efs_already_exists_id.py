"""EFS CreateFileSystem: a repeated ``CreationToken`` answers with the existing file system's id.

AWS: "If a file system with the specified creation token already exists, this
action returns a FileSystemAlreadyExists error with the ID of the existing
file system" -- the error's ``FileSystemId`` member (HTTP 409).
https://docs.aws.amazon.com/efs/latest/ug/API_CreateFileSystem.html

moto 5.2.5 honours the token (the error is raised) but leaves ``FileSystemId``
out of the error, so a retrying client cannot learn which file system it made.
"""

from __future__ import annotations

import json

from moto.efs.exceptions import FileSystemAlreadyExists
from moto.efs.models import EFSBackend

from ._common import argument, wrap


class FileSystemAlreadyExistsWithId(FileSystemAlreadyExists):
    """moto's error, with the members of the modeled FileSystemAlreadyExists shape."""

    def __init__(self, creation_token: str, file_system_id: str):
        super().__init__(creation_token)
        self.description = json.dumps(
            {
                "__type": self.error_type,
                "ErrorCode": self.error_type,
                "message": self.message,
                "Message": self.message,
                "FileSystemId": file_system_id,
            }
        )


def apply() -> None:
    def make_create_file_system(original):
        def create_file_system(self, *args, **kwargs):
            token = argument(original, "creation_token", (self, *args), kwargs)
            for fs in self.file_systems_by_id.values():
                if token and fs.creation_token == token:
                    raise FileSystemAlreadyExistsWithId(token, fs.file_system_id)
            return original(self, *args, **kwargs)

        return create_file_system

    wrap(EFSBackend, "create_file_system", make_create_file_system)
