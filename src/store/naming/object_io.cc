#include "naming/object_io.h"

#include <fmt/format.h>

#include <cstring>

#include "kvtier/core/aligned_buffer.h"

namespace kvtier::object_io {

Status transfer_range(Agent& agent, TransferOp op, const Target& target, std::byte* mem,
                      uint64_t offset, uint64_t length) {
  const MemDesc m{mem, length};
  const StorageDesc s{&target, offset, length};
  KVTIER_ASSIGN_OR_RETURN(Transfer xfer, agent.make_request(op, {&m, 1}, {&s, 1}));
  KVTIER_RETURN_IF_ERROR(xfer.post());
  xfer.wait();
  return xfer.first_error();
}

Status write_object(Agent& agent, const std::string& path, const std::string& temp_dir,
                    std::string_view bytes, const PublishOptions& options) {
  if (bytes.empty()) return invalid_argument_error("write_object: empty object");
  KVTIER_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::allocate(bytes.size()));
  std::memcpy(buf.data(), bytes.data(), bytes.size());
  KVTIER_ASSIGN_OR_RETURN(Registration reg, agent.register_memory(buf.data(), buf.size()));
  KVTIER_ASSIGN_OR_RETURN(Target target, agent.open_target(TargetSpec{path, TargetMode::kCreate,
                                                                      bytes.size(), temp_dir}));
  KVTIER_RETURN_IF_ERROR(
      transfer_range(agent, TransferOp::kWrite, target, buf.data(), 0, bytes.size()));
  return target.publish(options);
}

Result<std::string> read_object(Agent& agent, const std::string& path, uint64_t max_bytes) {
  KVTIER_ASSIGN_OR_RETURN(Target target,
                          agent.open_target(TargetSpec{path, TargetMode::kRead, 0, {}}));
  const uint64_t size = target.size();
  if (size > max_bytes) {
    return invalid_argument_error(
        fmt::format("'{}' is {} bytes, more than the {} expected", path, size, max_bytes));
  }
  if (size == 0) return std::string();
  KVTIER_ASSIGN_OR_RETURN(AlignedBuffer buf, AlignedBuffer::allocate(size));
  KVTIER_ASSIGN_OR_RETURN(Registration reg, agent.register_memory(buf.data(), buf.size()));
  KVTIER_RETURN_IF_ERROR(transfer_range(agent, TransferOp::kRead, target, buf.data(), 0, size));
  return std::string(reinterpret_cast<const char*>(buf.data()), size);
}

}  // namespace kvtier::object_io
