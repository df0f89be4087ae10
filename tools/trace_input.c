/* tools/trace_input.c: reads a trace or a PyTorch snapshot (imported on the fly),
 * gives the recorded allocator settings, finds the CLI's scripts and sample
 * traces relative to the executable, and writes JSON strings for every command's
 * output. Single-threaded (the CLI's main thread). */
#include "trace_input.h"
#include "stacks.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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
  char **argv = calloc((size_t)nargs + 3, sizeof *argv);
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

int mn__tools_trace_load(const char *prog, const char *path, int device, mn_trace_t **out) {
  if (!mn__tools_is_snapshot(path)) {
    if (mn_trace_read(path, out) != MN_OK) {
      fprintf(stderr, "%s: %s\n", prog, mn_last_error());
      return 1;
    }
    return 0;
  }
  /* A PyTorch snapshot: import it into a temporary trace, read that, remove it. */
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
  char *args[7] = {(char *)path, "-o", tmp, "--device", dev};
  int nargs = mn__tools_import_args(args, device >= 0 || device == MN__TOOLS_ALL_DEVICES ? 5 : 3);
  int rc = mn__tools_run_script(prog, "import_torch_snapshot.py", args, nargs);
  if (rc == 0 && mn_trace_read(tmp, out) != MN_OK) {
    fprintf(stderr, "%s: reading the imported %s: %s\n", prog, path, mn_last_error());
    rc = 1;
  }
  unlink(tmp);
  return rc;
}

const char *mn__tools_recorded_config(const char *prog, const mn_trace_t *t, bool *as_recorded) {
  const char *conf = mn_trace_meta_get(t, "config");
  *as_recorded = false;
  if (!conf) return "";
  mn_caching_config_t cfg = mn_caching_config_default();
  if (mn_caching_config_parse(conf, &cfg) != MN_OK) {
    if (prog) fprintf(stderr, "%s: warning: the trace's recorded settings \"%s\" are not mnemo's (%s); replaying with the defaults\n",
                      prog, conf, mn_last_error());
    mn_clear_error();
    return "";
  }
  *as_recorded = true;
  return conf;
}

#define RECORDED_ROUND 512u /* PyTorch's block rounding (kMinBlockSize) */

uint64_t mn__tools_recorded_block(const mn_trace_entry_t *e) {
  if (e->block_size) return e->block_size;
  uint64_t n = e->size;
  return n > UINT64_MAX - RECORDED_ROUND ? n : (n + RECORDED_ROUND - 1) / RECORDED_ROUND * RECORDED_ROUND;
}

static const mn_trace_t *g_sort_trace; /* for cmp_entry_size (the CLI is single-threaded) */
static int cmp_entry_size(const void *a, const void *b) {
  const mn_trace_entry_t *x = &g_sort_trace->entries[*(const size_t *)a];
  const mn_trace_entry_t *y = &g_sort_trace->entries[*(const size_t *)b];
  if (x->size != y->size) return x->size < y->size ? 1 : -1;
  return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

void mn__tools_sort_by_size(const mn_trace_t *t, size_t *idx, size_t n) {
  g_sort_trace = t;
  qsort(idx, n, sizeof *idx, cmp_entry_size);
}

static int cmp_holder_key(const void *a, const void *b) {
  const mn__tools_holder_t *x = a, *y = b;
  if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  return x->stack < y->stack ? -1 : x->stack > y->stack;
}

static int cmp_holder_bytes(const void *a, const void *b) {
  const mn__tools_holder_t *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  return cmp_holder_key(a, b);
}

uint64_t mn__tools_sat_add_u64(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

bool mn__tools_holders(const mn_trace_t *t, size_t *live, size_t n, mn__tools_holder_t **groups, size_t *ngroups) {
  mn__tools_holder_t *g = malloc((n ? n : 1) * sizeof *g);
  if (!g) return false;
  mn__tools_sort_by_size(t, live, n);
  for (size_t k = 0; k < n; k++) {
    const mn_trace_entry_t *e = &t->entries[live[k]];
    g[k] = (mn__tools_holder_t){e->stack, e->stack ? 0 : e->pre ? 1 : 2, 1, e->size,
                                mn__tools_recorded_block(e), 0, e->stack ? 1 : 0};
  }
  qsort(g, n, sizeof *g, cmp_holder_key);
  size_t m = 0;
  for (size_t k = 0; k < n; k++) {
    if (m && !cmp_holder_key(&g[m - 1], &g[k])) {
      g[m - 1].count++;
      g[m - 1].bytes = mn__tools_sat_add_u64(g[m - 1].bytes, g[k].bytes);
      g[m - 1].block_bytes = mn__tools_sat_add_u64(g[m - 1].block_bytes, g[k].block_bytes);
    } else {
      g[m++] = g[k];
    }
  }
  for (size_t k = 0; k < m; k++) g[k].key = mn__tools_stack_key(t, g[k].stack);
  qsort(g, m, sizeof *g, cmp_holder_bytes);
  *groups = g;
  *ngroups = m;
  return true;
}

/* By first user frame; a stack without one is its own group (then by stack id). */
static int cmp_holder_user_key(const void *a, const void *b) {
  const mn__tools_holder_t *x = a, *y = b;
  if (x->kind != y->kind) return x->kind < y->kind ? -1 : 1;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return x->key ? 0 : x->stack < y->stack ? -1 : x->stack > y->stack;
}

static int cmp_holder_user_bytes(const void *a, const void *b) {
  const mn__tools_holder_t *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes < y->bytes ? 1 : -1;
  int c = cmp_holder_user_key(a, b);
  return c ? c : x->stack < y->stack ? -1 : x->stack > y->stack;
}

/* By key, the most bytes first within one (so a group's first member is its largest stack). */
static int cmp_holder_key_then_bytes(const void *a, const void *b) {
  int c = cmp_holder_user_key(a, b);
  return c ? c : cmp_holder_user_bytes(a, b);
}

void mn__tools_holders_by_key(mn__tools_holder_t *g, size_t *ngroups) {
  size_t n = *ngroups, m = 0;
  qsort(g, n, sizeof *g, cmp_holder_key_then_bytes);
  for (size_t k = 0; k < n; k++) {
    if (m && !cmp_holder_user_key(&g[m - 1], &g[k])) {
      g[m - 1].count += g[k].count;
      g[m - 1].nstacks += g[k].nstacks;
      g[m - 1].bytes = mn__tools_sat_add_u64(g[m - 1].bytes, g[k].bytes);
      g[m - 1].block_bytes = mn__tools_sat_add_u64(g[m - 1].block_bytes, g[k].block_bytes);
    } else {
      g[m++] = g[k];
    }
  }
  qsort(g, m, sizeof *g, cmp_holder_user_bytes);
  *ngroups = m;
}

/* (trace_input.h) */
void mn__tools_json_str(FILE *f, const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  fputc('"', f);
  while (*p) {
    unsigned char c = *p;
    if (c == '"' || c == '\\') {
      fprintf(f, "\\%c", c);
    } else if (c == '<') {
      fputs("\\u003c", f);
    } else if (c < 0x20 || c == 0x7f) {
      fprintf(f, "\\u%04x", c);
    } else if (c < 0x80) {
      fputc(c, f);
    } else {
      size_t len = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
      size_t k = 1;
      while (len && k < len && (p[k] & 0xc0) == 0x80) k++;
      if (!len || k < len || (c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0) ||
          (c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90)) {
        fputs("\\ufffd", f);
        p++;
        continue;
      }
      fwrite(p, 1, len, f);
      p += len;
      continue;
    }
    p++;
  }
  fputc('"', f);
}
