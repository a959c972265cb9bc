"""A warehouse's objects on S3 (or a store that answers S3 requests): the operations its guarantees rest on.

An object store has no rename and no lock; what it has, and what this module offers:

- **one PUT is atomic**: an object is absent, or present with all its bytes (:meth:`ObjectStore.put`); a
  multipart upload becomes visible only when it completes (:meth:`ObjectStore.upload`), so a writer killed
  mid-upload leaves nothing a reader can see (only parts, which the bucket's lifecycle rule
  ``AbortIncompleteMultipartUpload`` or :meth:`ObjectStore.abort_stale_uploads` removes);
- **conditional writes** (RFC 9110 preconditions, which S3 honours since 2024-08 for ``If-None-Match: *`` and
  2024-11 for ``If-Match``): :meth:`create` succeeds for exactly one of any number of writers racing on a key,
  :meth:`replace` and :meth:`delete` only while the object is the one the caller read (its ETag). Leases and
  manifests are built on these (two writers on different machines cannot both hold a partition);
  :meth:`require_conditional_writes` checks a store honours them before anything relies on it.

How the store is reached is the AWS SDK's own configuration, as every S3 tool reads it: ``AWS_PROFILE`` and
``~/.aws/config``, ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_REGION``, and
for an S3-compatible store its endpoint in ``AWS_ENDPOINT_URL_S3`` (or ``AWS_ENDPOINT_URL``). Parquet is read
through pyarrow's ``S3FileSystem`` with the same credentials and endpoint (:meth:`filesystem`).
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from resdyn.dagster_project.configuration.locations import ObjectLocation

# a store that does not check preconditions answers a conditional PUT with 200 and overwrites: refuse to rely on it
PRECONDITION_FAILED = {"PreconditionFailed", "412"}
CONFLICT = {"ConditionalRequestConflict", "409"}  # S3: another conditional write to the key is in flight


class ObjectStoreError(RuntimeError):
    """The store cannot do what the warehouse's guarantees need, or cannot be reached; the message says why."""


@dataclass(frozen=True)
class StoredObject:
    data: bytes
    etag: str


@dataclass(frozen=True)
class ObjectInfo:
    relative: str  # the key below the warehouse's prefix
    size: int
    etag: str
    modified: datetime

    @property
    def bytes(self) -> int:  # as a leftover on disk says its size
        return self.size


def _error_code(error) -> str:
    response = getattr(error, "response", None) or {}
    return str(response.get("Error", {}).get("Code", "")) or str(
        response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


class ObjectStore:
    """The objects of one warehouse: keys ``<prefix>/<relative>`` in one bucket, through boto3."""

    def __init__(self, location: ObjectLocation, *, session=None, attempts: int = 5,
                 connect_timeout: float = 60.0) -> None:
        import boto3
        from botocore.config import Config

        self.location = location
        self.session = session or boto3.session.Session()
        # standard retry mode: throttling and 5xx are retried with backoff, a 412 (precondition) never is; a reader
        # that a person waits on (the UI's figures) asks for fewer attempts and a short connect timeout
        self.client = self.session.client("s3", config=Config(retries={"mode": "standard", "max_attempts": attempts},
                                                              connect_timeout=connect_timeout))

    # -- keys ---------------------------------------------------------------------------------------------

    def key(self, relative: str) -> str:
        return self.location.key(relative)

    def relative(self, key: str) -> str:
        return key[len(self.location.prefix) + 1:] if self.location.prefix else key

    # -- single objects -----------------------------------------------------------------------------------

    def put(self, relative: str, data: bytes) -> str:
        """Write an object in one request (atomic: readers see the old object or this one); its ETag."""
        return self._put(relative, data)

    def create(self, relative: str, data: bytes) -> str | None:
        """Write ``relative`` only if no object has that key (``If-None-Match: *``); its ETag, or None where one
        already exists (or another writer's conditional write to it is in flight)."""
        return self._conditional(relative, data, IfNoneMatch="*")

    def replace(self, relative: str, data: bytes, etag: str) -> str | None:
        """Overwrite ``relative`` only while it is the object whose ETag the caller read (``If-Match``); the new
        ETag, or None where it changed (or was removed) since."""
        return self._conditional(relative, data, IfMatch=etag)

    def delete(self, relative: str, etag: str | None = None) -> bool:
        """Remove ``relative`` (only while its ETag is ``etag``, when given); False where the condition failed."""
        arguments = {"IfMatch": etag} if etag is not None else {}
        try:
            self.client.delete_object(Bucket=self.location.bucket, Key=self.key(relative), **arguments)
            return True
        except self._client_error as error:
            if _error_code(error) in PRECONDITION_FAILED | {"NoSuchKey", "404"}:
                return False
            raise

    def _get_object(self, relative: str) -> dict | None:
        """boto3's answer to GET (its body not read yet), or None where there is no object."""
        try:
            return self.client.get_object(Bucket=self.location.bucket, Key=self.key(relative))
        except self._client_error as error:
            if _error_code(error) in {"NoSuchKey", "404"}:
                return None
            raise

    def get(self, relative: str) -> StoredObject | None:
        """The object's bytes and ETag, or None where there is none."""
        answer = self._get_object(relative)
        return None if answer is None else StoredObject(answer["Body"].read(), answer["ETag"])

    def info(self, relative: str) -> ObjectInfo | None:
        try:
            answer = self.client.head_object(Bucket=self.location.bucket, Key=self.key(relative))
        except self._client_error as error:
            if _error_code(error) in {"NoSuchKey", "404", "NotFound"}:
                return None
            raise
        return ObjectInfo(relative, answer["ContentLength"], answer["ETag"], answer["LastModified"])

    def list(self, relative_prefix: str = "") -> list[ObjectInfo]:
        """Every object whose key starts with ``relative_prefix`` (below the warehouse's prefix), in key order.
        A listing may lag a write on some stores: nothing here decides visibility by listing (manifests do)."""
        prefix = self.key(relative_prefix) if relative_prefix else (self.location.prefix + "/" if
                                                                     self.location.prefix else "")
        found = []
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.location.bucket,
                                                                            Prefix=prefix):
            found += [ObjectInfo(self.relative(item["Key"]), item["Size"], item["ETag"], item["LastModified"])
                      for item in page.get("Contents", [])]
        return found

    # -- large objects ------------------------------------------------------------------------------------

    def upload(self, local_path: str | os.PathLike, relative: str) -> str:
        """:meth:`upload_file`, and the file's sha256 (read once more for it)."""
        digest = hashlib.sha256()
        with open(local_path, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 22), b""):
                digest.update(block)
        self.upload_file(local_path, relative)
        return digest.hexdigest()

    def upload_file(self, local_path: str | os.PathLike, relative: str) -> None:
        """Upload a local file (multipart when large: invisible until the last part completes)."""
        self.client.upload_file(os.fspath(local_path), self.location.bucket, self.key(relative))

    def abort_stale_uploads(self, older_than: timedelta = timedelta(hours=24), *, keep=lambda key: False) -> int:
        """Abort multipart uploads under the warehouse's prefix begun before ``older_than`` (a killed writer's parts),
        except those whose key ``keep(relative)`` keeps; how many. A bucket lifecycle rule does the same without a
        caller; this is for stores without one."""
        cutoff = datetime.now(timezone.utc) - older_than
        prefix = self.location.prefix + "/" if self.location.prefix else ""  # never a sibling prefix's uploads
        aborted = 0
        for page in self.client.get_paginator("list_multipart_uploads").paginate(Bucket=self.location.bucket,
                                                                                  Prefix=prefix):
            for upload in page.get("Uploads", []):
                if upload["Initiated"] < cutoff and not keep(self.relative(upload["Key"])):
                    self.client.abort_multipart_upload(Bucket=self.location.bucket, Key=upload["Key"],
                                                       UploadId=upload["UploadId"])
                    aborted += 1
        return aborted

    def sha256(self, relative: str) -> tuple[str, int] | None:
        """The sha256 and size of an object's bytes, streamed (never the whole object in memory); None where there
        is none."""
        answer = self._get_object(relative)
        if answer is None:
            return None
        digest, size = hashlib.sha256(), 0
        for block in answer["Body"].iter_chunks(1 << 22):
            digest.update(block)
            size += len(block)
        return digest.hexdigest(), size

    def filesystem(self):
        """pyarrow's ``S3FileSystem`` with this store's credentials, region and endpoint: Parquet is read from
        it in ranges (a row group at a time), never copied whole to local disk."""
        return arrow_filesystem(self.session, self.client)

    def arrow_path(self, relative: str) -> str:
        """The path of ``relative`` on :meth:`filesystem` (bucket/key)."""
        return f"{self.location.bucket}/{self.key(relative)}"

    # -- checks -------------------------------------------------------------------------------------------

    def require_conditional_writes(self) -> None:
        """Refuse a store that does not honour ``If-None-Match`` / ``If-Match`` on PUT: leases there could be held
        by two writers at once. Probes with one key of its own under ``_probes/``, removed after."""
        probe = f"_probes/conditional-{os.getpid()}-{os.urandom(6).hex()}"
        first = self.create(probe, b"1")
        try:
            if first is None or self.create(probe, b"2") is not None:
                raise ObjectStoreError(
                    f"{self.location}: the store does not refuse a conditional PUT (If-None-Match: *) on an existing "
                    "object, so two writers could hold one partition's lease at once; use a store that honours S3's "
                    "conditional writes (AWS S3, MinIO, SeaweedFS, Ceph RGW recent releases)")
            if self.replace(probe, b"3", '"0000000000000000000000000000000a"') is not None:
                raise ObjectStoreError(f"{self.location}: the store ignores If-Match on PUT; leases need it")
        finally:
            self.delete(probe)

    def _put(self, relative: str, data: bytes, **conditions) -> str:
        answer = self.client.put_object(Bucket=self.location.bucket, Key=self.key(relative), Body=data,
                                        **conditions)
        return answer["ETag"]

    def _conditional(self, relative: str, data: bytes, **conditions) -> str | None:
        try:
            return self._put(relative, data, **conditions)
        except self._client_error as error:
            if _error_code(error) in PRECONDITION_FAILED | CONFLICT | {"NoSuchKey", "404"}:
                return None
            raise

    @property
    def _client_error(self):
        return self.client.exceptions.ClientError


def arrow_filesystem(session, client):
    """pyarrow's ``S3FileSystem`` with the credentials of ``session`` and the region and endpoint of ``client``."""
    from pyarrow import fs

    credentials = session.get_credentials()
    frozen = credentials.get_frozen_credentials() if credentials is not None else None
    endpoint = client.meta.endpoint_url
    options = {"region": client.meta.region_name or "us-east-1"}
    if frozen is not None:
        options.update(access_key=frozen.access_key, secret_key=frozen.secret_key, session_token=frozen.token)
    if endpoint and not endpoint.rstrip("/").endswith("amazonaws.com"):
        scheme, _, host = endpoint.partition("://")
        options.update(endpoint_override=host.rstrip("/"), scheme=scheme)
    return fs.S3FileSystem(**options)


@functools.lru_cache(maxsize=1)
def environment_filesystem():
    """The S3 filesystem this process's AWS configuration reaches (made once per process): what a worker process
    reads an ``s3://`` matrix reference with, with nothing handed to it but the URL."""
    import boto3

    session = boto3.session.Session()
    return arrow_filesystem(session, session.client("s3"))
