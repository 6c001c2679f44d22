#!/usr/bin/env bash
# Reinstall the dashboard's browser libraries from the npm registry (versions pinned
# in package.json / package-lock.json) and copy their built files into
# portal/static/vendor/, which is committed: CI and `make run` never need npm.
#
#   scripts/vendor-static.sh          # after changing a version in package.json
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -f package-lock.json ]; then
  npm ci --no-audit --no-fund --ignore-scripts
else
  npm install --no-audit --no-fund --ignore-scripts
fi

dest=portal/static/vendor
rm -rf "$dest"
mkdir -p "$dest/chartjs" "$dest/htmx"
cp node_modules/chart.js/dist/chart.umd.min.js "$dest/chartjs/chart.umd.min.js"
# The source map the minified file points to: collectstatic (manifest storage) needs it.
cp node_modules/chart.js/dist/chart.umd.min.js.map "$dest/chartjs/chart.umd.min.js.map"
cp node_modules/chart.js/LICENSE.md "$dest/chartjs/LICENSE.md"
cp node_modules/htmx.org/dist/htmx.min.js "$dest/htmx/htmx.min.js"
cp node_modules/htmx.org/LICENSE "$dest/htmx/LICENSE"

{
  echo "Vendored by scripts/vendor-static.sh from the npm registry; do not edit."
  for pkg in chart.js htmx.org; do
    node -e "const p=require('./node_modules/$pkg/package.json'); console.log(p.name + ' ' + p.version + ' (' + p.license + ')')"
  done
} >"$dest/VERSIONS.txt"
cat "$dest/VERSIONS.txt"
