/* tools/commands.h: the mnemo CLI's commands. Each takes its arguments with
 * argv[0] its own name (getopt_long's convention), parses them with the shared
 * parser (tools/cli.h) against its option table, and returns the exit status;
 * the command table (tools/mnemo.c) names each with its summary, description
 * (cmd_X_about) and options (cmd_X_opts). Single-threaded (the CLI's main thread). */
#ifndef MNEMO_TOOLS_COMMANDS_H
#define MNEMO_TOOLS_COMMANDS_H

#include "cli.h"
#include "mnemo/mnemo.h"

#define MN__CLI_COMMAND(x)                    \
  int cmd_##x(int argc, char **argv);         \
  extern const char cmd_##x##_about[];        \
  extern const mn__cli_opt_t cmd_##x##_opts[];

/* mnemo info | demo | version (tools/mnemo.c) */
MN__CLI_COMMAND(info)
MN__CLI_COMMAND(demo)
MN__CLI_COMMAND(version)
/* mnemo replay TRACE [--config ALLOC_CONF]... (tools/cmd_replay.c) */
MN__CLI_COMMAND(replay)
/* mnemo report TRACE -o REPORT.html [--config C]... (tools/cmd_report.c) */
MN__CLI_COMMAND(report)
/* mnemo diff A B [--json] [--top N] [--config C] (tools/cmd_diff.c) */
MN__CLI_COMMAND(diff)
/* mnemo snapshot FILE [--at peak|end|N] [--config C] [--blocks] (tools/cmd_snapshot.c) */
MN__CLI_COMMAND(snapshot)
/* mnemo import --from rmm|torch INPUT -o TRACE (tools/cmd_snapshot.c) */
MN__CLI_COMMAND(import)
/* mnemo export --to torch TRACE -o SNAPSHOT.pickle (tools/cmd_snapshot.c) */
MN__CLI_COMMAND(export)
/* mnemo bench [--device D] [--to D2] [--cases LIST] ... (tools/cmd_bench.c) */
MN__CLI_COMMAND(bench)

#undef MN__CLI_COMMAND

/* `mnemo report A B -o DIFF.html`: cmd_report hands two inputs over to the diff
 * (tools/cmd_diff.c) with what it parsed (p: its parse, for messages; config
 * NULL: each replayed as recorded; out "-": stdout; trace_device -1: each one's
 * lowest; json: the summary as `diff --json`'s object with the page's "path"
 * and "bytes"). Returns the exit status. */
int cmd_diff_page(const mn__cli_t *p, const char *a, const char *b, const char *out, const char *title,
                  const char *config, int trace_device, bool json);

#endif /* MNEMO_TOOLS_COMMANDS_H */
