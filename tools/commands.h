/* tools/commands.h: the mnemo CLI's commands that live in their own files;
 * each takes the arguments after its name and returns the exit status. */
#ifndef MNEMO_TOOLS_COMMANDS_H
#define MNEMO_TOOLS_COMMANDS_H

/* mnemo replay TRACE [--config ALLOC_CONF]... [--allocator caching|naive]
 *              [--json] [--capacity BYTES] [--no-pre] [--repeat N]  (tools/cmd_replay.c) */
int cmd_replay(int argc, char **argv);
/* The usage lines of `mnemo replay`. */
extern const char cmd_replay_usage[];

#endif /* MNEMO_TOOLS_COMMANDS_H */
