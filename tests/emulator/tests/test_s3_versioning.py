"""GetBucketVersioning's body is a ``VersioningConfiguration`` document.

AWS: the root element is ``VersioningConfiguration``; ``Status`` appears once versioning was
ever configured (``Enabled`` or ``Suspended``), a bucket never versioned answers it empty.
https://docs.aws.amazon.com/AmazonS3/latest/API/API_GetBucketVersioning.html

Patch ``s3_get_bucket_versioning``; fails with ``--skip-patch s3_get_bucket_versioning``.
"""

import secrets
import xml.etree.ElementTree as ET

NAMESPACE = "{http://s3.amazonaws.com/doc/2006-03-01/}"


def _raw_bodies(client):
    bodies = []

    def keep(http_response, **_):
        bodies.append(http_response.content)

    client.meta.events.register("after-call.s3.GetBucketVersioning", keep)
    return bodies


def test_the_root_is_versioning_configuration_in_every_state(aws):
    s3 = aws("s3")
    name = f"versioned-{secrets.token_hex(6)}"
    s3.create_bucket(Bucket=name)
    bodies = _raw_bodies(s3)

    assert "Status" not in s3.get_bucket_versioning(Bucket=name)
    for status in ("Enabled", "Suspended"):
        s3.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": status})
        assert s3.get_bucket_versioning(Bucket=name)["Status"] == status

    roots = [ET.fromstring(body) for body in bodies]
    assert [r.tag for r in roots] == [f"{NAMESPACE}VersioningConfiguration"] * 3
    assert [r.findtext(f"{NAMESPACE}Status") for r in roots] == [None, "Enabled", "Suspended"]
