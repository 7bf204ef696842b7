// ciuic._ciuic.SharedBuffer and ciuic._ciuic.Ring: the ring API (include/ciuic/ring.h) for
// Python. A SharedBuffer exports its memory with the buffer protocol (numpy.frombuffer,
// torch.frombuffer, memoryview: no copy); a Ring moves bytes between files and it.
#include <algorithm>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include <pybind11/stl.h>

#include "ciuic/cuda.h"
#include "ciuic/ring.h"
#include "python/bindings.h"
#include "python/py_util.h"

namespace py = pybind11;

namespace ciuic::python {
namespace {

struct PySharedBuffer {
  std::shared_ptr<SharedMemory> mem;
};

// A ring whose IOs carry an internal sequence number as user data, so each in-flight IO holds a
// reference to its Python file (a file collected meanwhile would close under the IO) until the
// completion is taken; the caller's user data comes back with it.
class PyRing {
 public:
  PyRing(PySharedBuffer& buf, uint32_t entries) : mem_(buf.mem) {
    ring_ = Unwrap(Ring::Create(buf.mem, entries));
  }
  ~PyRing() { Close(); }

  void Prep(bool write,
            py::object file,
            uint64_t offset,
            uint64_t length,
            uint64_t buffer_offset,
            py::object user_data) {
    Ring& r = ring();
    RingIo io;
    io.file = FileOf(file);
    io.write = write;
    io.offset = offset;
    io.len = length;
    io.region_offset = buffer_offset;
    io.user_data = next_++;
    Check(r.Prepare(io));
    pending_.emplace(io.user_data, std::make_pair(std::move(user_data), std::move(file)));
  }

  size_t Submit() {
    Ring& r = ring();
    Result<size_t> n;
    {
      py::gil_scoped_release nogil;
      n = r.Submit();
    }
    return Unwrap(std::move(n));
  }

  // [(user_data, result)], result bytes or -errno; None when the timeout passed first.
  py::object Wait(size_t min_complete, py::object timeout, size_t max) {
    Ring& r = ring();
    const int timeout_ms =
        timeout.is_none() ? -1 : static_cast<int>(py::cast<double>(timeout) * 1000.0);
    if (max == 0)
      max = std::max<size_t>(min_complete, r.entries());
    std::vector<RingCompletion> out(max);
    Result<size_t> n;
    {
      py::gil_scoped_release nogil;
      n = r.Wait(out, min_complete, timeout_ms);
    }
    if (!n.ok() && n.status().code() == StatusCode::kTimedOut)
      return py::none();
    const size_t got = Unwrap(std::move(n));
    py::list result;
    for (size_t i = 0; i < got; ++i) {
      auto it = pending_.find(out[i].user_data);
      py::object user = it != pending_.end() ? it->second.first : py::none();
      if (it != pending_.end())
        pending_.erase(it);
      result.append(py::make_tuple(user, out[i].result));
    }
    return result;
  }

  // Waits for the IOs in flight, then drops the ring.
  void Close() {
    if (!ring_)
      return;
    std::unique_ptr<Ring> r = std::move(ring_);
    {
      py::gil_scoped_release nogil;
      r.reset();
    }
    pending_.clear();
  }

  size_t in_flight() { return ring().in_flight(); }
  size_t prepared() { return ring().prepared(); }
  size_t ready() { return ring().ready(); }

 private:
  Ring& ring() {
    if (!ring_)
      throw py::value_error("the ring is closed");
    return *ring_;
  }

  std::shared_ptr<SharedMemory> mem_;
  std::unique_ptr<Ring> ring_;
  uint64_t next_ = 1;
  std::unordered_map<uint64_t, std::pair<py::object, py::object>> pending_;  // user data, file
};

}  // namespace

void RegisterRing(py::module_& m) {
  m.def(
      "cuda_available",
      [] {
        std::string why;
        const bool ok = cuda::Available(&why);
        return py::make_tuple(ok, why);
      },
      "(True, '') when a CUDA runtime loads, else (False, the reason).");
  py::class_<PySharedBuffer>(m, "SharedBuffer", py::buffer_protocol(),
                             "Memory shared with the OSSes on this machine (a sealed memfd): "
                             "reads into it are placed by the OSS and writes from it are taken "
                             "by the OSS, no byte crossing a socket. Supports the buffer "
                             "protocol: numpy.frombuffer(buf, dtype), torch.frombuffer(buf, "
                             "dtype=...), memoryview(buf).")
      .def(py::init([](PyClient& c, size_t nbytes) {
             Result<std::shared_ptr<SharedMemory>> mem;
             {
               py::gil_scoped_release nogil;
               mem = c.client->NewSharedMemory(nbytes);
             }
             return PySharedBuffer{Unwrap(std::move(mem))};
           }),
           py::arg("client"), py::arg("nbytes"))
      .def_buffer([](PySharedBuffer& b) {
        return py::buffer_info(b.mem->data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.mem->size())}, {py::ssize_t{1}},
                               /*readonly=*/false);
      })
      .def("__len__", [](PySharedBuffer& b) { return b.mem->size(); });

  py::class_<PyRing>(m, "Ring",
                     "Reads and writes between files and one SharedBuffer, started in batches "
                     "and completed in any order (include/ciuic/ring.h).")
      .def(py::init<PySharedBuffer&, uint32_t>(), py::arg("buffer"), py::arg("entries") = 256,
           py::keep_alive<1, 2>())
      .def(
          "prep_read",
          [](PyRing& r, py::object f, uint64_t offset, uint64_t length, uint64_t buffer_offset,
             py::object user_data) {
            r.Prep(false, std::move(f), offset, length, buffer_offset, std::move(user_data));
          },
          py::arg("file"), py::arg("offset"), py::arg("length"), py::arg("buffer_offset") = 0,
          py::arg("user_data") = py::none(),
          "Queue a read of length bytes at file offset into the buffer at buffer_offset.")
      .def(
          "prep_write",
          [](PyRing& r, py::object f, uint64_t offset, uint64_t length, uint64_t buffer_offset,
             py::object user_data) {
            r.Prep(true, std::move(f), offset, length, buffer_offset, std::move(user_data));
          },
          py::arg("file"), py::arg("offset"), py::arg("length"), py::arg("buffer_offset") = 0,
          py::arg("user_data") = py::none(),
          "Queue a write of the buffer's bytes at buffer_offset to the file at offset.")
      .def("submit", &PyRing::Submit, "Start the queued IOs; returns how many.")
      .def("wait", &PyRing::Wait, py::arg("min_complete") = 1, py::arg("timeout") = py::none(),
           py::arg("max") = 0,
           "Wait for at least min_complete IOs (timeout in seconds, None: no limit) and return "
           "[(user_data, result)]: result is the byte count or -errno. None when the timeout "
           "passed first (the completions stay for the next wait).")
      .def("close", &PyRing::Close)
      .def_property_readonly("in_flight", &PyRing::in_flight)
      .def_property_readonly("prepared", &PyRing::prepared)
      .def_property_readonly("ready", &PyRing::ready)
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyRing& r, py::args) { r.Close(); });
}

}  // namespace ciuic::python
