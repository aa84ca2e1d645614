# Tests of the Python binding (tests/python/, python/, docs/python.md), label `python`: unittest files
# run by the interpreter the module was built for (Debian's /usr/bin/python3) with PYTHONPATH at the
# module. Added only when the module is built (pybind11 found). Included from tests/CMakeLists.txt.
# python.py_methods also needs retro-bench with Python methods (libpython; python/CMakeLists.txt).
if(RETRO_HAVE_PYTHON_MODULE)
  set(_retro_py_tests ${CMAKE_SOURCE_DIR}/tests/python)
  set(_retro_py_test_names binding_vs_run exhaustive api venv_import method_base)
  if(RETRO_HAVE_PYTHON_METHODS)
    list(APPEND _retro_py_test_names py_methods)
  endif()
  foreach(_t ${_retro_py_test_names})
    add_test(NAME python.${_t}
             COMMAND ${RETRO_PYTHON_MODULE_PYTHON} -B ${_retro_py_tests}/test_${_t}.py
             WORKING_DIRECTORY ${_retro_py_tests})
    set_tests_properties(python.${_t} PROPERTIES
      LABELS "python"
      ENVIRONMENT "PYTHONPATH=${CMAKE_BINARY_DIR}/python;RETRO_BIN=$<TARGET_FILE:retro-bench>;PYTHONDONTWRITEBYTECODE=1"
      SKIP_RETURN_CODE 77
      TIMEOUT 300)
  endforeach()
  # `pip install .` into a fresh venv of a second Python (pyproject.toml, docs/python.md "Install with pip";
  # needs PyPI). Its build directory and venv sit beside this build directory (${CMAKE_BINARY_DIR}-pip-pyXY):
  # at the same depth under the source root, its library objects are this build's ccache entries.
  add_test(NAME python.pip_install
           COMMAND ${RETRO_PYTHON_MODULE_PYTHON} -B ${_retro_py_tests}/test_pip_install.py
           WORKING_DIRECTORY ${_retro_py_tests})
  set_tests_properties(python.pip_install PROPERTIES
    LABELS "python"
    ENVIRONMENT "PYTHONPATH=${CMAKE_BINARY_DIR}/python;RETRO_BIN=$<TARGET_FILE:retro-bench>;PYTHONDONTWRITEBYTECODE=1;RETRO_SOURCE_DIR=${CMAKE_SOURCE_DIR};RETRO_PIP_DIR_PREFIX=${CMAKE_BINARY_DIR}-pip"
    TIMEOUT 1200)
endif()
