# Third-party dependencies, all from Debian packages (tools/install_deps.sh installs them).
# Header-only where the library allows it, so the GPU machine needs only carried headers.
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(fmt 9 REQUIRED)
# Nearly every translation unit formats (DI_CHECK), and fmt's header-only mode compiles fmt's whole
# implementation into each one: 2-3 s per TU with gcc -O3 and 5-8 s under clang ASan+UBSan, most
# of a sanitizer build (docs/CI.md). Our targets name fmt::fmt-header-only; where the compiled
# library is there (Debian's libfmt-dev ships libfmt.so), that target forwards to it instead.
option(DEEPINFER_FMT_HEADER_ONLY "Use fmt header-only (slower builds, no libfmt.so needed at run time)" OFF)
if(NOT DEEPINFER_FMT_HEADER_ONLY AND TARGET fmt::fmt)
  set_target_properties(fmt::fmt-header-only PROPERTIES
    INTERFACE_COMPILE_DEFINITIONS "" INTERFACE_LINK_LIBRARIES fmt::fmt)
endif()
find_package(Threads REQUIRED)
# PCRE2 through find_library rather than pkg-config, so a relocated copy of the headers and
# libraries (tools/gpu/collect_deps.sh, for the GPU machine) works through CMAKE_PREFIX_PATH.
find_path(PCRE2_INCLUDE_DIR pcre2.h REQUIRED)
find_library(PCRE2_LIBRARY NAMES libpcre2-8.a pcre2-8 REQUIRED)
add_library(PkgConfig::PCRE2 INTERFACE IMPORTED)
target_include_directories(PkgConfig::PCRE2 SYSTEM INTERFACE ${PCRE2_INCLUDE_DIR})
target_link_libraries(PkgConfig::PCRE2 INTERFACE ${PCRE2_LIBRARY})
target_compile_definitions(PkgConfig::PCRE2 INTERFACE PCRE2_CODE_UNIT_WIDTH=8)
find_package(OpenMP)
# cpp-httplib: Debian ships it compiled (libcpp-httplib.so) with CPPHTTPLIB_OPENSSL_SUPPORT, which
# adds a member to httplib::Request, so every user must compile with the same macro (and therefore
# see the OpenSSL headers). Without either, the server is not built.
find_path(HTTPLIB_INCLUDE_DIR httplib.h)
find_library(HTTPLIB_LIBRARY NAMES cpp-httplib)
find_path(HTTPLIB_OPENSSL_INCLUDE_DIR openssl/ssl.h)
if(HTTPLIB_INCLUDE_DIR AND HTTPLIB_LIBRARY AND HTTPLIB_OPENSSL_INCLUDE_DIR)
  add_library(deepinfer::httplib INTERFACE IMPORTED)
  target_include_directories(deepinfer::httplib SYSTEM INTERFACE ${HTTPLIB_INCLUDE_DIR} ${HTTPLIB_OPENSSL_INCLUDE_DIR})
  target_link_libraries(deepinfer::httplib INTERFACE ${HTTPLIB_LIBRARY} Threads::Threads)
  target_compile_definitions(deepinfer::httplib INTERFACE CPPHTTPLIB_OPENSSL_SUPPORT)
else()
  message(STATUS "cpp-httplib or OpenSSL headers not found: the HTTP server is not built")
endif()

if(DEEPINFER_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(DEEPINFER_BUILD_BENCH)
  find_package(benchmark QUIET)
  if(NOT benchmark_FOUND)
    message(STATUS "Google Benchmark not found: benchmarks are not built")
    set(DEEPINFER_BUILD_BENCH OFF)
  endif()
endif()
