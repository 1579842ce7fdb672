// A batch's keys and pages as the store's bindings take them from Python, in the three forms
// a caller may give: Python objects per page (buffers, tensors, (address, nbytes) tuples:
// memory.h), flat lists of addresses and sizes, or rows of a host pool at fixed strides.
// Every function here needs the GIL and raises kvtier.InvalidArgumentError on a malformed
// batch.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/store/store.h"
#include "memory.h"

namespace kvtier::python {

namespace py = pybind11;

// Keys as views into strings that live as long as the call.
struct Keys {
  std::vector<std::string> owned;
  std::vector<std::string_view> views;
  explicit Keys(std::vector<std::string> keys) : owned(std::move(keys)) {
    views.assign(owned.begin(), owned.end());
  }
};

// The pages of a batch as flat pieces, `k` per page.
struct BatchPages {
  PieceSet hold;
  std::vector<MutableBuffer> mutable_pieces;
  std::vector<ConstBuffer> const_pieces;
};

// Python objects, one per page (each one piece or a list of pieces, the same number per page);
// `writable` for a get.
BatchPages gather_pages(const py::sequence& pages, size_t keys, bool writable);

// The pages of a batch given as flat address and size lists (the caller keeps the memory).
BatchPages flat_pages(size_t keys, const py::object& ptr_values, const py::object& size_values);

// The pages of a batch as rows of a host pool whose every page has its pieces at one stride:
// page i is pool row r = tokens[i * page_size] / page_size, and its piece j lies at
// first[j] + r * stride[j] (sizes[j] bytes). The rows are worked out here, in one pass, from the
// caller's token indices (a numpy view of SGLang's host_indices), with nothing per page built
// in Python. A token index that does not start a page, or a row at or past `rows`, is a caller
// error.
BatchPages row_pages(size_t keys, const py::object& token_values, uint64_t page_size,
                     const py::object& first_values, const py::object& stride_values,
                     const py::object& size_values, uint64_t rows);

}  // namespace kvtier::python
