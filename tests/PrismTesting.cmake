# prism_add_test(NAME name SOURCES a.cc b.cc LIBS lib... [LABELS l...] [TIMEOUT s])
# Builds a GoogleTest binary in build/bin and registers it with ctest.
# Label "unit" marks tests the ASan+UBSan configuration runs too.
function(prism_add_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "SOURCES;LIBS;LABELS;ARGS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} GTest::gtest GTest::gtest_main)
  add_test(NAME ${T_NAME} COMMAND ${T_NAME} ${T_ARGS})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 600)
  endif()
  set_tests_properties(${T_NAME} PROPERTIES TIMEOUT ${T_TIMEOUT})
  if(T_LABELS)
    set_tests_properties(${T_NAME} PROPERTIES LABELS "${T_LABELS}")
  endif()
  if("unit" IN_LIST T_LABELS)
    set_property(GLOBAL APPEND PROPERTY PRISM_UNIT_TARGETS ${T_NAME})
  endif()
endfunction()

# prism_add_fuzzer(NAME name SOURCES a.cc LIBS lib... [CORPUS dir])
# With PRISM_FUZZ=ON (clang): a libFuzzer binary; registered with ctest as
# "fuzz_<name>" running for PRISM_FUZZ_SECONDS. Otherwise: the same target
# source linked with a replay driver that runs the checked-in corpus, so every
# build exercises the fuzz entry point.
set(PRISM_FUZZ_SECONDS 20 CACHE STRING "Seconds each fuzzer runs in ctest")
function(prism_add_fuzzer)
  cmake_parse_arguments(F "" "NAME;CORPUS" "SOURCES;LIBS" ${ARGN})
  if(PRISM_FUZZ)
    add_executable(${F_NAME} ${F_SOURCES})
    target_link_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
    target_link_libraries(${F_NAME} PRIVATE ${F_LIBS})
    set_property(GLOBAL APPEND PROPERTY PRISM_FUZZ_TARGETS ${F_NAME})
    set(corpus_args)
    if(F_CORPUS)
      set(work ${PROJECT_BINARY_DIR}/fuzz-corpus/${F_NAME})
      file(MAKE_DIRECTORY ${work})
      set(corpus_args ${work} ${F_CORPUS})
    endif()
    add_test(NAME fuzz_${F_NAME}
             COMMAND ${F_NAME} -max_total_time=${PRISM_FUZZ_SECONDS}
                     -print_final_stats=1 ${corpus_args})
    set_tests_properties(fuzz_${F_NAME} PROPERTIES LABELS fuzz
                         TIMEOUT 600)
  else()
    add_executable(${F_NAME}_replay ${F_SOURCES}
                   ${PROJECT_SOURCE_DIR}/tests/fuzz/replay_main.cc)
    target_link_libraries(${F_NAME}_replay PRIVATE ${F_LIBS})
    if(F_CORPUS)
      add_test(NAME replay_${F_NAME} COMMAND ${F_NAME}_replay ${F_CORPUS})
      set_tests_properties(replay_${F_NAME} PROPERTIES LABELS "unit")
      set_property(GLOBAL APPEND PROPERTY PRISM_UNIT_TARGETS ${F_NAME}_replay)
    endif()
  endif()
endfunction()
