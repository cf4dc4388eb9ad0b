#!/usr/bin/env bash
# A multi-process test: mpirun starts RANKS copies of mpi_check (mpi_check.cc) on this machine.
#   mpi_test.sh MPIRUN MPI_CHECK CASE RANKS
# collectives: every rank must print its "ok" and the job exit 0. dead-peer and silent-peer: a
# rank is missing, and the job must end non-zero well within the collective timeout
# ($KILN_COMM_TIMEOUT_S, 5 s here) plus mpirun's start, never hang; silent-peer must end by the
# timeout's own error. Exits 77 (skipped) when mpirun is missing or Kiln was built without MPI.
set -u
mpirun=$1
check=$2
case=$3
ranks=$4

if [[ -z $mpirun || ! -x $mpirun ]]; then
  echo "skipped: no mpirun"
  exit 77
fi
if ! "$check" built-with-mpi; then
  echo "skipped: Kiln was built without MPI"
  exit 77
fi

export KILN_COMM_TIMEOUT_S=5
export OMP_NUM_THREADS=1  # the ranks share the machine's cores
# The ranks of a container may not see each other's memory through ptrace (CMA).
export OMPI_MCA_btl_vader_single_copy_mechanism=none
# Under AddressSanitizer, Open MPI's own allocations that live until exit (its initialization
# keeps them by design) are not Kiln's leaks: the ranks skip the leak check at exit.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
output=$(mktemp)
trap 'rm -f "$output"' EXIT

start=$SECONDS
timeout 120 "$mpirun" --allow-run-as-root --oversubscribe -np "$ranks" "$check" "$case" \
  >"$output" 2>&1
status=$?
elapsed=$((SECONDS - start))
cat "$output"
echo "mpirun exited $status after ${elapsed} s"

fail() {
  echo "FAIL: $*"
  exit 1
}

case $case in
  collectives)
    ((status == 0)) || fail "the job failed"
    for ((rank = 0; rank < ranks; ++rank)); do
      grep -q "^rank $rank: ok$" "$output" || fail "rank $rank did not finish its checks"
    done
    ;;
  dead-peer | silent-peer)
    ((status != 0)) || fail "the job succeeded without a peer"
    ((status != 124)) || fail "the job hung until killed"
    ((elapsed < 60)) || fail "the job took ${elapsed} s to stop, with a 5 s timeout"
    if [[ $case == silent-peer ]]; then
      grep -q "did not complete within 5 s" "$output" || fail "no rank reported the timeout"
    fi
    ;;
  *) fail "unknown case $case" ;;
esac
echo "PASS"
