# Closed-loop tests (tests/closedloop/, scripts/closedloop/, docs/closed-loop.md): every method inside the
# tiny random Llama's decode through the retro_bench binding (build/python), launched by `retro-bench run`.
# Run by Debian's /usr/bin/python3; the closed loop itself runs in the dump venv (exit 77 = skipped when
# it is missing). Included from tests/CMakeLists.txt after the retro-bench target exists.
get_filename_component(_retro_cl_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
if(EXISTS /usr/bin/python3)
  add_test(NAME closedloop.tiny
           COMMAND /usr/bin/python3 -B ${_retro_cl_root}/tests/closedloop/test_closed_loop.py
           WORKING_DIRECTORY ${_retro_cl_root}/tests/closedloop)
  set_tests_properties(closedloop.tiny PROPERTIES
    LABELS "closedloop"
    ENVIRONMENT "RETRO_BIN=$<TARGET_FILE:retro-bench>;PYTHONDONTWRITEBYTECODE=1"
    SKIP_RETURN_CODE 77
    TIMEOUT 300)
endif()
