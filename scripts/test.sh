#!/bin/bash
# Install everything the tests need on a fresh machine, then run them. `.ci/run` calls this.
# As root it also installs Debian's Slurm, munge, MariaDB and OpenSSH (the bare-node mpirun test), and g++ (train.compile's
# Inductor kernels): the integration tests start a real
# throw-away cluster (scripts/devcluster.py) and stop it again. Without root those tests skip,
# except under CI (CI=true), where a missing cluster is a failure.
# Then the release-sensitive Slurm tests (-m "slurm and each_release": what depends on the scheduler's own
# behaviour) run again on each release in $HPCQA_SLURM_RELEASES (default 24.11:
# Debian 13's, from a root scripts/slurmroot.py makes once and caches; 22.05 is the host's, run above). Set it
# empty to skip that. The exit status is the first pass's failure, else the later ones'.
set -euo pipefail
cd "$(dirname "$0")/.."
# the run's own clock: each phase's seconds, and each pass's test times (junit XML), for scripts/citime.py at the end
times=$(mktemp -d "$PWD/.citimes.XXXXXX")  # in the checkout: the Slurm root's pass sees it at the same path
phases=()
started=$SECONDS
if [ "$(id -u)" = 0 ] && { ! command -v slurmctld || ! command -v sshd || ! command -v debootstrap || ! command -v g++; } >/dev/null; then
    # the packages' daemons are started by the tests themselves, never by the package scripts
    policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client slurmdbd munge mariadb-server iproute2 openssh-server openssh-client debootstrap \
        libgoogle-perftools4 libjemalloc2 g++ >/dev/null
    if [ -n "$policy" ]; then rm -f "$policy"; fi
fi
PY=$(bash scripts/install.sh)  # this checkout's venv, unless one is active
# as an activated venv would: its tools first on PATH (mpirun from impi-rt, hpcqa), python3 its interpreter
export PATH="$(dirname "$PY"):$PATH"
# Intel MPI's runtime (mpirun / hydra) from PyPI: the mpirun launch path is tested for real, not stubbed
"$PY" -m pip install -q --disable-pip-version-check impi-rt
if [ "${CI:-}" = true ]; then export HPCQA_REQUIRE_SLURM=1; fi
phases+=(--phase "install=$((SECONDS - started))")
status=0
t=$SECONDS
"$PY" -m pytest -q -ra --durations=20 --junitxml="$times/pass1.xml" tests "$@" || status=$?
host_slurm=$( (slurmctld -V 2>/dev/null || echo "slurm none") | awk '{print $2}')
phases+=(--phase "pass 1 (Slurm $host_slurm)=$((SECONDS - t)):$times/pass1.xml")
for release in ${HPCQA_SLURM_RELEASES-24.11}; do
    if [ "$(id -u)" != 0 ]; then
        echo "hpcqa: the Slurm $release pass needs root (a Debian root, mounts): skipped" >&2
        if [ "${CI:-}" = true ] && [ "$status" = 0 ]; then status=1; fi
        continue
    fi
    echo "=== the Slurm integration tests on Slurm $release (scripts/slurmroot.py) ===" >&2
    code=0
    t=$SECONDS
    "$PY" scripts/slurmroot.py run --release "$release" -- "$PY" -m pytest -q -ra --durations=20 -m "slurm and each_release" \
        -p no:cacheprovider --junitxml="$times/slurm-$release.xml" "${@:-tests}" || code=$?
    phases+=(--phase "Slurm $release pass=$((SECONDS - t)):$times/slurm-$release.xml")
    if [ "$code" = 5 ]; then code=0; fi  # the arguments selected no Slurm test
    if [ "$status" = 0 ]; then status=$code; fi
done
# each phase's time, the 20 slowest tests of the run, and the suite against its budget (HPCQA_CI_BUDGET_S)
budget=0
"$PY" scripts/citime.py "${phases[@]}" || budget=$?
if [ "$status" = 0 ] && [ "${CI:-}" = true ]; then status=$budget; fi
rm -rf "$times"
exit "$status"
