#!/usr/bin/env bash
# `npm test`: every check, in the order that gets CI done soonest on two cores (docs/testing.md):
#   1. the typecheck and the lint;
#   2. vitest's `unit` and `db` projects (CPU-bound: they have the machine to themselves);
#   3. the builds both lanes need, once: the Kubernetes components of both releases, the tested one (the process
#      cluster's, and kind's main suite) and the oldest supported (kind's smaller suite) (e2e/cluster/build.sh, called
#      by scripts/image/build.sh), and the product's images (npm run image, once per release for kube-scheduler), so
#      that the two lanes below never build the same thing at once;
#   4. vitest's `cluster` project on the process cluster and npm run test:kind (its lines prefixed with [kind]: the
#      tested release's suites in both hand-off modes, then the oldest release's smaller one) side by side: they mostly
#      wait on their clusters rather than compute. BC_TEST_PARALLEL=0 runs them one after the
#      other. (The two share nothing on this host: the kind runs keep their test state beside kind's kubeconfig,
#      e2e/cluster/harness.ts externalStateDir);
#   5. a table of each step's time and result, then the kind lane's failing lines when it failed. Exit 0 only when every
#      step passed.
# A failing step 1–3 stops the run (what follows would fail for the same reason).
set -uo pipefail
cd "$(dirname "$0")/.."

t0=$SECONDS
steps=()
failed=0
say() { printf '[npm test %5ds] %s\n' "$((SECONDS - t0))" "$*" >&2; }
record() { steps+=("$(printf '%-10s %6ss  %s' "$1" "$2" "$3")"); }
summary() {
  printf '\n%-10s %7s  %s\n' step time result
  printf '%s\n' "${steps[@]}"
  printf '%-10s %6ss  %s\n' total "$((SECONDS - t0))" "$( ((failed)) && echo FAILED || echo passed)"
}

# step NAME CMD...: runs CMD in the foreground, records its time and result.
step() {
  local name="$1" s=$SECONDS rc=0
  shift
  say "$name: $*"
  "$@" || rc=$?
  record "$name" "$((SECONDS - s))" "$( ((rc)) && echo "FAILED (exit $rc)" || echo passed)"
  ((rc == 0)) || failed=1
  return "$rc"
}

stop_early() {
  summary
  exit 1
}

step typecheck npm run -s typecheck || stop_early
step lint npm run -s lint || stop_early
step unit+db npx vitest run --project unit --project db || stop_early
# Both releases: the tested one (e2e/cluster/versions.env) and the oldest supported (e2e/kind/versions.env's OLDEST_*,
# ADR 0053), each with its kube-scheduler image (scripts/image/build.sh builds the Kubernetes components it needs
# through build.sh).
oldest_release='source e2e/kind/versions.env && export BC_K8S_VERSION="$OLDEST_K8S_VERSION" BC_ETCD_VERSION="$OLDEST_ETCD_VERSION"'
step builds bash -c "npm run -s image && ($oldest_release && bash scripts/image/build.sh)" || stop_early

# The kind lane's lines also go to $kind_log, whose failures are printed again after the summary: interleaved with the
# cluster project's, they would otherwise be far from the end of a long log.
kind_lane() {
  local s=$SECONDS rc
  npm run -s test:kind 2>&1 | sed -u 's/^/[kind] /' | tee "$kind_log"
  rc=${PIPESTATUS[0]}
  echo "$rc $((SECONDS - s))" >"$kind_result"
}
kind_result="$(mktemp)"
kind_log="$(mktemp)"
trap 'rm -f "$kind_result" "$kind_log"' EXIT
# vitest's "Failed Tests" sections of the kind lane (each failing test with its error and where it was thrown, colours
# stripped), then the lane's last lines: what the end of a CI log must show when the lane fails beside the cluster.
kind_failures() {
  printf '\nthe kind lane failed; its failing tests, with their errors:\n'
  sed -e 's/\x1b\[[0-9;]*m//g' -e 's/^\[kind\] //' "$kind_log" |
    awk '/Failed Tests [0-9]+/ { on = 1 } /^ *Test Files / { on = 0 } on || /rc=[1-9]/' | head -n 200
  printf -- '--- its last lines:\n'
  tail -n 15 "$kind_log"
}

if [[ "${BC_TEST_PARALLEL:-1}" == 0 ]]; then
  step cluster npx vitest run --project cluster
  say "kind: npm run test:kind"
  kind_lane
else
  say "kind: npm run test:kind, beside the cluster project"
  kind_lane &
  kind_pid=$!
  step cluster npx vitest run --project cluster
  wait "$kind_pid"
fi
read -r kind_rc kind_s <"$kind_result" || { kind_rc=1; kind_s=0; }
record kind "$kind_s" "$( ((kind_rc)) && echo "FAILED (exit $kind_rc)" || echo passed)"
((kind_rc == 0)) || failed=1

summary
((kind_rc == 0)) || kind_failures
exit "$failed"
