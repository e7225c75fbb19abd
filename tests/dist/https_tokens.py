"""Token sources served by a web server: a real nginx (Debian's, bound to 127.0.0.1) serves the
sources' .bin/.idx files over http:// and over https:// (a certificate made here, trusted through
CURL_CA_BUNDLE), and TokenStreams over their URL prefixes are checked against the same streams
over the local files: the stream-equality test s3_tokens.py runs for s3://, on the third store
under io/bytes.h.

Usage: https_tokens.py PYTHON_PACKAGE_DIR   (nginx and openssl on PATH or in /usr/sbin)

1. http:// and https://, W = 1 and W = 3, every rank through TokenStream.loader(num_workers=2):
   each batch equals the local stream's (tokens, labels, masks, positions, sequence ids), and the
   reads were requests (the process's request count grew).
2. Sources in a locality order, read a block at a time through the block cache over https://:
   the local files' batches with workers on W = 2, in fewer requests than half the pieces read.
3. One clear error each, from a fresh process: a missing prefix (404, naming the URL); a server
   that ignores Range (Python's http.server, which answers 200 with the whole file: naming
   Range); a .bin replaced on the server while a stream reads it ("changed since it was
   opened"); an https:// server whose certificate nothing trusts (no CURL_CA_BUNDLE: naming the
   URL and the certificate); a URL with a query string; a scheme no store reads (gs://).
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

SEQ_LEN, BATCH, MICRO = 63, 12, 2
STEPS = 6

NGINX_CONF = """
worker_processes 1;
daemon off;
user root;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 256; }}
http {{
  access_log off;
  client_body_temp_path {root}/body;
  proxy_temp_path {root}/proxy;
  fastcgi_temp_path {root}/fastcgi;
  uwsgi_temp_path {root}/uwsgi;
  scgi_temp_path {root}/scgi;
  default_type application/octet-stream;
  server {{
    listen 127.0.0.1:{http_port};
    root {files};
  }}
  server {{
    listen 127.0.0.1:{https_port} ssl;
    ssl_certificate {root}/cert.pem;
    ssl_certificate_key {root}/key.pem;
    root {files};
  }}
}}
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(port, process, seconds=20):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {seconds} s")


def program(name):
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin")


def main(package_dir):
    package_dir = os.path.abspath(package_dir)
    sys.path.insert(0, package_dir)
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    from s3_tokens import compare, prefixes, run_error, stream, write_sources
    nginx, openssl = program("nginx"), program("openssl")
    if nginx is None or openssl is None:
        print(f"FAIL: nginx ({nginx}) and openssl ({openssl}) are needed (scripts/deps.sh's "
              "DISTSAMPLER_TEST_PACKAGES installs them)")
        return 1
    problems = []
    root = tempfile.mkdtemp(prefix="distsampler-https-")
    servers = []
    try:
        files = os.path.join(root, "files")
        os.makedirs(os.path.join(files, "corpus"))
        sources, _ = write_sources(os.path.join(files, "corpus"))
        subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                        "-keyout", os.path.join(root, "key.pem"),
                        "-out", os.path.join(root, "cert.pem")],
                       check=True, capture_output=True)
        http_port, https_port = free_port(), free_port()
        with open(os.path.join(root, "nginx.conf"), "w") as f:
            f.write(NGINX_CONF.format(root=root, files=files, http_port=http_port,
                                      https_port=https_port))
        server = subprocess.Popen([nginx, "-c", os.path.join(root, "nginx.conf"), "-p", root],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        servers.append(server)
        wait_for(http_port, server)
        wait_for(https_port, server)
        os.environ.update({"CURL_CA_BUNDLE": os.path.join(root, "cert.pem"),
                           "DISTSAMPLER_S3_CACHE": os.path.join(root, "cache"),
                           "DISTSAMPLER_S3_RETRY_SECONDS": "5"})
        from distsampler import _core
        local_sources = prefixes(sources, os.path.join(files, "corpus") + "/")

        # 1: http:// and https:// against the local files.
        for base in (f"http://127.0.0.1:{http_port}/corpus/",
                     f"https://127.0.0.1:{https_port}/corpus/"):
            remote_sources = prefixes(sources, base)
            before = _core.s3_counts()["requests"]
            for world in (1, 3):
                remote = [stream(remote_sources, r, world) for r in range(world)]
                local = [stream(local_sources, r, world) for r in range(world)]
                compare(remote, local, world, STEPS, problems, f"{base}, W = {world}")
            requests = _core.s3_counts()["requests"] - before
            print(f"part 1: {base}: W = 1 and 3, {STEPS} steps with 2 workers against the local "
                  f"files: {len(problems)} problems so far; {requests} requests in this process")
            if requests == 0:
                problems.append(f"{base}: no request was made: the URL was not read remotely")

        # 2: a locality order read in blocks, through the block cache, over https://.
        base = f"https://127.0.0.1:{https_port}/corpus/"
        remote = [stream(prefixes(sources, base), r, 2, locality=[(20, 8)] * 3)
                  for r in range(2)]
        local = [stream(local_sources, r, 2, locality=[(20, 8)] * 3) for r in range(2)]
        compare(remote, local, 2, STEPS, problems, "locality over https://, W = 2")
        code = (f"from distsampler import _core\nfrom distsampler.tokens import TokenStream\n"
                f"s = TokenStream({prefixes(sources, base)!r}, seq_len={SEQ_LEN}, "
                f"global_batch={BATCH}, seed=5, micro_batch={MICRO}, locality=[(20, 8)] * 3)\n"
                f"start = _core.s3_counts()['requests']\nb = s.loader(num_workers=0)\n"
                f"pieces = 0\nfor _ in range({STEPS} * {BATCH // MICRO}):\n"
                f"    pieces += int((next(b)['position_ids'] == 0).sum())\n"
                f"print(_core.s3_counts()['requests'] - start, pieces)")
        out = subprocess.run([sys.executable, "-c",
                              f"import sys; sys.path.insert(0, {package_dir!r})\n{code}"],
                             capture_output=True, text=True, timeout=300)
        counted = out.stdout.split()
        print(f"part 2: a locality order over https:// with workers, W = 2: "
              f"{len(problems)} problems so far; 0 workers: requests, pieces = {counted}")
        if out.returncode != 0 or len(counted) != 2:
            problems.append(f"locality counts: exit {out.returncode}: {out.stderr[-2000:]}")
        elif not int(counted[0]) * 2 < int(counted[1]):
            problems.append(f"locality over https://: {counted[0]} requests for {counted[1]} "
                            "pieces; expected fewer than half (a block a request)")

        # 3: errors.
        env = dict(os.environ)
        opened = ("from distsampler.tokens import TokenStream\n"
                  "s = TokenStream([({source!r}, 1.0)], seq_len=63, global_batch=4, seed=5)\n"
                  "b = s.loader(num_workers=0)\nfor _ in range(200): next(b)\n")
        plain_port = free_port()
        plain = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", "127.0.0.1",
                                  "--directory", files, str(plain_port)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        servers.append(plain)
        wait_for(plain_port, plain)
        cases = [
            ("a missing prefix", [f"http://127.0.0.1:{http_port}/corpus/missing"], env,
             [f"http://127.0.0.1:{http_port}/corpus/missing.idx", "not found (404)"]),
            ("a server without Range", [f"http://127.0.0.1:{plain_port}/corpus/source0_0"], env,
             ["source0_0.bin", "Range", "206"]),
            ("an untrusted certificate", [f"https://127.0.0.1:{https_port}/corpus/source0_0"],
             {k: v for k, v in env.items() if k != "CURL_CA_BUNDLE"} |
             {"DISTSAMPLER_S3_CACHE": os.path.join(root, "cache-untrusted")},
             [f"https://127.0.0.1:{https_port}/corpus/source0_0.idx", "certificate"]),
            ("a query string", [f"http://127.0.0.1:{http_port}/corpus/source0_0?sig=1"], env,
             ["query", "sig=1"]),
            ("another scheme", ["gs://corpus/source0_0"], env,
             ["gs://corpus/source0_0", "gs://", "s3://", "https://"]),
        ]
        for label, source, case_env, names in cases:
            status, line = run_error(package_dir, opened.format(source=source), case_env)
            print(f"part 3, {label}: {line}")
            if status == 0 or not all(n in line for n in names):
                problems.append(f"{label}: exit {status}: {line!r}; expected {names}")

        # A .bin replaced while a stream reads it: the next ranged read is refused.
        replaced = ("import os, sys, time\nfrom distsampler.tokens import TokenStream\n"
                    "s = TokenStream([({source!r}, 1.0)], seq_len=63, global_batch=4, seed=5)\n"
                    "b = s.loader(num_workers=0)\nnext(b)\n"
                    "data = open({path!r}, 'rb').read()\n"
                    "with open({path!r}, 'wb') as f: f.write(bytes(reversed(data)))\n"
                    "t = time.time() + 10\nos.utime({path!r}, (t, t))\n"
                    "for _ in range(200): next(b)\n")
        path = os.path.join(files, "corpus", "source2_0.bin")
        status, line = run_error(package_dir, replaced.format(
            source=[f"http://127.0.0.1:{http_port}/corpus/source2_0"], path=path), env)
        print(f"part 3, a .bin replaced while read: {line}")
        if status == 0 or "changed since it was opened" not in line or \
                "source2_0.bin" not in line:
            problems.append(f"a .bin replaced: exit {status}: {line!r}")
    finally:
        for s in servers:
            s.terminate()
            try:
                s.wait(timeout=10)
            except subprocess.TimeoutExpired:
                s.kill()
        shutil.rmtree(root, ignore_errors=True)
    for problem in problems:
        print("FAIL:", problem)
    print("https_tokens:", "passed" if not problems else f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
