"""Where a command writes what it makes when ``--output`` names an object store (``s3://BUCKET/PREFIX``): into a
local temporary folder (:class:`Spool`), then uploaded file by file with the project's object store (:class:`Upload`),
whose ``s3://`` URLs the command prints."""

from __future__ import annotations

from pathlib import Path


class Upload:
    """``--output s3://BUCKET/PREFIX``: what a command wrote into a local temporary folder (:class:`Spool`), put
    under the prefix's parent (a FILE's location names its own key) with the project's ObjectStore."""

    def __init__(self, location) -> None:
        from resdyn.dagster_project.configuration.locations import ObjectLocation
        from resdyn.dagster_project.store.object_store import ObjectStore

        self.location, self.store = location, ObjectStore(ObjectLocation(location.bucket, ""))  # keys as written

    def check(self) -> None:
        """Ask the store once before the work (its credentials, bucket and endpoint), not after it."""
        self.store.client.list_objects_v2(Bucket=self.location.bucket, Prefix=self.location.prefix, MaxKeys=1)

    def send(self, spool: Path, *, into_prefix: bool = False) -> dict[Path, str]:
        """Upload every file under ``spool``, below the prefix (``into_prefix``: a DIR's location) or beside the key
        (a FILE's location); local path -> its ``s3://`` URL."""
        from resdyn.dagster_project.configuration.locations import ObjectLocation

        base = self.location.prefix if into_prefix else self.location.prefix.rpartition("/")[0]
        folder = ObjectLocation(self.location.bucket, base)
        sent = {}
        for path in sorted(path for path in spool.rglob("*") if path.is_file()):
            relative = path.relative_to(spool).as_posix()
            self.store.upload_file(path, folder.key(relative))
            sent[path] = f"s3://{self.location.bucket}/{folder.key(relative)}"
        return sent


class Spool:
    """A local temporary folder for what an ``s3://`` output uploads (removed at the end, either way); with no
    upload, nothing (a ``None`` spool)."""

    def __init__(self, upload: Upload | None) -> None:
        self.upload, self.directory = upload, None

    def __enter__(self):
        import tempfile

        if self.upload is None:
            return None
        self.upload.check()
        self.directory = Path(tempfile.mkdtemp(prefix="resdyn-output-"))
        return self.directory

    def __exit__(self, *_) -> None:
        import shutil

        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
