// The s3 backend's data path: a submitted batch becomes ranged GETs (reads, one per contiguous
// run of an object) or whole-object uploads (a PUT, or a multipart upload above
// multipart_bytes), started on the client and completed from its event-loop thread.
#include <fmt/format.h>

#include <algorithm>
#include <pugixml.hpp>

#include "s3_backend_impl.h"

namespace kvtier::s3 {

void S3Backend::submit(IoBatch& batch) {
  const TransferOp op = batch.op();
  // Everything needed is copied first: once the last descriptor completes, `batch` is gone.
  const std::vector<IoDesc> descs(batch.descs().begin(), batch.descs().end());
  if (descs.empty()) return;
  const bool cancelled = batch.cancel_requested();
  const auto until = deadline();

  std::vector<BackendTarget*> order;
  std::unordered_map<BackendTarget*, std::vector<size_t>> groups;
  for (size_t i = 0; i < descs.size(); ++i) {
    auto [it, fresh] = groups.try_emplace(descs[i].target);
    if (fresh) order.push_back(descs[i].target);
    it->second.push_back(i);
  }
  std::vector<std::shared_ptr<Job>> jobs;
  for (BackendTarget* base : order) {
    auto* t = static_cast<S3Target*>(base);
    std::vector<size_t> idx = std::move(groups[base]);
    std::stable_sort(idx.begin(), idx.end(),
                     [&](size_t a, size_t b) { return descs[a].offset < descs[b].offset; });
    if (cancelled) {
      auto job = std::make_shared<Job>();
      job->descs = std::move(idx);
      job->immediate = cancelled_error(fmt::format("transfer of '{}' cancelled", t->path()));
      jobs.push_back(std::move(job));
      continue;
    }
    if (op == TransferOp::kWrite) {
      auto job = std::make_shared<Job>();
      job->key = t->key();
      uint64_t expect = 0;
      for (size_t i : idx) {
        if (descs[i].offset != expect) {
          job->immediate = invalid_argument_error(fmt::format(
              "'{}': an object is uploaded whole: one transfer must write every byte from "
              "offset 0 (a gap or overlap at {})",
              t->path(), expect));
        }
        expect = descs[i].offset + descs[i].length;
        job->body.emplace_back(descs[i].mem, descs[i].length);
      }
      job->bytes = expect;
      job->descs = std::move(idx);
      if (job->immediate.ok()) {
        MutexLock lock(t->mu);
        if (t->uploading || t->uploaded) {
          job->immediate = invalid_argument_error(
              fmt::format("'{}' is already written: objects are uploaded once", t->path()));
        } else {
          t->uploading = true;
          job->upload = t;
        }
      }
      jobs.push_back(std::move(job));
      continue;
    }
    // Reads: one ranged GET per contiguous run of about get_bytes.
    for (size_t k = 0; k < idx.size();) {
      auto job = std::make_shared<Job>();
      job->key = t->key();
      uint64_t end = descs[idx[k]].offset;
      const uint64_t start = end;
      while (k < idx.size() && descs[idx[k]].offset == end &&
             (end == start || end - start < options_.get_bytes)) {
        job->descs.push_back(idx[k]);
        end += descs[idx[k]].length;
        ++k;
      }
      job->bytes = end - start;
      auto r = std::make_shared<Request>();
      r->method = "GET";
      r->key = t->key();
      r->headers.push_back(fmt::format("Range: bytes={}-{}", start, end - 1));
      if (!t->etag().empty()) r->headers.push_back(fmt::format("If-Match: \"{}\"", t->etag()));
      for (size_t i : job->descs) r->sink.emplace_back(descs[i].mem, descs[i].length);
      r->deadline = until;
      job->read = std::move(r);
      jobs.push_back(std::move(job));
    }
  }

  auto work = std::make_shared<BatchWork>();
  work->jobs_left.store(jobs.size());
  {
    MutexLock lock(batches_mu_);
    batches_[&batch] = work;
  }
  std::vector<std::shared_ptr<Job>> failed_now;
  for (const auto& job : jobs) {
    if (!job->immediate.ok()) {
      failed_now.push_back(job);
    } else if (op == TransferOp::kWrite) {
      if (job->bytes > options_.multipart_bytes) {
        start_multipart(batch, work, job, until);
      } else {
        start_put(batch, work, job, until);
      }
    } else {
      std::shared_ptr<Request> r = std::move(job->read);
      const uint64_t bytes = job->bytes;
      auto* const t = static_cast<S3Target*>(descs[job->descs.front()].target);
      r->on_done = [this, &batch, work, job, bytes, t](Request& done) {
        Status st = done.status;
        if (st.ok() && done.received != bytes) {
          st = corrupt_error(
              fmt::format("'{}': {} of {} bytes arrived", done.key, done.received, bytes));
        }
        if (st.ok() && t->unchecked()) st = t->check_read(done);
        finish_job(batch, work, *job, std::move(st));
      };
      work->add(r);
      client_->start(std::move(r));
    }
  }
  for (const auto& job : failed_now) finish_job(batch, work, *job, job->immediate);
}

Status S3Target::check_read(const Request& done) {
  // A ranged GET says the object's size in Content-Range; a whole one (200) in its length.
  const uint64_t size = done.object_size != 0 ? done.object_size : done.content_length;
  if (size != this->size()) {
    return corrupt_error(
        fmt::format("'{}' is {} bytes; {} were expected", path(), size, this->size()));
  }
  if (done.etag.empty()) return ok_status();  // one GET reads one object; nothing to match
  MutexLock lock(mu);
  if (seen_etag_.empty()) {
    seen_etag_ = done.etag;
  } else if (seen_etag_ != done.etag) {
    return corrupt_error(fmt::format("'{}' was replaced while it was read", path()));
  }
  return ok_status();
}

void S3Backend::start_put(IoBatch& batch, const std::shared_ptr<BatchWork>& work,
                          const std::shared_ptr<Job>& job, Clock::time_point until) {
  auto r = std::make_shared<Request>();
  r->method = "PUT";
  r->key = job->key;
  r->body_pieces = job->body;
  r->deadline = until;
  r->on_done = [this, &batch, work, job](Request& done) {
    finish_job(batch, work, *job, done.status);
  };
  work->add(r);
  client_->start(std::move(r));
}

// A multipart upload in flight: initiate, every part in parallel, complete (or abort).
struct S3Backend::Multipart {
  std::shared_ptr<Job> job;
  std::string upload_id;
  Mutex mu;
  std::vector<std::string> etags KVTIER_GUARDED_BY(mu);
  Status error KVTIER_GUARDED_BY(mu);  // the first part failure
  std::atomic<size_t> parts_left{0};
};

void S3Backend::start_multipart(IoBatch& batch, const std::shared_ptr<BatchWork>& work,
                                const std::shared_ptr<Job>& job, Clock::time_point until) {
  auto mp = std::make_shared<Multipart>();
  mp->job = job;
  auto abort_upload = [this, mp, until] {
    auto r = std::make_shared<Request>();
    r->method = "DELETE";
    r->key = mp->job->key;
    r->query = {{"uploadId", mp->upload_id}};
    r->deadline = until + std::chrono::seconds(5);
    client_->start(std::move(r));  // best effort: a failed abort leaves parts the bucket's
                                   // lifecycle rules remove
  };
  auto complete = [this, &batch, work, mp, until, abort_upload] {
    // Every part is done (parts_left reached zero), so the lock is uncontended; it is taken
    // so that each access to etags is checked the same way.
    pugi::xml_document doc;
    pugi::xml_node done = doc.append_child("CompleteMultipartUpload");
    {
      MutexLock lock(mp->mu);
      for (size_t i = 0; i < mp->etags.size(); ++i) {
        pugi::xml_node part = done.append_child("Part");
        part.append_child("PartNumber").text().set(static_cast<unsigned long long>(i + 1));
        part.append_child("ETag").text().set(fmt::format("\"{}\"", mp->etags[i]).c_str());
      }
    }
    std::string xml = xml_body(doc);
    auto r = std::make_shared<Request>();
    r->method = "POST";
    r->key = mp->job->key;
    r->query = {{"uploadId", mp->upload_id}};
    r->headers = {"Content-Type: application/xml"};
    r->body = std::move(xml);
    r->deadline = until;
    r->on_done = [this, &batch, work, mp, abort_upload](Request& done) {
      Status st = done.status;
      // CompleteMultipartUpload can fail with 200 and an error document.
      pugi::xml_document doc;
      if (st.ok() && doc.load_buffer(done.response.data(), done.response.size()) &&
          doc.child("Error")) {
        st = unavailable_error(fmt::format("completing the upload of '{}': {}", done.key,
                                           doc.child("Error").child_value("Code")));
      }
      if (!st.ok()) abort_upload();
      finish_job(batch, work, *mp->job, std::move(st));
    };
    work->add(r);
    client_->start(std::move(r));
  };
  auto start_parts = [this, &batch, work, mp, until, complete, abort_upload] {
    // Cut the body into parts of part_bytes (pieces may straddle parts).
    std::vector<std::vector<std::span<const std::byte>>> parts(1);
    uint64_t in_part = 0;
    for (std::span<const std::byte> piece : mp->job->body) {
      while (!piece.empty()) {
        const uint64_t take = std::min<uint64_t>(piece.size(), options_.part_bytes - in_part);
        parts.back().push_back(piece.first(take));
        piece = piece.subspan(take);
        in_part += take;
        if (in_part == options_.part_bytes) {
          parts.emplace_back();
          in_part = 0;
        }
      }
    }
    if (parts.back().empty()) parts.pop_back();
    {
      MutexLock lock(mp->mu);  // no part has started yet: uncontended
      mp->etags.resize(parts.size());
    }
    mp->parts_left.store(parts.size());
    for (size_t i = 0; i < parts.size(); ++i) {
      auto r = std::make_shared<Request>();
      r->method = "PUT";
      r->key = mp->job->key;
      r->query = {{"partNumber", std::to_string(i + 1)}, {"uploadId", mp->upload_id}};
      r->body_pieces = std::move(parts[i]);
      r->deadline = until;
      r->on_done = [this, &batch, work, mp, i, complete, abort_upload](Request& done) {
        {
          MutexLock lock(mp->mu);
          if (done.status.ok() && done.etag.empty()) {
            mp->error = internal_error(
                fmt::format("part {} of '{}' came back without an ETag", i + 1, done.key));
          } else if (!done.status.ok() && mp->error.ok()) {
            mp->error = done.status;
          }
          mp->etags[i] = done.etag;
        }
        if (mp->parts_left.fetch_sub(1) != 1) return;
        Status error;
        {
          MutexLock lock(mp->mu);
          error = mp->error;
        }
        if (!error.ok() || work->cancelled.load()) {
          abort_upload();
          finish_job(batch, work, *mp->job,
                     error.ok() ? cancelled_error("multipart upload cancelled") : error);
          return;
        }
        complete();
      };
      work->add(r);
      client_->start(std::move(r));
    }
  };
  auto r = std::make_shared<Request>();
  r->method = "POST";
  r->key = job->key;
  r->query = {{"uploads", ""}};
  r->deadline = until;
  r->on_done = [this, &batch, work, mp, start_parts](Request& done) {
    Status st = done.status;
    if (st.ok()) {
      pugi::xml_document doc;
      if (doc.load_buffer(done.response.data(), done.response.size())) {
        mp->upload_id = doc.child("InitiateMultipartUploadResult").child_value("UploadId");
      }
      if (mp->upload_id.empty()) {
        st = internal_error(fmt::format("starting the upload of '{}': no UploadId", done.key));
      }
    }
    if (!st.ok()) return finish_job(batch, work, *mp->job, std::move(st));
    start_parts();
  };
  work->add(r);
  client_->start(std::move(r));
}

void S3Backend::finish_job(IoBatch& batch, const std::shared_ptr<BatchWork>& work, Job& job,
                           Status st) {
  if (job.upload != nullptr) {
    MutexLock lock(job.upload->mu);
    job.upload->uploading = false;
    job.upload->uploaded = st.ok();
  }
  if (work->jobs_left.fetch_sub(1) == 1) {
    MutexLock lock(batches_mu_);
    batches_.erase(&batch);
  }
  for (size_t i : job.descs) batch.complete(i, st);
}

}  // namespace kvtier::s3
