#!/usr/bin/env bash
# Checks that go.mod is exactly the library's: what its users' builds get.
# The tests build with go_test.mod (go.mod's requirements and what only the
# tests use), so nothing else would notice go.mod missing a requirement the
# library needs, or keeping one only a test needs. make check runs it.
#
#  1. The library's packages (all but test/, whose kit imports test-only
#     modules) and the bench commands build with go.mod alone.
#  2. go mod tidy of the library's files alone (no _test.go, no test/, no
#     tools/) would change neither go.mod nor go.sum.
#  3. Each module the library's packages come from has the same version
#     under go_test.mod as under go.mod: the tests test what users build.
#
# With -w it writes what 2 found instead (go mod tidy for the library alone:
# a plain go mod tidy would add the tests' requirements to go.mod).
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"

mapfile -t lib < <("$GO" list -modfile=go_test.mod ./... | grep -v '^github.com/amqpactor/amqpactor/test/')

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
git ls-files --cached --others --exclude-standard |
	grep -v -E '(_test\.go$|^test/|^tools/|(^|/)testdata/|(^|/)node_modules/|^go_test\.(mod|sum)$)' |
	while IFS= read -r f; do
		[ -f "$f" ] || continue
		mkdir -p "$tmp/$(dirname "$f")"
		cp "$f" "$tmp/$f"
	done
if [ "${1:-}" = -w ]; then
	(cd "$tmp" && "$GO" mod tidy)
	cp "$tmp/go.mod" "$tmp/go.sum" .
elif ! (cd "$tmp" && "$GO" mod tidy -diff); then
	echo "librarymod: go.mod/go.sum are not what the library alone needs (above: what go mod tidy of the library's files would change; bash tools/librarymod.sh -w writes it)" >&2
	exit 1
fi

"$GO" build "${lib[@]}" ./test/bench/cmd/... || {
	echo "librarymod: the library does not build with go.mod alone (a requirement missing?)" >&2
	exit 1
}

mods() { "$GO" list "$@" -deps -f '{{with .Module}}{{if not .Main}}{{.Path}} {{.Version}}{{end}}{{end}}' "${lib[@]}" | sort -u; }
if ! diff <(mods) <(mods -modfile=go_test.mod); then
	echo "librarymod: go_test.mod builds the library with other versions than go.mod (< go.mod, > go_test.mod)" >&2
	exit 1
fi
