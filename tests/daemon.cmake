# Daemon area: unit tests of the scheduler, config and block hashing; end-to-end tests of
# the real kvd (with real kvd-broker / kvd-worker processes) through the SDK.
if(TARGET kvddaemon)  # unit tests: pure modules, no processes
  kvd_unit_test(test_sched SOURCES unit/test_sched.c LIBS kvddaemon)
  kvd_unit_test(test_config SOURCES unit/test_config.c LIBS kvddaemon)
  kvd_unit_test(test_blockhash SOURCES unit/test_blockhash.c LIBS kvddaemon)
  kvd_unit_test(test_detok SOURCES unit/test_detok.c LIBS kvddaemon)
  kvd_unit_test(test_nnuv SOURCES unit/test_nnuv.c LIBS kvddaemon)
endif()

if(TARGET kvd AND TARGET kvdclient AND TARGET kvctl)
  # End to end: real kvd, kvd-broker and kvd-worker processes on real sockets (kvctl plays
  # a client process that dies without saying bye).
  set(KVD_E2E_DEPS kvd kvd-broker kvd-worker kvctl)
  foreach(t test_kvd_e2e test_kvd_prefix test_kvd_faults)
    if(EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/integration/${t}.c)
      kvd_unit_test(${t} SOURCES integration/${t}.c integration/test_kvd_harness.c
                    LIBS kvdclient kvdproto PkgConfig::NANOMSG TIMEOUT 600 LABELS integration)
      add_dependencies(${t} ${KVD_E2E_DEPS})
    endif()
  endforeach()
endif()
