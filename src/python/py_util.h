// Helpers shared by the binding files: Status -> OSError, buffer views without copies.
// Functions here need the GIL unless they say otherwise.
#pragma once

#include <Python.h>

#include <cstddef>
#include <string>
#include <utility>

#include <pybind11/pybind11.h>

#include "ciuic/status.h"

namespace ciuic::python {

// Raises OSError(errno, message) (Python picks FileNotFoundError etc. from the errno).
[[noreturn]] inline void ThrowStatus(const Status& s) {
  int err = s.ToErrno();
  if (err == 0) {
    err = EIO;
  }
  pybind11::object exc = pybind11::reinterpret_steal<pybind11::object>(
      PyObject_CallFunction(PyExc_OSError, "is", err, s.ToString().c_str()));
  if (!exc) {
    throw pybind11::error_already_set();
  }
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
  throw pybind11::error_already_set();
}

template <typename T>
T Unwrap(Result<T> r) {
  if (!r.ok()) {
    ThrowStatus(r.status());
  }
  return std::move(*r);
}

inline void Check(const Status& s) {
  if (!s.ok()) {
    ThrowStatus(s);
  }
}

// A contiguous view of a Python buffer (bytes, bytearray, memoryview, numpy array...), released
// on destruction. Holding it keeps the exporter alive, so the GIL may be dropped while it is used.
class BufferView {
 public:
  // Objects without the buffer protocol that have a `numpy()` method sharing their memory (a
  // torch CPU tensor) are viewed through it, still without a copy.
  BufferView(pybind11::handle obj, bool writable) {
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (!PyObject_CheckBuffer(obj.ptr()) && pybind11::hasattr(obj, "numpy")) {
      holder_ = obj.attr("numpy")();
      obj = holder_;
    }
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
      throw pybind11::error_already_set();
    }
  }
  ~BufferView() { PyBuffer_Release(&view_); }
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;

  void* data() const { return view_.buf; }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  pybind11::object holder_;  // the numpy view of a tensor, when one was made
  Py_buffer view_{};
};

}  // namespace ciuic::python
