# Model-files area: GGUF reader/writer, tokenizer, kvd-mkmodel, GGUF fuzz replay.
# All run under ASan too (nothing here is nosan).
kvd_unit_test(test_gguf SOURCES unit/test_gguf.c LIBS kvdcommon TIMEOUT 300)
kvd_unit_test(test_tok SOURCES unit/test_tok.c LIBS kvdcommon TIMEOUT 300)
if(TARGET kvd-mkmodel)
  add_dependencies(test_gguf kvd-mkmodel)
  add_dependencies(test_tok kvd-mkmodel)
endif()

# fuzz_gguf: libFuzzer-style entry point; built as a plain executable that replays the
# seed corpus and a fixed number of deterministic mutations of each seed (ctest), and, when
# the compiler is clang, also as a real libFuzzer binary (fuzz_gguf_libfuzzer, not in ctest).
add_executable(fuzz_gguf fuzz/fuzz_gguf.c fuzz/fuzz_replay.c)
target_link_libraries(fuzz_gguf PRIVATE kvdcommon)
set_target_properties(fuzz_gguf PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
add_test(NAME fuzz_gguf COMMAND fuzz_gguf --iterations 20000 ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus_gguf)
set_tests_properties(fuzz_gguf PROPERTIES TIMEOUT 600)
if(CMAKE_C_COMPILER_ID STREQUAL "Clang")
  add_executable(fuzz_gguf_libfuzzer fuzz/fuzz_gguf.c)
  target_compile_options(fuzz_gguf_libfuzzer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_options(fuzz_gguf_libfuzzer PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(fuzz_gguf_libfuzzer PRIVATE kvdcommon)
  set_target_properties(fuzz_gguf_libfuzzer PROPERTIES EXCLUDE_FROM_ALL ON
    RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
endif()
