#include "batch_pages.h"

#include <fmt/format.h>
#include <pybind11/stl.h>  // the cast of a sequence to std::vector

#include <cstring>

#include "errors.h"

namespace kvtier::python {
namespace {

void check_flat(size_t keys, const std::vector<uint64_t>& ptrs,
                const std::vector<uint64_t>& sizes) {
  if (ptrs.size() != sizes.size()) {
    raise_invalid(fmt::format("{} pointers but {} sizes", ptrs.size(), sizes.size()));
  }
  if (keys == 0 ? !ptrs.empty() : ptrs.size() % keys != 0) {
    raise_invalid(fmt::format("{} pieces do not split evenly into {} pages", ptrs.size(), keys));
  }
}

// Addresses or sizes: a numpy array of 8-byte integers is read as it lies (no conversion per
// element: what a pool's geometry computes in one vector operation); any other sequence of
// integers element by element.
std::vector<uint64_t> integers(const py::object& values, const char* what) {
  if (py::isinstance<py::buffer>(values) && !py::isinstance<py::bytes>(values)) {
    py::buffer_info info = py::reinterpret_borrow<py::buffer>(values).request();
    const bool integral =
        info.format == "l" || info.format == "L" || info.format == "q" || info.format == "Q";
    if (integral && info.itemsize == 8 && info.ndim == 1) {
      const bool is_signed = info.format == "l" || info.format == "q";
      std::vector<uint64_t> out(static_cast<size_t>(info.shape[0]));
      const auto* base = static_cast<const std::byte*>(info.ptr);
      for (size_t i = 0; i < out.size(); ++i) {
        std::memcpy(&out[i], base + static_cast<ptrdiff_t>(i) * info.strides[0], 8);
        if (is_signed && static_cast<int64_t>(out[i]) < 0) {
          raise_invalid(fmt::format("{}[{}] is negative", what, i));
        }
      }
      return out;
    }
  }
  try {
    return values.cast<std::vector<uint64_t>>();
  } catch (const py::cast_error&) {
    raise_invalid(fmt::format("{} must be a sequence of integers or a 1-d int64 array", what));
  }
}

}  // namespace

BatchPages gather_pages(const py::sequence& pages, size_t keys, bool writable) {
  if (pages.size() != keys) {
    raise_invalid(fmt::format("{} keys but {} pages", keys, pages.size()));
  }
  BatchPages out;
  size_t k = 0;
  for (size_t i = 0; i < pages.size(); ++i) {
    const size_t n = out.hold.add_page(pages[i], writable);
    if (i == 0) k = n;
    if (n != k) {
      raise_invalid(
          fmt::format("page {} has {} pieces, page 0 has {}: every page of a batch "
                      "needs the same number of pieces",
                      i, n, k));
    }
  }
  for (const auto& p : out.hold.pieces()) {
    out.mutable_pieces.push_back(MutableBuffer{p.data, p.size});
    out.const_pieces.push_back(ConstBuffer{p.data, p.size});
  }
  return out;
}

BatchPages flat_pages(size_t keys, const py::object& ptr_values, const py::object& size_values) {
  const std::vector<uint64_t> ptrs = integers(ptr_values, "ptrs");
  const std::vector<uint64_t> sizes = integers(size_values, "sizes");
  check_flat(keys, ptrs, sizes);
  BatchPages out;
  for (size_t i = 0; i < ptrs.size(); ++i) {
    out.mutable_pieces.push_back(MutableBuffer{reinterpret_cast<void*>(ptrs[i]), sizes[i]});
    out.const_pieces.push_back(ConstBuffer{reinterpret_cast<const void*>(ptrs[i]), sizes[i]});
  }
  return out;
}

BatchPages row_pages(size_t keys, const py::object& token_values, uint64_t page_size,
                     const py::object& first_values, const py::object& stride_values,
                     const py::object& size_values, uint64_t rows) {
  const std::vector<uint64_t> tokens = integers(token_values, "tokens");
  const std::vector<uint64_t> first = integers(first_values, "first");
  const std::vector<uint64_t> stride = integers(stride_values, "stride");
  const std::vector<uint64_t> sizes = integers(size_values, "sizes");
  if (page_size == 0) raise_invalid("page_size is 0");
  if (first.size() != stride.size() || first.size() != sizes.size() || first.empty()) {
    raise_invalid(fmt::format("{} first addresses, {} strides and {} sizes: one of each per piece",
                              first.size(), stride.size(), sizes.size()));
  }
  if (tokens.size() != keys * page_size) {
    raise_invalid(fmt::format("{} keys need {} token indices (page size {}), got {}", keys,
                              keys * page_size, page_size, tokens.size()));
  }
  BatchPages out;
  out.mutable_pieces.reserve(keys * first.size());
  out.const_pieces.reserve(keys * first.size());
  for (size_t i = 0; i < keys; ++i) {
    const uint64_t token = tokens[i * page_size];
    if (token % page_size != 0 || token / page_size >= rows) {
      raise_invalid(fmt::format("token index {} does not start one of the pool's {} pages of {}",
                                token, rows, page_size));
    }
    const uint64_t row = token / page_size;
    for (size_t j = 0; j < first.size(); ++j) {
      void* piece = reinterpret_cast<void*>(first[j] + row * stride[j]);
      out.mutable_pieces.push_back(MutableBuffer{piece, sizes[j]});
      out.const_pieces.push_back(ConstBuffer{piece, sizes[j]});
    }
  }
  return out;
}

}  // namespace kvtier::python
