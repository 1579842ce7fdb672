// Python-facing types shared by the store and agent bindings.
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

#include "kvtier/core/status.h"
#include "kvtier/store/store.h"
#include "kvtier/transfer/agent.h"
#include "memory.h"

namespace kvtier::python {

namespace py = pybind11;

// A batch's per-page outcome (kvtier.BatchResult).
struct PyBatchResult {
  std::vector<Status> pages;
};
// Converts a store BatchResult: a batch-level caller error raises; any other batch-level error
// becomes every page's status, so callers only look at pages.
PyBatchResult to_python(BatchResult result, size_t pages);

// A registration and the Python memory it pins (kvtier.Registration).
class PyRegistration {
 public:
  PyRegistration(Registration registration, HeldRegion region)
      : registration_(std::move(registration)), region_(std::move(region)) {}
  ~PyRegistration();
  // Deregisters (waiting for transfers that use the memory) and unpins. Idempotent.
  void release();
  bool valid() const { return registration_.valid(); }
  size_t nbytes() const { return region_.size; }
  uintptr_t address() const { return reinterpret_cast<uintptr_t>(region_.data); }

 private:
  Registration registration_;
  HeldRegion region_;
};

void bind_common(py::module_& m);
void bind_store(py::module_& m);
void bind_agent(py::module_& m);

}  // namespace kvtier::python
