# Model-files area: GGUF reader/writer, tokenizer, kvd-mkmodel, GGUF fuzz replay.
# All run under ASan too (nothing here is nosan).
kvd_unit_test(test_gguf SOURCES unit/test_gguf.c LIBS kvdcommon TIMEOUT 300)
kvd_unit_test(test_tok SOURCES unit/test_tok.c LIBS kvdcommon TIMEOUT 300)
kvd_unit_test(test_mkmodel SOURCES unit/test_mkmodel.c LIBS kvdcommon TIMEOUT 300)
if(TARGET kvd-mkmodel)
  add_dependencies(test_tok kvd-mkmodel)
  add_dependencies(test_mkmodel kvd-mkmodel)
endif()

# fuzz_gguf: libFuzzer-style entry point; built as a plain executable that replays the
# seed corpus and a fixed number of deterministic mutations of each seed (ctest).
add_executable(fuzz_gguf fuzz/fuzz_gguf.c fuzz/fuzz_replay.c)
target_link_libraries(fuzz_gguf PRIVATE kvdcommon)
set_target_properties(fuzz_gguf PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
add_test(NAME fuzz_gguf COMMAND fuzz_gguf --iterations 20000 ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus_gguf)
set_tests_properties(fuzz_gguf PROPERTIES TIMEOUT 600)
# With clang installed (whatever the project's compiler), `cmake --build B --target
# fuzz_gguf_libfuzzer` builds a coverage-guided libFuzzer binary of the same target:
#   B/tests/fuzz_gguf_libfuzzer -max_total_time=240 CORPUS_COPY_DIR
find_program(KVD_CLANG NAMES clang)
if(KVD_CLANG)
  set(_fz_src ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_gguf.c)
  foreach(f gguf.c gguf_meta.c gguf_dtype.c gguf_llama.c tok.c tok_spm.c tok_bpe.c log.c err.c)
    list(APPEND _fz_src ${CMAKE_SOURCE_DIR}/common/${f})
  endforeach()
  add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/tests/fuzz_gguf_libfuzzer
    COMMAND ${KVD_CLANG} -std=c11 -D_GNU_SOURCE -g -O1 -fsanitize=fuzzer,address,undefined
            -I${CMAKE_SOURCE_DIR} ${_fz_src} ${XXHASH_LDFLAGS} ${PCRE2_LDFLAGS} -lm
            -o ${CMAKE_BINARY_DIR}/tests/fuzz_gguf_libfuzzer
    DEPENDS ${_fz_src} VERBATIM)
  add_custom_target(fuzz_gguf_libfuzzer DEPENDS ${CMAKE_BINARY_DIR}/tests/fuzz_gguf_libfuzzer)
endif()
