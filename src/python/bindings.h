// The pybind11 module `ciuic._ciuic`. One module, several files: each file registers its part.
// Contract between the parts: a connected client crosses into Python as ciuic._ciuic.Client,
// whose C++ type is PyClient; other parts take `PyClient&` to reach the libciuic Client.
#pragma once

#include <memory>
#include <string>

#include <pybind11/pybind11.h>

#include "ciuic/client.h"

namespace ciuic::python {

struct PyClient {
  std::shared_ptr<ciuic::Client> client;
  std::string cluster_file;
};

void RegisterClient(pybind11::module_& m);  // client_bindings.cc: Client, File, errors.
void RegisterRing(pybind11::module_& m);    // ring_bindings.cc: SharedBuffer, Ring.
// The open File behind a ciuic._ciuic.File (client_bindings.cc); raises ValueError when it is
// closed, TypeError when `obj` is not one.
ciuic::File* FileOf(pybind11::handle obj);
void RegisterLoader(pybind11::module_& m);      // loader_bindings.cc: indexes, prefetch engine.
void RegisterCheckpoint(pybind11::module_& m);  // checkpoint_bindings.cc: engine, conversion.

}  // namespace ciuic::python
