# Writes OUT (a C++ source defining retro::git_revision() from `git describe`, and retro::source_dir()),
# touching it only when either changes, so every build records the commit it was built from (plus "-dirty").
# The source path lives in this one file, not in a compile definition, so that ccache hits across
# checkouts at other paths (CCACHE_BASEDIR) for every other translation unit.
execute_process(COMMAND git describe --always --dirty --abbrev=12 WORKING_DIRECTORY ${SRC}
                OUTPUT_VARIABLE rev OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT rev)
  set(rev "unknown")
endif()
set(content "namespace retro {\nconst char* git_revision() { return \"${rev}\"; }\nconst char* source_dir() { return \"${SRC}\"; }\n}\n")
if(EXISTS ${OUT})
  file(READ ${OUT} old)
endif()
if(NOT "${old}" STREQUAL "${content}")
  file(WRITE ${OUT} "${content}")
endif()
