/* tools/cli.h: the mnemo CLI's conventions in one place, below every command:
 * the shape of the command table (name, handler, one-line summary, usage) that
 * drives both dispatch and every usage text (the table itself is tools/mnemo.c's,
 * handed to mn__cli_main), and the one option parser (getopt_long) every
 * subcommand uses.
 *
 * A command declares its options in a table of mn__cli_opt_t (long name, short
 * name, the value's name or none, help) and reads them with mn__cli_next:
 * `--opt value`, `--opt=value`, `-o value`, `-ovalue`, unambiguous prefixes of a
 * long name (getopt_long's rule), options before or after the positional
 * arguments, `--` ending the options. Every command gets `--help`/`-h` (its
 * usage on stdout, exit 0); an unknown option, a missing value or a bad value is
 * "mnemo CMD: what was wrong" plus the usage hint on stderr, exit 2.
 *
 * Exit statuses of every command (`mnemo --help` lists them): 0 success; 1 a
 * failure (I/O, a missing file, device or helper script, a trace or RMM log that
 * does not parse, a replay that failed, out of host memory); 2 bad usage (an
 * unknown option, a missing or bad value or argument; also a malformed PyTorch
 * snapshot, the importer's status).
 *
 * Single-threaded (the CLI's main thread): getopt_long keeps global state. */
#ifndef MNEMO_TOOLS_CLI_H
#define MNEMO_TOOLS_CLI_H

#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

/* One option of a command. The table ends with an entry whose name is NULL. */
typedef struct mn__cli_opt_s {
  const char *name;   /* long name, without the "--" */
  char short_name;    /* e.g. 'o' for -o; 0: none */
  const char *value;  /* the value's name in the usage (e.g. "BYTES"); NULL: a flag, no value */
  int id;             /* > 0: what mn__cli_next returns for it */
  const char *help;   /* what it does (wrapped by the usage printer) */
} mn__cli_opt_t;

/* One command: a row of the command table (tools/mnemo.c). */
typedef struct mn__cli_cmd_s {
  const char *name;
  int (*run)(int argc, char **argv); /* argv[0]: the command's name; returns the exit status */
  const char *args;                  /* the positional arguments in the synopsis ("TRACE"), "" for none */
  const char *summary;               /* one line for `mnemo --help` */
  const char *about;                 /* `mnemo CMD --help`'s description, lines as written */
  const mn__cli_opt_t *opts;         /* its options (--help comes with every command) */
} mn__cli_cmd_t;

#define MN__CLI_MAX_OPTS 40

/* The state of one command's parse. */
typedef struct mn__cli_s {
  const mn__cli_cmd_t *cmd;
  char prog[48]; /* "mnemo CMD", the prefix of every message */
  int argc;
  char **argv;
  const mn__cli_opt_t *opt; /* the option mn__cli_next returned last */
  char **args;              /* the positional arguments, once mn__cli_next returned 0 */
  int nargs;
  int rc; /* the exit status when mn__cli_next returned -1 */
  struct option longopts[MN__CLI_MAX_OPTS + 2];
  char shortopts[3 * MN__CLI_MAX_OPTS + 4];
} mn__cli_t;

/* Starts parsing argv[1..argc) for the command argv[0] (a name of the table
 * mn__cli_main was given). */
void mn__cli_begin(mn__cli_t *p, int argc, char **argv);

/* The next option: its id (> 0) with *value its value (NULL for a flag); 0 when
 * the options are done (the positional arguments in p->args, p->nargs); -1 when
 * the command must stop and exit with p->rc: 0 after --help printed the usage on
 * stdout, 2 after an unknown option or a missing value was reported on stderr. */
int mn__cli_next(mn__cli_t *p, const char **value);

/* Reports a usage error: "mnemo CMD: <message>" and the usage hint on stderr;
 * returns 2, the exit status. */
int mn__cli_error(const mn__cli_t *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Checks the number of positional arguments: at least lo, at most hi; else a
 * usage error naming what is missing (`what`, e.g. "a trace") or the first extra
 * argument. 0 when they fit, else 2. */
int mn__cli_want_args(const mn__cli_t *p, int lo, int hi, const char *what);

/* Parses an integer option value in [lo, hi]; 0, or a usage error (2) naming
 * the current option. */
int mn__cli_int(const mn__cli_t *p, const char *value, long lo, long hi, long *out);

/* Parses a byte-count option value (a count, or with K/M/G/T: mn_bytes_parse)
 * of at least 1; 0, or a usage error (2) naming the current option. */
int mn__cli_bytes(const mn__cli_t *p, const char *value, size_t *out);

/* Whether an output path means the standard output ("-"). */
bool mn__cli_is_stdout(const char *path);

/* The whole tool: `mnemo CMD args...` through `commands` (the table, in the
 * order `mnemo --help` lists them, ended by a NULL name; kept for the run),
 * `mnemo --help`, `mnemo help [CMD]`, `mnemo --version`; returns the exit status. */
int mn__cli_main(const mn__cli_cmd_t *commands, int argc, char **argv);

#endif /* MNEMO_TOOLS_CLI_H */
