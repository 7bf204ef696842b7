// Loader part of ciuic._ciuic: the prefetch engine, tar shard indexes and pack (src/loader).
// The Python side (python/ciuic/data.py) computes epoch orders; these run the IO.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include "loader/pack.h"
#include "loader/prefetch_engine.h"
#include "loader/tar_index.h"
#include "python/bindings.h"
#include "python/py_util.h"

namespace py = pybind11;

namespace ciuic::python {
namespace {

// One sample's bytes handed out without a copy: the engine's buffer, exported with the buffer
// protocol (memoryview, numpy.frombuffer, torch.frombuffer) and given back to the engine's
// pool when the last view is dropped. Writable: the memory is the holder's alone until then.
struct Sample {
  loader::SampleBuffer buf;
};

using loader::PrefetchEngine;
using loader::SampleRef;
using loader::TarMember;
using Int64Array = py::array_t<int64_t, py::array::c_style | py::array::forcecast>;

// An epoch's order from three 1-d arrays of one length.
std::vector<SampleRef> ToOrder(const Int64Array& source,
                               const Int64Array& offset,
                               const Int64Array& length) {
  if (source.ndim() != 1 || offset.ndim() != 1 || length.ndim() != 1 ||
      source.size() != offset.size() || source.size() != length.size()) {
    throw py::value_error("source, offset and length must be 1-d arrays of one length");
  }
  std::vector<SampleRef> order(static_cast<size_t>(source.size()));
  auto s = source.unchecked<1>();
  auto o = offset.unchecked<1>();
  auto l = length.unchecked<1>();
  for (py::ssize_t i = 0; i < source.size(); ++i) {
    if (s(i) < 0 || o(i) < 0 || l(i) < 0)
      throw py::value_error("negative source, offset or length in the order");
    order[static_cast<size_t>(i)] = {static_cast<uint32_t>(s(i)), static_cast<uint64_t>(o(i)),
                                     static_cast<uint64_t>(l(i))};
  }
  return order;
}

std::shared_ptr<Client> ClientOf(PyClient& c) {
  if (!c.client) {
    throw py::value_error("client is closed");
  }
  return c.client;
}

// The data set's sources resolved once (FID, layout, size), shared by every epoch's engine.
struct PyResolved {
  std::shared_ptr<const loader::ResolvedSources> sources;
};

// A SamplePool kept by a CiuicDataLoader across its epochs.
struct PySamplePool {
  std::shared_ptr<loader::SamplePool> pool;
};

py::list Members(const std::vector<TarMember>& members) {
  py::list out;
  for (const auto& m : members) {
    out.append(py::make_tuple(m.name, m.offset, m.size));
  }
  return out;
}

}  // namespace

void RegisterLoader(py::module_& m) {
  py::class_<Sample>(m, "Sample", py::buffer_protocol(),
                     "One sample's bytes in the loader's own buffer (no copy); views of it "
                     "(memoryview, numpy.frombuffer, torch.frombuffer) keep it, and the buffer "
                     "goes back to the loader when the last one is dropped.")
      .def_buffer([](Sample& s) {
        // A zero-length sample still exports a valid (non-null) pointer.
        static char empty = 0;
        char* p = s.buf.size() > 0 ? const_cast<char*>(s.buf.data()) : &empty;
        return py::buffer_info(p, 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(s.buf.size())}, {py::ssize_t{1}},
                               /*readonly=*/false);
      })
      .def("__len__", [](const Sample& s) { return s.buf.size(); })
      .def("__bytes__", [](const Sample& s) { return py::bytes(s.buf.data(), s.buf.size()); });
  py::class_<PyResolved>(m, "ResolvedSources",
                         "Source files resolved once (FID, layout, size): an engine given them "
                         "reads each sample with no MDS round trip.")
      .def("__len__", [](const PyResolved& r) { return r.sources ? r.sources->size() : 0; })
      .def(
          "sizes",
          [](const PyResolved& r) {
            std::vector<uint64_t> out;
            if (r.sources) {
              out.reserve(r.sources->size());
              for (const auto& s : *r.sources)
                out.push_back(s.size);
            }
            return out;
          },
          "The size of each source at the resolve, in order.");
  m.def(
      "resolve_sources",
      [](PyClient& c, const std::vector<std::string>& paths, int threads) {
        auto client = ClientOf(c);
        Result<std::shared_ptr<const loader::ResolvedSources>> r;
        {
          py::gil_scoped_release nogil;
          r = loader::ResolveSources(*client, paths, threads);
        }
        return PyResolved{Unwrap(std::move(r))};
      },
      py::arg("client"), py::arg("paths"), py::arg("threads") = 8,
      "Resolves regular files once (a stat and a layout request each, `threads` in flight).");
  py::class_<PySamplePool>(
      m, "SamplePool",
      "Sample buffers for prefetch engines of one client, one epoch after another (keep one "
      "across epochs: its memory, shared with OSSes on this host, stays mapped).")
      .def(py::init([](PyClient& c, size_t budget_bytes, bool shared_memory) {
             return PySamplePool{
                 loader::NewSamplePool(ClientOf(c).get(), budget_bytes, shared_memory)};
           }),
           py::arg("client"), py::arg("budget_bytes") = size_t{256} << 20,
           py::arg("shared_memory") = true);
  py::class_<PrefetchEngine>(m, "PrefetchEngine",
                             "Reads an epoch's samples in exactly the given order, ahead of the "
                             "consumer, within a memory budget (C++ threads; GIL released).")
      .def(py::init([](PyClient& c, std::vector<std::string> sources, Int64Array source,
                       Int64Array offset, Int64Array length, size_t budget_bytes, int max_inflight,
                       int opener_threads, int max_open_sources, bool keep_sources_open,
                       const PyResolved* resolved, const PySamplePool* pool,
                       std::optional<Int64Array> next_source, std::optional<Int64Array> next_offset,
                       std::optional<Int64Array> next_length) {
             std::vector<SampleRef> order = ToOrder(source, offset, length);
             loader::PrefetchOptions opts;
             if (next_source || next_offset || next_length) {
               if (!next_source || !next_offset || !next_length)
                 throw py::value_error("next_source, next_offset and next_length go together");
               opts.next_order = ToOrder(*next_source, *next_offset, *next_length);
             }
             opts.budget_bytes = budget_bytes;
             opts.max_inflight = max_inflight;
             opts.opener_threads = opener_threads;
             opts.max_open_sources = max_open_sources;
             opts.keep_sources_open = keep_sources_open;
             auto e = std::make_unique<PrefetchEngine>(
                 ClientOf(c), std::move(sources), std::move(order), opts,
                 resolved != nullptr ? resolved->sources : nullptr,
                 pool != nullptr ? pool->pool : nullptr);
             Check(e->Start());
             return e;
           }),
           py::arg("client"), py::arg("sources"), py::arg("source"), py::arg("offset"),
           py::arg("length"), py::arg("budget_bytes") = size_t{256} << 20,
           py::arg("max_inflight") = 256, py::arg("opener_threads") = 8,
           py::arg("max_open_sources") = 64, py::arg("keep_sources_open") = true,
           py::arg("resolved") = nullptr, py::arg("pool") = nullptr,
           py::arg("next_source") = py::none(), py::arg("next_offset") = py::none(),
           py::arg("next_length") = py::none())
      .def(
          "next",
          [](PrefetchEngine& e) -> py::object {
            Result<std::optional<loader::SampleBuffer>> r;
            {
              py::gil_scoped_release nogil;
              r = e.Next();
            }
            auto v = Unwrap(std::move(r));
            if (!v) {
              return py::none();
            }
            return py::bytes(v->data(), v->size());
          },
          "The next sample's bytes in order, or None after the last.")
      .def(
          "next_batch",
          [](PrefetchEngine& e, size_t n, bool zero_copy) {
            // Up to n samples (fewer only at the end), waited for with the GIL dropped once.
            std::vector<loader::SampleBuffer> got;
            got.reserve(std::min<size_t>(n, 4096));
            Result<size_t> r;
            {
              py::gil_scoped_release nogil;
              r = e.NextBatch(n, &got);
            }
            Unwrap(std::move(r));
            py::list out(got.size());
            for (size_t i = 0; i < got.size(); ++i) {
              if (zero_copy) {
                out[i] = py::cast(Sample{std::move(got[i])});
              } else {
                out[i] = py::bytes(got[i].data(), got[i].size());
              }
            }
            return out;
          },
          py::arg("n"), py::arg("zero_copy") = false,
          "Up to n samples: bytes, or with zero_copy Sample objects exporting the engine's "
          "buffers (the buffer protocol) until the last view of each is dropped.")
      .def("stop",
           [](PrefetchEngine& e) {
             py::gil_scoped_release nogil;
             e.Stop();
           })
      .def("__len__", &PrefetchEngine::size)
      .def("stats", [](PrefetchEngine& e) {
        auto s = e.stats();
        py::dict d;
        d["samples"] = s.samples;
        d["bytes"] = s.bytes;
        d["opens"] = s.opens;
        d["peak_buffered"] = s.peak_buffered;
        d["consumer_waits"] = s.consumer_waits;
        d["consumer_wait_s"] = s.consumer_wait_s;
        d["pool_shared_bytes"] = s.pool_shared_bytes;
        return d;
      });

  m.def(
      "scan_tar",
      [](PyClient& c, const std::string& path) {
        auto client = ClientOf(c);
        Result<std::vector<TarMember>> r;
        {
          py::gil_scoped_release nogil;
          r = [&]() -> Result<std::vector<TarMember>> {
            OpenOptions oo;
            oo.random_access = true;
            CIUIC_ASSIGN_OR_RETURN(auto f, client->Open(path, O_RDONLY, 0, oo));
            CIUIC_ASSIGN_OR_RETURN(FileStat st, f->Stat());
            auto members = loader::ScanTar(*f, st.size);
            f->Close().IgnoreError();  // read-only: nothing to lose
            return members;
          }();
        }
        return Members(Unwrap(std::move(r)));
      },
      py::arg("client"), py::arg("path"),
      "Index a tar file on the cluster: [(name, data offset, size)] of its regular members "
      "(reads only the headers). OSError(EIO) for a corrupt or truncated tar.");
  m.def(
      "parse_index",
      [](py::bytes text) { return Members(Unwrap(loader::ParseIndex(std::string(text)))); },
      py::arg("text"));
  m.def(
      "format_index",
      [](const std::vector<std::tuple<std::string, uint64_t, uint64_t>>& members) {
        std::vector<TarMember> v;
        for (const auto& [name, off, size] : members) {
          v.push_back({name, off, size});
        }
        return py::bytes(loader::FormatIndex(v));
      },
      py::arg("members"));
  m.def(
      "pack",
      [](PyClient& c, const std::string& src, const std::string& dest, uint64_t shard_bytes) {
        auto client = ClientOf(c);
        loader::PackOptions o;
        o.shard_bytes = shard_bytes;
        Result<loader::PackResult> r;
        {
          py::gil_scoped_release nogil;
          r = loader::PackDirectory(*client, src, dest, o);
        }
        auto res = Unwrap(std::move(r));
        py::dict d;
        d["files"] = res.files;
        d["shards"] = res.shards;
        d["bytes"] = res.bytes;
        return d;
      },
      py::arg("client"), py::arg("src"), py::arg("dest"),
      py::arg("shard_bytes") = uint64_t{64} << 20,
      "Pack local directory src into tar shards + indexes under cluster directory dest.");
}

}  // namespace ciuic::python
