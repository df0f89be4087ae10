/* tests/hostfault_sites.h: the host allocation sites present in the library's
 * sources, found by reading them (not a kept list), for the host-fault sweep
 * (test_hostfault.c) to count the sites it reached against. Single-threaded. */
#ifndef MNEMO_TESTS_HOSTFAULT_SITES_H
#define MNEMO_TESTS_HOSTFAULT_SITES_H

#include <stdbool.h>

typedef struct hf_site {
  char file[96]; /* "folder/file.c", as runtime/hostmem.c names a site */
  int line;      /* the line of the call's name (GCC's __LINE__ in a macro call) */
  int line_end;  /* the line of its closing parenthesis (clang's) */
  bool counted;  /* compiled into this build's libmnemo, so the sweep must reach it */
  char why[400]; /* when not counted: why, as the scan found it */
  bool reached;
} hf_site;

typedef struct hf_scan {
  hf_site *sites;
  int nsites;
  /* direct libc allocations outside runtime/hostmem.c, in any scanned file
   * and any branch ("folder/file.c:line: name()") */
  char (*libc)[200];
  int nlibc;
  int nfiles;
} hf_scan;

/* Scans the library folders under `source_dir` (`layers`: the libmnemo layer
 * folders, space-separated; `extra`: folders of optional modules outside
 * libmnemo) for calls of mn__malloc, mn__calloc, mn__realloc,
 * mn__aligned_alloc and mn__strdup (and of macros that wrap them, counted at
 * their call sites), skipping comments, strings and the definitions in
 * runtime/hostmem.*. `compiled` (a file of absolute paths, one a line) lists
 * the sources this build compiles into libmnemo; a site in another .c/.cu file,
 * or in a region `#if`'d out for this build (MNEMO_HAVE_CUDA, MNEMO_KERNEL_EMU,
 * `#if 0`), is not counted, and why is said. A site in CUDA code of a CUDA
 * build is not counted either: the sweep drives CPU and SIM devices. False with
 * a message on stderr when the sources cannot be read. */
bool hf_scan_sources(const char *source_dir, const char *layers, const char *extra, const char *compiled,
                     bool have_cuda, bool kernel_emu, hf_scan *out);
void hf_scan_free(hf_scan *s);
/* Marks the site `where` ("folder/file.c:line", runtime/hostmem.h's form)
 * reached; false when no scanned site is there. */
bool hf_scan_mark(hf_scan *s, const char *where);

#endif
