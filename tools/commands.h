/* tools/commands.h: the mnemo CLI's commands that live in their own files;
 * each takes the arguments after its name and returns the exit status. */
#ifndef MNEMO_TOOLS_COMMANDS_H
#define MNEMO_TOOLS_COMMANDS_H

/* mnemo replay TRACE [--config ALLOC_CONF]... [--allocator caching|naive]
 *              [--json] [--capacity BYTES] [--no-pre] [--repeat N]  (tools/cmd_replay.c) */
int cmd_replay(int argc, char **argv);
/* The usage lines of `mnemo replay`. */
extern const char cmd_replay_usage[];

/* mnemo report TRACE -o REPORT.html [--config C]... (tools/cmd_report.c) */
int cmd_report(int argc, char **argv);
extern const char cmd_report_usage[];
/* mnemo diff A B [--json] [--top N] [--config C] (tools/cmd_diff.c) */
int cmd_diff(int argc, char **argv);
extern const char cmd_diff_usage[];
/* mnemo report A B -o DIFF.html [--title T] [--config C] [--top N]: the diff as a
 * page; cmd_report hands its arguments over when it is given two inputs. */
int cmd_diff_report(int argc, char **argv);

/* mnemo snapshot FILE [--at peak|end|N] [--config C] [--blocks] [--summary] (tools/cmd_snapshot.c) */
int cmd_snapshot(int argc, char **argv);
extern const char cmd_snapshot_usage[];
/* mnemo import --from rmm|torch INPUT -o TRACE (tools/cmd_snapshot.c) */
int cmd_import(int argc, char **argv);
extern const char cmd_import_usage[];

/* mnemo export --to torch TRACE -o SNAPSHOT.pickle (tools/cmd_snapshot.c) */
int cmd_export(int argc, char **argv);
extern const char cmd_export_usage[];

/* mnemo bench [--device D] [--to D2] [--cases LIST] [--sizes LIST|A..B] [--reps N]
 *             [--min-time S] [--json|--csv] [--plot OUT.svg] (tools/cmd_bench.c) */
int cmd_bench(int argc, char **argv);
extern const char cmd_bench_usage[];

#endif /* MNEMO_TOOLS_COMMANDS_H */
