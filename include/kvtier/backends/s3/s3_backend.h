// Object-store backend: any S3-compatible service (Ceph RGW, MinIO, AWS S3) through libcurl.
//
// Objects are the store's paths under one bucket ("/prefix/kvtier/<ns>/ab/<hash>" is the key
// "prefix/kvtier/<ns>/ab/<hash>"). Requests are signed by libcurl (SigV4) and run on one
// multi handle: a batch of pages is one parallel operation over reused connections, at most
// `max_parallel` requests at once. A write transfer uploads each object whole (one PUT
// streamed from the caller's memory, or a multipart upload above `multipart_bytes`), so an
// object is never visible partly written; publish() then only confirms the upload. Reads
// are ranged GETs streamed into the caller's memory, conditional on the ETag seen when the
// target was opened (a replaced object reads as kNotFound, not as a mix).
//
// Faults: 5xx, 429, timeouts and connection failures are retried with jittered exponential
// backoff, within a deadline per batch (`deadline_ms`); after it the remaining descriptors
// fail with kDeadlineExceeded/kUnavailable. Nothing blocks past the deadline.
//
// Parameters (URI query or BackendParams):
//   bucket          required (s3://bucket/... sets it)
//   endpoint        scheme://host[:port]; default https://s3.<region>.amazonaws.com
//   region          default us-east-1 (signing region)
//   addressing      path (default with an endpoint) or virtual (bucket.host; default for AWS)
//   ca_bundle       CA certificates file for https
//   access_key, secret_key, session_token
//                   default: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
//   max_parallel    requests in flight, all loops together (32)
//   loops           event-loop threads moving the bytes (one per core, up to 8)
//   max_attempts    attempts per request (4)
//   deadline_ms     per batch or call (10000)
//   connect_timeout_ms (2000)
//   multipart_bytes objects above this are uploaded in parts (64 MiB)
//   part_bytes      part size (16 MiB; at least 5 MiB)
// Secrets never appear in describe(), errors or logs.
//
// Thread-safety: safe for concurrent use by multiple threads.
#pragma once

#include <memory>

#include "kvtier/core/status.h"
#include "kvtier/transfer/backend.h"

namespace kvtier {

// Factory for the registry. Checks the credentials and that the bucket is reachable.
Result<std::unique_ptr<Backend>> create_s3_backend(const BackendParams& params);
// The parameters create_s3_backend() reads.
std::vector<ParamSpec> s3_backend_params();

}  // namespace kvtier
