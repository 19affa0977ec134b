# tests/broker.cmake — owned by the BROKER area: page pool, prefix index, request core,
# the kvd-broker process on real sockets, pool hand-over, and the GPU backend.
kvd_unit_test(test_pool SOURCES unit/test_pool.c LIBS kvdbroker TIMEOUT 120)
kvd_unit_test(test_prefix SOURCES unit/test_prefix.c LIBS kvdbroker TIMEOUT 120)
kvd_unit_test(test_broker_core SOURCES unit/test_broker_core.c LIBS kvdbroker TIMEOUT 120)
# Real kvd-broker processes on real sockets in temp runtime dirs.
add_library(kvdbrokerharness STATIC integration/broker_harness.c)
target_link_libraries(kvdbrokerharness PUBLIC kvdbroker)
target_include_directories(kvdbrokerharness PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/integration)
kvd_unit_test(test_broker_proc SOURCES integration/test_broker_proc.c
              LIBS kvdbrokerharness TIMEOUT 300)
add_dependencies(test_broker_proc kvd-broker)
