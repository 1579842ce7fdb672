# kvtier_test(<name> SOURCES <files...> LIBS <targets...> [LABELS <labels...>]): one GoogleTest
# binary, every test in it registered with ctest (each test runs in its own process, so fd
# counts are per test). Label `concurrency` marks the suites the TSan pass runs.
if(KVTIER_BUILD_TESTS)
  enable_testing()
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()

set_property(GLOBAL PROPERTY KVTIER_TEST_SOURCES "")

function(kvtier_test name)
  if(NOT KVTIER_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(T "" "TIMEOUT" "SOURCES;LIBS;LABELS" ${ARGN})
  # ctest's per-test limit is a ceiling for a hung test, not a judgement of speed: the longest
  # test took 192 s in a loaded ASan pass (make test-stress).
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LIBS} kvtier_testing kvtier_test_main GTest::gtest
                                        GTest::gmock)
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  # The properties reach set_tests_properties through gtest_discover_tests' script, which
  # flattens a list: of several labels only the first would be set, and the others taken for
  # property names. (s3_backend_test's second label went missing that way, and the TSan pass
  # left it out.) So a test binary has one label.
  list(LENGTH T_LABELS n_labels)
  if(n_labels GREATER 1)
    message(FATAL_ERROR "kvtier_test(${name}): one label at most (got ${T_LABELS})")
  endif()
  gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST
                       PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS "${T_LABELS}")
  foreach(src IN LISTS T_SOURCES)
    get_filename_component(abs ${src} ABSOLUTE)
    set_property(GLOBAL APPEND PROPERTY KVTIER_TEST_SOURCES ${abs})
  endforeach()
endfunction()

# Fails the configure step when a *_test.cc exists that no kvtier_test() builds, or when test
# code forks: a forked copy of a process with threads can hang for good on a lock one of them
# held (the allocator's, under ASan), so tests start child processes from exec
# (src/testing/child_process.h). store_fork_test.cc forks on purpose: what a forked child of a
# store's process gets is what it tests.
function(kvtier_check_tests_registered)
  file(GLOB_RECURSE all_tests CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*_test.cc
       ${PROJECT_SOURCE_DIR}/tools/*_test.cc)
  get_property(registered GLOBAL PROPERTY KVTIER_TEST_SOURCES)
  foreach(t IN LISTS all_tests)
    if(NOT t IN_LIST registered)
      message(FATAL_ERROR "${t} is not built by any kvtier_test(): register it")
    endif()
  endforeach()
  file(GLOB_RECURSE test_code CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/*_test.cc
       ${PROJECT_SOURCE_DIR}/tools/*_test.cc ${PROJECT_SOURCE_DIR}/src/*test*.h
       ${PROJECT_SOURCE_DIR}/src/testing/*)
  kvtier_refuse_lines(REGEX "(^|[^a-z_])v?fork[ ]*\\(" FILES ${test_code}
                      EXCEPT store_fork_test.cc
                      WHY "test code forks: start child processes with "
                          "src/testing/child_process.h, from exec")
endfunction()
