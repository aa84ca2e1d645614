# Closed-loop tests (tests/closedloop/, python/retro_bench/closedloop/, docs/closed-loop.md): every method inside a
# model's decode through the retro_bench package with its core (build/python), launched by `retro-bench run`:
#   closedloop.tiny     the tiny random Llama of tests/dump (2 layers), every check incl. resume and bad input
#   closedloop.smollm2  SmolLM2-135M (30 layers), 320 tokens of Emma: exhaustive = full, sinks-only diverges
#   closedloop.qwen     Qwen2.5-Coder-0.5B (qwen2, 24 layers; fetched from PyPI once): a 1K dump with the GGUF
#                       q/k/v check, the closed loop at 1K (needle answered, exhaustive = full); skipped only
#                       when the model cannot be fetched (~4 min; 6 min on busy cores)
#   closedloop.user_cases  "cases": FILE.jsonl on the tiny model: one accepted file, refusals by line (~20 s)
#   closedloop.py_method   Python methods (examples/methods/) on the tiny model: their compiled twins' scores,
#                          a broken one fails by name (~5 s)
#   closedloop.claims   retro_bench.closedloop.claims on hand-written results directories (no model; ~1 s)
#   closedloop.progress the progress lines of a long prefill (closed_loop.py prefill_progress; no model; ~0.1 s)
#   closedloop.sharding the cases dealt to shards and --shard-plan's list and estimate (sharding.py; no model; ~0.1 s)
#   closedloop.manifest shards' sessions in one manifest.json, stale sessions marked (results.py; no model; ~1 s)
# Run by Debian's /usr/bin/python3; the closed loop itself runs in the dump venv (exit 77 = skipped when
# it is missing). Included from tests/CMakeLists.txt after the retro-bench target exists.
get_filename_component(_retro_cl_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
if(EXISTS /usr/bin/python3)
  foreach(_case "tiny;test_closed_loop.py;300" "smollm2;test_closed_loop_smollm2.py;600"
                "qwen;test_closed_loop_qwen.py;900" "user_cases;test_user_cases.py;300"
                "py_method;test_closed_loop_py_method.py;300" "claims;test_claims.py;60"
                "progress;test_progress.py;60" "sharding;test_sharding.py;60"
                "manifest;test_manifest_sessions.py;60")
    list(GET _case 0 _name)
    list(GET _case 1 _script)
    list(GET _case 2 _timeout)
    add_test(NAME closedloop.${_name}
             COMMAND /usr/bin/python3 -B ${_retro_cl_root}/tests/closedloop/${_script}
             WORKING_DIRECTORY ${_retro_cl_root}/tests/closedloop)
    set_tests_properties(closedloop.${_name} PROPERTIES
      LABELS "closedloop"
      ENVIRONMENT "RETRO_BIN=$<TARGET_FILE:retro-bench>;PYTHONDONTWRITEBYTECODE=1"
      SKIP_RETURN_CODE 77
      TIMEOUT ${_timeout})
  endforeach()
endif()
