/* What the command implementations share: the global options, output helpers, and the
 * signature of a command. Only app/ prints for people or exits. */
#ifndef NNLAB_APP_CLI_H
#define NNLAB_APP_CLI_H

#include <signal.h>
#include <stdio.h>

#include "nnlab/error.h"
#include "nnlab/runs.h"
#include "nnlab/store.h"
#include "nnlab/trainer.h"

/* Exit statuses. */
enum { EXIT_OK = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

struct globals {
    const char *db_path; /* NULL: the default */
    int json;            /* stdout carries only JSON objects, one per line */
    int quiet;           /* no progress, no informational lines */
    char **argv;         /* the command's argv as getopt_long sees it, for option_error */
};

extern struct globals g;
extern volatile sig_atomic_t interrupted; /* set by SIGINT/SIGTERM */

struct command {
    const char *name;
    int (*run)(int argc, char **argv); /* argv[0] is the command's name */
    const char *args;                  /* the synopsis after the name */
    const char *summary;
    const char *help; /* the options, one per line, or NULL */
    const char *more; /* a further section of options (train's cluster mode), or NULL */
};

/* Prints "nnlab: MESSAGE" to stderr; returns EXIT_FAIL (EXIT_INTERRUPTED when canceled). */
int fail(const struct nl_error *err);
int failf(const char *fmt, ...) NL_PRINTF(1, 2);
/* Prints a usage error naming the command, with a pointer to its --help; returns EXIT_USAGE. */
int usage_error(const char *cmd, const char *fmt, ...) NL_PRINTF(2, 3);
/* After getopt_long returned '?' (opterr is 0): "unknown option '--foo'" or "option '--lr'
 * needs a value", naming what was typed, as one usage error; returns EXIT_USAGE. */
int option_error(const char *cmd);
/* Prints the command's help to stdout; returns EXIT_OK. */
int command_help(const char *cmd);
void warn_cb(void *ud, const char *msg);

/* Opens the store at --db or the default path. */
int open_store(struct nl_store **out, struct nl_error *err);
/* Opens it for a command that only reads: an existing store, read-only where it is not writable;
 * a missing one is an error and nothing is created. */
int open_store_read(struct nl_store **out, struct nl_error *err);

/* Parsing numbers from options: non-zero on success; errors are reported by the caller. */
int parse_int(const char *s, long lo, long hi, long *out);
int parse_float(const char *s, double lo, double hi, double *out);

/* JSON output: a string with escapes, a number or null for NaN/inf. */
void json_str(FILE *f, const char *s);
void json_num(FILE *f, double v);

/* Training progress for people and scripts: a terminal progress bar, one line per epoch, or
 * JSON lines; what it shows is recorded by the run's session (core/store/session.c). */
struct progress {
    int tty;
    double last_draw;
};
/* The display of a training session's events (nl_session_hooks); non-zero on Ctrl-C. */
int progress_event(void *ud, const struct nl_event *ev);

/* Models for commands (app/cmd_model.c). build_model loads the spec named model (a shipped name
 * or a path), or parses spec_text when given, and builds it for dataset d (its shape, class
 * count, vocabulary and embedded columns: nl_spec_use).
 * load_init loads --init: a .safetensors file, or a run's weights, matched by tensor name. */
struct nl_model;
struct nl_run_info;
struct nl_dataset;
int build_model(struct nl_model **m, const char *model, const char *spec_text,
                const struct nl_dataset *d, struct nl_error *err);
int load_init(struct nl_store *store, struct nl_model *m, const char *init, int partial,
              struct nl_error *err);
/* Cluster options of train (empty when nhosts is 0). */
struct nl_mpi;
struct cluster_args {
    const char *hosts, *hostfile, *ssh_config, *remote_nnlab, *bind;
    int accept_new, port_lo, port_hi, bf16;
    int heartbeat_ms; /* 0: the default */
    int max_restarts; /* < 0: the default */
    int insecure_plaintext;
    int mpi;           /* --mpi: the ranks of an MPI launch are the cluster */
    int mpi_exchange;  /* --mpi-exchange: 0 unset, 1 p2p, 2 collective */
    struct nl_mpi *mp; /* with --mpi, this rank's MPI (rank 0 drives the run) */
};
/* "A-B" with 1 <= A <= B <= 65535: non-zero on success. */
int parse_port_range(const char *s, int *lo, int *hi);

/* The commands. */
int cmd_demo(int argc, char **argv);
int cmd_import(int argc, char **argv);
int cmd_datasets(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_runs(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_summary(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_hosts(int argc, char **argv); /* with NNLAB_HAVE_SSH only */
int cmd_bench(int argc, char **argv);

/* The symbol of a module of this program (app/meson.build): file from beside the program (a
 * build folder), else from NNLAB_MODULE_DIR, loaded now (global: its libraries' symbols shown to
 * the others, as Open MPI's components need). NULL when it cannot be loaded, after saying why on
 * stderr, naming the module as what. */
void *nl_app_module(const char *file, const char *symbol, int global, const char *what);

#endif
