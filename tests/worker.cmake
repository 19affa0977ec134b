# Worker area tests (forward pass, sampler, step protocol, kvd-worker process).
kvd_unit_test(test_step_msg SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_step_msg.c
              LIBS kvdproto)
kvd_unit_test(test_sampler SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_sampler.c
              LIBS kvdworker)
# Runs the NumPy reference (/usr/bin/python3 tests/ref/llama_ref.py) and kvd-mkmodel.
kvd_unit_test(test_forward SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_forward.c
              LIBS kvdworker TIMEOUT 600)
target_include_directories(test_forward PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/unit)
if(TARGET kvd-mkmodel)
  add_dependencies(test_forward kvd-mkmodel)
endif()
# The real kvd-worker against the real kvd-broker over sockets (plays kvd itself).
kvd_unit_test(test_worker SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_worker.c
              LIBS kvdworker PkgConfig::NANOMSG TIMEOUT 600)
foreach(dep kvd-worker kvd-broker)
  if(TARGET ${dep})
    add_dependencies(test_worker ${dep})
  endif()
endforeach()
