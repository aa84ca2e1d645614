# Writes OUT (a C++ source defining retro::git_revision()) from `git describe`, touching it only when
# the revision changes, so every build records the commit it was built from (plus "-dirty").
execute_process(COMMAND git describe --always --dirty --abbrev=12 WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT rev)
  set(rev "unknown")
endif()
set(content "namespace retro { const char* git_revision() { return \"${rev}\"; } }\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${content}")
  file(WRITE ${OUT} "${content}")
endif()
