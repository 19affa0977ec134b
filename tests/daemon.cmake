# Daemon area: unit tests of the scheduler, config and block hashing; end-to-end tests of
# the real kvd (with real kvd-broker / kvd-worker processes) through the SDK.
if(TARGET kvddaemon)
  kvd_unit_test(test_sched SOURCES unit/test_sched.c LIBS kvddaemon)
  kvd_unit_test(test_config SOURCES unit/test_config.c LIBS kvddaemon)
  kvd_unit_test(test_blockhash SOURCES unit/test_blockhash.c LIBS kvddaemon)
endif()
