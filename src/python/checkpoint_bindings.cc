// ciuic._ciuic checkpoint functions: the C++ checkpoint engine (src/checkpoint) and dtype
// conversion for python/ciuic/checkpoint.py. Buffers cross without copies (buffer protocol);
// every blocking call drops the GIL; errors raise OSError with the errno of the Status.
#include <memory>
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "ciuic/checkpoint.h"
#include "common/prefault.h"
#include "python/bindings.h"
#include "python/py_util.h"

namespace py = pybind11;

namespace ciuic::python {
namespace {

namespace ck = ciuic::checkpoint;

Client& Cl(PyClient& c) {
  if (!c.client)
    ThrowStatus(Status::InvalidArgument("client is closed"));
  return *c.client;
}

ck::HalfKind KindOf(const std::string& name) {
  if (name == "float16")
    return ck::HalfKind::kFloat16;
  if (name == "bfloat16")
    return ck::HalfKind::kBFloat16;
  ThrowStatus(Status::InvalidArgument("conversion target must be 'float16' or 'bfloat16', not '" +
                                      name + "'"));
}

ck::SaveOptions OptionsOf(const py::dict& d) {
  ck::SaveOptions o;
  if (d.contains("convert")) {
    for (auto item : d["convert"].cast<py::list>()) {
      auto pair = item.cast<std::pair<std::string, std::string>>();
      o.convert.push_back({pair.first, KindOf(pair.second)});
    }
  }
  if (d.contains("convert_threads"))
    o.convert_threads = d["convert_threads"].cast<int>();
  if (d.contains("chunk_bytes"))
    o.chunk_bytes = d["chunk_bytes"].cast<size_t>();
  if (d.contains("max_inflight"))
    o.max_inflight = d["max_inflight"].cast<int>();
  if (d.contains("stripe_count"))
    o.stripe_count = d["stripe_count"].cast<uint32_t>();
  if (d.contains("stripe_size"))
    o.stripe_size = d["stripe_size"].cast<uint32_t>();
  if (d.contains("extra_json"))
    o.extra_json = d["extra_json"].cast<std::string>();
  if (d.contains("update_latest"))
    o.update_latest = d["update_latest"].cast<bool>();
  if (d.contains("clean_min_age_s"))
    o.clean_min_age_s = d["clean_min_age_s"].cast<int>();
  if (d.contains("clean_incomplete"))
    o.clean_incomplete = d["clean_incomplete"].cast<bool>();
  return o;
}

// Tensors to save: a list of dicts {name, dtype, shape, data (buffer), global_shape?, offsets?}.
struct SaveInput {
  std::vector<std::unique_ptr<BufferView>> views;
  std::vector<ck::TensorToSave> tensors;
};

std::unique_ptr<SaveInput> InputOf(const py::list& tensors) {
  auto in = std::make_unique<SaveInput>();
  for (auto item : tensors) {
    auto d = item.cast<py::dict>();
    ck::TensorToSave t;
    t.name = d["name"].cast<std::string>();
    t.dtype = d["dtype"].cast<std::string>();
    t.shape = d["shape"].cast<std::vector<int64_t>>();
    in->views.push_back(std::make_unique<BufferView>(d["data"], false));
    t.data = in->views.back()->data();
    t.nbytes = in->views.back()->size();
    if (d.contains("global_shape") && !d["global_shape"].is_none())
      t.global_shape = d["global_shape"].cast<std::vector<int64_t>>();
    if (d.contains("offsets") && !d["offsets"].is_none())
      t.offsets = d["offsets"].cast<std::vector<int64_t>>();
    in->tensors.push_back(std::move(t));
  }
  return in;
}

py::dict StatsOf(const ck::SaveStats& s) {
  py::dict d;
  d["bytes_in"] = s.bytes_in;
  d["bytes_written"] = s.bytes_written;
  d["tensors"] = s.tensors;
  d["seconds"] = s.seconds;
  return d;
}

py::dict TensorDict(const ck::TensorInfo& t) {
  py::dict d;
  d["name"] = t.name;
  d["dtype"] = t.dtype;
  d["stored_dtype"] = t.stored_dtype;
  d["shape"] = t.shape;
  py::list shards;
  for (const ck::ShardInfo& s : t.shards) {
    py::dict sd;
    sd["file"] = s.file;
    sd["offset"] = s.offset;
    sd["length"] = s.length;
    sd["shape"] = s.shape;
    sd["offsets"] = s.offsets;
    shards.append(sd);
  }
  d["shards"] = shards;
  return d;
}

}  // namespace

void RegisterCheckpoint(py::module_& m) {
  py::class_<ck::Manifest, std::shared_ptr<ck::Manifest>>(
      m, "CheckpointManifest", "The committed manifest of one checkpoint (read-only).")
      .def_readonly("dir", &ck::Manifest::dir)
      .def_readonly("save_id", &ck::Manifest::save_id)
      .def_readonly("world_size", &ck::Manifest::world_size)
      .def_readonly("extra_json", &ck::Manifest::extra_json)
      .def("tensors", [](const ck::Manifest& mf) {
        py::list out;
        for (const ck::TensorInfo& t : mf.tensors)
          out.append(TensorDict(t));
        return out;
      });

  py::class_<FreshBuffer>(m, "FreshBuffer", py::buffer_protocol(),
                          "Writable bytes of fresh memory mapped with transparent huge pages "
                          "where the kernel allows (see fresh_buffer).")
      .def_buffer([](FreshBuffer& b) {
        return py::buffer_info(b.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.size())}, {py::ssize_t{1}});
      })
      .def("__len__", &FreshBuffer::size);
  m.def(
      "fresh_buffer",
      [](size_t nbytes) {
        std::unique_ptr<FreshBuffer> b;
        {
          py::gil_scoped_release nogil;
          b = FreshBuffer::Allocate(nbytes);
        }
        if (!b)
          throw std::bad_alloc();
        return b;
      },
      py::arg("nbytes"),
      "New zeroed memory of nbytes that is about to be filled whole (a loaded tensor, a staging "
      "copy): 2 MiB aligned and marked MADV_HUGEPAGE when large, so filling it takes one page "
      "fault per 2 MiB instead of one per 4 KiB. Exposes the buffer protocol.");
  m.def(
      "prefault",
      [](uintptr_t address, size_t nbytes) {
        py::gil_scoped_release nogil;
        PrefaultForWrite(reinterpret_cast<void*>(address), nbytes);
      },
      py::arg("address"), py::arg("nbytes"),
      "Maps the whole pages of fresh memory [address, address + nbytes) in one system call "
      "(MADV_POPULATE_WRITE) before it is filled; a hint (a no-op where unsupported). Internal: "
      "the range must belong to a live buffer of the caller.");
  m.def(
      "checkpoint_save",
      [](PyClient& c, const std::string& path, const py::list& tensors, const py::dict& opts) {
        auto in = InputOf(tensors);
        const ck::SaveOptions o = OptionsOf(opts);
        Result<ck::SaveStats> r;
        {
          py::gil_scoped_release nogil;
          r = ck::Save(Cl(c), path, in->tensors, o);
        }
        return StatsOf(Unwrap(std::move(r)));
      },
      py::arg("client"), py::arg("path"), py::arg("tensors"), py::arg("options"),
      "Save tensors (list of dicts) as checkpoint `path` and commit it (single writer).");
  m.def(
      "checkpoint_save_shard",
      [](PyClient& c, const std::string& path, const std::string& save_id, int rank,
         const py::list& tensors, const py::dict& opts) {
        auto in = InputOf(tensors);
        const ck::SaveOptions o = OptionsOf(opts);
        Result<ck::SaveStats> r;
        {
          py::gil_scoped_release nogil;
          r = ck::SaveShard(Cl(c), path, save_id, rank, in->tensors, o);
        }
        return StatsOf(Unwrap(std::move(r)));
      },
      py::arg("client"), py::arg("path"), py::arg("save_id"), py::arg("rank"), py::arg("tensors"),
      py::arg("options"), "Write one rank's part of save `save_id`.");
  m.def(
      "checkpoint_commit",
      [](PyClient& c, const std::string& path, const std::string& save_id, int world,
         const py::dict& opts) {
        const ck::SaveOptions o = OptionsOf(opts);
        Status st;
        {
          py::gil_scoped_release nogil;
          st = ck::Commit(Cl(c), path, save_id, world, o);
        }
        Check(st);
      },
      py::arg("client"), py::arg("path"), py::arg("save_id"), py::arg("world_size"),
      py::arg("options"), "Commit save `save_id` once every rank's part is written.");
  m.def(
      "checkpoint_abort",
      [](PyClient& c, const std::string& path, const std::string& save_id) {
        py::gil_scoped_release nogil;
        ck::Abort(Cl(c), path, save_id).IgnoreError();  // best effort, the caller is failing
      },
      py::arg("client"), py::arg("path"), py::arg("save_id"));
  m.def(
      "checkpoint_manifest",
      [](PyClient& c, const std::string& path) {
        Result<ck::Manifest> r;
        {
          py::gil_scoped_release nogil;
          r = ck::ReadManifest(Cl(c), path);
        }
        return std::make_shared<ck::Manifest>(Unwrap(std::move(r)));
      },
      py::arg("client"), py::arg("path"),
      "Read the manifest of checkpoint `path` (or of the one `path/latest` names).");
  m.def(
      "checkpoint_load",
      [](PyClient& c, const ck::Manifest& mf, const py::list& requests) {
        // requests: list of (name, destination, row_begin, row_end, upcast_fp32); the
        // destination is a writable buffer, or (device pointer, bytes) for GPU memory.
        std::vector<std::unique_ptr<BufferView>> views;
        std::vector<ck::TensorToLoad> loads;
        for (auto item : requests) {
          auto t = item.cast<py::tuple>();
          ck::TensorToLoad l;
          l.name = t[0].cast<std::string>();
          if (py::isinstance<py::tuple>(t[1])) {
            auto dev = t[1].cast<py::tuple>();
            if (dev.size() != 2)
              throw py::value_error("a device destination is (device pointer, bytes)");
            l.dst = reinterpret_cast<void*>(dev[0].cast<uintptr_t>());
            l.dst_len = dev[1].cast<size_t>();
            l.dst_on_device = true;
          } else {
            views.push_back(std::make_unique<BufferView>(t[1], true));
            l.dst = views.back()->data();
            l.dst_len = views.back()->size();
          }
          l.row_begin = t[2].cast<int64_t>();
          l.row_end = t[3].cast<int64_t>();
          l.upcast_fp32 = t[4].cast<bool>();
          loads.push_back(std::move(l));
        }
        Status st;
        {
          py::gil_scoped_release nogil;
          st = ck::Load(Cl(c), mf, loads);
        }
        Check(st);
      },
      py::arg("client"), py::arg("manifest"), py::arg("requests"),
      "Read tensors into caller buffers, verifying checksums.");
  m.def(
      "checkpoint_latest",
      [](PyClient& c, const std::string& root) {
        Result<std::string> r;
        {
          py::gil_scoped_release nogil;
          r = ck::Latest(Cl(c), root);
        }
        return Unwrap(std::move(r));
      },
      py::arg("client"), py::arg("root"));
  m.def(
      "checkpoint_list_incomplete",
      [](PyClient& c, const std::string& root) {
        Result<std::vector<std::string>> r;
        {
          py::gil_scoped_release nogil;
          r = ck::ListIncomplete(Cl(c), root);
        }
        return Unwrap(std::move(r));
      },
      py::arg("client"), py::arg("root"));
  m.def(
      "checkpoint_clean_incomplete",
      [](PyClient& c, const std::string& root, const std::string& keep, int min_age_s) {
        Status st;
        {
          py::gil_scoped_release nogil;
          st = ck::CleanIncomplete(Cl(c), root, keep, min_age_s);
        }
        Check(st);
      },
      py::arg("client"), py::arg("root"), py::arg("keep") = "", py::arg("min_age_s") = 0);
  m.def(
      "narrow_float32",
      [](py::object src, py::object dst, const std::string& to, int threads) {
        BufferView s(src, false);
        BufferView d(dst, true);
        if (s.size() % 4 != 0 || d.size() * 2 != s.size())
          ThrowStatus(Status::InvalidArgument("dst must hold half as many bytes as src (fp32)"));
        const ck::HalfKind kind = KindOf(to);
        py::gil_scoped_release nogil;
        ck::NarrowFloat32(static_cast<const float*>(s.data()), static_cast<uint16_t*>(d.data()),
                          s.size() / 4, kind, threads);
      },
      py::arg("src"), py::arg("dst"), py::arg("to"), py::arg("threads") = 1,
      "Convert fp32 to float16/bfloat16 bits (bit-identical to torch's cast).");
  m.def(
      "widen_to_float32",
      [](py::object src, py::object dst, const std::string& from, int threads) {
        BufferView s(src, false);
        BufferView d(dst, true);
        if (s.size() % 2 != 0 || s.size() * 2 != d.size())
          ThrowStatus(Status::InvalidArgument("dst must hold twice as many bytes as src"));
        const ck::HalfKind kind = KindOf(from);
        py::gil_scoped_release nogil;
        ck::WidenToFloat32(static_cast<const uint16_t*>(s.data()), static_cast<float*>(d.data()),
                           s.size() / 2, kind, threads);
      },
      py::arg("src"), py::arg("dst"), py::arg("from"), py::arg("threads") = 1,
      "Convert float16/bfloat16 bits to fp32.");
}

}  // namespace ciuic::python
