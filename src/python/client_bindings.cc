// ciuic._ciuic.Client and ciuic._ciuic.File: libciuic for Python. Every blocking call drops the
// GIL; errors raise OSError with the errno of the Status (FileNotFoundError, ...).
#include <fcntl.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "ciuic/cuda.h"
#include "python/bindings.h"
#include "python/py_util.h"

namespace py = pybind11;

namespace ciuic::python {
namespace {

// One open file. Holds the client so that the client outlives its files.
class PyFile {
 public:
  PyFile(std::shared_ptr<Client> client, std::unique_ptr<File> file, std::string mode)
      : client_(std::move(client)), file_(std::move(file)), mode_(std::move(mode)) {}
  ~PyFile() {
    if (file_) {
      py::gil_scoped_release nogil;
      file_->Close().IgnoreError();  // best effort, as Python's files do on collection
      file_.reset();
    }
  }

  File& f() {
    if (!file_) {
      throw py::value_error("I/O operation on closed file");
    }
    return *file_;
  }

  py::bytes Read(int64_t n) {
    File& file = f();
    if (n < 0) {
      Result<FileStat> st;
      Result<uint64_t> pos;
      {
        py::gil_scoped_release nogil;
        st = file.Stat();
        pos = file.Seek(0, SEEK_CUR);
      }
      uint64_t size = Unwrap(std::move(st)).size;
      uint64_t at = Unwrap(std::move(pos));
      n = size > at ? static_cast<int64_t>(size - at) : 0;
    }
    std::string buf(static_cast<size_t>(n), '\0');
    Result<size_t> got;
    {
      py::gil_scoped_release nogil;
      got = ReadFully(file, buf.data(), buf.size());
    }
    buf.resize(Unwrap(std::move(got)));
    return py::bytes(buf);
  }

  // Reads into the caller's buffer directly (no intermediate copy).
  size_t ReadInto(py::handle buffer) {
    File& file = f();
    BufferView view(buffer, /*writable=*/true);
    Result<size_t> got;
    {
      py::gil_scoped_release nogil;
      got = ReadFully(file, view.data(), view.size());
    }
    return Unwrap(std::move(got));
  }

  // Reads into GPU memory at `device_ptr` through the CUDA runtime (include/ciuic/cuda.h).
  size_t ReadToDevice(uintptr_t device_ptr, size_t nbytes, uint64_t offset, size_t chunk) {
    File& file = f();
    cuda::DeviceReadOptions o;
    if (chunk > 0)
      o.chunk_bytes = chunk;
    Result<size_t> got;
    {
      py::gil_scoped_release nogil;
      got = cuda::ReadToDevice(*client_, file, offset, nbytes, reinterpret_cast<void*>(device_ptr),
                               o);
    }
    return Unwrap(std::move(got));
  }

  py::bytes Pread(size_t n, uint64_t offset) {
    File& file = f();
    std::string buf(n, '\0');
    Result<size_t> got;
    {
      py::gil_scoped_release nogil;
      got = file.Pread(buf.data(), buf.size(), offset);
    }
    buf.resize(Unwrap(std::move(got)));
    return py::bytes(buf);
  }

  size_t Write(py::handle data) {
    File& file = f();
    BufferView view(data, /*writable=*/false);
    Result<size_t> put;
    {
      py::gil_scoped_release nogil;
      put = file.Write(view.data(), view.size());
    }
    return Unwrap(std::move(put));
  }

  uint64_t Seek(int64_t offset, int whence) {
    File& file = f();
    if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END) {
      throw py::value_error("invalid whence (" + std::to_string(whence) + ")");
    }
    Result<uint64_t> pos;
    {
      py::gil_scoped_release nogil;
      pos = file.Seek(offset, whence);
    }
    return Unwrap(std::move(pos));
  }

  void Flush() {
    Blocking([](File& file) { return file.Flush(); });
  }
  void Fsync() {
    Blocking([](File& file) { return file.Fsync(); });
  }
  uint64_t Truncate(std::optional<uint64_t> size) {
    uint64_t to = size ? *size : Seek(0, SEEK_CUR);
    Blocking([to](File& file) { return file.Truncate(to); });
    return to;
  }

  void Close() {
    if (!file_) {
      return;
    }
    Status s;
    {
      py::gil_scoped_release nogil;
      s = file_->Close();
      file_.reset();
    }
    Check(s);
  }

  bool closed() const { return !file_; }
  const std::string& mode() const { return mode_; }
  std::string name() const { return file_ ? file_->path() : std::string(); }
  bool readable() const { return mode_.find('r') != std::string::npos || Plus(); }
  bool writable() const { return mode_.find_first_of("wax") != std::string::npos || Plus(); }
  bool Plus() const { return mode_.find('+') != std::string::npos; }

 private:
  template <typename Fn>
  void Blocking(Fn fn) {
    File& file = f();
    Status s;
    {
      py::gil_scoped_release nogil;
      s = fn(file);
    }
    Check(s);
  }

  // Reads until `len` bytes or end of file (a short Read happens only at EOF, but loop anyway).
  static Result<size_t> ReadFully(File& file, void* buf, size_t len) {
    size_t done = 0;
    while (done < len) {
      CIUIC_ASSIGN_OR_RETURN(size_t n, file.Read(static_cast<char*>(buf) + done, len - done));
      if (n == 0) {
        break;
      }
      done += n;
    }
    return done;
  }

  std::shared_ptr<Client> client_;
  std::unique_ptr<File> file_;
  std::string mode_;
};

// Python mode string -> open(2) flags. Binary modes only ("t" is refused).
int ParseMode(const std::string& mode) {
  if (mode.find('b') == std::string::npos || mode.find('t') != std::string::npos ||
      mode.find_first_not_of("rwaxb+") != std::string::npos) {
    throw py::value_error("invalid mode '" + mode +
                          "' (binary modes only: rb, wb, ab, xb, r+b...)");
  }
  bool plus = mode.find('+') != std::string::npos;
  int kinds = static_cast<int>(
      std::count(mode.begin(), mode.end(), 'r') + std::count(mode.begin(), mode.end(), 'w') +
      std::count(mode.begin(), mode.end(), 'a') + std::count(mode.begin(), mode.end(), 'x'));
  if (kinds != 1) {
    throw py::value_error("invalid mode '" + mode + "': exactly one of r, w, a, x");
  }
  switch (mode.find_first_of("rwax") == std::string::npos ? 'r'
                                                          : mode[mode.find_first_of("rwax")]) {
    case 'r':
      return plus ? O_RDWR : O_RDONLY;
    case 'w':
      return (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_TRUNC;
    case 'a':
      return (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_APPEND;
    default:
      return (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_EXCL;
  }
}

Client& C(PyClient& c) {
  if (!c.client) {
    throw py::value_error("client is closed");
  }
  return *c.client;
}

template <typename Fn>
auto Blocking(Fn fn) {
  decltype(fn()) r;
  {
    py::gil_scoped_release nogil;
    r = fn();
  }
  return r;
}

py::object StatResult(const FileStat& st) {
  static py::object stat_result = py::module_::import("os").attr("stat_result");
  auto ts = [](int64_t sec, uint32_t nsec) {
    return static_cast<double>(sec) + static_cast<double>(nsec) * 1e-9;
  };
  auto ns = [](int64_t sec, uint32_t nsec) {
    return py::int_(py::int_(sec) * py::int_(1000000000) + py::int_(nsec));
  };
  // os.stat_result: 10 positional fields, then int seconds x3 again as float, ns x3, blocks...
  py::tuple seq = py::make_tuple(
      st.mode, st.ino, 0, st.nlink, st.uid, st.gid, st.size, st.atime_sec, st.mtime_sec,
      st.ctime_sec, ts(st.atime_sec, st.atime_nsec), ts(st.mtime_sec, st.mtime_nsec),
      ts(st.ctime_sec, st.ctime_nsec), ns(st.atime_sec, st.atime_nsec),
      ns(st.mtime_sec, st.mtime_nsec), ns(st.ctime_sec, st.ctime_nsec), 4096, st.blocks, st.rdev);
  return stat_result(seq);
}

}  // namespace

ciuic::File* FileOf(py::handle obj) {
  if (!py::isinstance<PyFile>(obj)) {
    throw py::type_error(std::string("expected a ciuic File, got ") +
                         std::string(py::str(py::type::handle_of(obj).attr("__name__"))));
  }
  return &py::cast<PyFile&>(obj).f();
}

void RegisterClient(py::module_& m) {
  py::class_<PyFile>(m, "File", "An open ciuic file; behaves like Python's binary file objects.")
      .def("read", &PyFile::Read, py::arg("size") = -1,
           "Read up to size bytes (all to end of file if negative).")
      .def("readinto", &PyFile::ReadInto, py::arg("buffer"),
           "Read into a writable contiguous buffer without extra copies; returns the byte count.")
      .def("read_to_device", &PyFile::ReadToDevice, py::arg("device_ptr"), py::arg("nbytes"),
           py::arg("offset") = 0, py::arg("chunk_bytes") = 0,
           "Read nbytes at offset into GPU memory at device_ptr (CUDA loaded at run time); "
           "returns the bytes read. ciuic.read_into(file, cuda_tensor) is the usual way in.")
      .def("pread", &PyFile::Pread, py::arg("size"), py::arg("offset"),
           "Read up to size bytes at offset (does not move the file position).")
      .def("write", &PyFile::Write, py::arg("data"))
      .def("seek", &PyFile::Seek, py::arg("offset"), py::arg("whence") = 0)
      .def("tell", [](PyFile& f) { return f.Seek(0, SEEK_CUR); })
      .def("flush", &PyFile::Flush)
      .def("fsync", &PyFile::Fsync, "Make written data durable.")
      .def("truncate", &PyFile::Truncate, py::arg("size") = py::none())
      .def("close", &PyFile::Close)
      .def("readable", &PyFile::readable)
      .def("writable", &PyFile::writable)
      .def("seekable", [](PyFile&) { return true; })
      .def("isatty", [](PyFile&) { return false; })
      .def_property_readonly("closed", &PyFile::closed)
      .def_property_readonly("mode", &PyFile::mode)
      .def_property_readonly("name", &PyFile::name)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyFile& f, py::args) { f.Close(); });

  py::class_<PyClient>(m, "Client", "A connection to a ciuic cluster (thread-safe).")
      .def(
          "open",
          [](PyClient& c, const std::string& path, const std::string& mode, bool random_access) {
            int flags = ParseMode(mode);
            OpenOptions oo;
            oo.random_access = random_access;
            Client& cl = C(c);
            auto f = Unwrap(Blocking([&] { return cl.Open(path, flags, 0644, oo); }));
            return std::make_unique<PyFile>(c.client, std::move(f), mode);
          },
          py::arg("path"), py::arg("mode") = "rb", py::arg("random_access") = false)
      .def(
          "listdir",
          [](PyClient& c, const std::string& path) {
            Client& cl = C(c);
            auto entries = Unwrap(Blocking([&] { return cl.ReadDir(path); }));
            std::vector<std::string> names;
            names.reserve(entries.size());
            for (auto& e : entries) {
              names.push_back(std::move(e.name));
            }
            std::sort(names.begin(), names.end());
            return names;
          },
          py::arg("path") = "/")
      .def(
          "scandir",
          [](PyClient& c, const std::string& path) {
            // (name, is_dir, size) of every entry, sorted by name, from one paged listing.
            Client& cl = C(c);
            auto r = Blocking([&]() -> Result<std::vector<DirEntry>> {
              std::vector<DirEntry> all;
              uint64_t cookie = 0;
              while (true) {
                CIUIC_ASSIGN_OR_RETURN(DirPage page, cl.ReadDirPage(path, cookie, 4096, true));
                for (auto& e : page.entries) {
                  all.push_back(std::move(e));
                }
                cookie = page.next_cookie;
                if (page.eof) {
                  break;
                }
              }
              return all;
            });
            auto entries = Unwrap(std::move(r));
            std::sort(entries.begin(), entries.end(),
                      [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
            py::list out;
            for (auto& e : entries) {
              bool is_dir = (e.type & S_IFMT) == S_IFDIR;
              out.append(py::make_tuple(e.name, is_dir, e.has_attr ? e.attr.size : 0));
            }
            return out;
          },
          py::arg("path"))
      .def(
          "stat",
          [](PyClient& c, const std::string& path) {
            Client& cl = C(c);
            return StatResult(Unwrap(Blocking([&] { return cl.Stat(path); })));
          },
          py::arg("path"))
      .def(
          "exists",
          [](PyClient& c, const std::string& path) {
            Client& cl = C(c);
            auto r = Blocking([&] { return cl.Stat(path); });
            if (r.ok()) {
              return true;
            }
            if (r.status().code() == StatusCode::kNotFound) {
              return false;
            }
            ThrowStatus(r.status());
          },
          py::arg("path"))
      .def(
          "mkdir",
          [](PyClient& c, const std::string& path, uint32_t mode) {
            Client& cl = C(c);
            Check(Blocking([&] { return cl.Mkdir(path, mode); }));
          },
          py::arg("path"), py::arg("mode") = 0755)
      .def(
          "makedirs",
          [](PyClient& c, const std::string& path, bool exist_ok, uint32_t mode) {
            Client& cl = C(c);
            if (!exist_ok) {
              auto st = Blocking([&] { return cl.Stat(path); });
              if (st.ok()) {
                ThrowStatus(Status::AlreadyExists(path + ": already exists"));
              }
            }
            Check(Blocking([&] { return cl.MkdirAll(path, mode); }));
          },
          py::arg("path"), py::arg("exist_ok") = true, py::arg("mode") = 0755)
      .def(
          "remove",
          [](PyClient& c, const std::string& path) {
            Client& cl = C(c);
            Check(Blocking([&] { return cl.Unlink(path); }));
          },
          py::arg("path"))
      .def(
          "rmdir",
          [](PyClient& c, const std::string& path) {
            Client& cl = C(c);
            Check(Blocking([&] { return cl.Rmdir(path); }));
          },
          py::arg("path"))
      .def(
          "rename",
          [](PyClient& c, const std::string& from, const std::string& to) {
            Client& cl = C(c);
            Check(Blocking([&] { return cl.Rename(from, to); }));
          },
          py::arg("src"), py::arg("dst"))
      .def(
          "hsm_restore",
          [](PyClient& c, const std::string& path) {
            Client& cl = C(c);
            Check(Blocking([&] { return cl.HsmRestore(path); }));
          },
          py::arg("path"),
          "Bring a released file back onto the OSTs (nothing to do when it is not released).")
      .def(
          "has_node_cache", [](PyClient& c) { return C(c).HasNodeCache(); },
          "Whether this client's reads go through the node cache of this machine.")
      .def(
          "hsm_state",
          [](PyClient& c, const std::string& path) {
            Client& cl = C(c);
            return std::string(
                HsmStateName(Unwrap(Blocking([&] { return cl.HsmGetState(path); })).state));
          },
          py::arg("path"), "none, archived, released, dirty or lost.")
      .def(
          "read_file",
          [](PyClient& c, const std::string& path) {
            Client& cl = C(c);
            return py::bytes(Unwrap(Blocking([&] { return cl.ReadFile(path); })));
          },
          py::arg("path"), "Read a whole file.")
      .def(
          "write_file",
          [](PyClient& c, const std::string& path, py::handle data) {
            Client& cl = C(c);
            BufferView view(data, false);
            std::string bytes(static_cast<const char*>(view.data()), view.size());
            Check(Blocking([&] { return cl.WriteFile(path, bytes); }));
          },
          py::arg("path"), py::arg("data"), "Create or replace a file with data.")
      .def("close",
           [](PyClient& c) {
             std::shared_ptr<Client> cl = std::move(c.client);
             py::gil_scoped_release nogil;
             cl.reset();
           })
      .def_property_readonly("closed", [](const PyClient& c) { return !c.client; })
      .def_readonly("cluster_file", &PyClient::cluster_file)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyClient& c, py::args) {
        std::shared_ptr<Client> cl = std::move(c.client);
        py::gil_scoped_release nogil;
        cl.reset();
      });

  m.def(
      "connect",
      [](const std::string& cluster_file, int io_threads, size_t readahead_bytes, bool shm_reads) {
        ClientOptions o;
        o.cluster_file = cluster_file;
        o.io_threads = io_threads;
        o.readahead_bytes = readahead_bytes;
        o.shm_reads = shm_reads;
        auto r = Blocking([&] { return Client::Connect(o); });
        auto client = Unwrap(std::move(r));
        auto pc = std::make_unique<PyClient>();
        pc->cluster_file = client->options().cluster_file;
        pc->client = std::shared_ptr<Client>(std::move(client));
        return pc;
      },
      py::arg("cluster_file") = "", py::arg("io_threads") = 1,
      py::arg("readahead_bytes") = size_t{8} << 20, py::arg("shm_reads") = true,
      "Connect to a cluster (cluster file: argument, else $CIUIC_CLUSTER, else "
      "~/ciuic/cluster.conf). shm_reads=False: read over TCP even from OSSes on this host.");
}

}  // namespace ciuic::python
