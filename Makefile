# kvtier's everyday commands. `make run` and `make test` are the README's two commands; both
# install missing Debian packages (scripts/deps) and build what is needed first.
#
#   make build        Release build into build/ (CLI: build/bin/kvtier)
#   make run          kvtier bench on the default directory (extra flags: ARGS="--pages 64")
#   make test         format check, clang's thread-safety analysis (compile only), Release
#                     tests, the multi-host tests (three simulated hosts sharing a throw-away
#                     Ceph: CephFS and radosgw; KVTIER_CEPH=0 skips them), the whole suite
#                     under ASan+UBSan, and the concurrency suites under TSan (SANITIZE=0
#                     skips the sanitizer passes),
#                     beside a throw-away local S3 server for the S3 tests (KVTIER_S3=0: none),
#                     then the S3 tests again against a second S3 implementation (Swift),
#                     all in a network namespace with only loopback up (scripts/loopback-only)
#   make test-stress  the Release tests that read other stores' and processes' writes once on
#                     the idle machine (writers as fast as it allows), then the ASan+UBSan and
#                     TSan passes three times in a row (STRESS_ROUNDS=3) with every core kept
#                     busy by stress-ng (scripts/under-load), beside the S3 server, in the
#                     loopback-only namespace; not part of `make test`
#   make bench        kvtier against fio and memcpy, side by side (bench/compare.py; ARGS=...),
#                     then the page-size sweep of both layouts against fio on one big file
#                     (bench/segments_compare.py; SEGMENT_ARGS=...)
#   make wheel        dist/kvtier-<version>-<tag>.whl: the Python module, kvtier.sglang and the
#                     CLI, for Debian's python3 or PYTHON=/path/to/python3.X (which needs that
#                     Python's headers; built in build-wheel-3.X/)
#   make deb          dist/kvtier_<version>_amd64.deb (CPack): CLI, shared library, headers,
#                     CMake and pkg-config files, man page, completion, Python module
#   make install      cmake --install build --prefix $(PREFIX) (default /usr/local)
#   make format       clang-format every C++ file in place
#   make check-thread-safety
#                     compile everything with clang++ -Wthread-safety -Werror (build-clang/)

SHELL := /bin/bash
SANITIZE ?= 1
ARGS ?=
PYTHON ?= /usr/bin/python3
PREFIX ?= /usr/local

.PHONY: all deps s3-deps build run bench test test-release test-s3-swift test-multihost test-asan test-tsan \
	build-asan build-tsan test-stress \
	format format-check \
	check-thread-safety \
	wheel deb install clean

all: build

deps:
	@scripts/deps

build: deps
	@cmake --preset release >/dev/null
	@cmake --build --preset release

run: build
	build/bin/kvtier bench $(ARGS)

bench: build
	bench/compare.py $(ARGS)
	bench/segments_compare.py $(SEGMENT_ARGS)

# The wheel packs what CMake built (scripts/build-wheel); for another Python, a build of the
# module and the CLI alone in a directory of its own.
ifeq ($(PYTHON),/usr/bin/python3)
wheel: build
	@scripts/build-wheel build dist
else
WHEEL_BUILD = build-wheel-$(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
wheel: deps
	@cmake -S . -B $(WHEEL_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVTIER_BUILD_TESTS=OFF \
	  -DKVTIER_PYTHON_EXECUTABLE=$(PYTHON) >/dev/null
	@cmake --build $(WHEEL_BUILD) --target kvtier_python_package kvtier_cli
	@scripts/build-wheel $(WHEEL_BUILD) dist
endif

deb: build
	@cd build && cpack --config CPackConfig.cmake -B ../dist >/dev/null
	@rm -rf dist/_CPack_Packages
	@ls dist/kvtier_*.deb

install: build
	cmake --install build --prefix $(PREFIX)

# One throw-away S3 server (tests/s3/server.sh) serves every pass's S3 tests. The passes run
# in a network namespace of their own with only loopback up, so a test that reaches for any
# other address fails; packages (Ceph's too) are installed before, outside it.
SUITES := check-thread-safety test-release test-s3-swift test-multihost
ifneq ($(SANITIZE),0)
SUITES += test-asan test-tsan
endif

test: deps format-check s3-deps
	@KVTIER_S3_NO_INSTALL=1 KVTIER_CEPH_NO_INSTALL=1 scripts/loopback-only scripts/with-s3-server \
	  $(MAKE) --no-print-directory $(SUITES)

s3-deps:
	@if [ "$${KVTIER_S3:-1}" != 0 ]; then tests/s3/server.sh install || true; fi
	@if [ "$${KVTIER_S3:-1}" != 0 ]; then tests/s3/swift.sh install || true; fi
	@if [ "$${KVTIER_CEPH:-1}" != 0 ]; then tests/ceph/cluster.sh install || true; fi

test-release: build
	ctest --preset release

# The S3 tests (the s3 backend's and client's, and every store test of the s3 kinds) again,
# against OpenStack Swift's S3 API (tests/s3/swift.sh) instead of Ceph's radosgw; skipped, with
# the reason, where it cannot start.
test-s3-swift: build
	KVTIER_S3_SERVER=swift scripts/with-s3-server ctest --preset release -R 'S3|/s3'

# Three simulated hosts (network namespaces on a bridge of their own, each with its own
# ceph-fuse mount) share a throw-away Ceph cluster (tests/ceph/cluster.sh); skipped, with the
# reason, where it cannot start.
test-multihost: build
	tests/ceph/run-tests.sh

test-asan: build-asan
	ctest --preset asan

test-tsan: build-tsan
	ctest --preset tsan

build-asan: deps
	@cmake --preset asan >/dev/null
	@cmake --build --preset asan

build-tsan: deps
	@cmake --preset tsan >/dev/null
	@cmake --build --preset tsan

# No test may depend on the machine's speed, either way. First the tests that read what other
# stores, processes or threads wrote, in the Release build on the idle machine, where writers
# finish soonest (a lookup interval then outlasts a whole write); then the sanitizer passes on
# a machine whose every core is busy. Built first, unloaded; each round runs both passes under
# the load.
STRESS_ROUNDS ?= 3
FAST_WRITER_TESTS := StoreVisibility|StoreSegments|StoreLifecycle|StoreFork|ReadMarks|Inspect|python\.
test-stress: deps s3-deps build build-asan build-tsan
	@scripts/deps stress-ng
	@KVTIER_S3_NO_INSTALL=1 scripts/loopback-only scripts/with-s3-server \
	  bash -c 'ctest --preset release -R "$(FAST_WRITER_TESTS)" && \
	    scripts/under-load $(STRESS_ROUNDS) bash -c "ctest --preset asan && ctest --preset tsan"'

# Compiles every C++ target with clang and -Wthread-safety as errors; runs nothing.
check-thread-safety: deps
	@cmake --preset clang-tsa >/dev/null
	@cmake --build --preset clang-tsa

format-check: deps
	@scripts/check-format

format: deps
	@git ls-files '*.cc' '*.h' | xargs clang-format -i

clean:
	rm -rf build build-debug build-asan build-tsan build-clang build-wheel-* dist
