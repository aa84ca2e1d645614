# The docs' generated tables (tests/docs/, python/retro_bench/doc_tables.py, issue 42 #3), label `docs`:
# every `<!-- generated: COMMAND -->` block of docs/*.md and README.md equals COMMAND's output on the files
# in the repository (~10 s). Debian's /usr/bin/python3 with python3-numpy; included from tests/CMakeLists.txt.
if(EXISTS /usr/bin/python3)
  add_test(NAME docs.tables COMMAND /usr/bin/python3 -B ${CMAKE_SOURCE_DIR}/tests/docs/test_docs_tables.py
           WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(docs.tables PROPERTIES LABELS "docs" ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1" TIMEOUT 300)
endif()
