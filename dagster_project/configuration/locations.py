"""Where a warehouse lives: a local directory or an object store (``s3://bucket/prefix``).

A warehouse is named in one form everywhere (``--warehouse``, ``RESDYN_WAREHOUSE``, ``resdyn.open``,
``resdyn.run``, the UI): a path, or an ``s3://`` URL. :func:`parse_location` tells them apart and refuses
anything else by name, so that a URL never becomes a local folder called ``s3:`` (``Path("s3://b/p")`` is the
relative path ``s3:/b/p``). How an S3 store is reached (credentials, region, an endpoint for an S3-compatible
store) is the AWS SDK's own configuration, read by :mod:`resdyn.dagster_project.store.object_store`.

Every other option that names a place goes through the same parser: :func:`parse_output` for what a command
writes and can upload (``report --output FILE``, ``claims --output DIR``: a local path, or ``s3://`` where the
command writes into a local temporary folder and uploads each file under that prefix), and :func:`local_path` for
what must stay on this machine (``claims --save-inputs/--inputs DIR``, ``run --summary FILE``: an ``s3://`` value
is refused in one line saying what to give instead). Nothing resdyn writes is ever a folder named ``s3:``.
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


def parse_location(value: str | os.PathLike, what: str = "warehouse", forms: str = SUPPORTED
                   ) -> LocalLocation | ObjectLocation:
    """A warehouse's location from what a user wrote: ``s3://bucket[/prefix]`` is an object store, ``file://PATH``
    and anything without a scheme a local directory; every other scheme, and an ``s3:`` URL without its bucket, is
    refused with the forms that work. ``what`` names the value in a refusal (``warehouse``, ``--output``) and
    ``forms`` says what that option takes."""
    if not isinstance(value, (str, os.PathLike)):
        raise LocationError(f"{what} {value!r}: give {forms} (a str or a path), not {type(value).__name__}")
    text = os.fspath(value).strip()
    if not text:
        raise LocationError(f"{what} is empty: give {forms}")
    match = _SCHEME.match(text)
    # a URL has '://' (a local name may hold a colon: 'runs:v1'); 's3:' alone is a mistyped URL, never a folder
    if match is None or not (match.group(2) or match.group(1).lower() == "s3"):
        return LocalLocation(Path(text).expanduser().resolve())
    scheme = match.group(1).lower()
    if scheme == "file":
        return LocalLocation(Path(text[len(match.group(0)):] or "/").expanduser().resolve())
    if scheme != "s3":
        raise LocationError(f"{what} {text!r}: the scheme {scheme}:// is not supported; give {forms} "
                            "(a store that answers S3 requests, such as MinIO, Ceph or Google Cloud Storage's interoperability "
                            "endpoint, is s3:// with its endpoint in AWS_ENDPOINT_URL_S3)")
    if not match.group(2):
        raise LocationError(f"{what} {text!r}: an S3 location is s3://BUCKET/PREFIX (two slashes after s3:)")
    bucket, _, prefix = text[len(match.group(0)):].partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise LocationError(f"{what} {text!r}: {bucket!r} is not an S3 bucket name (3-63 lower-case letters, "
                            "digits, dots and hyphens, starting and ending with a letter or a digit): give "
                            "s3://BUCKET/PREFIX")
    prefix = prefix.strip("/")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise LocationError(f"{what} {text!r}: the prefix {prefix!r} has an empty, '.' or '..' part; object keys "
                            "are not resolved like paths: give s3://BUCKET/PREFIX with the prefix as its keys read")
    return ObjectLocation(bucket, prefix)


def parse_output(value: str | os.PathLike, option: str, *, file: bool = False) -> LocalLocation | ObjectLocation:
    """Where a command writes what it makes (``option``, e.g. ``--output``): a local path, or ``s3://BUCKET/PREFIX``
    (the command writes into a local temporary folder, then uploads each file under the prefix). ``file``: the
    option names one file (``report --output FILE``), so an S3 location needs a key below the bucket."""
    forms = "a local FILE or s3://BUCKET/KEY" if file else "a local DIR or s3://BUCKET/PREFIX"
    location = parse_location(value, option, forms)
    if file and isinstance(location, ObjectLocation) and not location.prefix:
        raise LocationError(f"{option} {location}: name the object to write, s3://BUCKET/KEY (e.g. "
                            f"{location}/report.html)")
    return location


def local_path(value: str | os.PathLike, option: str, why: str) -> Path:
    """A local file or folder an option names (``option``, e.g. ``--save-inputs``), resolved; an ``s3://`` URL (or
    any other scheme) is refused in one line: ``why`` says why it must be local and what to give instead."""
    location = parse_location(value, option, "a local path")
    if isinstance(location, ObjectLocation):
        raise LocationError(f"{option} {location}: {why}")
    return location.path
