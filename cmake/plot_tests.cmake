# Plotting and report tests (tests/plotting/, docs/plots.md): Python unittest files run by ctest with the
# project's Python (Debian's /usr/bin/python3 with python3-matplotlib; scripts/env.sh's RETRO_PYTHON).
# Included from tests/CMakeLists.txt after the retro-bench target exists:
#   include(${CMAKE_SOURCE_DIR}/cmake/plot_tests.cmake)
get_filename_component(_retro_plot_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
set(_retro_plot_tests "${_retro_plot_root}/tests/plotting")
if(DEFINED ENV{RETRO_PYTHON} AND NOT "$ENV{RETRO_PYTHON}" STREQUAL "")
  set(_retro_plot_python_default "$ENV{RETRO_PYTHON}")
else()
  set(_retro_plot_python_default "/usr/bin/python3")
endif()
set(RETRO_PLOT_PYTHON "${_retro_plot_python_default}" CACHE FILEPATH
    "Python with matplotlib for the plotting tests (default /usr/bin/python3, Debian's)")

if(NOT EXISTS "${RETRO_PLOT_PYTHON}")
  message(WARNING "retro-bench: ${RETRO_PLOT_PYTHON} not found: plotting tests not added (bash scripts/setup.sh)")
else()
  # data behind each figure (pure Python, fixtures only)
  add_test(NAME plot.figure_data
           COMMAND ${RETRO_PLOT_PYTHON} -B ${_retro_plot_tests}/test_figures_data.py
           WORKING_DIRECTORY ${_retro_plot_tests})
  # `retro-bench plot` / `retro-bench report` end to end
  add_test(NAME plot.cli
           COMMAND ${RETRO_PLOT_PYTHON} -B ${_retro_plot_tests}/test_plot_cli.py
           WORKING_DIRECTORY ${_retro_plot_tests})
  # the report in headless Chromium (exit 77 = skipped when Chromium is absent)
  add_test(NAME plot.report_browser
           COMMAND ${RETRO_PLOT_PYTHON} -B ${_retro_plot_tests}/test_report_browser.py
           WORKING_DIRECTORY ${_retro_plot_tests})
  set_tests_properties(plot.figure_data plot.cli plot.report_browser PROPERTIES
    LABELS plot
    ENVIRONMENT "RETRO_BIN=$<TARGET_FILE:retro-bench>;RETRO_PYTHON=${RETRO_PLOT_PYTHON};PYTHONDONTWRITEBYTECODE=1"
    TIMEOUT 600)
  set_tests_properties(plot.report_browser PROPERTIES SKIP_RETURN_CODE 77)
  set_tests_properties(plot.cli plot.report_browser PROPERTIES RESOURCE_LOCK retro_plot_cpu)
endif()
