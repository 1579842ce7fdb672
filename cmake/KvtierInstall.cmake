# What `cmake --install` puts under a prefix, and the Debian package made of it (CPack):
#   lib/libkvtier.so.<version>          the library, one shared object (SONAME below)
#   include/kvtier/...                  the public headers
#   lib/cmake/kvtier/                   find_package(kvtier): the target kvtier::kvtier
#   lib/pkgconfig/kvtier.pc             pkg-config --cflags --libs kvtier
#   bin/kvtier                          the CLI (the library linked in statically)
#   share/man/man1/kvtier.1             its man page, made from --help by help2man
#   share/bash-completion/completions/kvtier
#   lib/python3/dist-packages/kvtier/   the Python package, for the Python it was built for
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The layers' objects (built once, position-independent, for the static libraries the tools
# and tests link) make up the shared library.
set(kvtier_layers kvtier_core kvtier_transfer kvtier_backend_file kvtier_backend_posix
    kvtier_backend_dram kvtier_backend_fault kvtier_backends kvtier_store_format
    kvtier_store_naming kvtier_store_capacity kvtier_store_guard kvtier_store_inspect
    kvtier_store_window kvtier_store_layout kvtier_store)
foreach(optional kvtier_backend_uring kvtier_backend_s3)
  if(TARGET ${optional})
    list(APPEND kvtier_layers ${optional})
  endif()
endforeach()
add_library(kvtier_shared SHARED)
foreach(layer IN LISTS kvtier_layers)
  target_sources(kvtier_shared PRIVATE $<TARGET_OBJECTS:${layer}>)
endforeach()
# The static libraries carry the third-party libraries each layer needs; their objects are
# already in, so nothing else is taken from them.
target_link_libraries(kvtier_shared PRIVATE ${kvtier_layers})
target_include_directories(kvtier_shared INTERFACE
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(kvtier_shared INTERFACE cxx_std_20)
# Before 1.0 a minor version may change the ABI: the SONAME carries major.minor.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(KVTIER_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
else()
  set(KVTIER_SOVERSION ${PROJECT_VERSION_MAJOR})
endif()
set_target_properties(kvtier_shared PROPERTIES OUTPUT_NAME kvtier EXPORT_NAME kvtier
  VERSION ${PROJECT_VERSION} SOVERSION ${KVTIER_SOVERSION}
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
add_library(kvtier::kvtier ALIAS kvtier_shared)

install(TARGETS kvtier_shared EXPORT kvtierTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT kvtier)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kvtier DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT kvtier)
install(TARGETS kvtier_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT kvtier)

set(cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/kvtier)
install(EXPORT kvtierTargets NAMESPACE kvtier:: DESTINATION ${cmake_dir} COMPONENT kvtier)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kvtierConfig.cmake.in
  ${CMAKE_BINARY_DIR}/kvtierConfig.cmake INSTALL_DESTINATION ${cmake_dir})
# 0.x: only the same minor version is compatible (as the SONAME says).
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kvtierConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kvtierConfig.cmake ${CMAKE_BINARY_DIR}/kvtierConfigVersion.cmake
        DESTINATION ${cmake_dir} COMPONENT kvtier)

# kvtier.pc finds its prefix from where it lies, so the tree can move (a .deb, a staging root).
file(RELATIVE_PATH KVTIER_PC_PREFIX_FROM_PCDIR
     /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
configure_file(${PROJECT_SOURCE_DIR}/cmake/kvtier.pc.in ${CMAKE_BINARY_DIR}/kvtier.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/kvtier.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
        COMPONENT kvtier)

# The man page, from `kvtier --help`, each subcommand's --help and `kvtier --version`.
# (Not in sanitizer builds, which are not installed.)
find_program(HELP2MAN help2man)
if(HELP2MAN AND NOT KVTIER_SANITIZE)
  add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/kvtier.1
    COMMAND ${PROJECT_SOURCE_DIR}/tools/man-subcommands.sh $<TARGET_FILE:kvtier_cli>
            ${CMAKE_BINARY_DIR}/kvtier.1.subcommands
    COMMAND ${HELP2MAN} --no-info --name "benchmark and inspect KV-cache page stores"
            --include ${CMAKE_BINARY_DIR}/kvtier.1.subcommands
            --output ${CMAKE_BINARY_DIR}/kvtier.1 $<TARGET_FILE:kvtier_cli>
    DEPENDS kvtier_cli ${PROJECT_SOURCE_DIR}/tools/man-subcommands.sh
    COMMENT "kvtier.1 (help2man)")
  add_custom_target(kvtier_man ALL DEPENDS ${CMAKE_BINARY_DIR}/kvtier.1)
  install(FILES ${CMAKE_BINARY_DIR}/kvtier.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
          COMPONENT kvtier)
elseif(NOT HELP2MAN)
  message(WARNING "help2man not found: no man page (scripts/deps installs it)")
endif()
install(FILES ${PROJECT_SOURCE_DIR}/tools/kvtier.bash-completion
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME kvtier
        COMPONENT kvtier)

if(KVTIER_PYTHON)
  set(KVTIER_PYTHON_INSTALL_DIR lib/python3/dist-packages CACHE STRING
      "Where the Python package is installed, under the prefix (Debian's python3 layout)")
  install(DIRECTORY ${CMAKE_BINARY_DIR}/python/kvtier DESTINATION ${KVTIER_PYTHON_INSTALL_DIR}
          COMPONENT kvtier PATTERN __pycache__ EXCLUDE)
endif()

# make deb: CPack's DEB generator, Depends from dpkg-shlibdeps (the libraries linked) plus the
# Python the module was built for.
set(CPACK_PACKAGE_NAME kvtier)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "kvtier maintainers")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "storage tier for LLM KV-cache pages")
set(CPACK_PACKAGE_DESCRIPTION
    "kvtier stores the KV cache pages of LLM serving engines in local directories, S3 object stores or memory, verified on every read. This package holds the kvtier CLI, the shared library with its headers, CMake and pkg-config files, and the Python module for Debian's python3.")
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
if(KVTIER_PYTHON)
  # The extension module is built for one Python minor version (Debian's python3).
  string(REGEX MATCH "^([0-9]+)\\.([0-9]+)" py_minor "${KVTIER_PYTHON_VERSION}")
  math(EXPR py_next "${CMAKE_MATCH_2} + 1")
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
      "python3 (>= ${py_minor}), python3 (<< ${CMAKE_MATCH_1}.${py_next})")
endif()
include(CPack)

# The packaging tests (tests/package): the install prefix with a find_package and a
# pkg-config consumer, the wheel in a fresh venv, the .deb unpacked. Not in sanitizer builds,
# whose library a plain consumer cannot link and which build no Python module.
if(KVTIER_BUILD_TESTS AND NOT KVTIER_SANITIZE)
  set(pkg_tests package.install)
  add_test(NAME package.install
           COMMAND ${PROJECT_SOURCE_DIR}/tests/package/install_test.sh ${CMAKE_BINARY_DIR})
  if(KVTIER_PYTHON)
    add_test(NAME package.wheel
             COMMAND ${PROJECT_SOURCE_DIR}/tests/package/wheel_test.sh ${CMAKE_BINARY_DIR})
    add_test(NAME package.deb
             COMMAND ${PROJECT_SOURCE_DIR}/tests/package/deb_test.sh ${CMAKE_BINARY_DIR})
    list(APPEND pkg_tests package.wheel package.deb)
  endif()
  # Each installs the whole build tree; one at a time keeps the two cores for the others.
  set_tests_properties(${pkg_tests} PROPERTIES LABELS package TIMEOUT 600
                       RESOURCE_LOCK kvtier_install ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1")
endif()
