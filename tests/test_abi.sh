#!/usr/bin/env bash
# tests/test_abi.sh: libmnemo.so exports exactly the public API. Every function
# (or variable) declared MN_API in include/mnemo/*.h must be in the library's
# dynamic symbol table, and nothing else may be there (no mn__ internals, no
# CUDA runtime, no stray helper), apart from the few names listed below; a
# public declaration without MN_API fails too (it would be hidden). The checker
# first runs on a planted header and symbol list, so it cannot pass vacuously.
# Single-threaded; reads the library and the headers, writes only a temp dir.
#
# usage: test_abi.sh NM LIBMNEMO_SO SOURCE_DIR
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 NM LIBMNEMO_SO SOURCE_DIR" >&2
  exit 2
fi
NM=$1 LIB=$2 SRC=$3
export LC_ALL=C

# Exported names that are not MN_API declarations, and why each is allowed:
#  - _init _fini _edata _end __bss_start: ELF section markers some linkers
#    (GNU ld before 2.35, gold) put in the dynamic symbol table of every
#    shared library; no code of ours, nothing a caller can misuse.
# Nothing else: the names frameworks look up by name are all ours and all
# declared MN_API: PyTorch's CUDAPluggableAllocator and CuPy's
# CFunctionAllocator take mnemo_torch_alloc/free, mnemo_cupy_malloc/free and
# mnemo_empty_cache (include/mnemo/pluggable.h); DLPack is produced and consumed
# through mn_view_to_dlpack* / mn_view_from_dlpack* (include/mnemo/dlpack.h),
# whose tensors carry their deleters as pointers, never as exported names.
ALLOWED_EXTRA="_init _fini _edata _end __bss_start"

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# Prints, for the headers DIR/*.h, one line per public declaration:
#   "api NAME FILE"  declared MN_API
#   "bare NAME FILE" a file-scope mn_/mnemo_ function declared without MN_API
# Comments, string literals and preprocessor lines are dropped first; a
# declaration may span lines (it ends at ';', '{' or '}').
header_decls() {
  local f
  for f in "$1"/*.h; do
    # mnemo/nccl.h declares the optional NCCL module (libmnemo_nccl), not libmnemo.
    [[ $(basename "$f") == nccl.h ]] && continue
    awk -v file="$(basename "$f")" '
      { text = text $0 "\n" }
      END {
        # 1. Comments and string literals out (newlines kept).
        out = ""
        n = length(text)
        i = 1
        while (i <= n) {
          c = substr(text, i, 1)
          two = substr(text, i, 2)
          if (two == "/*") {
            j = index(substr(text, i + 2), "*/")
            if (j == 0) break
            seg = substr(text, i, j + 3)
            gsub(/[^\n]/, "", seg)
            out = out " " seg
            i += j + 3
          } else if (two == "//") {
            j = index(substr(text, i), "\n")
            if (j == 0) break
            i += j - 1
          } else if (c == "\"") {
            j = i + 1
            while (j <= n && substr(text, j, 1) != "\"") j += (substr(text, j, 1) == "\\") ? 2 : 1
            out = out "\"\""
            i = j + 1
          } else {
            out = out c
            i++
          }
        }
        # 2. Preprocessor lines out, with their continuations.
        m = split(out, lines, "\n")
        body = ""
        cont = 0
        for (k = 1; k <= m; k++) {
          l = lines[k]
          if (cont || l ~ /^[ \t]*#/) {
            cont = (l ~ /\\[ \t]*$/)
            continue
          }
          body = body " " l
        }
        # 3. Declarations: pieces between ; { and }.
        gsub(/[\t\r]/, " ", body)
        np = split(body, piece, /[;{}]/)
        for (k = 1; k <= np; k++) {
          p = piece[k]
          sub(/^ +/, "", p)
          if (p ~ /(^|[^A-Za-z0-9_])MN_API([^A-Za-z0-9_]|$)/) {
            match(p, /MN_API/)
            rest = substr(p, RSTART + 6)
            q = index(rest, "(")
            if (q > 0) rest = substr(rest, 1, q - 1)
            else sub(/[\[=].*$/, "", rest)
            sub(/ +$/, "", rest)
            if (match(rest, /[A-Za-z_][A-Za-z0-9_]*$/)) print "api", substr(rest, RSTART, RLENGTH), file
            else print "api", "?unparsed:" p, file
          } else if (p ~ /^(extern +)?[A-Za-z_][A-Za-z0-9_ *]*[ *](mn|mnemo)_[A-Za-z0-9_]* *\(/ &&
                     p !~ /^(typedef|static)[^A-Za-z0-9_]/) {
            q = index(p, "(")
            rest = substr(p, 1, q - 1)
            sub(/ +$/, "", rest)
            match(rest, /[A-Za-z_][A-Za-z0-9_]*$/)
            print "bare", substr(rest, RSTART, RLENGTH), file
          }
        }
      }' "$f"
  done
}

# Prints the defined dynamic symbols of an `nm -D --defined-only` listing (names
# only, without @VERSION).
exported_names() {
  awk 'NF >= 2 { n = $NF; sub(/@.*$/, "", n); print n }' "$1" | sort -u
}

# Compares the declarations (header_decls output) with the exported names; prints
# one complaint per line, naming the symbol.
complaints() {
  local decls=$1 exports=$2
  awk -v extra="$ALLOWED_EXTRA" '
    BEGIN { ne = split(extra, e, " "); for (k = 1; k <= ne; k++) allowed[e[k]] = 1 }
    FILENAME == ARGV[1] {
      if ($1 == "api") {
        if ($2 ~ /^\?unparsed:/) { print "cannot read an MN_API declaration in " $NF ": " $0; next }
        api[$2] = $3
        if ($2 !~ /^(mn|mnemo)_/ || $2 ~ /^mn__/) print "MN_API on a name outside the public prefixes (mn_, mnemo_): " $2 " (" $3 ")"
      } else if ($1 == "bare") bare[$2] = $3
      next
    }
    { exported[$1] = 1 }
    END {
      for (s in exported)
        if (!(s in api) && !(s in allowed)) print "exported but not a public MN_API declaration: " s
      for (s in api)
        if (!(s in exported)) print "declared MN_API in include/mnemo/" api[s] " but not exported: " s
      for (s in bare)
        if (!(s in api)) print "public declaration without MN_API (hidden in libmnemo.so): " s " (include/mnemo/" bare[s] ")"
    }' "$decls" "$exports" | sort
}

# ---- 1. the checker on a planted case -----------------------------------------
mkdir -p "$TMP/planted"
cat > "$TMP/planted/fake.h" <<'EOF'
/* fake.h: MN_API in a comment names nothing: MN_API int mn_in_comment(void); */
#define MN_API __attribute__((visibility("default")))
#define MN_FIELD(x) int mn_in_macro(int x); \
  MN_API int mn_in_macro_continuation(void);
// MN_API int mn_in_line_comment(void);
extern "C" {
typedef struct mn_thing_s { int (*mn_member)(int); } mn_thing_t;
typedef void (*mn_callback_fn)(void *user);
MN_API int mn_good(void);
MN_API const char *
mn_split_across_lines(const char *s,
                      int n);
MN_API extern int mn_data;
MN_API mn_status mn_declared_not_exported(void);
int mn_unmarked(void);
static inline int mn_inline_helper(void) { return 0; }
const char *mn_string = "MN_API int mn_in_string(void);";
}
EOF
cat > "$TMP/planted/nm.txt" <<'EOF'
0000000000001000 T mn_good
0000000000001010 T mn_split_across_lines
0000000000004000 B mn_data
0000000000001020 T mn__internal_leak
0000000000001030 T cudaMalloc@@libcudart.so.12
0000000000001040 T mn_unmarked
0000000000005000 D _edata
EOF
header_decls "$TMP/planted" > "$TMP/planted/decls.txt"
exported_names "$TMP/planted/nm.txt" > "$TMP/planted/exports.txt"
complaints "$TMP/planted/decls.txt" "$TMP/planted/exports.txt" > "$TMP/planted/got.txt"
cat > "$TMP/planted/want.txt" <<'EOF'
declared MN_API in include/mnemo/fake.h but not exported: mn_declared_not_exported
exported but not a public MN_API declaration: cudaMalloc
exported but not a public MN_API declaration: mn__internal_leak
exported but not a public MN_API declaration: mn_unmarked
public declaration without MN_API (hidden in libmnemo.so): mn_unmarked (include/mnemo/fake.h)
EOF
if ! diff -u "$TMP/planted/want.txt" "$TMP/planted/got.txt"; then
  echo "test_abi: the checker's self-check on a planted header failed (above: - wanted, + got)" >&2
  exit 1
fi
if [[ $(grep -c '^api ' "$TMP/planted/decls.txt") -ne 4 ]]; then
  echo "test_abi: self-check: wanted 4 MN_API declarations in the planted header, read:" >&2
  cat "$TMP/planted/decls.txt" >&2
  exit 1
fi
echo "test_abi: checker self-check passed"

# ---- 2. the real library ------------------------------------------------------
[[ -f $LIB ]] || { echo "test_abi: no library at $LIB" >&2; exit 1; }
"$NM" -D --defined-only "$LIB" > "$TMP/nm.txt"
header_decls "$SRC/include/mnemo" > "$TMP/decls.txt"
exported_names "$TMP/nm.txt" > "$TMP/exports.txt"
napi=$(grep -c '^api ' "$TMP/decls.txt" || true)
nexp=$(wc -l < "$TMP/exports.txt")
# Not vacuous: a library and headers that both hold the error API at least.
for anchor in mn_last_error mn_allocator_alloc mnemo_torch_alloc; do
  if ! grep -qx "$anchor" "$TMP/exports.txt" || ! grep -q "^api $anchor " "$TMP/decls.txt"; then
    echo "test_abi: $anchor is not both declared MN_API and exported: the headers or the nm output were not read" >&2
    exit 1
  fi
done
complaints "$TMP/decls.txt" "$TMP/exports.txt" > "$TMP/got.txt"
if [[ -s $TMP/got.txt ]]; then
  echo "test_abi: libmnemo.so's exports do not match the public headers ($(wc -l < "$TMP/got.txt") problems):" >&2
  sed 's/^/  /' "$TMP/got.txt" >&2
  exit 1
fi
echo "test_abi: $nexp exported symbols = $napi MN_API declarations in include/mnemo/*.h ($LIB)"
