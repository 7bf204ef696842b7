#include "python/bindings.h"

namespace ciuic::python {

void RegisterCheckpoint(pybind11::module_& m) { (void)m; }

}  // namespace ciuic::python
