#include "python/bindings.h"

namespace ciuic::python {

void RegisterClient(pybind11::module_& m) { (void)m; }

}  // namespace ciuic::python
