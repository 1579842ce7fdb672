// Status to Python: the one place where kvtier statuses become exceptions.
//
//   kvtier.Error                      base of every kvtier exception; `.code` is the status
//                                     code name ("INVALID_ARGUMENT", ...)
//   kvtier.InvalidArgumentError       Error and ValueError: the caller's mistake (bad key,
//                                     wrong sizes, unregistered memory, closed store)
//   kvtier.StorageError               Error and OSError: a store or handle could not be made
//                                     (unwritable directory, unknown backend, ...)
//
// Data-path calls (get, put, batches, exists) raise only for caller errors: a miss or a
// storage fault is a result (kvtier.Status), never an exception.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "kvtier/core/status.h"

namespace kvtier::python {

namespace py = pybind11;

void register_errors(py::module_& m);

// Raises the exception for `status` (REQUIRES: !status.ok()).
[[noreturn]] void raise_status(const Status& status);
[[noreturn]] void raise_invalid(const std::string& message);
// Raises when `status` is a caller error; returns otherwise.
void raise_if_caller_error(const Status& status);

}  // namespace kvtier::python
