"""GetBucketVersioning answers a ``VersioningConfiguration`` document.

AWS: the response body's root element is ``VersioningConfiguration`` (namespace
``http://s3.amazonaws.com/doc/2006-03-01/``), holding ``Status`` (``Enabled`` or
``Suspended``) only once versioning was ever configured; a bucket never versioned answers an
empty ``VersioningConfiguration``
(https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetBucketVersioning.html).

moto 5.2.5 names the root ``GetBucketVersioningResponse``, which the AWS SDK for Rust refuses
to parse (the SDKs for Python and the CLI ignore the root's name), so kfaws could not read a
bucket's versioning.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from moto.s3.responses import S3Response

from ._common import wrap

NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"


def apply() -> None:
    def make_get(_original):
        def get_bucket_versioning(self):
            status = self.backend.get_bucket_versioning(self.bucket_name)
            self.data["Action"] = "GetBucketVersioning"
            inner = f"<Status>{escape(status)}</Status>" if status else ""
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                f'<VersioningConfiguration xmlns="{NAMESPACE}">{inner}</VersioningConfiguration>'
            )
            return 200, {"Content-Type": "application/xml"}, body

        return get_bucket_versioning

    wrap(S3Response, "get_bucket_versioning", make_get)
