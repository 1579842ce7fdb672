// Clang thread-safety annotations (no-ops elsewhere). See -Wthread-safety.
#pragma once

#if defined(__clang__)
#define KVTIER_THREAD_ANNOTATION_(x) __attribute__((x))
#else
#define KVTIER_THREAD_ANNOTATION_(x)
#endif

#define KVTIER_GUARDED_BY(x) KVTIER_THREAD_ANNOTATION_(guarded_by(x))
#define KVTIER_REQUIRES(...) KVTIER_THREAD_ANNOTATION_(requires_capability(__VA_ARGS__))
#define KVTIER_EXCLUDES(...) KVTIER_THREAD_ANNOTATION_(locks_excluded(__VA_ARGS__))
