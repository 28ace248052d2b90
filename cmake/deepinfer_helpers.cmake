# Helpers that give every target of ours the same standard, warnings and include roots.

# Warnings are errors in our code only (third-party headers come in as SYSTEM). The release
# (gcc) build is the gate; the clang sanitizer build may turn -Werror off (DEEPINFER_WERROR).
option(DEEPINFER_WERROR "Treat warnings in our code as errors" ON)
set(DEEPINFER_WARNINGS -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor)
if(DEEPINFER_WERROR)
  list(APPEND DEEPINFER_WARNINGS -Werror -Wno-error=deprecated-declarations)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    # GCC 12 at -O3 reports false positives inside libstdc++'s string/vector code (GCC bugs
    # 105329, 105651); they stay visible as warnings but do not fail the build.
    list(APPEND DEEPINFER_WARNINGS -Wno-error=restrict -Wno-error=array-bounds
         -Wno-error=stringop-overflow -Wno-error=stringop-overread)
  endif()
endif()

if(DEEPINFER_SANITIZE)
  add_compile_options(-fsanitize=${DEEPINFER_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${DEEPINFER_SANITIZE})
endif()
if(DEEPINFER_FUZZ)
  # Coverage instrumentation for all our code, so the fuzzers see inside the libraries.
  add_compile_options($<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link>)
endif()

# A flavour that runs only some test labels (CI's sanitizer flavour runs unit + fuzz) need not
# compile the rest: with DEEPINFER_TEST_LABELS set, a test or fuzzer with none of those labels is
# still defined (other CMake code may refer to it) but left out of `all` and not registered.
set(DEEPINFER_TEST_LABELS "" CACHE STRING "Build and register only tests with one of these labels (empty: all)")
# How long ctest runs each fuzzer (seconds); the seed corpus is replayed first either way.
set(DEEPINFER_FUZZ_SECONDS 20 CACHE STRING "Seconds ctest spends in each libFuzzer target")

# deepinfer_test_wanted(<out-var> <labels>): TRUE when DEEPINFER_TEST_LABELS admits one of <labels>.
function(deepinfer_test_wanted out_var)
  set(wanted TRUE)
  if(DEEPINFER_TEST_LABELS)
    set(wanted FALSE)
    foreach(label IN LISTS ARGN)
      if(label IN_LIST DEEPINFER_TEST_LABELS)
        set(wanted TRUE)
      endif()
    endforeach()
  endif()
  set(${out_var} ${wanted} PARENT_SCOPE)
endfunction()

function(deepinfer_target_defaults target)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/src>
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${DEEPINFER_WARNINGS}>)
endfunction()

# deepinfer_add_library(NAME SOURCES a.cpp b.cpp [CUDA_SOURCES k.cu] DEPS lib...)
# CUDA_SOURCES are compiled only when the CUDA backend is enabled.
function(deepinfer_add_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;CUDA_SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  set(sources ${ARG_SOURCES})
  if(DEEPINFER_HAVE_CUDA)
    list(APPEND sources ${ARG_CUDA_SOURCES})
  endif()
  add_library(${name} STATIC ${sources})
  deepinfer_target_defaults(${name})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  if(DEEPINFER_HAVE_CUDA AND ARG_CUDA_SOURCES)
    set_target_properties(${name} PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
    target_link_libraries(${name} PUBLIC CUDA::cudart)
  endif()
endfunction()

# Test executables compile as unity builds: their files share gtest, json and our headers, and
# code generation of those inline functions is most of a test file's compile time, so one TU per
# target instead of one per file cuts test compile time by more than half (docs/CI.md). So
# file-local helpers in one test target need distinct names (the files share one anonymous
# namespace); NO_UNITY opts a target out.
option(DEEPINFER_UNITY_TESTS "Compile each test target as unity batches" ON)

# deepinfer_add_test(NAME SOURCES a_test.cpp DEPS lib... [LABELS unit] [TIMEOUT s] [NO_UNITY])
function(deepinfer_add_test name)
  cmake_parse_arguments(ARG "NO_UNITY" "TIMEOUT" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  deepinfer_test_wanted(wanted ${ARG_LABELS})
  add_executable(${name} ${ARG_SOURCES})
  if(NOT wanted)
    set_target_properties(${name} PROPERTIES EXCLUDE_FROM_ALL TRUE)
  endif()
  if(DEEPINFER_UNITY_TESTS AND NOT ARG_NO_UNITY)
    set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
  deepinfer_target_defaults(${name})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE
    DEEPINFER_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
    DEEPINFER_BINARY_DIR="${PROJECT_BINARY_DIR}")
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  if(NOT wanted)
    return()
  endif()
  gtest_discover_tests(${name} PROPERTIES LABELS "${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
                       DISCOVERY_TIMEOUT 60)
endfunction()

# deepinfer_add_fuzzer(NAME SOURCES f.cpp DEPS lib... [CORPUS dir]): a libFuzzer target, built only
# with DEEPINFER_FUZZ=ON and clang. CTest runs each one briefly over its seed corpus.
function(deepinfer_add_fuzzer name)
  cmake_parse_arguments(ARG "" "CORPUS" "SOURCES;DEPS" ${ARGN})
  deepinfer_test_wanted(wanted fuzz)
  if(NOT DEEPINFER_FUZZ OR NOT wanted)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  deepinfer_target_defaults(${name})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
  # libFuzzer writes what it finds into the first corpus folder: a scratch folder in the build
  # tree, so the committed seeds (read from the second) never change under a test run.
  set(found_dir ${CMAKE_CURRENT_BINARY_DIR}/${name}_found)
  file(MAKE_DIRECTORY ${found_dir})
  add_test(NAME fuzz.${name}
           COMMAND ${name} -max_total_time=${DEEPINFER_FUZZ_SECONDS} -timeout=5 -rss_limit_mb=2048 ${found_dir} ${ARG_CORPUS})
  set_tests_properties(fuzz.${name} PROPERTIES LABELS fuzz TIMEOUT 120)
endfunction()
