# The Slurm test (tests/cluster/slurm_sweep.sh, docs/cluster.md): a sharded sweep on a throw-away one-node
# Slurm cluster, merged and compared with a one-machine run, with a shard killed and rerun. Label
# "cluster"; reported skipped (exit 77) only where Slurm cannot be installed.
add_test(NAME Cluster.SlurmSweep
         COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cluster/slurm_sweep.sh $<TARGET_FILE:retro-bench>)
set_tests_properties(Cluster.SlurmSweep PROPERTIES LABELS cluster SKIP_RETURN_CODE 77 TIMEOUT 300
                     RUN_SERIAL TRUE)
