#!/usr/bin/env python3
"""POSIX edge cases on a ciuic mount, run as an UNPRIVILEGED user (as root, permission checks
test nothing). test_posix.py prepares the tree as root and runs this under setpriv.

Usage: posix_checks.py MOUNT   (MOUNT/shared is 1777, MOUNT/rootonly is root's 0755 directory
with `file` 0644 and `secret` 0600, MOUNT/shared/rootfile is root's 0666 file)
Prints one line per failed check and exits 1 if any failed.
"""
import errno
import os
import stat
import subprocess
import sys

M = sys.argv[1]
SHARED = os.path.join(M, "shared")
ROOTONLY = os.path.join(M, "rootonly")
ME = os.getuid()
D = os.path.join(SHARED, "u%d" % ME)
CHECKS = []


def check(fn):
    CHECKS.append(fn)
    return fn


def expect_errno(err, fn, *args):
    try:
        fn(*args)
    except OSError as e:
        assert e.errno == err, "%s%r: errno %s, want %s" % (fn.__name__, args,
                                                           errno.errorcode.get(e.errno),
                                                           errno.errorcode[err])
        return
    raise AssertionError("%s%r succeeded, want %s" % (fn.__name__, args, errno.errorcode[err]))


def write(path, data, flags=os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode=0o644):
    fd = os.open(path, flags, mode)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def p(*names):
    return os.path.join(D, *names)


@check
def not_root():
    assert ME != 0, "run me as an unprivileged user"


@check
def owner_is_caller():
    write(p("mine"), b"x")
    st = os.stat(p("mine"))
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid()), (st.st_uid, st.st_gid)
    os.mkdir(p("mydir"))
    st = os.stat(p("mydir"))
    assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())


@check
def create_flags():
    write(p("cf"), b"hello")
    expect_errno(errno.EEXIST, os.open, p("cf"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    fd = os.open(p("cf"), os.O_WRONLY | os.O_TRUNC)
    os.close(fd)
    assert os.stat(p("cf")).st_size == 0
    expect_errno(errno.ENOENT, os.open, p("nope"), os.O_RDONLY)
    expect_errno(errno.EISDIR, os.open, D, os.O_WRONLY)
    expect_errno(errno.ENOTDIR, os.open, p("cf", "x"), os.O_RDONLY)
    expect_errno(errno.ENOTDIR, os.open, p("cf"), os.O_RDONLY | os.O_DIRECTORY)


@check
def mode_of_new_files_follows_umask():
    old = os.umask(0o027)
    try:
        write(p("um"), b"", mode=0o666)
        assert stat.S_IMODE(os.stat(p("um")).st_mode) == 0o640, oct(os.stat(p("um")).st_mode)
    finally:
        os.umask(old)


@check
def directories():
    os.mkdir(p("d1"))
    expect_errno(errno.EEXIST, os.mkdir, p("d1"))
    write(p("d1", "f"), b"1")
    expect_errno(errno.ENOTEMPTY, os.rmdir, p("d1"))
    expect_errno(errno.ENOTDIR, os.rmdir, p("d1", "f"))
    expect_errno(errno.EISDIR, os.unlink, p("d1"))
    expect_errno(errno.ENOENT, os.mkdir, p("nodir", "x"))
    os.unlink(p("d1", "f"))
    os.rmdir(p("d1"))
    assert not os.path.exists(p("d1"))


@check
def name_and_path_limits():
    write(p("n" * 255), b"ok")
    assert read(p("n" * 255)) == b"ok"
    expect_errno(errno.ENAMETOOLONG, os.open, p("n" * 256), os.O_CREAT | os.O_WRONLY)
    expect_errno(errno.ENAMETOOLONG, os.mkdir, p("m" * 256))
    # A deep path close to PATH_MAX works; one over it is ENAMETOOLONG.
    deep = p("deep")
    os.mkdir(deep)
    while len(deep) + 201 < 4000:
        deep = os.path.join(deep, "q" * 200)
        os.mkdir(deep)
    write(os.path.join(deep, "leaf"), b"deep")
    assert read(os.path.join(deep, "leaf")) == b"deep"
    expect_errno(errno.ENAMETOOLONG, os.stat, os.path.join(deep, "z" * 200, "z" * 200))


@check
def permissions_of_other_users_files():
    assert read(os.path.join(ROOTONLY, "file")) == b"root data"
    expect_errno(errno.EACCES, os.open, os.path.join(ROOTONLY, "secret"), os.O_RDONLY)
    expect_errno(errno.EACCES, os.open, os.path.join(ROOTONLY, "file"), os.O_WRONLY)
    expect_errno(errno.EACCES, os.open, os.path.join(ROOTONLY, "new"), os.O_CREAT | os.O_WRONLY)
    expect_errno(errno.EACCES, os.mkdir, os.path.join(ROOTONLY, "newdir"))
    expect_errno(errno.EACCES, os.unlink, os.path.join(ROOTONLY, "file"))
    expect_errno(errno.EACCES, os.mkfifo, os.path.join(ROOTONLY, "fifo"))
    expect_errno(errno.EACCES, os.rename, os.path.join(ROOTONLY, "file"), p("stolen"))
    expect_errno(errno.EPERM, os.chmod, os.path.join(ROOTONLY, "file"), 0o777)
    expect_errno(errno.EPERM, os.utime, os.path.join(ROOTONLY, "file"), (1, 1))
    expect_errno(errno.EPERM, os.chown, p("mine"), 0, 0)
    expect_errno(errno.EPERM, os.chown, os.path.join(ROOTONLY, "file"), ME, -1)


@check
def own_mode_bits_are_enforced():
    write(p("locked"), b"data")
    os.chmod(p("locked"), 0o000)
    expect_errno(errno.EACCES, os.open, p("locked"), os.O_RDONLY)
    os.chmod(p("locked"), 0o200)
    expect_errno(errno.EACCES, os.open, p("locked"), os.O_RDONLY)
    fd = os.open(p("locked"), os.O_WRONLY)
    os.close(fd)
    os.mkdir(p("nox"))
    write(p("nox", "f"), b"1")
    os.chmod(p("nox"), 0o600)
    expect_errno(errno.EACCES, os.stat, p("nox", "f"))
    os.chmod(p("nox"), 0o300)
    expect_errno(errno.EACCES, os.listdir, p("nox"))
    os.chmod(p("nox"), 0o700)
    assert os.listdir(p("nox")) == ["f"]


@check
def sticky_directory():
    rootfile = os.path.join(SHARED, "rootfile")
    assert os.stat(SHARED).st_mode & stat.S_ISVTX
    with open(rootfile, "ab") as f:  # 0666: writable by anyone
        f.write(b"")
    expect_errno(errno.EPERM, os.unlink, rootfile)
    expect_errno(errno.EPERM, os.rename, rootfile, os.path.join(SHARED, "moved"))
    # My own file in the sticky directory: I may remove it.
    write(os.path.join(SHARED, "mine-%d" % ME), b"")
    os.unlink(os.path.join(SHARED, "mine-%d" % ME))


@check
def fifo_and_special_files():
    os.mkfifo(p("fifo"), 0o600)
    assert stat.S_ISFIFO(os.stat(p("fifo")).st_mode)
    # The FIFO works between two processes (the kernel runs it).
    child = subprocess.Popen(["/bin/sh", "-c", "echo through-fifo > '%s'" % p("fifo")])
    with open(p("fifo"), "rb") as f:
        assert f.read() == b"through-fifo\n"
    child.wait(10)
    os.chmod(p("fifo"), 0o000)
    expect_errno(errno.EACCES, os.open, p("fifo"), os.O_RDONLY | os.O_NONBLOCK)
    expect_errno(errno.EPERM, os.mknod, p("chr"), 0o600 | stat.S_IFCHR, os.makedev(1, 3))


@check
def links():
    write(p("target"), b"t")
    os.symlink("target", p("sym"))
    assert os.readlink(p("sym")) == "target"
    assert read(p("sym")) == b"t"
    assert stat.S_ISLNK(os.lstat(p("sym")).st_mode)
    os.symlink("missing", p("dangling"))
    expect_errno(errno.ENOENT, os.stat, p("dangling"))
    expect_errno(errno.EEXIST, os.symlink, "x", p("sym"))
    os.link(p("target"), p("hard"))
    assert os.stat(p("target")).st_nlink == 2
    assert os.stat(p("hard")).st_ino == os.stat(p("target")).st_ino
    os.unlink(p("target"))
    assert os.stat(p("hard")).st_nlink == 1 and read(p("hard")) == b"t"
    os.mkdir(p("ldir"))
    expect_errno(errno.EPERM, os.link, p("ldir"), p("ldir2"))
    expect_errno(errno.EEXIST, os.link, p("hard"), p("sym"))


@check
def renames():
    os.makedirs(p("r1", "sub"))
    os.mkdir(p("r2"))
    write(p("r1", "a"), b"A")
    write(p("r2", "b"), b"B")
    os.rename(p("r1", "a"), p("r2", "a"))  # across directories
    assert read(p("r2", "a")) == b"A" and not os.path.exists(p("r1", "a"))
    os.rename(p("r2", "a"), p("r2", "b"))  # over an existing file
    assert read(p("r2", "b")) == b"A" and os.listdir(p("r2")) == ["b"]
    os.mkdir(p("full"))
    write(p("full", "x"), b"")
    expect_errno(errno.ENOTEMPTY, os.rename, p("r1"), p("full"))
    expect_errno(errno.EISDIR, os.rename, p("r2", "b"), p("r1"))
    expect_errno(errno.ENOTDIR, os.rename, p("r1"), p("r2", "b"))
    expect_errno(errno.EINVAL, os.rename, p("r1"), p("r1", "sub", "inside"))
    os.mkdir(p("emptydir"))
    os.rename(p("r1"), p("emptydir"))  # a directory over an empty one
    assert os.path.isdir(p("emptydir", "sub"))
    # A directory moved keeps its children reachable (inodes are FIDs, not paths).
    fd = os.open(p("emptydir", "sub"), os.O_RDONLY)
    os.rename(p("emptydir"), p("r2", "moved"))
    write(p("r2", "moved", "sub", "after"), b"ok")
    assert os.listdir(fd) == ["after"]
    os.close(fd)


@check
def timestamps():
    write(p("ts"), b"")
    os.utime(p("ts"), ns=(1_500_000_000_123_456_789, 1_600_000_000_987_654_321))
    st = os.stat(p("ts"))
    assert (st.st_atime_ns, st.st_mtime_ns) == (1_500_000_000_123_456_789,
                                               1_600_000_000_987_654_321), (st.st_atime_ns,
                                                                            st.st_mtime_ns)
    big = (1 << 33) + 5  # past 2038 and past 32 bits
    os.utime(p("ts"), (big, big))
    assert os.stat(p("ts")).st_mtime == big
    before = os.stat(p("ts")).st_ctime_ns
    os.chmod(p("ts"), 0o600)
    assert os.stat(p("ts")).st_ctime_ns >= before
    # Writing updates mtime.
    os.utime(p("ts"), (1, 1))
    write(p("ts"), b"new", os.O_WRONLY)
    assert os.stat(p("ts")).st_mtime > 1000


@check
def truncate_up_and_down():
    write(p("tr"), b"0123456789")
    os.truncate(p("tr"), 4)
    assert read(p("tr")) == b"0123"
    os.truncate(p("tr"), 10000)
    assert read(p("tr")) == b"0123" + b"\0" * 9996
    with open(p("tr"), "r+b") as f:
        f.truncate(2)
        f.seek(0)
        assert f.read() == b"01"


@check
def xattrs():
    write(p("xa"), b"")
    os.setxattr(p("xa"), "user.k", b"v1")
    assert os.getxattr(p("xa"), "user.k") == b"v1"
    assert "user.k" in os.listxattr(p("xa"))
    expect_errno(errno.EEXIST, os.setxattr, p("xa"), "user.k", b"v2", os.XATTR_CREATE)
    expect_errno(errno.ENODATA, os.setxattr, p("xa"), "user.none", b"v", os.XATTR_REPLACE)
    expect_errno(errno.ENODATA, os.getxattr, p("xa"), "user.none")
    os.removexattr(p("xa"), "user.k")
    expect_errno(errno.ENODATA, os.getxattr, p("xa"), "user.k")
    expect_errno(errno.EACCES, os.setxattr, os.path.join(ROOTONLY, "file"), "user.k", b"v")


@check
def append_from_two_processes():
    path = p("append")
    write(path, b"")
    code = ("import os,sys\nfd=os.open(sys.argv[1],os.O_WRONLY|os.O_APPEND)\n"
            "for i in range(300): os.write(fd, (sys.argv[2]*63+'\\n').encode())\nos.close(fd)\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, path, c]) for c in "ab"]
    for pr in procs:
        assert pr.wait(60) == 0
    lines = read(path).split(b"\n")[:-1]
    assert len(lines) == 600, len(lines)
    assert all(l in (b"a" * 63, b"b" * 63) for l in lines)


@check
def unlink_while_open():
    write(p("uo"), b"still here")
    fd = os.open(p("uo"), os.O_RDWR)
    os.unlink(p("uo"))
    assert not os.path.exists(p("uo"))
    os.write(fd, b"STILL")
    os.lseek(fd, 0, os.SEEK_SET)
    assert os.read(fd, 100) == b"STILL here"
    assert os.fstat(fd).st_nlink == 0
    os.close(fd)


@check
def rename_over_open_file():
    write(p("old"), b"old content")
    write(p("new"), b"new content")
    fd = os.open(p("old"), os.O_RDONLY)
    os.rename(p("new"), p("old"))
    assert os.read(fd, 100) == b"old content"
    os.close(fd)
    assert read(p("old")) == b"new content"


@check
def readdir_large():
    os.mkdir(p("many"))
    names = set("entry-%05d-%s" % (i, "x" * (i % 40)) for i in range(3000))
    for n in names:
        os.close(os.open(p("many", n), os.O_CREAT | os.O_WRONLY, 0o644))
    got = os.listdir(p("many"))
    assert len(got) == len(names) and set(got) == names, (len(got), len(names))


def main():
    os.makedirs(D, exist_ok=True)
    failed = 0
    for fn in CHECKS:
        try:
            fn()
            print("ok   %s" % fn.__name__)
        except Exception as e:  # report every failing check, not just the first
            failed += 1
            print("FAIL %s: %s: %s" % (fn.__name__, type(e).__name__, e))
    print("%d of %d checks failed" % (failed, len(CHECKS)))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
