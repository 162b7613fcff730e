# weir_module(NAME DEPS dep...) builds src/NAME/*.cc (tests excluded) into the static library
# weir_NAME. Globbing keeps one concern per file without a CMake edit per file.
function(weir_module name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  list(FILTER srcs EXCLUDE REGEX "_test\\.cc$")
  if(srcs)
    add_library(weir_${name} STATIC ${srcs})
    target_include_directories(weir_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(weir_${name} PUBLIC ${ARG_DEPS})
  else()
    add_library(weir_${name} INTERFACE)
    target_include_directories(weir_${name} INTERFACE ${PROJECT_SOURCE_DIR}/src)
    target_link_libraries(weir_${name} INTERFACE ${ARG_DEPS})
  endif()
  add_library(weir::${name} ALIAS weir_${name})
endfunction()

# weir_test_suite(NAME DEPS dep...) builds tests/NAME/*_test.cc into weir_NAME_tests.
function(weir_test_suite name)
  cmake_parse_arguments(ARG "" "" "DEPS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/${name}/*_test.cc)
  if(NOT srcs)
    return()
  endif()
  add_executable(weir_${name}_tests ${srcs})
  set_target_properties(weir_${name}_tests PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  target_link_libraries(weir_${name}_tests PRIVATE ${ARG_DEPS} weir_testing GTest::gtest_main)
  gtest_discover_tests(weir_${name}_tests
    PROPERTIES ENVIRONMENT "WEIR_SHARED=${WEIR_SHARED_DIR};WEIR_BIN=${WEIR_TEST_BIN}"
    DISCOVERY_TIMEOUT 60)
endfunction()
