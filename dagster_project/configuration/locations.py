"""Where a warehouse lives: a local directory or an object store (``s3://bucket/prefix``).

A warehouse is named in one form everywhere (``--warehouse``, ``RESDYN_WAREHOUSE``, ``resdyn.open``,
``resdyn.run``, the UI): a path, or an ``s3://`` URL. :func:`parse_location` tells them apart and refuses
anything else by name, so that a URL never becomes a local folder called ``s3:`` (``Path("s3://b/p")`` is the
relative path ``s3:/b/p``). How an S3 store is reached (credentials, region, an endpoint for an S3-compatible
store) is the AWS SDK's own configuration, read by :mod:`resdyn.dagster_project.store.object_store`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

SUPPORTED = "a local directory or s3://BUCKET/PREFIX"
# S3's bucket rules (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html): 3-63
# characters of lower-case letters, digits, dots and hyphens, beginning and ending with a letter or a digit
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(//)?")


class LocationError(ValueError):
    """A warehouse named in a form resdyn cannot use; the message names the forms it can."""


@dataclass(frozen=True)
class LocalLocation:
    path: Path

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class ObjectLocation:
    """``s3://bucket/prefix``: every key of the warehouse lies under ``prefix/`` (no slash at either end;
    empty for the bucket's root)."""

    bucket: str
    prefix: str

    def key(self, relative: str) -> str:
        """The object key of a path relative to the warehouse root."""
        relative = relative.strip("/")
        return f"{self.prefix}/{relative}" if self.prefix else relative

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"


def parse_location(value: str | os.PathLike) -> LocalLocation | ObjectLocation:
    """A warehouse's location from what a user wrote: ``s3://bucket[/prefix]`` is an object store, ``file://PATH``
    and anything without a scheme a local directory; every other scheme, and an ``s3:`` URL without its bucket, is
    refused with the forms that work."""
    text = os.fspath(value).strip()
    match = _SCHEME.match(text)
    # a URL has '://' (a local name may hold a colon: 'runs:v1'); 's3:' alone is a mistyped URL, never a folder
    if match is None or not (match.group(2) or match.group(1).lower() == "s3"):
        return LocalLocation(Path(text).expanduser().resolve())
    scheme = match.group(1).lower()
    if scheme == "file":
        return LocalLocation(Path(text[len(match.group(0)):] or "/").expanduser().resolve())
    if scheme != "s3":
        raise LocationError(f"warehouse {text!r}: the scheme {scheme}:// is not supported; give {SUPPORTED} "
                            "(a store that answers S3 requests, such as MinIO, Ceph or Google Cloud Storage's interoperability "
                            "endpoint, is s3:// with its endpoint in AWS_ENDPOINT_URL_S3)")
    if not match.group(2):
        raise LocationError(f"warehouse {text!r}: an S3 location is s3://BUCKET/PREFIX (two slashes after s3:)")
    bucket, _, prefix = text[len(match.group(0)):].partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise LocationError(f"warehouse {text!r}: {bucket!r} is not an S3 bucket name (3-63 lower-case letters, "
                            "digits, dots and hyphens, starting and ending with a letter or a digit): give "
                            "s3://BUCKET/PREFIX")
    prefix = prefix.strip("/")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise LocationError(f"warehouse {text!r}: the prefix {prefix!r} has an empty, '.' or '..' part; object keys "
                            "are not resolved like paths: give s3://BUCKET/PREFIX with the prefix as its keys read")
    return ObjectLocation(bucket, prefix)
