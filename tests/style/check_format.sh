#!/usr/bin/env bash
# Every C++ file git tracks is clang-format clean (.clang-format: Google
# base). Fix with `make format`. Skips (exit 77) outside a git checkout or
# without clang-format (.ci/install-deps.sh installs it).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
command -v clang-format >/dev/null || { echo "SKIP: no clang-format"; exit 77; }
git rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
  { echo "SKIP: not a git checkout"; exit 77; }
bad=$(git ls-files -z '*.cc' '*.h' | xargs -0 -n 64 clang-format --style=file --dry-run 2>&1 |
      grep -oE '^[^:]+\.(cc|h):' | sort -u)
if [ -n "$bad" ]; then
  echo "not clang-format clean ($(clang-format --version)):"
  echo "$bad" | sed 's/:$//; s/^/  /'
  echo "fix: make format"
  exit 1
fi
echo "clang-format clean: $(git ls-files '*.cc' '*.h' | wc -l) files ($(clang-format --version))"
