# tests/broker.cmake — owned by the BROKER area: page pool, prefix index, request core,
# the kvd-broker process on real sockets, pool hand-over, and the GPU backend.
kvd_unit_test(test_pool SOURCES unit/test_pool.c LIBS kvdbroker TIMEOUT 120)
kvd_unit_test(test_prefix SOURCES unit/test_prefix.c LIBS kvdbroker TIMEOUT 120)
kvd_unit_test(test_broker_core SOURCES unit/test_broker_core.c LIBS kvdbroker TIMEOUT 120)
