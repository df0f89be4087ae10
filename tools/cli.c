/* tools/cli.c: the mnemo CLI's conventions, below every command: dispatch and
 * usage from the command table it is given (tools/mnemo.c holds it), its one
 * option parser over getopt_long, and the usage printer; the contract is in
 * tools/cli.h. Single-threaded (the CLI's main thread): getopt_long keeps
 * global state, reset at every mn__cli_begin, and the table mn__cli_main was
 * given is kept for the run. */
#include "cli.h"

#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mnemo/mnemo.h"

/* The command table of this run (mn__cli_main's), ended by a NULL name. */
static const mn__cli_cmd_t *g_commands;

static const char exit_statuses[] =
    "exit status (every command):\n"
    "  0  success\n"
    "  1  a failure: an I/O error; a file, device or helper (python3, a script)\n"
    "     missing; a trace or RMM log that does not parse; a replay or benchmark\n"
    "     that failed; out of host memory\n"
    "  2  bad usage: an unknown command or option, a missing or bad value, a\n"
    "     missing argument; also a PyTorch snapshot the importer finds malformed\n";

static const mn__cli_cmd_t *find_cmd(const char *name) {
  for (const mn__cli_cmd_t *c = g_commands; c && c->name; c++)
    if (!strcmp(c->name, name)) return c;
  return NULL;
}

static void top_usage(FILE *f) {
  fprintf(f, "usage: mnemo COMMAND [options] [arguments]\n"
             "       mnemo COMMAND --help     the command's usage and options\n"
             "       mnemo --help | --version\n"
             "commands:\n");
  for (const mn__cli_cmd_t *c = g_commands; c->name; c++) fprintf(f, "  %-9s %s\n", c->name, c->summary);
  fprintf(f, "options of every command: --opt VALUE or --opt=VALUE; -h, --help prints its usage;\n"
             "-o - writes the output to stdout; an unknown option or a missing value is an error (2).\n"
             "%s",
          exit_statuses);
}

static void synopsis(const mn__cli_cmd_t *cmd, FILE *f) {
  fprintf(f, "usage: mnemo %s%s%s%s\n", cmd->name, cmd->args[0] ? " " : "", cmd->args,
          cmd->opts && cmd->opts[0].name ? " [options]" : "");
}

/* Writes text wrapped at `width` columns, continuation lines indented by `indent`. */
static void wrap(FILE *f, const char *text, int col, int indent, int width) {
  const char *p = text;
  while (*p) {
    while (*p == ' ') p++;
    const char *w = p;
    while (*p && *p != ' ' && *p != '\n') p++;
    int len = (int)(p - w);
    if (len == 0) {
      if (*p == '\n') {
        fprintf(f, "\n%*s", indent, "");
        col = indent;
        p++;
      }
      continue;
    }
    if (col > indent && col + 1 + len > width) {
      fprintf(f, "\n%*s", indent, "");
      col = indent;
    } else if (col > indent) {
      fputc(' ', f);
      col++;
    }
    fwrite(w, 1, (size_t)len, f);
    col += len;
  }
  fputc('\n', f);
}

#define HELP_COL 28

static void print_opt(FILE *f, char short_name, const char *name, const char *value, const char *help) {
  char label[96];
  int n = short_name ? snprintf(label, sizeof label, "  -%c, --%s", short_name, name)
                     : snprintf(label, sizeof label, "      --%s", name);
  if (value && n > 0 && (size_t)n < sizeof label) snprintf(label + n, sizeof label - (size_t)n, " %s", value);
  fputs(label, f);
  int col = (int)strlen(label);
  if (col + 2 > HELP_COL) {
    fprintf(f, "\n%*s", HELP_COL, "");
  } else {
    fprintf(f, "%*s", HELP_COL - col, "");
  }
  wrap(f, help, HELP_COL, HELP_COL, 79);
}

/* The usage of one command (synopsis, description, options) to f. */
static void cli_usage(const mn__cli_cmd_t *cmd, FILE *f) {
  synopsis(cmd, f);
  fprintf(f, "%s\n", cmd->summary);
  if (cmd->about && cmd->about[0]) fprintf(f, "\n%s", cmd->about);
  fprintf(f, "\noptions:\n");
  for (const mn__cli_opt_t *o = cmd->opts; o && o->name; o++) print_opt(f, o->short_name, o->name, o->value, o->help);
  print_opt(f, 'h', "help", NULL, "print this usage on stdout and exit 0");
  fprintf(f, "\nexit status: 0 success, 1 failure, 2 bad usage (`mnemo --help` says more)\n");
}

/* One line, starting "usage:" (python/mnemo/profiling.py leaves such lines out of its errors). */
static void hint(const mn__cli_t *p) {
  const mn__cli_cmd_t *cmd = p->cmd;
  fprintf(stderr, "usage: mnemo %s%s%s%s  (`mnemo %s --help` lists the options)\n", cmd->name,
          cmd->args[0] ? " " : "", cmd->args, cmd->opts && cmd->opts[0].name ? " [options]" : "", cmd->name);
}

int mn__cli_error(const mn__cli_t *p, const char *fmt, ...) {
  fflush(stdout);
  fprintf(stderr, "%s: ", p->prog);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  hint(p);
  return 2;
}

void mn__cli_begin(mn__cli_t *p, int argc, char **argv) {
  memset(p, 0, sizeof *p);
  p->cmd = find_cmd(argv[0]);
  if (!p->cmd) abort(); /* a handler not in the table: a bug of the CLI itself */
  snprintf(p->prog, sizeof p->prog, "mnemo %s", p->cmd->name);
  p->argc = argc;
  p->argv = argv;
  size_t n = 0, s = 0;
  p->shortopts[s++] = ':'; /* ':' for a missing value, '?' for an unknown option */
  for (const mn__cli_opt_t *o = p->cmd->opts; o && o->name; o++, n++) {
    if (n >= MN__CLI_MAX_OPTS) abort(); /* a table too long for MN__CLI_MAX_OPTS: a bug of the CLI */
    p->longopts[n] = (struct option){o->name, o->value ? required_argument : no_argument, NULL, 256 + (int)n};
    if (o->short_name) {
      p->shortopts[s++] = o->short_name;
      if (o->value) p->shortopts[s++] = ':';
    }
  }
  p->longopts[n++] = (struct option){"help", no_argument, NULL, 'h'};
  p->longopts[n] = (struct option){NULL, 0, NULL, 0};
  p->shortopts[s++] = 'h';
  p->shortopts[s] = '\0';
  optind = 0; /* glibc: a full reinitialization (the demo parses twice) */
  opterr = 0;
}

/* The table entry of a getopt_long return value (256 + index, or a short name). */
static const mn__cli_opt_t *opt_of(const mn__cli_t *p, int c) {
  if (c >= 256) return &p->cmd->opts[c - 256];
  for (const mn__cli_opt_t *o = p->cmd->opts; o && o->name; o++)
    if (o->short_name == c) return o;
  return NULL;
}

/* "--name" or "-c" of an option, for messages. */
static const char *opt_text(const mn__cli_opt_t *o, char *buf, size_t n) {
  if (o->name) snprintf(buf, n, "--%s", o->name);
  else snprintf(buf, n, "-%c", o->short_name);
  return buf;
}

/* An unknown or ambiguous long option: say which. */
static int bad_long(mn__cli_t *p, const char *arg) {
  const char *name = arg + 2, *eq = strchr(name, '=');
  size_t len = eq ? (size_t)(eq - name) : strlen(name);
  char names[512] = "";
  size_t used = 0, matches = 0;
  for (const mn__cli_opt_t *o = p->cmd->opts; o && o->name; o++)
    if (len && !strncmp(o->name, name, len)) {
      matches++;
      int k = snprintf(names + used, sizeof names - used, "%s--%s", used ? ", " : "", o->name);
      if (k > 0 && used + (size_t)k < sizeof names) used += (size_t)k;
    }
  if (matches > 1) return mn__cli_error(p, "ambiguous option \"%.*s\" (%s)", (int)(len + 2), arg, names);
  return mn__cli_error(p, "unknown option \"%.*s\"", (int)(len + 2), arg);
}

int mn__cli_next(mn__cli_t *p, const char **value) {
  *value = NULL;
  int c = getopt_long(p->argc, p->argv, p->shortopts, p->longopts, NULL);
  char buf[64];
  if (c == -1) {
    p->args = p->argv + optind;
    p->nargs = p->argc - optind;
    return 0;
  }
  p->rc = 2;
  if (c == 'h') {
    cli_usage(p->cmd, stdout);
    p->rc = 0;
    return -1;
  }
  if (c == ':') { /* named as written: -o, --output or a prefix of it */
    const mn__cli_opt_t *o = opt_of(p, optopt);
    const char *arg = optind > 0 && optind <= p->argc ? p->argv[optind - 1] : "";
    mn__cli_error(p, "%s needs a value (%s)", arg[0] == '-' ? arg : o ? opt_text(o, buf, sizeof buf) : "an option",
                  o ? o->value : "?");
    return -1;
  }
  if (c == '?') {
    const mn__cli_opt_t *o = optopt >= 256 ? opt_of(p, optopt) : NULL;
    const char *arg = optind > 0 && optind <= p->argc ? p->argv[optind - 1] : "";
    if (o || (optopt == 'h' && !strncmp(arg, "--", 2))) /* a flag given a value: --json=1 */
      mn__cli_error(p, "%s takes no value (\"%s\")", o ? opt_text(o, buf, sizeof buf) : "--help", arg);
    else if (optopt) mn__cli_error(p, "unknown option \"-%c\"", optopt);
    else if (!strncmp(arg, "--", 2)) bad_long(p, arg);
    else mn__cli_error(p, "unknown option \"%s\"", arg);
    return -1;
  }
  p->opt = opt_of(p, c);
  if (!p->opt) { /* not reached: getopt_long returns only what the table gave it */
    mn__cli_error(p, "unknown option");
    return -1;
  }
  p->rc = 0;
  *value = p->opt->value ? optarg : NULL;
  return p->opt->id;
}

int mn__cli_want_args(const mn__cli_t *p, int lo, int hi, const char *what) {
  if (p->nargs < lo) return mn__cli_error(p, "missing %s", what);
  if (p->nargs > hi) {
    if (hi == 0) return mn__cli_error(p, "unexpected argument \"%s\" (this command takes none)", p->args[0]);
    return mn__cli_error(p, "unexpected argument \"%s\" (one %s at a time; got \"%s\" first)", p->args[hi], what,
                         p->args[0]);
  }
  return 0;
}

int mn__cli_int(const mn__cli_t *p, const char *value, long lo, long hi, long *out) {
  char *end = NULL, buf[64];
  long n = strtol(value, &end, 10);
  if (!*value || *end || n < lo || n > hi)
    return mn__cli_error(p, "%s must be %ld..%ld, not \"%s\"", p->opt ? opt_text(p->opt, buf, sizeof buf) : "a value",
                         lo, hi, value);
  *out = n;
  return 0;
}

int mn__cli_bytes(const mn__cli_t *p, const char *value, size_t *out) {
  char buf[64];
  size_t n = 0;
  if (mn_bytes_parse(value, &n) != MN_OK || n == 0) {
    mn_clear_error();
    return mn__cli_error(p, "%s \"%s\" is not a byte count (e.g. 85899345920 or 80G)",
                         p->opt ? opt_text(p->opt, buf, sizeof buf) : "the value", value);
  }
  *out = n;
  return 0;
}

bool mn__cli_is_stdout(const char *path) { return path && !strcmp(path, "-"); }

int mn__cli_main(const mn__cli_cmd_t *commands, int argc, char **argv) {
  g_commands = commands;
  if (argc < 2) {
    top_usage(stderr);
    return 2;
  }
  const char *name = argv[1];
  if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
    if (argc > 3) {
      fprintf(stderr, "mnemo %s: one command name at most (got \"%s\" and \"%s\")\n", name, argv[2], argv[3]);
      return 2;
    }
    if (argc == 3) {
      const mn__cli_cmd_t *c = find_cmd(argv[2]);
      if (!c) {
        fprintf(stderr, "mnemo %s: unknown command \"%s\" (`mnemo --help` lists the commands)\n", name, argv[2]);
        return 2;
      }
      cli_usage(c, stdout);
      return 0;
    }
    top_usage(stdout);
    return 0;
  }
  if (!strcmp(name, "--version")) name = "version";
  const mn__cli_cmd_t *c = find_cmd(name);
  if (!c) {
    fprintf(stderr, "mnemo: unknown %s \"%s\" (`mnemo --help` lists the commands)\n",
            name[0] == '-' ? "option" : "command", name);
    return 2;
  }
  argv[1] = (char *)c->name;
  return c->run(argc - 1, argv + 1);
}
