#!/usr/bin/env bash
# Runs every Go fuzz target in the repository for FUZZTIME each (default
# 30s), one at a time. A failure leaves its input in the package's
# testdata/fuzz/<target>/: commit it as a seed once the bug is fixed.
# Usage: hack/fuzz.sh [regexp to select targets by name]
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${FUZZTIME:-30s}
select=${1:-.}
status=0
while IFS=: read -r file _ decl; do
	name=$(sed -E 's/^func (Fuzz[A-Za-z0-9_]*).*/\1/' <<<"$decl")
	grep -Eq -- "$select" <<<"$name" || continue
	pkg=./$(dirname "$file")
	echo "== $pkg $name ($fuzztime)"
	if ! go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg"; then
		echo "FAIL: $pkg $name"
		status=1
	fi
done < <(grep -rn --include='*_test.go' --exclude-dir=.tools --exclude-dir=node_modules '^func Fuzz[A-Za-z0-9_]*(f \*testing.F)' . | sed 's|^\./||' | sort)
exit $status
