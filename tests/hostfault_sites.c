/* tests/hostfault_sites.c: finds the host allocation sites of the library by
 * reading its sources (tests/hostfault_sites.h): a small C lexer that skips
 * comments, strings and character constants, follows #if/#ifdef/#ifndef/
 * #elif/#else/#endif for the build switches it knows (MNEMO_HAVE_CUDA,
 * MNEMO_KERNEL_EMU, 0 and 1; any other condition keeps both branches), and
 * records every call of the hostmem.h entry points (and of macros defined over
 * them), plus every direct call of libc's allocating functions. Single-threaded. */
#include "hostfault_sites.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_seam[] = {"mn__malloc", "mn__calloc", "mn__realloc", "mn__aligned_alloc", "mn__strdup"};
/* libc (and POSIX/GNU) calls that hand back heap memory the caller frees
 * (realpath only with a NULL buffer: left out) */
static const char *const k_libc[] = {"malloc",   "calloc",         "realloc",         "reallocarray", "aligned_alloc",
                                     "posix_memalign", "memalign", "valloc",          "pvalloc",      "strdup",
                                     "strndup",  "asprintf",       "vasprintf",       "getline",      "getdelim",
                                     "open_memstream", "open_wmemstream", "wcsdup",   "tempnam",      "scandir",
                                     "get_current_dir_name"};

#define MAX_WRAP 64
static char g_wrap[MAX_WRAP][64]; /* macros whose body calls an entry point */
static int g_nwrap;

static bool in_list(const char *id, size_t n, const char *const *list) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(id, list[i]) == 0) return true;
  return false;
}

static bool is_entry(const char *id) {
  if (in_list(id, sizeof k_seam / sizeof k_seam[0], k_seam)) return true;
  for (int i = 0; i < g_nwrap; i++)
    if (strcmp(id, g_wrap[i]) == 0) return true;
  return false;
}

static bool id_start(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool id_char(int c) { return id_start(c) || (c >= '0' && c <= '9'); }

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap + 1);
  for (size_t got; b && (got = fread(b + n, 1, cap - n, f)) > 0;) {
    n += got;
    if (n == cap) {
      char *nb = realloc(b, 2 * cap + 1);
      if (!nb) {
        free(b);
        b = NULL;
        break;
      }
      b = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (b) b[n] = 0;
  *len = n;
  return b;
}

/* ---- conditional compilation ---- */

/* One #if's state in a build: the current branch's value (1 taken, 0 not,
 * -1 not known: kept), whether a branch was taken, whether a condition was
 * not known. */
typedef struct cond_state {
  int value;
  bool any, unknown;
} cond_state;

typedef struct cond_frame {
  cond_state here;   /* in this build */
  cond_state nocuda; /* in this build without MNEMO_HAVE_CUDA */
  char why[320];     /* the directive that decided `here.value`, for a 0 */
  char open[200];    /* the #if that opened it, as written */
} cond_frame;

typedef struct scan_ctx {
  bool have_cuda, kernel_emu;
  cond_frame stack[64];
  int depth;
} scan_ctx;

/* The value of a condition over the switches this scan knows, or -1. */
static int eval_cond(bool have_cuda, bool kernel_emu, const char *text) {
  char t[200];
  size_t n = 0;
  for (const char *p = text; *p && n + 1 < sizeof t; p++)
    if (*p != ' ' && *p != '\t') t[n++] = *p;
  t[n] = 0;
  bool neg = false;
  const char *p = t;
  if (*p == '!') {
    neg = true;
    p++;
  }
  char name[100];
  if (strncmp(p, "defined(", 8) == 0) {
    size_t k = strcspn(p + 8, ")");
    if (p[8 + k] != ')' || p[9 + k] != 0 || k >= sizeof name) return -1;
    memcpy(name, p + 8, k);
    name[k] = 0;
  } else if (strncmp(p, "defined", 7) == 0) {
    snprintf(name, sizeof name, "%.99s", p + 7);
  } else {
    snprintf(name, sizeof name, "%.99s", p);
  }
  int v;
  if (strcmp(name, "MNEMO_HAVE_CUDA") == 0) v = have_cuda;
  else if (strcmp(name, "MNEMO_KERNEL_EMU") == 0) v = kernel_emu;
  else if (strcmp(name, "0") == 0 && !neg && p == t) v = 0;
  else if (strcmp(name, "1") == 0 && !neg && p == t) v = 1;
  else return -1;
  return neg ? !v : v;
}

static void cond_open(cond_state *s, int v) {
  *s = (cond_state){.value = v, .any = v == 1, .unknown = v < 0};
}

/* #elif (e: its condition's value) or #else (e: 1). */
static void cond_next(cond_state *s, int e) {
  int v = s->any ? 0 : e;
  if (!s->any && e < 0) s->unknown = true;
  if (s->unknown && v == 0 && !s->any) v = -1;
  s->value = v;
  if (v == 1) s->any = true;
}

/* Why the current line is compiled out, or NULL when it is compiled (or may be). */
static const char *excluded(const scan_ctx *c) {
  for (int i = 0; i < c->depth; i++)
    if (c->stack[i].here.value == 0) return c->stack[i].why;
  return NULL;
}

/* Whether the current line is compiled only because this build has MNEMO_HAVE_CUDA. */
static bool cuda_only(const scan_ctx *c) {
  for (int i = 0; i < c->depth; i++)
    if (c->stack[i].here.value != 0 && c->stack[i].nocuda.value == 0) return true;
  return false;
}

/* ---- the scan of one file ---- */

typedef struct file_scan {
  const char *rel; /* "folder/file.c" */
  bool compiled;   /* among this build's libmnemo sources (or a header in a layer folder) */
  const char *not_compiled_why;
  bool is_hostmem; /* runtime/hostmem.[ch]: the seam's own definitions */
} file_scan;

static bool add_site(hf_scan *out, int *cap, const file_scan *f, int line, int line_end, const char *why) {
  if (out->nsites == *cap) {
    int nc = *cap ? 2 * *cap : 256;
    hf_site *ns = realloc(out->sites, (size_t)nc * sizeof *ns);
    if (!ns) return false;
    out->sites = ns;
    *cap = nc;
  }
  hf_site *s = &out->sites[out->nsites++];
  memset(s, 0, sizeof *s);
  snprintf(s->file, sizeof s->file, "%s", f->rel);
  s->line = line;
  s->line_end = line_end;
  s->counted = why == NULL;
  if (why) snprintf(s->why, sizeof s->why, "%s", why);
  return true;
}

static bool add_libc(hf_scan *out, int *cap, const char *rel, int line, const char *name) {
  if (out->nlibc == *cap) {
    int nc = *cap ? 2 * *cap : 16;
    char(*nl)[200] = realloc(out->libc, (size_t)nc * sizeof *nl);
    if (!nl) return false;
    out->libc = nl;
    *cap = nc;
  }
  snprintf(out->libc[out->nlibc++], sizeof out->libc[0], "%s:%d: %s()", rel, line, name);
  return true;
}

/* The line of the ')' closing the '(' at b[i] (counting lines from `line`). */
static int close_line(const char *b, size_t n, size_t i, int line) {
  int depth = 0;
  for (; i < n; i++) {
    char c = b[i];
    if (c == '\n') line++;
    else if (c == '(') depth++;
    else if (c == ')' && --depth == 0) return line;
    else if (c == '"' || c == '\'') {
      for (i++; i < n && b[i] != c; i++)
        if (b[i] == '\\') i++;
    }
  }
  return line;
}

/* Pass 1 (`collect`): notes the macros defined over an entry point. Pass 2:
 * records the sites and the direct libc calls. */
static bool scan_text(const char *b, size_t n, const file_scan *f, bool collect, hf_scan *out, int *site_cap,
                      int *libc_cap, bool have_cuda, bool kernel_emu) {
  scan_ctx c = {.have_cuda = have_cuda, .kernel_emu = kernel_emu};
  int line = 1;
  bool line_start = true;
  char prev_tok = 0; /* the last non-space character before an identifier */
  for (size_t i = 0; i < n;) {
    char ch = b[i];
    if (ch == '\n') {
      line++;
      line_start = true;
      i++;
      continue;
    }
    if (ch == ' ' || ch == '\t' || ch == '\r' || ch == '\f') {
      i++;
      continue;
    }
    if (ch == '/' && i + 1 < n && b[i + 1] == '/') {
      while (i < n && b[i] != '\n') i++;
      continue;
    }
    if (ch == '/' && i + 1 < n && b[i + 1] == '*') {
      for (i += 2; i + 1 < n && !(b[i] == '*' && b[i + 1] == '/'); i++)
        if (b[i] == '\n') line++;
      i += 2;
      continue;
    }
    if (ch == '#' && line_start) { /* a directive: to the end of its logical line */
      char d[4096];
      size_t k = 0;
      for (i++; i < n && b[i] != '\n'; i++) {
        if (b[i] == '\\' && i + 1 < n && b[i + 1] == '\n') {
          i++;
          line++;
          continue;
        }
        if (b[i] == '/' && i + 1 < n && b[i + 1] == '*') { /* a comment inside it */
          for (i += 2; i + 1 < n && !(b[i] == '*' && b[i + 1] == '/'); i++)
            if (b[i] == '\n') line++;
          i++;
          continue;
        }
        if (b[i] == '/' && i + 1 < n && b[i + 1] == '/') {
          while (i < n && b[i] != '\n') i++;
          break;
        }
        if (k + 1 < sizeof d) d[k++] = b[i];
      }
      d[k] = 0;
      const char *p = d;
      while (*p == ' ' || *p == '\t') p++;
      char word[16] = {0};
      size_t w = 0;
      while (id_char((unsigned char)*p) && w + 1 < sizeof word) word[w++] = *p++;
      while (*p == ' ' || *p == '\t') p++;
      int dline = line;
      if (strcmp(word, "if") == 0 || strcmp(word, "ifdef") == 0 || strcmp(word, "ifndef") == 0) {
        if (c.depth == 64) {
          fprintf(stderr, "%s:%d: #if nested too deep for the scan\n", f->rel, dline);
          return false;
        }
        char cond[220];
        if (strcmp(word, "if") == 0) snprintf(cond, sizeof cond, "%.200s", p);
        else snprintf(cond, sizeof cond, "%sdefined(%.*s)", word[2] == 'n' ? "!" : "", (int)strcspn(p, " \t"), p);
        cond_frame *fr = &c.stack[c.depth++];
        cond_open(&fr->here, eval_cond(have_cuda, kernel_emu, cond));
        cond_open(&fr->nocuda, eval_cond(false, kernel_emu, cond));
        snprintf(fr->why, sizeof fr->why, "compiled out here: `#%s %.60s` (%s:%d) is false in this build", word, p,
                 f->rel, dline);
        snprintf(fr->open, sizeof fr->open, "#%s %.60s` (line %d", word, p, dline);
      } else if ((strcmp(word, "elif") == 0 || strcmp(word, "else") == 0) && c.depth > 0) {
        cond_frame *fr = &c.stack[c.depth - 1];
        bool els = strcmp(word, "else") == 0;
        cond_next(&fr->here, els ? 1 : eval_cond(have_cuda, kernel_emu, p));
        cond_next(&fr->nocuda, els ? 1 : eval_cond(false, kernel_emu, p));
        if (els) {
          char why[sizeof fr->why + sizeof fr->open];
          snprintf(why, sizeof why, "compiled out here: the #else (%s:%d) of `%s), true in this build", f->rel, dline,
                   fr->open);
          snprintf(fr->why, sizeof fr->why, "%.319s", why);
        } else {
          snprintf(fr->why, sizeof fr->why, "compiled out here: `#elif %.60s` (%s:%d) is not taken in this build", p,
                   f->rel, dline);
        }
      } else if (strcmp(word, "endif") == 0 && c.depth > 0) {
        c.depth--;
      } else if (strcmp(word, "define") == 0 && collect) {
        char name[64];
        size_t m = 0;
        while (id_char((unsigned char)*p) && m + 1 < sizeof name) name[m++] = *p++;
        name[m] = 0;
        for (size_t s = 0; s < sizeof k_seam / sizeof k_seam[0]; s++) {
          const char *hit = strstr(p, k_seam[s]);
          if (hit && !id_char((unsigned char)hit[strlen(k_seam[s])]) && m && !is_entry(name) && g_nwrap < MAX_WRAP) {
            snprintf(g_wrap[g_nwrap++], sizeof g_wrap[0], "%s", name);
            break;
          }
        }
      }
      line_start = false;
      continue;
    }
    line_start = false;
    if (ch == '"' || ch == '\'') {
      for (i++; i < n && b[i] != ch && b[i] != '\n'; i++)
        if (b[i] == '\\') i++;
      i++;
      prev_tok = ch;
      continue;
    }
    if (id_start((unsigned char)ch)) {
      size_t s = i;
      while (i < n && id_char((unsigned char)b[i])) i++;
      char id[64];
      size_t len = i - s < sizeof id - 1 ? i - s : sizeof id - 1;
      memcpy(id, b + s, len);
      id[len] = 0;
      size_t j = i;
      while (j < n && (b[j] == ' ' || b[j] == '\t' || b[j] == '\n' || b[j] == '\r')) j++;
      bool call = j < n && b[j] == '(';
      bool member = prev_tok == '.' || prev_tok == '>'; /* a.f( or a->f( */
      if (!collect && call && !member && !f->is_hostmem) {
        if (is_entry(id)) {
          const char *why = NULL;
          char because[240];
          if (!f->compiled) {
            why = f->not_compiled_why;
          } else if ((why = excluded(&c)) != NULL) {
          } else if (cuda_only(&c)) {
            snprintf(because, sizeof because,
                     "CUDA code (under MNEMO_HAVE_CUDA): the sweep drives the CPU and SIM devices only");
            why = because;
          }
          if (!add_site(out, site_cap, f, line, close_line(b, n, j, line), why)) return false;
        } else if (in_list(id, sizeof k_libc / sizeof k_libc[0], k_libc)) { /* compiled here or not */
          if (!add_libc(out, libc_cap, f->rel, line, id)) return false;
        }
      }
      prev_tok = 'a';
      continue;
    }
    prev_tok = ch;
    i++;
  }
  return true;
}

/* ---- the folders ---- */

static bool listed(const char *compiled_list, const char *abs) {
  size_t n = strlen(abs);
  for (const char *p = compiled_list; (p = strstr(p, abs)) != NULL; p += n)
    if ((p == compiled_list || p[-1] == '\n') && (p[n] == '\n' || p[n] == 0)) return true;
  return false;
}

static int name_cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

typedef struct folder_job {
  const char *source_dir, *folder, *compiled_list;
  bool layer;
} folder_job;

static bool scan_folder(const folder_job *job, bool collect, hf_scan *out, int *site_cap, int *libc_cap,
                        bool have_cuda, bool kernel_emu) {
  char dir[700];
  snprintf(dir, sizeof dir, "%s/%s", job->source_dir, job->folder);
  DIR *d = opendir(dir);
  if (!d) {
    if (!job->layer) return true; /* an optional module's folder may be absent */
    fprintf(stderr, "cannot read the library folder %s\n", dir);
    return false;
  }
  char *names[1024];
  int nn = 0;
  for (struct dirent *e; (e = readdir(d)) != NULL && nn < 1024;) {
    const char *dot = strrchr(e->d_name, '.');
    if (!dot || e->d_name[0] == '.') continue;
    if (strcmp(dot, ".c") && strcmp(dot, ".h") && strcmp(dot, ".cu") && strcmp(dot, ".cuh") && strcmp(dot, ".cpp"))
      continue;
    names[nn++] = strdup(e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)nn, sizeof names[0], name_cmp);
  bool ok = true;
  for (int i = 0; i < nn && ok; i++) {
    char abs[1000], rel[96], why[300];
    snprintf(abs, sizeof abs, "%s/%s", dir, names[i]);
    snprintf(rel, sizeof rel, "%s/%s", job->folder, names[i]);
    const char *dot = strrchr(names[i], '.');
    bool header = strcmp(dot, ".h") == 0 || strcmp(dot, ".cuh") == 0;
    file_scan f = {.rel = rel, .is_hostmem = strcmp(rel, "runtime/hostmem.c") == 0 ||
                                            strcmp(rel, "runtime/hostmem.h") == 0};
    if (!job->layer) {
      snprintf(why, sizeof why, "%s/ is not a libmnemo layer (an optional module the sweep's program does not link)",
               job->folder);
      f.not_compiled_why = why;
    } else if (header) {
      f.compiled = true; /* counted where a compiled file includes it: the scan takes every header of a layer */
    } else if (!(f.compiled = listed(job->compiled_list, abs))) {
      snprintf(why, sizeof why, "%s is not among this build's libmnemo sources%s", rel,
               strcmp(dot, ".cu") == 0 ? " (CUDA kernels: a CUDA or kernel-emulation build)" : "");
      f.not_compiled_why = why;
    }
    size_t len = 0;
    char *text = read_file(abs, &len);
    if (!text) {
      fprintf(stderr, "cannot read %s\n", abs);
      ok = false;
    } else {
      if (!collect) out->nfiles++;
      ok = scan_text(text, len, &f, collect, out, site_cap, libc_cap, have_cuda, kernel_emu);
      free(text);
    }
  }
  for (int i = 0; i < nn; i++) free(names[i]);
  return ok;
}

bool hf_scan_sources(const char *source_dir, const char *layers, const char *extra, const char *compiled,
                     bool have_cuda, bool kernel_emu, hf_scan *out) {
  memset(out, 0, sizeof *out);
  g_nwrap = 0;
  size_t clen = 0;
  char *compiled_list = read_file(compiled, &clen);
  if (!compiled_list) {
    fprintf(stderr, "cannot read the build's source list %s\n", compiled);
    return false;
  }
  folder_job jobs[32];
  int nj = 0;
  for (int pass = 0; pass < 2; pass++) {
    const char *list = pass ? extra : layers;
    for (const char *p = list; *p && nj < 32;) {
      size_t k = strcspn(p, " ;");
      if (k) {
        char *name = malloc(k + 1);
        if (!name) break;
        memcpy(name, p, k);
        name[k] = 0;
        jobs[nj++] = (folder_job){source_dir, name, compiled_list, pass == 0};
      }
      p += k;
      while (*p == ' ' || *p == ';') p++;
    }
  }
  int site_cap = 0, libc_cap = 0;
  bool ok = true;
  for (int collect = 1; collect >= 0 && ok; collect--)
    for (int j = 0; j < nj && ok; j++)
      ok = scan_folder(&jobs[j], collect, out, &site_cap, &libc_cap, have_cuda, kernel_emu);
  for (int j = 0; j < nj; j++) free((char *)jobs[j].folder);
  free(compiled_list);
  if (ok && out->nfiles == 0) {
    fprintf(stderr, "no library sources under %s\n", source_dir);
    ok = false;
  }
  return ok;
}

void hf_scan_free(hf_scan *s) {
  free(s->sites);
  free(s->libc);
  memset(s, 0, sizeof *s);
}

bool hf_scan_mark(hf_scan *s, const char *where) {
  const char *colon = strrchr(where, ':');
  if (!colon) return false;
  int line = atoi(colon + 1);
  size_t flen = (size_t)(colon - where);
  bool found = false;
  for (int i = 0; i < s->nsites; i++) {
    hf_site *t = &s->sites[i];
    if (strlen(t->file) == flen && strncmp(t->file, where, flen) == 0 && (t->line == line || t->line_end == line)) {
      t->reached = true;
      found = true;
    }
  }
  return found;
}
