#!/usr/bin/env python3
"""End-to-end data repositories with the real binaries: `ciuic repo link|sync|export|status`
against a file:// directory and an s3rver bucket, with objects added, changed and deleted behind
ciuic's back; `link` imports released files whose bytes the OSSes load on first read; bad input
(a missing bucket, an unreachable endpoint, a directory that is not linked, a conflicting local
change, an object deleted or changed under a released file) gives a one-line error and loses
nothing.

Usage: test_repo.py --bin-dir BUILD/apps [--s3rver tests/s3/node_modules/s3rver/bin/s3rver.js]
"""
import argparse
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from s3rver_util import S3rver

BIN = None
S3RVER = None


def ciuic(*args, env=None, check=True, timeout=300):
    r = subprocess.run([os.path.join(BIN, "ciuic"), *args], capture_output=True, env=env,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError("ciuic %s failed (%d): %s" % (" ".join(args), r.returncode,
                                                            r.stderr.decode(errors="replace")))
    return r


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


class RepoBase:
    """The checks shared by both stores; subclasses say how to touch objects behind ciuic."""

    def cat(self, path):
        return ciuic("cat", path, env=self.env).stdout

    def ls(self, path):
        return sorted(ciuic("ls", path, env=self.env).stdout.decode().split())

    def check_link_sync_export(self, d):
        big = os.urandom((9 << 20) + 123)  # more than one copy chunk
        self.put_obj("a.txt", b"alpha")
        self.put_obj("sub/dir/b.bin", big)
        self.put_obj("sub/c.txt", b"gamma")
        r = ciuic("repo", "link", d, self.url, env=self.env)
        self.assertIn("3 new", r.stdout.decode())
        # Imported, not copied: released until read.
        self.assertIn("released", ciuic("hsm", "state", d + "/sub/dir/b.bin",
                                        env=self.env).stdout.decode())
        self.assertEqual(self.ls(d), ["a.txt", "sub"])
        self.assertEqual(self.ls(d + "/sub"), ["c.txt", "dir"])
        self.assertEqual(self.cat(d + "/a.txt"), b"alpha")
        self.assertEqual(self.cat(d + "/sub/dir/b.bin"), big)
        st = ciuic("stat", d + "/sub/dir/b.bin", env=self.env).stdout.decode()
        self.assertIn(str(len(big)), st)
        self.assertIn("files 3 from-repository 3 changed-here 0",
                      ciuic("repo", "status", d, env=self.env).stdout.decode())

        # Behind ciuic's back: one added, one changed, one deleted.
        self.put_obj("new.txt", b"fresh")
        self.put_obj("a.txt", b"alpha, second version")
        self.del_obj("sub/c.txt")
        r = ciuic("repo", "sync", d, env=self.env)
        self.assertIn("1 new, 1 changed, 1 deleted, 1 unchanged, 0 failed", r.stdout.decode())
        self.assertEqual(self.cat(d + "/a.txt"), b"alpha, second version")
        self.assertEqual(self.cat(d + "/new.txt"), b"fresh")
        self.assertEqual(self.ls(d + "/sub"), ["dir"])
        r = ciuic("repo", "sync", d, env=self.env)
        self.assertIn("0 new, 0 changed, 0 deleted, 3 unchanged", r.stdout.decode())

        # Export: a file made here and one changed here become plain objects under their path.
        src = os.path.join(self.tmp, "made.src")
        write(src, b"made in ciuic")
        ciuic("put", src, d + "/sub/made.txt", env=self.env)
        write(src, b"new text for new.txt")
        ciuic("put", src, d + "/new.txt", env=self.env)
        self.assertIn("changed-here 1 new-here 1",
                      ciuic("repo", "status", d, env=self.env).stdout.decode())
        r = ciuic("repo", "export", d, env=self.env)
        self.assertIn("2 exported, 2 unchanged, 0 failed", r.stdout.decode())
        self.assertEqual(self.get_obj("sub/made.txt"), b"made in ciuic")
        self.assertEqual(self.get_obj("new.txt"), b"new text for new.txt")
        self.assertIn("changed-here 0 new-here 0",
                      ciuic("repo", "status", d, env=self.env).stdout.decode())
        # The exported files are in step: a sync changes nothing.
        r = ciuic("repo", "sync", d, env=self.env)
        self.assertIn("0 new, 0 changed, 0 deleted, 4 unchanged, 0 failed", r.stdout.decode())

        # Changed on both sides: the sync keeps the local file and says so in one line.
        write(src, b"local edit")
        ciuic("put", src, d + "/a.txt", env=self.env)
        self.put_obj("a.txt", b"remote edit")
        r = ciuic("repo", "sync", d, env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        err = r.stderr.decode().strip()
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn(d + "/a.txt", err)
        self.assertIn("changed both here and in the repository", err)
        self.assertEqual(self.cat(d + "/a.txt"), b"local edit")
        # Deleted in the repository but changed here: kept too.
        self.del_obj("a.txt")
        r = ciuic("repo", "sync", d, env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("was deleted from", r.stderr.decode())
        self.assertEqual(self.cat(d + "/a.txt"), b"local edit")

    def check_object_gone_under_released_file(self, d, url, put, delete):
        put("x.bin", b"x" * 5000)
        put("y.bin", b"y" * 5000)
        ciuic("repo", "link", d, url, env=self.env)
        delete("x.bin")
        put("y.bin", b"second y")
        for name, why in (("x.bin", "was deleted"), ("y.bin", "changed since it was imported")):
            r = ciuic("cat", d + "/" + name, env=self.env, check=False)
            self.assertNotEqual(r.returncode, 0)
            self.assertEqual(r.stdout, b"")  # never wrong bytes
            err = r.stderr.decode().strip()
            self.assertEqual(len(err.splitlines()), 1, err)
            self.assertIn(d + "/" + name, err)
            self.assertIn("object '%s'" % name, err)
            self.assertIn(why, err)
            self.assertIn("lost", ciuic("hsm", "state", d + "/" + name,
                                        env=self.env).stdout.decode())
        r = ciuic("repo", "sync", d, env=self.env)
        self.assertIn("0 new, 1 changed, 1 deleted, 0 unchanged, 0 failed", r.stdout.decode())
        self.assertEqual(self.cat(d + "/y.bin"), b"second y")
        self.assertEqual(self.ls(d), ["y.bin"])

    def check_export_on_close(self, d, url, get, atomic):
        """`link --export-on-close`: the agent `cluster up` started exports a file as soon as its
        writer closes it, and never before the close; nothing else needs to run."""
        ciuic("repo", "link", "--export-on-close", d, url, env=self.env)
        self.assertIn("%s %s export-on-close on queued 0" % (d, url),
                      ciuic("repo", "list", env=self.env).stdout.decode())
        data = os.urandom((3 << 20) + 17)
        src = os.path.join(self.tmp, "onclose.src")
        write(src, data)
        ciuic("mkdir", "-p", d + "/closed", env=self.env)
        ciuic("put", src, d + "/closed/file.bin", env=self.env)
        got = first = None
        for _ in range(120):
            try:
                got = get("closed/file.bin")
            except Exception:  # not there yet
                got = None
            if first is None:
                first = got
            if got == data:
                break
            time.sleep(0.25)
        self.assertEqual(got, data)
        if atomic:
            # Exported once, after the close: whole at its first appearance (s3rver is left
            # out: it serves an object while its PUT is still arriving).
            self.assertEqual(first, data)
        for _ in range(40):  # the agent records the export just after the PUT
            status = ciuic("repo", "status", d, env=self.env).stdout.decode()
            if "export-on-close on queued 0" in status:
                break
            time.sleep(0.25)
        self.assertIn("export-on-close on queued 0", status)
        r = ciuic("repo", "link", "--no-export-on-close", d, url, env=self.env)
        self.assertIn("export on close off", r.stdout.decode())
        ciuic("put", src, d + "/closed/after-off.bin", env=self.env)
        time.sleep(1.5)  # three agent ticks
        with self.assertRaises(Exception):
            get("closed/after-off.bin")

    def check_not_linked(self):
        ciuic("mkdir", "-p", "/plain", env=self.env)
        r = ciuic("repo", "sync", "/plain", env=self.env, check=False)
        self.assertNotEqual(r.returncode, 0)
        err = r.stderr.decode().strip()
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("/plain: not linked", err)


class FileRepoTest(RepoBase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ciuic-e2e-repo-")
        cls.cdir = os.path.join(cls.tmp, "cluster")
        cls.env = dict(os.environ, CIUIC_CLUSTER=os.path.join(cls.cdir, "cluster.conf"))
        ciuic("cluster", "up", cls.cdir, "--timeout", "60", env=cls.env)
        cls.store = os.path.join(cls.tmp, "store")
        os.makedirs(cls.store)
        cls.url = "file://" + cls.store

    @classmethod
    def tearDownClass(cls):
        subprocess.run([os.path.join(BIN, "ciuic"), "cluster", "down", cls.cdir],
                       capture_output=True, env=cls.env, timeout=60)
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def put_obj(self, key, data):
        path = os.path.join(self.store, key)
        write(path + ".tmp", data)
        os.rename(path + ".tmp", path)
        # Local etags include the modification time: make the change visible even when the
        # size is the same and the clock did not tick.
        t = time.time() + 1
        os.utime(path, (t, t))

    def del_obj(self, key):
        os.unlink(os.path.join(self.store, key))

    def get_obj(self, key):
        with open(os.path.join(self.store, key), "rb") as f:
            return f.read()

    def test_link_sync_export(self):
        self.check_link_sync_export("/datasets/files")

    def test_not_linked(self):
        self.check_not_linked()

    def test_object_gone_under_released_file(self):
        store = os.path.join(self.tmp, "store-gone")
        os.makedirs(store)

        def put(key, data):
            write(os.path.join(store, key), data)
            t = time.time() + 1
            os.utime(os.path.join(store, key), (t, t))

        self.check_object_gone_under_released_file(
            "/datasets/gone", "file://" + store, put, lambda k: os.unlink(os.path.join(store, k)))

    def test_copy_mode(self):
        store = os.path.join(self.tmp, "store-copy")
        write(os.path.join(store, "c.txt"), b"copied now")
        ciuic("repo", "link", "--copy", "/datasets/copied", "file://" + store, env=self.env)
        self.assertNotIn("released", ciuic("hsm", "state", "/datasets/copied/c.txt",
                                           env=self.env).stdout.decode())
        os.unlink(os.path.join(store, "c.txt"))  # the bytes are in ciuic already
        self.assertEqual(self.cat("/datasets/copied/c.txt"), b"copied now")

    def test_sync_interval(self):
        d = "/datasets/interval"
        store = os.path.join(self.tmp, "store-interval")  # its own, so other tests' counts hold
        os.makedirs(store)
        ciuic("repo", "link", d, "file://" + store, env=self.env)
        p = subprocess.Popen([os.path.join(BIN, "ciuic"), "repo", "sync", d, "--interval", "0.5"],
                             env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            write(os.path.join(store, "later", "appeared.txt"), b"late")
            for _ in range(120):
                r = ciuic("cat", d + "/later/appeared.txt", env=self.env, check=False)
                if r.returncode == 0:
                    break
                time.sleep(0.25)
            self.assertEqual(r.stdout, b"late")
            self.assertIsNone(p.poll())  # still syncing
        finally:
            p.kill()
            p.wait()

    def test_sync_interval_with_export(self):
        d = "/datasets/autoexport"
        store = os.path.join(self.tmp, "store-autoexport")
        os.makedirs(store)
        ciuic("repo", "link", d, "file://" + store, env=self.env)
        p = subprocess.Popen([os.path.join(BIN, "ciuic"), "repo", "sync", d, "--export",
                              "--interval", "0.5"], env=self.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        try:
            src = os.path.join(self.tmp, "auto.src")
            write(src, b"written in ciuic")
            ciuic("mkdir", "-p", d + "/out", env=self.env)
            ciuic("put", src, d + "/out/made.txt", env=self.env)
            target = os.path.join(store, "out", "made.txt")
            # A pass may find the file created but not yet written (`put` creates, then
            # writes): it exports it empty, and the next pass the bytes.
            got = None
            for _ in range(120):
                if os.path.exists(target):
                    with open(target, "rb") as f:
                        got = f.read()
                    if got == b"written in ciuic":
                        break
                time.sleep(0.25)
            self.assertEqual(got, b"written in ciuic")
            self.assertIsNone(p.poll())
        finally:
            p.kill()
            p.wait()

    def test_sync_interval_goes_on_after_a_failed_pass(self):
        # A file whose key the store refuses (longer than 1,024 bytes) fails every export pass;
        # files written after it must still be exported, pass after pass.
        d = "/datasets/goeson"
        store = os.path.join(self.tmp, "store-goeson")
        os.makedirs(store)
        ciuic("repo", "link", d, "file://" + store, env=self.env)
        src = os.path.join(self.tmp, "goeson.src")
        write(src, b"first")
        ciuic("put", src, d + "/first.txt", env=self.env)
        p = subprocess.Popen([os.path.join(BIN, "ciuic"), "repo", "sync", d, "--export",
                              "--interval", "0.5"], env=self.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)

        def exported(name, want):
            for _ in range(120):
                path = os.path.join(store, name)
                if os.path.exists(path):
                    with open(path, "rb") as f:
                        if f.read() == want:
                            return
                if p.poll() is not None:
                    self.fail("sync --interval ended: %s" % p.stderr.read().decode())
                time.sleep(0.25)
            self.fail("%s was not exported" % name)

        try:
            exported("first.txt", b"first")  # the first pass started and ran
            deep = d + "/" + "/".join(["d%d" % i + "x" * 250 for i in range(5)])
            ciuic("mkdir", "-p", deep, env=self.env)
            ciuic("put", src, deep + "/f", env=self.env)
            write(src, b"second")
            ciuic("put", src, d + "/second.txt", env=self.env)
            exported("second.txt", b"second")  # in a pass that also failed on the deep file
            write(src, b"third")
            ciuic("put", src, d + "/third.txt", env=self.env)
            exported("third.txt", b"third")  # a later pass: the loop survived the failure
        finally:
            p.kill()
            _, err = p.communicate()
        self.assertIn("invalid object key", err.decode())

    def test_export_on_close(self):
        store = os.path.join(self.tmp, "store-onclose")
        os.makedirs(store)
        def get(key):
            with open(os.path.join(store, key), "rb") as f:
                return f.read()

        self.check_export_on_close("/datasets/onclose", "file://" + store, get, atomic=True)

    def test_more_than_a_page(self):
        # 1,100 objects in one directory: the listing (1,000 keys a page) and the directory walk
        # (1,000 entries a page) both take two pages.
        d = "/datasets/paged"
        store = os.path.join(self.tmp, "store-paged")
        for i in range(1100):
            write(os.path.join(store, "many", "f%05d" % i), b"%d" % i)
        r = ciuic("repo", "link", d, "file://" + store, env=self.env)
        self.assertIn("1100 new", r.stdout.decode())
        self.assertEqual(len(self.ls(d + "/many")), 1100)
        self.assertEqual(self.cat(d + "/many/f01099"), b"1099")
        for i in range(0, 1100, 2):
            os.unlink(os.path.join(store, "many", "f%05d" % i))
        r = ciuic("repo", "sync", d, env=self.env)
        self.assertIn("0 new, 0 changed, 550 deleted, 550 unchanged, 0 failed",
                      r.stdout.decode())
        self.assertEqual(len(self.ls(d + "/many")), 550)

    def test_missing_directory(self):
        r = ciuic("repo", "link", "/datasets/missing", "file:///no/such/dir/ciuic", env=self.env,
                  check=False)
        self.assertNotEqual(r.returncode, 0)
        err = r.stderr.decode().strip()
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("/no/such/dir/ciuic", err)
        # Nothing was made.
        self.assertNotEqual(ciuic("stat", "/datasets/missing", env=self.env,
                                  check=False).returncode, 0)


class S3RepoTest(RepoBase, unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="ciuic-e2e-repo-s3-")
        try:
            cls.s3 = S3rver(S3RVER, cls.tmp)
        except BaseException:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise
        cls.endpoint = cls.s3.endpoint
        cls.cdir = os.path.join(cls.tmp, "cluster")
        cls.env = dict(os.environ, CIUIC_CLUSTER=os.path.join(cls.cdir, "cluster.conf"),
                       **cls.s3.env)
        cls.env.pop("AWS_PROFILE", None)
        ciuic("cluster", "up", cls.cdir, "--timeout", "60", env=cls.env)
        cls.url = "s3://bucket/data/set"

    @classmethod
    def tearDownClass(cls):
        subprocess.run([os.path.join(BIN, "ciuic"), "cluster", "down", cls.cdir],
                       capture_output=True, env=cls.env, timeout=60)
        cls.s3.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def req(self, method, key, data=None, prefix="data/set"):
        return self.s3.request(method, "bucket/%s/%s" % (prefix, key), data)

    def put_obj(self, key, data):
        self.req("PUT", key, data)

    def del_obj(self, key):
        self.req("DELETE", key)

    def get_obj(self, key):
        return self.req("GET", key)

    def test_link_sync_export(self):
        self.check_link_sync_export("/datasets/s3")

    def test_not_linked(self):
        self.check_not_linked()

    def test_export_on_close(self):
        self.check_export_on_close("/datasets/s3onclose", "s3://bucket/onclose",
                                   lambda k: self.req("GET", k, prefix="onclose"), atomic=False)

    def test_object_gone_under_released_file(self):
        self.check_object_gone_under_released_file(
            "/datasets/s3gone", "s3://bucket/gone",
            lambda k, data: self.req("PUT", k, data, prefix="gone"),
            lambda k: self.req("DELETE", k, prefix="gone"))

    def test_missing_bucket(self):
        r = ciuic("repo", "link", "/datasets/nobucket", "s3://no-such-bucket/x", env=self.env,
                  check=False)
        self.assertNotEqual(r.returncode, 0)
        err = r.stderr.decode().strip()
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("no-such-bucket", err)
        self.assertNotEqual(ciuic("stat", "/datasets/nobucket", env=self.env,
                                  check=False).returncode, 0)

    def test_wrong_credentials(self):
        # s3rver does not check signatures: a server that refuses every request as S3 does
        # with a wrong key (403 InvalidAccessKeyId) stands in for it.
        class Refuse(http.server.BaseHTTPRequestHandler):
            def do_any(self):
                body = (b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>InvalidAccessKeyId'
                        b'</Code><Message>The AWS Access Key Id you provided does not exist.'
                        b'</Message></Error>')
                self.send_response(403)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)
            do_GET = do_PUT = do_HEAD = do_DELETE = do_POST = do_any

            def log_message(self, *args):
                pass

        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
        t = threading.Thread(target=srv.serve_forever, daemon=True)
        t.start()
        try:
            env = dict(self.env, AWS_ENDPOINT_URL_S3="http://127.0.0.1:%d" % srv.server_port,
                       AWS_ACCESS_KEY_ID="WRONG", AWS_SECRET_ACCESS_KEY="WRONG")
            r = ciuic("repo", "link", "/datasets/creds", "s3://bucket/x", env=env, check=False)
        finally:
            srv.shutdown()
            srv.server_close()
        self.assertNotEqual(r.returncode, 0)
        err = r.stderr.decode().strip()
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("s3://bucket/x", err)
        self.assertIn("InvalidAccessKeyId", err)
        self.assertNotEqual(ciuic("stat", "/datasets/creds", env=self.env,
                                  check=False).returncode, 0)

    def test_unreachable_endpoint(self):
        env = dict(self.env, AWS_ENDPOINT_URL_S3="http://127.0.0.1:1")
        r = ciuic("repo", "link", "/datasets/unreach", "s3://bucket/x", env=env, check=False)
        self.assertNotEqual(r.returncode, 0)
        err = r.stderr.decode().strip()
        self.assertEqual(len(err.splitlines()), 1, err)
        self.assertIn("s3://bucket/x", err)
        self.assertNotEqual(ciuic("stat", "/datasets/unreach", env=self.env,
                                  check=False).returncode, 0)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--s3rver", default="")
    args, rest = ap.parse_known_args()
    BIN = args.bin_dir
    S3RVER = args.s3rver
    unittest.main(argv=[sys.argv[0]] + rest)
