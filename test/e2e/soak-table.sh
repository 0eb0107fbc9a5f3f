#!/usr/bin/env bash
# soak-table.sh RUN.log...: a table of e2e scenario × run from `go test -v`
# logs: each cell is the scenario's seconds, or FAIL; a last column counts
# the failures. (POSIX awk: Debian's default is mawk.)
set -euo pipefail
awk '
FNR == 1 { run++ }
/^--- (PASS|FAIL|SKIP): Test[^ ]+ \([0-9.]+s\)/ {
	res = substr($2, 1, length($2) - 1); t = $3; secs = $4
	gsub(/[()s]/, "", secs)
	if (!(t in seen)) { seen[t] = 1; order[++n] = t }
	cell[t, run] = (res == "PASS") ? sprintf("%.0f", secs) : res
	if (res == "FAIL") fails[t]++
}
END {
	printf "%-40s", "scenario (seconds per run)"
	for (r = 1; r <= run; r++) printf " %6s", "run" r
	printf " %6s\n", "fails"
	for (i = 1; i <= n; i++) {
		t = order[i]; printf "%-40s", t
		for (r = 1; r <= run; r++) printf " %6s", ((t, r) in cell) ? cell[t, r] : "-"
		printf " %6d\n", fails[t] + 0
	}
}' "$@"
