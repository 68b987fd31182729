#!/usr/bin/env bash
# Checks deploy/observability/ (ctest observability_rules; also run by hand, from anywhere):
#   1. promtool check rules   prometheus/streamd-alerts.yml
#   2. promtool test rules    prometheus/streamd-alerts.test.yml
#   3. promtool check config  prometheus/prometheus.example.yml
#   4. the dashboard: valid JSON, unique panel ids, every panel with the ${datasource} data
#      source and targets, every streamd_* selector filtered by $job and $instance, and every
#      query valid PromQL (promtool check rules on the queries, Grafana variables substituted)
#   5. every streamd_* metric in the dashboard, the rules and their tests is in docs/METRICS.md
# Exit 0 when all pass, 1 on any failure (each reported on a FAIL: line). A missing promtool
# or python3 is a failure, not a skip: scripts/install-deps.sh installs both.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
PROM="$HERE/prometheus"
DASHBOARD="$HERE/grafana/streamd-dashboard.json"
METRICS_DOC="$ROOT/docs/METRICS.md"

failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok:   $*"; }

# Runs "$@", printing its output only when it fails.
run_check() {
  local what="$1"; shift
  local out
  if out="$("$@" 2>&1)"; then pass "$what"; else fail "$what"; printf '      %s\n' "$out"; fi
}

for tool in promtool python3; do
  if ! command -v "$tool" >/dev/null; then
    echo "FAIL: $tool not found (the Debian packages prometheus and python3;" \
      "scripts/install-deps.sh installs them)"
    exit 1
  fi
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# promtool resolves rule_files relative to the file that names them, so any working directory
# does; run from $PROM anyway for short paths in its messages.
cd "$PROM" || exit 1
run_check "promtool check rules streamd-alerts.yml" promtool check rules streamd-alerts.yml
run_check "promtool test rules streamd-alerts.test.yml" promtool test rules streamd-alerts.test.yml
run_check "promtool check config prometheus.example.yml" \
  promtool check config prometheus.example.yml

# The dashboard's structure; writes its queries as recording rules for promtool to parse.
if python3 - "$DASHBOARD" "$tmp/dashboard-queries.yml" <<'EOF'
import json, re, sys
path, rules_out = sys.argv[1], sys.argv[2]
try:
    with open(path) as f:
        dash = json.load(f)
except (OSError, ValueError) as e:
    print(f"FAIL: {path}: not valid JSON: {e}")
    sys.exit(1)
errors = []
names = [v.get("name") for v in dash.get("templating", {}).get("list", [])]
for var in ("datasource", "job", "instance"):
    if var not in names:
        errors.append(f"no template variable ${var}")
ds_var = next((v for v in dash.get("templating", {}).get("list", [])
               if v.get("name") == "datasource"), {})
if ds_var and (ds_var.get("type") != "datasource" or ds_var.get("query") != "prometheus"):
    errors.append("$datasource is not a data source variable of type prometheus")
want_ds = {"type": "prometheus", "uid": "${datasource}"}
for v in dash.get("templating", {}).get("list", []):
    if v.get("type") == "query" and v.get("datasource") != want_ds:
        errors.append(f"variable ${v.get('name')}: datasource is {v.get('datasource')}, "
                      f"not {want_ds}")
panels = []
for p in dash.get("panels", []):
    panels.append(p)
    panels.extend(p.get("panels", []))  # panels inside collapsed rows
ids = [p.get("id") for p in panels]
for i in sorted({i for i in ids if ids.count(i) > 1}, key=str):
    errors.append(f"panel id {i} is used {ids.count(i)} times")
selector = re.compile(r"\b(streamd_[a-z0-9_]*[a-z0-9])\b(\{[^}]*\})?")
exprs = []
for p in panels:
    if p.get("type") == "row":
        continue
    title = f"panel {p.get('id')} \"{p.get('title')}\""
    if p.get("datasource") != want_ds:
        errors.append(f"{title}: datasource is {p.get('datasource')}, not {want_ds}")
    targets = p.get("targets") or []
    if not targets:
        errors.append(f"{title}: no targets")
    for t in targets:
        expr = t.get("expr", "").strip()
        if t.get("datasource") != want_ds:
            errors.append(f"{title} target {t.get('refId')}: datasource is not {want_ds}")
        if not expr:
            errors.append(f"{title} target {t.get('refId')}: no expr")
            continue
        for m in selector.finditer(expr):
            sel = m.group(2) or ""
            if 'job=~"$job"' not in sel or 'instance=~"$instance"' not in sel:
                errors.append(f"{title}: {m.group(1)} is not filtered by "
                              'job=~"$job",instance=~"$instance"')
        exprs.append((title, expr))
for e in errors:
    print(f"FAIL: dashboard: {e}")
# Grafana's variables as Prometheus would see them after substitution.
with open(rules_out, "w") as f:
    f.write("groups:\n  - name: dashboard\n    rules:\n")
    for n, (title, expr) in enumerate(exprs):
        expr = (expr.replace("$__rate_interval", "1m").replace("$job", ".*")
                .replace("$instance", ".*"))
        f.write(f"      - record: dashboard:query:{n}\n        expr: {json.dumps(expr)}\n")
print(f"ok:   dashboard: {len(panels)} panels, {len(exprs)} queries")
sys.exit(1 if errors else 0)
EOF
then
  run_check "dashboard queries parse (promtool check rules)" \
    promtool check rules "$tmp/dashboard-queries.yml"
else
  failures=$((failures + 1))
fi

# Every metric name used must be documented. The names in docs/METRICS.md are the backticked
# first column of its tables: `streamd_x` or `streamd_x{labels}`.
documented="$(grep -E '^\|' "$METRICS_DOC" | grep -oE '^\| `streamd_[a-z0-9_]+' | sed 's/^| `//' | sort -u)"
if [ -z "$documented" ]; then
  fail "no metric names found in the tables of $METRICS_DOC"
else
  used="$(cat "$DASHBOARD" "$PROM/streamd-alerts.yml" "$PROM/streamd-alerts.test.yml" |
    grep -oE '\bstreamd_[a-z0-9_]*[a-z0-9]' | sed -E 's/_(bucket|sum|count)$//' | sort -u)"
  missing="$(comm -23 <(echo "$used") <(echo "$documented"))"
  if [ -n "$missing" ]; then
    fail "metric names used but not in docs/METRICS.md: $(tr '\n' ' ' <<<"$missing")"
  else
    pass "$(echo "$used" | wc -l) metric names used, all in docs/METRICS.md"
  fi
fi

if [ "$failures" -ne 0 ]; then
  echo "deploy/observability: $failures check(s) failed"
  exit 1
fi
echo "deploy/observability: all checks passed"
