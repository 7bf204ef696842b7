#include "python/bindings.h"

PYBIND11_MODULE(_ciuic, m) {
  m.doc() = "ciuic native module (use the `ciuic` package, not this module directly)";
  ciuic::python::RegisterClient(m);
  ciuic::python::RegisterRing(m);
  ciuic::python::RegisterLoader(m);
  ciuic::python::RegisterCheckpoint(m);
}
