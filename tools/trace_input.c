/* tools/trace_input.c: reads a trace or a PyTorch snapshot (imported on the fly),
 * gives the recorded allocator settings, finds the CLI's scripts and sample
 * traces relative to the executable, and writes JSON strings for every command's
 * output. Single-threaded (the CLI's main thread). */
#include "trace_input.h"
#include "profiling/stacks.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mnemo/mnemo.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/fileio.h"
#include "runtime/hostmem.h"

/* The folder of the running executable, resolved; false when unknown. */
static bool exe_dir(char *buf, size_t size) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return false;
  exe[n] = '\0';
  char *slash = strrchr(exe, '/');
  if (!slash) return false;
  *slash = '\0';
  return (size_t)snprintf(buf, size, "%s", exe) < size;
}

/* Whether the executable is the one the build tree made (then the source tree's
 * tools/ and data/ are its own); compared as resolved paths. */
static bool in_build_tree(const char *dir) {
  char a[PATH_MAX], b[PATH_MAX];
  return realpath(dir, a) && realpath(MN_BUILD_BIN_DIR, b) && !strcmp(a, b);
}

bool mn__tools_find(mn__tools_kind kind, const char *name, char *buf, size_t size) {
  const char *env = mn__env(kind == MN__TOOLS_SCRIPT ? MN__ENV_TOOLS_DIR : MN__ENV_DATA_DIR);
  char first[PATH_MAX] = "", dir[PATH_MAX];
  const char *places[3];
  size_t n = 0;
  char share[PATH_MAX + 32], resolved[PATH_MAX];
  if (env && *env) places[n++] = env;
  if (exe_dir(dir, sizeof dir)) {
    snprintf(share, sizeof share, "%s/../share/mnemo", dir);
    places[n++] = realpath(share, resolved) ? resolved : share; /* <prefix>/share/mnemo, without the bin/.. */
    if (in_build_tree(dir)) places[n++] = kind == MN__TOOLS_SCRIPT ? MN_TOOLS_DIR : MN_DATA_DIR;
  }
  for (size_t i = 0; i < n; i++) {
    int len = snprintf(buf, size, "%s/%s", places[i], name);
    if (len < 0 || (size_t)len >= size) continue;
    if (!first[0]) snprintf(first, sizeof first, "%s", buf);
    if (access(buf, R_OK) == 0) return true;
  }
  snprintf(buf, size, "%s", first[0] ? first : name);
  return false;
}

int mn__tools_run_script(const char *prog, const char *script, char *const *args, int nargs) {
  char path[PATH_MAX];
  if (!mn__tools_find(MN__TOOLS_SCRIPT, script, path, sizeof path)) {
    fprintf(stderr, "%s: cannot find %s (looked in $MNEMO_TOOLS_DIR and next to the executable, first at %s)\n",
            prog, script, path);
    return 1;
  }
  char **argv = mn__calloc((size_t)nargs + 3, sizeof *argv);
  if (!argv) {
    fprintf(stderr, "%s: out of host memory\n", prog);
    return 1;
  }
  argv[0] = "python3";
  argv[1] = path;
  for (int i = 0; i < nargs; i++) argv[2 + i] = args[i];
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    execvp("python3", argv);
    fprintf(stderr, "%s: cannot run python3: %s\n", prog, strerror(errno));
    _exit(127);
  }
  free(argv);
  int status = 0;
  while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (pid < 0) {
    fprintf(stderr, "%s: cannot run python3: %s\n", prog, strerror(errno));
    return 1;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return 1; /* python3 missing: said by the child */
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

bool mn__tools_is_snapshot(const char *path) {
  int fd = -1;
  if (mn__file_open_regular("mnemo", path, O_RDONLY, 0, &fd, NULL) != MN_OK) {
    mn_clear_error();
    return false;
  }
  unsigned char c[2] = {0, 0};
  ssize_t n;
  do {
    n = read(fd, c, sizeof c);
  } while (n < 0 && errno == EINTR);
  close(fd);
  /* pickle protocol 2 and later start with PROTO (0x80); gzip with 1f 8b */
  return (n >= 1 && c[0] == 0x80) || (n == 2 && c[0] == 0x1f && c[1] == 0x8b);
}

static const char *g_max_decompressed; /* --max-decompressed-size's value (the CLI is single-threaded) */
static bool g_no_cache;                 /* --no-cache (the CLI is single-threaded) */

void mn__tools_set_no_cache(void) { g_no_cache = true; }

int mn__tools_set_max_decompressed(const mn__cli_t *p, const char *value) {
  size_t v = 0;
  if (mn_bytes_parse(value, &v) != MN_OK) {
    mn_clear_error();
    return mn__cli_error(p, "--max-decompressed-size needs a byte count (e.g. 8G), not \"%s\"", value);
  }
  g_max_decompressed = value;
  return 0;
}

int mn__tools_import_args(char **args, int n) {
  if (!g_max_decompressed) return n;
  args[n++] = "--max-decompressed-size";
  args[n++] = (char *)g_max_decompressed;
  return n;
}

/* ---- the import cache ----------------------------------------------------------------
 * A snapshot is imported once: the trace the importer wrote (and what it said on
 * stderr, warnings included, replayed on a hit) is kept in the user's cache folder
 * under a key hashed from the snapshot's bytes, the importer script's bytes (its
 * version) and the import options. An entry is
 *   "mnemo-import-cache 2 <key> <stderr bytes> <trace bytes> <hash of both>\n" <stderr> <trace>
 * (the snapshot's path in <stderr> kept as PATH_MARK: a hit under another name says that name)
 * and is used only when its header, lengths and hash match and the trace parses;
 * anything else is a miss (the entry is rewritten). Not a security boundary: the
 * folder is the user's own (created 0700; one another user may write is not used). */

#define CACHE_MAGIC "mnemo-import-cache 2" /* 2: the snapshot's path in the messages kept as PATH_MARK */

/* A 128-bit content hash (two 64-bit lanes of xxHash64-style rounds over 16-byte
 * blocks, the tail bytewise, lengths folded in): detects changed content, not
 * a cryptographic hash. */
typedef struct hash128_s {
  uint64_t a, b, n;
  unsigned char tail[16];
  size_t ntail;
} hash128_t;

#define H_P1 0x9E3779B185EBCA87ull
#define H_P2 0xC2B2AE3D27D4EB4Full
#define H_P3 0x165667B19E3779F9ull

static uint64_t h_rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t h_round(uint64_t acc, uint64_t w) { return h_rotl(acc + w * H_P2, 31) * H_P1; }
static uint64_t h_mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

static void hash_init(hash128_t *h, uint64_t seed) { *h = (hash128_t){seed + H_P1, seed ^ H_P3, 0, {0}, 0}; }

static void hash_block(hash128_t *h, const unsigned char *p) {
  uint64_t w0, w1;
  memcpy(&w0, p, 8);
  memcpy(&w1, p + 8, 8);
  h->a = h_round(h->a, w0);
  h->b = h_round(h->b, w1);
}

static void hash_update(hash128_t *h, const void *data, size_t len) {
  const unsigned char *p = data;
  h->n += len;
  if (h->ntail) {
    size_t k = 16 - h->ntail < len ? 16 - h->ntail : len;
    memcpy(h->tail + h->ntail, p, k);
    h->ntail += k;
    p += k;
    len -= k;
    if (h->ntail < 16) return;
    hash_block(h, h->tail);
    h->ntail = 0;
  }
  for (; len >= 16; p += 16, len -= 16) hash_block(h, p);
  memcpy(h->tail, p, len);
  h->ntail = len;
}

static void hash_final(const hash128_t *h, uint64_t out[2]) {
  uint64_t a = h->a, b = h->b;
  for (size_t i = 0; i < h->ntail; i++) a = h_rotl(a ^ (h->tail[i] * H_P3), 11) * H_P1;
  out[0] = h_mix(a ^ h_rotl(b, 17) ^ h->n);
  out[1] = h_mix(b + out[0] * H_P2 + h->n);
}

/* Hashes the whole regular file at path into h; false when it cannot be read. */
static bool hash_file(const char *path, hash128_t *h) {
  int fd = -1;
  if (mn__file_open_regular("mnemo", path, O_RDONLY, 0, &fd, NULL) != MN_OK) {
    mn_clear_error();
    return false;
  }
  size_t cap = 1u << 20;
  unsigned char *buf = mn__malloc(cap);
  bool ok = buf != NULL;
  while (ok) {
    ssize_t n = read(fd, buf, cap);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ok = false;
    if (n <= 0) break;
    hash_update(h, buf, (size_t)n);
  }
  free(buf);
  close(fd);
  return ok;
}

/* Whether the cache is on (MNEMO_CACHE not 0/off, no --no-cache) and, when it
 * is, its folder (MNEMO_CACHE when it names one, else $XDG_CACHE_HOME/mnemo,
 * else ~/.cache/mnemo) written to buf. */
static bool cache_folder(char *buf, size_t size) {
  const char *v = mn__env(MN__ENV_CACHE);
  if (g_no_cache || (v && (!strcmp(v, "0") || !strcmp(v, "off") || !strcmp(v, "no") || !strcmp(v, "false"))))
    return false;
  if (v && *v && strcmp(v, "1") && strcmp(v, "on")) return (size_t)snprintf(buf, size, "%s", v) < size;
  const char *xdg = mn__env(MN__ENV_XDG_CACHE_HOME), *home = mn__env(MN__ENV_HOME);
  if (xdg && xdg[0] == '/') return (size_t)snprintf(buf, size, "%s/mnemo", xdg) < size;
  if (home && home[0] == '/') return (size_t)snprintf(buf, size, "%s/.cache/mnemo", home) < size;
  return false;
}

/* Creates the folder (and missing parents) 0700; true when it then is a folder
 * of this user that no one else may write to. */
static bool cache_mkdirs(const char *dir) {
  char p[PATH_MAX];
  if ((size_t)snprintf(p, sizeof p, "%s", dir) >= sizeof p) return false;
  for (char *s = p + 1; *s; s++) {
    if (*s != '/') continue;
    *s = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST) return false;
    *s = '/';
  }
  if (mkdir(p, 0700) != 0 && errno != EEXIST) return false;
  struct stat st;
  return lstat(p, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 022);
}

/* The cache entry of (snapshot, importer, options): path in buf, key (32 hex
 * digits) in key; false when the cache is off or unusable. */
static bool cache_entry(const char *path, const char *script, int device, char *buf, size_t size, char key[33]) {
  char dir[PATH_MAX];
  if (!cache_folder(dir, sizeof dir)) return false;
  hash128_t h;
  hash_init(&h, 33);
  hash_update(&h, CACHE_MAGIC, sizeof CACHE_MAGIC);
  if (!hash_file(script, &h)) return false; /* the importer's bytes: its version */
  /* the importer's default is every device, the same trace as `--device all`: one entry for both */
  if (device == -1) device = MN__TOOLS_ALL_DEVICES;
  char opts[96];
  int n = snprintf(opts, sizeof opts, "|device=%d|max=%s|", device, g_max_decompressed ? g_max_decompressed : "");
  hash_update(&h, opts, (size_t)n);
  if (!hash_file(path, &h)) return false; /* the snapshot's bytes */
  uint64_t d[2];
  hash_final(&h, d);
  snprintf(key, 33, "%016llx%016llx", (unsigned long long)d[0], (unsigned long long)d[1]);
  if (!cache_mkdirs(dir)) return false;
  return (size_t)snprintf(buf, size, "%s/import-%s.trace", dir, key) < size;
}

/* The stderr text kept in an entry: lines as a terminal shows them (what a
 * progress display wrote before its last \r dropped, its clear-line escape too). */
static size_t keep_stderr(char *s, size_t len) {
  size_t out = 0, start = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '\r') start = i + 1;
    if (s[i] != '\n') continue;
    if (i - start >= 3 && !memcmp(s + start, "\033[K", 3)) start += 3;
    memmove(s + out, s + start, i + 1 - start);
    out += i + 1 - start;
    start = i + 1;
  }
  return out;
}

static void hash_hex(const void *a, size_t alen, const void *b, size_t blen, char hex[33]) {
  hash128_t h;
  hash_init(&h, 7);
  hash_update(&h, a, alen);
  hash_update(&h, b, blen);
  uint64_t d[2];
  hash_final(&h, d);
  snprintf(hex, 33, "%016llx%016llx", (unsigned long long)d[0], (unsigned long long)d[1]);
}

/* A status line on a terminal while a big trace (over STATUS_BYTES: about a
 * second to hash, read and parse) is read: "<prog>: <what> (N MB)...", cleared
 * afterwards; nothing when stderr is not a terminal. */
#define STATUS_BYTES (32u << 20)
static bool status_show(const char *prog, const char *what, const char *path) {
  struct stat st;
  if (!isatty(2) || stat(path, &st) != 0 || (uint64_t)st.st_size < STATUS_BYTES) return false;
  fprintf(stderr, "\r%s: %s (%llu MB)...\033[K", prog, what, (unsigned long long)st.st_size / 1000000u);
  fflush(stderr);
  return true;
}

static void status_clear(bool shown) { mn__tools_stage_clear(shown); }

/* s[0..len) with every `from` replaced by `to`, malloc'ed (NUL-terminated,
 * *outlen bytes); NULL when out of memory. The importer's messages name the
 * snapshot by the path it was given: an entry keeps PATH_MARK in its place, so
 * a hit under another name says that name. */
#define PATH_MARK "\001"
static char *swap_text(const char *s, size_t len, const char *from, const char *to, size_t *outlen) {
  size_t fl = strlen(from), tl = strlen(to), n = 0, cap = len + 1;
  char *out = mn__malloc(cap);
  for (size_t i = 0; out && i < len;) {
    bool at = fl && i + fl <= len && !memcmp(s + i, from, fl);
    size_t add = at ? tl : 1;
    if (n + add + 1 > cap) {
      cap = 2 * cap + add;
      char *g = mn__realloc(out, cap);
      if (!g) {
        free(out);
        return NULL;
      }
      out = g;
    }
    memcpy(out + n, at ? to : s + i, add);
    n += add;
    i += at ? fl : 1;
  }
  if (!out) return NULL;
  out[n] = '\0';
  *outlen = n;
  return out;
}

/* A hit: the entry's importer messages replayed on stderr and its trace parsed
 * into *out (status: a status_show line to clear first). false (nothing printed,
 * *out untouched) for a missing, stale or damaged entry. */
static bool cache_load(const char *cpath, const char *key, const char *source, mn_trace_t **out, bool status) {
  void *buf = NULL;
  size_t len = 0;
  if (mn__file_read_all("mnemo", cpath, &buf, &len) != MN_OK) {
    mn_clear_error();
    return false;
  }
  char *s = buf, *nl = memchr(s, '\n', len < 256 ? len : 256);
  char head[256], k[64], hex[64];
  unsigned long long elen = 0, tlen = 0;
  int used = 0;
  if (nl) { /* the header line alone, NUL-terminated (the buffer is not) */
    memcpy(head, s, (size_t)(nl - s));
    head[nl - s] = '\0';
  }
  bool ok = nl && sscanf(head, CACHE_MAGIC " %63s %llu %llu %63s%n", k, &elen, &tlen, hex, &used) == 4 &&
            used == nl - s && !strcmp(k, key) && elen <= len && tlen <= len &&
            (size_t)(nl + 1 - s) + elen + tlen == len;
  if (ok) {
    char *err = nl + 1, *text = err + elen, want[33];
    hash_hex(err, elen, text, tlen, want);
    mn_trace_t *t = NULL;
    ok = !strcmp(want, hex) && mn_trace_parse(text, tlen, source, &t) == MN_OK;
    size_t mlen = 0;
    char *msg = ok ? swap_text(err, elen, PATH_MARK, source, &mlen) : NULL;
    ok = ok && msg;
    if (ok) {
      status_clear(status);
      fwrite(msg, 1, mlen, stderr);
      *out = t;
    } else {
      mn_trace_destroy(t); /* parsed, but its messages could not be had (out of memory) */
      mn_clear_error();
    }
    free(msg);
  }
  free(buf);
  return ok;
}

/* Writes an entry (atomically: a reader sees the old one, none, or the whole new
 * one); a failure leaves no entry and is not an error of the command. */
static void cache_store(const char *cpath, const char *key, const char *source, const char *err0, size_t elen0,
                        const char *text, size_t tlen) {
  size_t elen = 0;
  char *err = swap_text(err0, elen0, source, PATH_MARK, &elen);
  if (!err) return;
  elen = keep_stderr(err, elen);
  char hex[33], head[160];
  hash_hex(err, elen, text, tlen, hex);
  int hn = snprintf(head, sizeof head, CACHE_MAGIC " %s %zu %zu %s\n", key, elen, tlen, hex);
  mn__atomic_file_t f;
  if (mn__file_atomic_begin("mnemo", cpath, &f) != MN_OK) {
    mn_clear_error();
    free(err);
    return;
  }
  const char *parts[3] = {head, err, text};
  size_t lens[3] = {(size_t)hn, elen, tlen};
  int werr = 0;
  for (int i = 0; i < 3 && !werr; i++) {
    size_t done = 0;
    while (!werr && done < lens[i]) {
      ssize_t w = write(f.fd, parts[i] + done, lens[i] - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) werr = w < 0 && errno ? errno : EIO;
      else done += (size_t)w;
    }
  }
  if (mn__file_atomic_end(&f, werr) != MN_OK) mn_clear_error();
  free(err);
}

/* Runs the importer as mn__tools_run_script does, its stderr passed through
 * to ours as it comes and also kept in *err (malloc'ed, *elen bytes; NULL when
 * out of memory: then only passed through). */
static int run_importer(const char *prog, const char *script, char *const *args, int nargs, char **err, size_t *elen) {
  *err = NULL;
  *elen = 0;
  char **argv = mn__calloc((size_t)nargs + 3, sizeof *argv);
  int fds[2];
  if (!argv || pipe(fds) != 0) {
    fprintf(stderr, "%s: cannot run python3: %s\n", prog, argv ? strerror(errno) : "out of host memory");
    free(argv);
    return 1;
  }
  argv[0] = "python3";
  argv[1] = (char *)script;
  for (int i = 0; i < nargs; i++) argv[2 + i] = args[i];
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (dup2(fds[1], 2) < 0) _exit(127);
    close(fds[1]);
    execvp("python3", argv);
    fprintf(stderr, "%s: cannot run python3: %s\n", prog, strerror(errno));
    _exit(127);
  }
  free(argv);
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    fprintf(stderr, "%s: cannot run python3: %s\n", prog, strerror(errno));
    return 1;
  }
  size_t cap = 0;
  char chunk[4096], *kept = NULL;
  bool room = true;
  for (;;) {
    ssize_t n = read(fds[0], chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    fwrite(chunk, 1, (size_t)n, stderr);
    fflush(stderr);
    if (room && *elen + (size_t)n > cap) {
      size_t ncap = cap ? cap * 2 : 8192;
      while (ncap < *elen + (size_t)n) ncap *= 2;
      char *g = mn__realloc(kept, ncap);
      if (!g) room = false;
      else kept = g, cap = ncap;
    }
    if (room) memcpy(kept + *elen, chunk, (size_t)n), *elen += (size_t)n;
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (room) *err = kept;
  else free(kept), *elen = 0;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return 1; /* python3 missing: said by the child */
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int mn__tools_trace_load(const char *prog, const char *path, int device, mn_trace_t **out) {
  if (!mn__tools_is_snapshot(path)) {
    bool shown = status_show(prog, "reading the trace", path);
    mn_status st = mn_trace_read(path, out);
    status_clear(shown);
    if (st != MN_OK) {
      fprintf(stderr, "%s: %s\n", prog, mn_last_error());
      return 1;
    }
    return 0;
  }
  char script[PATH_MAX];
  if (!mn__tools_find(MN__TOOLS_SCRIPT, "import_torch_snapshot.py", script, sizeof script)) {
    fprintf(stderr, "%s: cannot find %s (looked in $MNEMO_TOOLS_DIR and next to the executable, first at %s)\n",
            prog, "import_torch_snapshot.py", script);
    return 1;
  }
  /* A PyTorch snapshot: from the cache, or imported into a temporary trace,
   * read, kept in the cache, removed. */
  char cpath[PATH_MAX], key[33];
  bool shown = status_show(prog, "reading the snapshot through the import cache", path);
  bool cached = cache_entry(path, script, device, cpath, sizeof cpath, key);
  bool hit = cached && cache_load(cpath, key, path, out, shown);
  status_clear(shown && !hit);
  if (hit) return 0;
  const char *tmpdir = mn__env(MN__ENV_TMPDIR);
  char tmp[PATH_MAX];
  snprintf(tmp, sizeof tmp, "%s/mnemo-import-XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
  int fd = mkstemp(tmp);
  if (fd < 0) {
    fprintf(stderr, "%s: cannot make a temporary file in %s: %s\n", prog, tmpdir && *tmpdir ? tmpdir : "/tmp",
            strerror(errno));
    return 1;
  }
  close(fd);
  char dev[16];
  if (device == MN__TOOLS_ALL_DEVICES) snprintf(dev, sizeof dev, "all");
  else snprintf(dev, sizeof dev, "%d", device);
  char *args[8] = {(char *)path, "-o", tmp, "--device", dev};
  int nargs = mn__tools_import_args(args, device >= 0 || device == MN__TOOLS_ALL_DEVICES ? 5 : 3);
  if (isatty(2)) args[nargs++] = "--progress";
  char *err = NULL;
  size_t elen = 0;
  int rc = run_importer(prog, script, args, nargs, &err, &elen);
  if (rc == 0) {
    void *text = NULL;
    size_t tlen = 0;
    if (mn__file_read_all("mnemo", tmp, &text, &tlen) != MN_OK || mn_trace_parse(text, tlen, tmp, out) != MN_OK) {
      fprintf(stderr, "%s: reading the imported %s: %s\n", prog, path, mn_last_error());
      rc = 1;
    } else if (cached && err) {
      cache_store(cpath, key, path, err, elen, text, tlen);
    }
    free(text);
  }
  free(err);
  unlink(tmp);
  return rc;
}

bool mn__tools_stage_on(int forced, size_t entries) {
  if (forced >= 0) return forced != 0;
  return isatty(2) && entries >= 100000;
}

static void tools_stage(bool on, const char *prog, const char *fmt, ...) {
  if (!on) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "\r%s: ", prog);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\033[K", stderr);
  fflush(stderr);
}

void mn__tools_stage_clear(bool on) {
  if (!on) return;
  fputs("\r\033[K", stderr);
  fflush(stderr);
}

void mn__tools_print_notes(const char *prog, const char *notes) {
  for (const char *p = notes; p && *p;) {
    size_t n = strcspn(p, "\n");
    if (n) fprintf(stderr, "%s: %.*s\n", prog, (int)n, p);
    p += n + (p[n] == '\n');
  }
}

void mn__tools_stage_fn(void *prog, const char *what) { tools_stage(true, prog, "%s", what); }

int mn__tools_lib_failed(const char *prog, mn_status st) {
  fprintf(stderr, "%s: %s\n", prog, mn__last_error_detail());
  mn_clear_error();
  return st == MN_ERR_INVALID_ARGUMENT ? 2 : 1;
}

int mn__tools_write_page(const char *prog, const char *out, const mn_report_t *r) {
  if (mn__cli_is_stdout(out)) {
    if (fwrite(r->page, 1, r->page_size, stdout) == r->page_size && fflush(stdout) == 0) return 0;
    fprintf(stderr, "%s: writing the page to stdout failed\n", prog);
    return 1;
  }
  if (mn__file_write_atomic(prog, out, r->page, r->page_size) == MN_OK) return 0;
  fprintf(stderr, "%s\n", mn_last_error());
  return 1;
}

const char *mn__tools_recorded_config(const char *prog, const mn_trace_t *t, bool *as_recorded) {
  mn__sbuf_t notes = {0};
  const char *conf = mn__trace_recorded_config(t, &notes, as_recorded);
  if (prog) mn__tools_print_notes(prog, mn__sbuf_str(&notes));
  mn__sbuf_free(&notes);
  return conf;
}

int mn__tools_pick_device(const char *prog, const char *path, const mn_trace_t *t, int want, const char *what,
                          int *index, uint64_t *number, bool *multi) {
  mn__sbuf_t notes = {0};
  mn_status st = mn__trace_pick_device(prog, path, t, want, what, &notes, index, number, multi);
  mn__tools_print_notes(prog, mn__sbuf_str(&notes));
  mn__sbuf_free(&notes);
  return st == MN_OK ? 0 : mn__tools_lib_failed(prog, st); /* no such device: 2 */
}

/* (trace_input.h) */
void mn__tools_json_str(FILE *f, const char *s) {
  mn__sbuf_t b = {0};
  mn__sbuf_json_str(&b, s);
  const char *text = mn__sbuf_str(&b);
  if (text) fputs(text, f);
  else fputs("\"\"", f); /* no host memory left for the escaped text */
  mn__sbuf_free(&b);
}
