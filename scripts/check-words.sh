#!/usr/bin/env bash
# The docs, comments and messages speak the user's language: no words of the project's own work
# tracking (its issues and their items, its rounds of work, the source documents it grew from,
# its internal design file). Prints the file:line of every such word in the user-facing docs and
# in the workspace's sources, and fails if there is one.
#
# A legitimate use (a quotation, a name that cannot change) is allowed by one line in
# scripts/check-words.allow: `path<TAB>text`, where `text` is a part of the allowed line.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each pattern is an extended regular expression, matched without regard to case. They name the
# tracking words only: "round trip", rounds of a benchmark ("the same round", "--rounds 3"), a
# random seed ("std seeds them", a `SEED` constant) and a test's "seed" value do not match.
patterns=(
  '\bissues? ?#?[0-9]+'                              # issue 21, issue #21, issues 20
  '\b(the|this|that|next|last|previous) issue\b'    # what the issue left open
  '\bitems? [0-9]+'                                  # item 2, items 1-3
  '\bround [0-9]+'                                   # round 3
  '\bthis round\b'
  "'s (first|next|last|previous) round\\b"          # this page's first round
  "\\bround's (entries|changes|work|fixes)\\b"
  '\bfrom one round to the next\b'
  '\b(next|last|previous|first|later|earlier) round of (work|changes|fixes)\b'
  "\\bseeds'"                                       # the seeds' recipe
  '\bthe seeds\b'                                   # as in the seeds
  '\bseed (documents?|docs?)\b'
  '\bcookbook'                                       # the cookbook's cache-aside
  '\bdesign(\.md)? §'                               # design §7
  '\bdesign\.md\b'
  '"must show"'                                       # a heading of a work item
  '\bthe review\b'
)

# The files users read: the top-level docs, docs/, every README, and the sources, scripts and
# manifests of the workspace (tracked or new, never the build output).
mapfile -t files < <(
  git ls-files --cached --others --exclude-standard -- \
    README.md SECURITY.md CHANGELOG.md 'docs/*.md' '*README.md' \
    'crates/*' 'examples/*' 'tests/*' 'scripts/*' |
    grep -E '(^|/)README\.md$|^(README|SECURITY|CHANGELOG)\.md$|^docs/[^/]*\.md$|^(crates|examples|tests|scripts)/.*\.(rs|lua|html|toml|sh)$' |
    grep -vx 'scripts/check-words\.sh' |
    sort -u
)

allow=scripts/check-words.allow
regex=$(IFS='|'; echo "${patterns[*]}")
hits=$(grep -nHiE "$regex" -- "${files[@]}" 2>/dev/null || true)
if [ -n "$hits" ] && [ -f "$allow" ]; then
  hits=$(printf '%s\n' "$hits" | awk -F'\t' '
    FILENAME == ARGV[1] {
      if ($0 !~ /^#/ && NF >= 2) { path[++n] = $1; text[n] = substr($0, length($1) + 2) }
      next
    }
    {
      file = $0; sub(/:.*/, "", file)
      line = $0; sub(/^[^:]*:[^:]*:/, "", line)
      for (i = 1; i <= n; i++) if (file == path[i] && index(line, text[i])) next
      print
    }' "$allow" -)
fi
if [ -n "$hits" ]; then
  printf '%s\n' "$hits"
  printf '\n%s line(s) with words of the project'"'"'s own work tracking (issues, items, rounds, seeds, cookbook, design file) above:\n' \
    "$(printf '%s\n' "$hits" | wc -l)" >&2
  echo "say what the code does and why instead, or allow a legitimate use in $allow" >&2
  exit 1
fi
echo "no work-tracking words in ${#files[@]} files"
