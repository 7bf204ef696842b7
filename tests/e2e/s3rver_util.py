"""s3rver (npm, tests/s3) for end-to-end tests: a real S3-compatible server on 127.0.0.1."""
import os
import re
import shutil
import subprocess
import time
import urllib.request


class S3rver:
    """Starts s3rver on a free port with `bucket` configured; `env` has the AWS settings that
    the ciuic binaries (and the servers `cluster up` starts) read. Raises unittest.SkipTest
    when s3rver or node is missing."""

    def __init__(self, script, tmp, bucket="bucket"):
        import unittest
        if not script or not os.path.exists(script) or shutil.which("node") is None:
            raise unittest.SkipTest("s3rver is not installed (tests/s3: npm ci)")
        data = os.path.join(tmp, "s3data")
        os.makedirs(data, exist_ok=True)
        self.log = open(os.path.join(tmp, "s3rver.log"), "w+")
        self.proc = subprocess.Popen(
            ["node", "--openssl-legacy-provider", script, "-d", data, "-a", "127.0.0.1", "-p",
             "0", "--configure-bucket", bucket], stdout=self.log, stderr=subprocess.STDOUT)
        port = None
        for _ in range(300):
            self.log.seek(0)
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", self.log.read())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.1)
        if port is None:
            self.stop()
            raise AssertionError("s3rver did not start")
        self.endpoint = "http://127.0.0.1:%d" % port
        self.env = {"AWS_ENDPOINT_URL_S3": self.endpoint, "AWS_ACCESS_KEY_ID": "S3RVER",
                    "AWS_SECRET_ACCESS_KEY": "S3RVER", "AWS_REGION": "us-east-1"}

    def request(self, method, path, data=None):
        """Plain HTTP to s3rver (no signature: it checks none): `path` is "bucket/key"."""
        r = urllib.request.Request("%s/%s" % (self.endpoint, path), data=data, method=method)
        with urllib.request.urlopen(r, timeout=30) as resp:
            return resp.read()

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()
