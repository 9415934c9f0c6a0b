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
# The caller's own arguments select within each phase: a `-m EXPR` of theirs is and-ed with the phase's mark
# (pytest keeps only the last -m, so passing it on as is would replace the phase's).
user_mark=""
sel=()
while [ $# -gt 0 ]; do
    case "$1" in
        -m) user_mark=${2:?-m needs an expression}; shift 2 ;;
        -m*) user_mark=${1#-m}; shift ;;
        *) sel+=("$1"); shift ;;
    esac
done
if [ ${#sel[@]} = 0 ]; then sel=(tests); fi
# the run's own clock: each phase's seconds, and each pass's test times (junit XML), for scripts/citime.py at the end
times=$(mktemp -d "$PWD/.citimes.XXXXXX")  # in the checkout: the Slurm root's pass sees it at the same path
phases=()
started=$SECONDS
wheel_pid=""
wheel_dir=""
cleanup() {  # however the run ends: the wheel's venv, if still being made (no test waited for it), and the clock
    local pid
    pid=$(cat "$times/roots.pid" 2>/dev/null) || pid=""
    # a root build still under way (the run ended before its release pass): by PID, once /proc says it is that build
    if [ -n "$pid" ] && grep -qa "slurmroot.py" "/proc/$pid/cmdline" 2>/dev/null; then
        kill -- "-$pid" 2>/dev/null || true
    fi
    if [ -n "$wheel_pid" ]; then
        kill -- "-$wheel_pid" 2>/dev/null || true  # our child, not yet waited for: its PID is still its own
        wait "$wheel_pid" 2>/dev/null || true
        rm -rf "$wheel_dir"
    fi
    rm -rf "$times"
}
trap cleanup EXIT
# The other releases' Debian roots (scripts/slurmroot.py build: made once and cached, minutes of mirror and dpkg on
# a fresh machine) start as soon as debootstrap is there, beside the rest of the install, which leaves CPU idle;
# the release pass's `slurmroot.py run` waits for a build under way (the root's lock) and reuses what it made.
# A failure here is left to that pass, which builds again and says why.
releases=${HPCQA_SLURM_RELEASES-24.11}
start_roots() {
    if [ "$(id -u)" != 0 ] || [ -z "$releases" ] || ! command -v debootstrap >/dev/null; then return 0; fi
    setsid bash -c 'for r in $1; do python3 scripts/slurmroot.py build --release "$r"; done' _ "$releases" \
        >"$times/roots.log" 2>&1 &
    echo "$!" >"$times/roots.pid"
}
# Debian's packages install beside the Python ones (apt and pip share nothing; each mostly waits on its mirror)
apt_pid=""
if [ "$(id -u)" = 0 ] && { ! command -v slurmctld || ! command -v sshd || ! command -v debootstrap || ! command -v g++; } >/dev/null; then
    (
        # the packages' daemons are started by the tests themselves, never by the package scripts
        policy=""
        if [ ! -e /usr/sbin/policy-rc.d ]; then
            policy=/usr/sbin/policy-rc.d
            printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy"
        fi
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            slurmctld slurmd slurm-client slurmdbd munge mariadb-server iproute2 openssh-server openssh-client \
            debootstrap libgoogle-perftools4 libjemalloc2 g++ >/dev/null
        if [ -n "$policy" ]; then rm -f "$policy"; fi
        start_roots
    ) >"$times/apt.log" 2>&1 &
    apt_pid=$!
else
    start_roots
fi
PY=$(bash scripts/install.sh)  # this checkout's venv, unless one is active
# as an activated venv would: its tools first on PATH (mpirun from impi-rt, hpcqa), python3 its interpreter
export PATH="$(dirname "$PY"):$PATH"
# The wheel a user installs, in a fresh venv outside the checkout by the README's install line (tests/test_wheel.py
# checks it against this checkout before using it): made beside the rest of the install, which leaves a core idle,
# where the tests asked for include those of test_wheel.py
if [ "${sel[*]}" = tests ] || [[ "${sel[*]}" == *test_wheel.py* ]]; then
    wheel_dir=$(mktemp -d "${TMPDIR:-/tmp}/hpcqa-wheel.XXXXXX")
    # its own process group (setsid): ended with everything it started if the tests end first
    setsid "$PY" scripts/wheelvenv.py "$wheel_dir" >"$times/wheel.log" 2>&1 &
    wheel_pid=$!
    export HPCQA_TEST_WHEEL=$wheel_dir
fi
# Intel MPI's runtime (mpirun / hydra) from PyPI: the mpirun launch path is tested for real, not stubbed; and
# the [mlflow] extra at its pinned versions, with what `mlflow server` needs beyond it: a real server receives the
# tests' runs (test_tracking_e2e.py). Not in install.sh: command 1 works without them
"$PY" -m pip install -q --disable-pip-version-check -c constraints.txt impi-rt -e ".[mlflow]" \
    Flask-CORS graphene huey aiohttp
if [ -n "$apt_pid" ] && ! wait "$apt_pid"; then
    cat "$times/apt.log" >&2
    echo "hpcqa: installing Debian's packages (Slurm, MariaDB, OpenSSH, g++) failed: the log above" >&2
    exit 1
fi
if [ "${CI:-}" = true ]; then export HPCQA_REQUIRE_SLURM=1; fi
phases+=(--phase "install=$((SECONDS - started))")
# pytest-xdist workers, side by side (tests/conftest.py groups what shares a fixture; each worker brings up its own
# Slurm clusters, scripts/devcluster.py --instance). HPCQA_TEST_WORKERS=0: one process, as before.
workers=${HPCQA_TEST_WORKERS:-3}
side=()
if [ "$workers" != 0 ]; then side=(-n "$workers" --dist loadgroup); fi
host_slurm=$( (slurmctld -V 2>/dev/null || echo "slurm none") | awk '{print $2}')
if [ "$(id -u)" != 0 ] && [ -n "$releases" ]; then
    echo "hpcqa: the Slurm $releases pass needs root (a Debian root, mounts): skipped" >&2
    if [ "${CI:-}" = true ]; then release_status=1; fi
    releases=""
fi
release_status=${release_status:-0}
# The release-sensitive Slurm tests on each other release, in that release's root: beside pass 1 (their clusters are
# instance 5), in one process (they mostly wait on Slurm, and the machine is busy with pass 1's workers), their
# output kept until pass 1 has printed its own.
release_pass() {  # RELEASE MARK XML -> the pytest exit status (5, nothing selected, is 0)
    local code=0 cpu_log=""
    # HPCQA_TEST_CPU_LOG: the root has a /tmp of its own, so the pass writes into $times (the checkout, seen at
    # the same path) and its lines join the caller's file afterwards, their worker named after the release
    if [ -n "${HPCQA_TEST_CPU_LOG:-}" ]; then cpu_log="$times/cpu-$1.log"; fi
    # its modules in reverse order (tests/conftest.py): not the same 4-rank job as pass 1's first, at the same time
    HPCQA_TEST_MODULES_REVERSED=1 HPCQA_TEST_CPU_LOG=$cpu_log HPCQA_CLUSTER_INSTANCE_BASE=5 \
        "$PY" scripts/slurmroot.py run --release "$1" -- \
        "$PY" -m pytest -q -ra --durations=20 -m "$2" -p no:cacheprovider --junitxml="$3" "${@:4}" || code=$?
    if [ -n "$cpu_log" ] && [ -f "$cpu_log" ]; then
        awk -v w="slurm-$1" '{ $4 = w; print }' "$cpu_log" >>"$HPCQA_TEST_CPU_LOG"
    fi
    if [ "$code" = 5 ]; then code=0; fi
    return "$code"
}
mark() {  # PHASE_MARK -> that phase's -m expression, with the caller's own if any
    if [ -n "$user_mark" ]; then echo "($user_mark) and ($1)"; else echo "$1"; fi
}
release_mark=$(mark "slurm and each_release and not alone")
read -r -a release_list <<<"$releases"
# the first release beside pass 1; the others (if any) after it, one root at a time
beside_pid=""
if [ ${#release_list[@]} -gt 0 ]; then
    (
        t=$SECONDS
        code=0
        release_pass "${release_list[0]}" "$release_mark" "$times/slurm-${release_list[0]}.xml" "${sel[@]}" \
            >"$times/slurm-${release_list[0]}.log" 2>&1 || code=$?
        echo "$code $((SECONDS - t))" >"$times/slurm-${release_list[0]}.done"
    ) &
    beside_pid=$!
fi
status=0
t=$SECONDS
"$PY" -m pytest -q -ra --durations=20 "${side[@]}" -m "$(mark "not alone")" --junitxml="$times/pass1.xml" \
    "${sel[@]}" || status=$?
if [ "$status" = 5 ]; then status=0; fi
phases+=(--phase "pass 1 (Slurm $host_slurm)=$((SECONDS - t)):$times/pass1.xml")
for release in "${release_list[@]}"; do
    echo "=== the Slurm integration tests on Slurm $release (scripts/slurmroot.py) ===" >&2
    if [ "$release" = "${release_list[0]}" ]; then
        wait "$beside_pid" || true
        cat "$times/slurm-$release.log" >&2
        read -r code took <"$times/slurm-$release.done" || { code=1; took=0; }
        phases+=(--phase "Slurm $release pass=$took:$times/slurm-$release.xml" --beside "Slurm $release pass")
    else
        t=$SECONDS
        code=0
        release_pass "$release" "$release_mark" "$times/slurm-$release.xml" "${sel[@]}" || code=$?
        phases+=(--phase "Slurm $release pass=$((SECONDS - t)):$times/slurm-$release.xml")
    fi
    if [ "$release_status" = 0 ]; then release_status=$code; fi
done
# the tests that measure time or speed (and the cold compile), one at a time with nothing beside them
t=$SECONDS
code=0
"$PY" -m pytest -q -ra --durations=10 -m "$(mark alone)" --junitxml="$times/alone.xml" "${sel[@]}" || code=$?
if [ "$code" = 5 ]; then code=0; fi
if [ "$status" = 0 ]; then status=$code; fi
phases+=(--phase "alone (Slurm $host_slurm)=$((SECONDS - t)):$times/alone.xml")
if [ "$status" = 0 ]; then status=$release_status; fi
if [ -n "$wheel_dir" ] && [ -f "$wheel_dir/done.json" ]; then  # made beside the install and the first pass
    took=$("$PY" -c 'import json, sys; print(round(json.load(open(sys.argv[1]))["seconds"]))' \
        "$wheel_dir/done.json" 2>/dev/null) || took=0
    phases+=(--phase "the wheel's venv=$took" --beside "the wheel's venv")
fi
# each phase's time, the 20 slowest tests of the run, and the suite against its budget (HPCQA_CI_BUDGET_S)
budget=0
"$PY" scripts/citime.py "${phases[@]}" || budget=$?
if [ "$status" = 0 ] && [ "${CI:-}" = true ]; then status=$budget; fi
exit "$status"
