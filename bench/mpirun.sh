# Sourced by the benches that launch sequence-parallel ranks on this one machine, so that they launch them
# as the suite's MPI tests do (CMakeLists.txt, FPDT_MPIEXEC_FLAGS and FPDT_MPI_TEST_ENV): as root, which
# Open MPI refuses unless told; oversubscribed (more ranks than cores); and without the vader single-copy
# (CMA) mechanism, whose ptrace rights containers often lack.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# bench_mpirun NP COMMAND [ARGS...]: COMMAND on NP ranks.
bench_mpirun() {
  local ranks=$1
  shift
  mpirun -np "$ranks" --oversubscribe --mca btl_vader_single_copy_mechanism none "$@"
}
