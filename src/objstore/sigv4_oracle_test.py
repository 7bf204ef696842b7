#!/usr/bin/python3
"""Compares ciuic's SigV4 signer with botocore's S3SigV4Auth on random requests.

Usage: sigv4_oracle_test.py PATH_TO_SIGV4_TOOL [--seed N] [--count N]

Generates requests with random methods, keys with odd bytes ('%', '+', spaces, "//", ".",
"..", bytes that are not UTF-8), query parameters (repeated names, empty values, non-ASCII),
headers (mixed case, repeated, runs of spaces and tabs), payloads (or UNSIGNED-PAYLOAD),
session tokens, hosts with and without ports, regions and times. Each is signed by botocore
with the clock frozen at the request's time, and by sigv4_tool (which signs the way S3Store
does); the canonical requests and Authorization headers must be identical. The seed is printed
so a failure can be replayed with --seed. Needs Debian's python3-botocore.
"""

import argparse
import datetime
import json
import os
import random
import subprocess
import sys
import time
import types
import urllib.parse

try:
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
except ImportError as e:  # pragma: no cover - environment problem, reported plainly
    print(f"sigv4_oracle_test: botocore is missing ({e}); run scripts/install-deps.sh",
          file=sys.stderr)
    sys.exit(1)

METHODS = ["GET", "PUT", "POST", "DELETE", "HEAD"]
REGIONS = ["us-east-1", "eu-west-1", "ap-southeast-2", "us-gov-west-1", "local"]
HOSTS = [
    ("https", "examplebucket.s3.amazonaws.com", None),
    ("https", "s3.us-west-2.amazonaws.com", None),
    ("http", "127.0.0.1", 9000),
    ("http", "minio.local", 80),
    ("https", "s3.example.com", 8443),
    ("https", "bkt.s3.example.com", 443),
]
# Bytes a key may hold: anything but NUL, with the troublesome ones weighted up.
KEY_SPECIAL = [b"/", b"//", b".", b"..", b"%", b"+", b" ", b"~", b"=", b"&", b"?", b"#",
               b"\xe1\x88\xb4", b"\xff", b"\x80", b"\x01", b"\x7f", b"*", b"'", b"(", b"$",
               b"\t", b"\n"]
QUERY_CHARS = ("abcXYZ019-_.~ /%+=&?#*!'$@:;,\u00e9\u1234\U0001f600")
HEADER_VALUE_CHARS = "abcdefXYZ0123456789 -_.,;:=/\"'()<>?@[]{}!#$%&*+^`|~\t"


def random_key(rng):
    parts = []
    for _ in range(rng.randint(1, 8)):
        if rng.random() < 0.4:
            parts.append(rng.choice(KEY_SPECIAL))
        else:
            parts.append(bytes(rng.randint(1, 255) for _ in range(rng.randint(1, 6))))
    return b"".join(parts)[:200]


def random_text(rng, alphabet, lo, hi):
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(lo, hi)))


def random_request(rng):
    scheme, hostname, port = rng.choice(HOSTS)
    host = hostname
    if port is not None and not ((scheme == "http" and port == 80) or
                                 (scheme == "https" and port == 443)):
        host = f"{hostname}:{port}"
    netloc = hostname if port is None else f"{hostname}:{port}"
    if rng.random() < 0.5:
        path = b"/bucket-" + str(rng.randint(0, 9)).encode() + b"/" + random_key(rng)
    elif rng.random() < 0.9:
        path = b"/" + random_key(rng)
    else:
        path = b"/"
    query = []
    for _ in range(rng.choice([0, 0, 1, 2, 3, 5])):
        name = rng.choice(["prefix", "list-type", "uploads", "partNumber", "uploadId",
                           "continuation-token", "delimiter", "encoding-type", "max-keys",
                           "Param", "x-id"]) if rng.random() < 0.6 else \
            random_text(rng, QUERY_CHARS, 1, 8)
        value = "" if rng.random() < 0.2 else random_text(rng, QUERY_CHARS, 0, 12)
        query.append((name, value))
        if rng.random() < 0.15:
            query.append((name, random_text(rng, QUERY_CHARS, 0, 5)))
    headers = []
    for _ in range(rng.randint(0, 5)):
        if rng.random() < 0.5:
            name = "x-amz-meta-" + random_text(rng, "abcdefghij0123456789-", 1, 10)
        else:
            name = rng.choice(["Content-Type", "Range", "X-Amz-Storage-Class", "If-Match",
                               "Content-MD5", "X-Amz-Meta-Mixed-CASE", "Cache-Control",
                               "x-amz-acl"])
        value = random_text(rng, HEADER_VALUE_CHARS, 0, 20)
        if rng.random() < 0.3:
            value = "  " + value + " \t "
        if rng.random() < 0.2:
            value = value.replace(" ", "   ")
        headers.append((name, value))
        if rng.random() < 0.1:
            headers.append((name, random_text(rng, HEADER_VALUE_CHARS, 1, 6)))
    payload = b""
    if rng.random() < 0.6:
        payload = bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 300)))
    token = None
    if rng.random() < 0.3:
        token = random_text(rng, "ABCDEFabcdef0123456789+/=", 20, 60)
    return {
        "method": rng.choice(METHODS),
        "scheme": scheme,
        "netloc": netloc,
        "host": host,
        "path": path,
        "query": query,
        "headers": headers,
        "payload": payload,
        "unsigned_payload": rng.random() < 0.2,
        "unix_time": rng.randint(946684800, 2145916800),  # 2000 .. 2038
        "region": rng.choice(REGIONS),
        "access_key": "AKID" + random_text(rng, "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 8, 16),
        "secret_key": random_text(rng, "abcdefABCDEF0123456789+/", 20, 40),
        "session_token": token,
    }


class RecordingS3SigV4Auth(botocore.auth.S3SigV4Auth):
    """S3SigV4Auth that keeps the canonical request it signed."""

    def canonical_request(self, request):
        self.last_canonical_request = super().canonical_request(request)
        return self.last_canonical_request


def botocore_sign(r):
    frozen = datetime.datetime.utcfromtimestamp(r["unix_time"])

    class FrozenDatetime(datetime.datetime):
        @classmethod
        def utcnow(cls):
            return frozen

    botocore.auth.datetime = types.SimpleNamespace(datetime=FrozenDatetime)
    url = f"{r['scheme']}://{r['netloc']}" + urllib.parse.quote(r["path"], safe="/~")
    request = AWSRequest(method=r["method"], url=url, data=r["payload"],
                         params=list(r["query"]))
    for name, value in r["headers"]:
        request.headers[name] = value  # HTTPHeaders appends: repeated names stay repeated
    if r["unsigned_payload"]:
        request.context["client_config"] = types.SimpleNamespace(
            s3={"payload_signing_enabled": False})
    auth = RecordingS3SigV4Auth(
        Credentials(r["access_key"], r["secret_key"], r["session_token"]), "s3", r["region"])
    auth.add_auth(request)
    return auth.last_canonical_request, request.headers["Authorization"]


def tool_input(r):
    return json.dumps({
        "method": r["method"],
        "host": r["host"],
        "path_hex": r["path"].hex(),
        "query": [[n.encode().hex(), v.encode().hex()] for n, v in r["query"]],
        "headers": [[n, v] for n, v in r["headers"]],
        "payload_hex": r["payload"].hex(),
        "unsigned_payload": r["unsigned_payload"],
        "unix_time": r["unix_time"],
        "region": r["region"],
        "access_key": r["access_key"],
        "secret_key": r["secret_key"],
        "session_token": r["session_token"] or "",
    })


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("tool")
    parser.add_argument("--seed", type=int,
                        default=int(os.environ.get("CIUIC_TEST_SEED", time.time_ns() % 10**9)))
    parser.add_argument("--count", type=int, default=400)
    args = parser.parse_args()
    print(f"sigv4_oracle_test: seed {args.seed} (replay with --seed {args.seed}), "
          f"{args.count} requests, botocore {botocore.__version__}", flush=True)
    rng = random.Random(args.seed)
    requests = [random_request(rng) for _ in range(args.count)]
    stdin = "".join(tool_input(r) + "\n" for r in requests)
    proc = subprocess.run([args.tool], input=stdin.encode(), stdout=subprocess.PIPE,
                          check=True, timeout=120)
    answers = proc.stdout.decode().splitlines()
    if len(answers) != len(requests):
        print(f"FAIL: the tool answered {len(answers)} lines for {len(requests)} requests")
        return 1
    failed = 0
    for i, (r, line) in enumerate(zip(requests, answers)):
        ours = json.loads(line)
        if "error" in ours:
            print(f"FAIL #{i}: the tool failed: {ours['error']}")
            failed += 1
            continue
        creq, authz = botocore_sign(r)
        if ours["canonical_request"] != creq or ours["authorization"] != authz:
            failed += 1
            if failed <= 3:
                print(f"FAIL #{i}: {r['method']} {r['path']!r} query={r['query']!r} "
                      f"headers={r['headers']!r}")
                print("--- botocore canonical request:\n" + creq)
                print("--- ciuic canonical request:\n" + ours["canonical_request"])
                print(f"--- botocore: {authz}\n--- ciuic:    {ours['authorization']}")
    print(f"{len(requests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
