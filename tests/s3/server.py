"""A real S3 server for the storage tests: SeaweedFS's `weed server` with its S3 gateway on 127.0.0.1 (built by
tests/s3/build.sh), one bucket, one access key. Ray Train reaches it the way a user points at an S3-compatible
endpoint: ``s3://BUCKET/PREFIX?endpoint_override=127.0.0.1:PORT&scheme=http`` (pyarrow's S3 filesystem; pyarrow
ignores AWS_ENDPOINT_URL, so the endpoint is in the URI), with the credentials in the environment of every process
that touches it -- as EKS Pod Identity or IRSA puts a role's in every pod."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: the credentials the server accepts (tests/conftest.py puts them in the environment every Ray node inherits)
ACCESS_KEY, SECRET_KEY = "raynb-test", "raynb-test-secret"


def weed_binary() -> Path | None:
    out = subprocess.run(["bash", str(HERE / "build.sh"), "bin"], capture_output=True, text=True, check=True)
    weed = Path(out.stdout.strip()) / "weed"
    return weed if weed.exists() else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class S3Server:
    port: int
    bucket: str

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def uri(self, prefix: str) -> str:
        """An ``s3://`` storage path under this server's bucket, as Ray Train and pyarrow take it."""
        return f"s3://{self.bucket}/{prefix}?endpoint_override={self.endpoint}&scheme=http&region=us-east-1"

    def filesystem(self):
        from pyarrow import fs

        return fs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            endpoint_override=self.endpoint,
            scheme="http",
            region="us-east-1",
            allow_bucket_creation=True,
        )


@contextmanager
def s3_server(workdir: Path, bucket: str = "raynb") -> Iterator[S3Server]:
    """``weed server`` (master, volume, filer and S3 gateway in one process) in ``workdir``, until the block ends."""
    weed = weed_binary()
    if weed is None:
        raise RuntimeError("SeaweedFS is not built: run `bash tests/s3/build.sh` (make test does)")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "s3.json"
    config.write_text(
        json.dumps(
            {
                "identities": [
                    {
                        "name": "raynb-test",
                        "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                        "actions": ["Admin", "Read", "Write", "List", "Tagging"],
                    }
                ]
            }
        )
    )
    ports = {name: _free_port() for name in ("master", "volume", "filer", "s3")}
    grpc = {name: _free_port() for name in ports}
    args = [
        str(weed),
        "server",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-dir={workdir / 'data'}",
        f"-master.port={ports['master']}",
        f"-master.port.grpc={grpc['master']}",
        "-master.volumeSizeLimitMB=64",
        f"-volume.port={ports['volume']}",
        f"-volume.port.grpc={grpc['volume']}",
        "-volume.max=20",
        "-filer",
        f"-filer.port={ports['filer']}",
        f"-filer.port.grpc={grpc['filer']}",
        "-s3",
        f"-s3.port={ports['s3']}",
        f"-s3.port.grpc={grpc['s3']}",  # its default, port + 10000, is past 65535 for a high free port
        "-s3.port.iceberg=0",  # the Iceberg and Lance catalogs are not used, and their fixed ports may be taken
        "-s3.port.lance=0",
        f"-s3.config={config}",
    ]
    (workdir / "data").mkdir(exist_ok=True)
    log = open(workdir / "weed.log", "wb")  # noqa: SIM115 - closed below, after the process
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = S3Server(ports["s3"], bucket)
    try:
        deadline, last = time.monotonic() + 90, ""
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"weed server exited ({proc.returncode}): {(workdir / 'weed.log').read_text()[-2000:]}"
                )
            try:
                server.filesystem().create_dir(bucket)  # answers once master, volume, filer and S3 are up
                break
            except OSError as e:
                last = str(e)
            if time.monotonic() > deadline:
                raise RuntimeError(f"the S3 gateway did not answer within 90 s: {last}")
            time.sleep(0.5)
        yield server
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 15)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait(5)
        log.close()
