# tests/broker.cmake — owned by the BROKER area: page pool, prefix index, request core,
# the kvd-broker process on real sockets, pool hand-over, and the GPU backend.
kvd_unit_test(test_pool SOURCES unit/test_pool.c LIBS kvdbroker TIMEOUT 120)
kvd_unit_test(test_prefix SOURCES unit/test_prefix.c LIBS kvdbroker TIMEOUT 120)
kvd_unit_test(test_broker_core SOURCES unit/test_broker_core.c LIBS kvdbroker TIMEOUT 120)
kvd_unit_test(test_lease SOURCES unit/test_lease.c LIBS kvdbroker TIMEOUT 60)
kvd_unit_test(test_broker_opts SOURCES unit/test_broker_opts.c LIBS kvdbroker TIMEOUT 60)
# Real kvd-broker processes on real sockets in temp runtime dirs.
add_library(kvdbrokerharness STATIC integration/broker_harness.c)
target_link_libraries(kvdbrokerharness PUBLIC kvdbroker)
target_include_directories(kvdbrokerharness PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/integration)
kvd_unit_test(test_broker_proc SOURCES integration/test_broker_proc.c
              LIBS kvdbrokerharness TIMEOUT 300)
add_dependencies(test_broker_proc kvd-broker)
# bench/broker-alloc runs this: alloc+free round trips/s through the real broker.sock
# against in-process and bare-transport baselines (it reuses the harness above).
add_executable(broker-alloc-bench ${CMAKE_SOURCE_DIR}/bench/broker_alloc.c)
target_link_libraries(broker-alloc-bench PRIVATE kvdbrokerharness)
set_target_properties(broker-alloc-bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY
                      ${CMAKE_BINARY_DIR}/bench)
add_dependencies(broker-alloc-bench kvd-broker)
kvd_unit_test(test_broker_peercred SOURCES integration/test_broker_peercred.c
              LIBS kvdbrokerharness TIMEOUT 60)
add_dependencies(test_broker_peercred kvd-broker)
# GPU: skipped (77, reason printed) where cudaGetDeviceCount finds no device.
kvd_unit_test(test_broker_gpu SOURCES integration/test_broker_gpu.c
              LIBS kvdbrokerharness TIMEOUT 300 LABELS gpu)
add_dependencies(test_broker_gpu kvd-broker)
