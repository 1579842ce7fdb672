// Submitted batches: submit_put/submit_get copy the batch into a ticket's state, one of the
// store's async threads runs it, and the BatchTicket waits for it or takes its result.
#include <fmt/format.h>

#include <type_traits>

#include "store_impl.h"

namespace kvtier {

// Runs one submitted batch on the store's async pool.
class Store::Impl::TicketJob final : public PoolJob {
 public:
  TicketJob(Store::Impl& impl, std::shared_ptr<detail::TicketState> state)
      : impl_(impl), state_(std::move(state)) {}

  void run() override {
    detail::TicketState& st = *state_;
    st.result = st.is_put ? impl_.put(st.views, st.put_pieces) : impl_.get(st.views, st.get_pieces);
    if (st.callback) {
      // A completion thread must not unwind: an exception from the callback stops here.
      try {
        st.callback(st.result);
      } catch (...) {
      }
    }
    {
      MutexLock lock(st.mu);
      st.done = true;
    }
    st.cv.notify_all();
    state_.reset();
    MutexLock lock(impl_.async_mu);
    if (--impl_.async_pending == 0) impl_.async_idle.notify_all();
  }

 private:
  Store::Impl& impl_;
  std::shared_ptr<detail::TicketState> state_;
};

template <typename Buffer>
BatchTicket Store::Impl::submit(std::span<const std::string_view> keys,
                                std::span<const Buffer> pieces, BatchCallback on_done) {
  auto st = std::make_shared<detail::TicketState>();
  st->keys.assign(keys.begin(), keys.end());
  st->views.assign(st->keys.begin(), st->keys.end());
  if constexpr (std::is_same_v<Buffer, ConstBuffer>) {
    st->is_put = true;
    st->put_pieces.assign(pieces.begin(), pieces.end());
  } else {
    st->get_pieces.assign(pieces.begin(), pieces.end());
  }
  st->callback = std::move(on_done);
  BatchTicket t;
  t.state_ = st;
  std::call_once(async_once, [&] {
    async_pool = std::make_unique<WorkerPool>(std::max<size_t>(1, config.async_threads));
  });
  {
    MutexLock lock(async_mu);
    ++async_pending;
  }
  async_pool->schedule(std::make_shared<TicketJob>(*this, std::move(st)), 1);
  return t;
}

// ---- BatchTicket ----

namespace {
void abandon_if_not_ours(std::shared_ptr<detail::TicketState>& state) {
  if (state && !state->owner.here()) abandon(state);
}
}  // namespace

BatchTicket::BatchTicket() noexcept = default;
BatchTicket::BatchTicket(BatchTicket&&) noexcept = default;
BatchTicket& BatchTicket::operator=(BatchTicket&& other) noexcept {
  if (this != &other) {
    if (state_) wait();
    abandon_if_not_ours(state_);
    state_ = std::move(other.state_);
  }
  return *this;
}
BatchTicket::~BatchTicket() {
  if (state_) wait();
  abandon_if_not_ours(state_);
}

BatchTicket BatchTicket::refused(Status status, BatchCallback on_done) {
  auto st = std::make_shared<detail::TicketState>();
  st->result.status = std::move(status);
  if (on_done) {
    try {
      on_done(st->result);
    } catch (...) {
    }
  }
  {
    MutexLock lock(st->mu);
    st->done = true;
  }
  BatchTicket t;
  t.state_ = std::move(st);
  return t;
}

// A ticket in another process than the one that submitted it (a forked child's copy): its
// batch cannot finish there, so it is done, take() says why, waits return at once, and its
// state is abandoned rather than destroyed (its lock may be held for good).
bool BatchTicket::done() const {
  if (!state_) return false;
  if (!state_->owner.here()) return true;
  MutexLock lock(state_->mu);
  return state_->done;
}

Status BatchTicket::wait(std::chrono::nanoseconds timeout) const {
  if (!state_) return invalid_argument_error("wait on an empty BatchTicket");
  KVTIER_RETURN_IF_ERROR(state_->owner.check("this batch"));
  MutexLock lock(state_->mu);
  if (!lock.wait_for(state_->cv, timeout,
                     [&]() KVTIER_REQUIRES(state_->mu) { return state_->done; })) {
    return deadline_exceeded_error(
        fmt::format("batch of {} pages still running", state_->keys.size()));
  }
  return ok_status();
}

void BatchTicket::wait() const {
  if (!state_ || !state_->owner.here()) return;
  MutexLock lock(state_->mu);
  lock.wait(state_->cv, [&]() KVTIER_REQUIRES(state_->mu) { return state_->done; });
}

BatchResult BatchTicket::take() {
  BatchResult out;
  if (!state_) {
    out.status = invalid_argument_error("take on an empty BatchTicket");
    return out;
  }
  if (Status st = state_->owner.check("this batch"); !st.ok()) {
    out.status = std::move(st);
    return out;
  }
  MutexLock lock(state_->mu);
  if (!state_->done) {
    out.status = invalid_argument_error("take before the batch is done (wait first)");
  } else if (state_->taken) {
    out.status = invalid_argument_error("the result was already taken");
  } else {
    state_->taken = true;
    out = std::move(state_->result);
  }
  return out;
}

void BatchTicket::detach() noexcept {
  abandon_if_not_ours(state_);
  state_.reset();
}

BatchTicket Store::submit_put(std::span<const std::string_view> keys,
                              std::span<const ConstBuffer> pieces, BatchCallback on_done) {
  if (Status st = impl_->owner.check("this kvtier Store"); !st.ok()) {
    return BatchTicket::refused(std::move(st), std::move(on_done));
  }
  return impl_->submit(keys, pieces, std::move(on_done));
}

BatchTicket Store::submit_get(std::span<const std::string_view> keys,
                              std::span<const MutableBuffer> pieces, BatchCallback on_done) {
  if (Status st = impl_->owner.check("this kvtier Store"); !st.ok()) {
    return BatchTicket::refused(std::move(st), std::move(on_done));
  }
  return impl_->submit(keys, pieces, std::move(on_done));
}

}  // namespace kvtier
