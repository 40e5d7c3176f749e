/* The SQLite store: one database file holds datasets and their samples, runs, per-epoch metrics
 * and checkpoints. The schema and its version live at the top of core/store/store.c. */
#ifndef NNLAB_STORE_H
#define NNLAB_STORE_H

#include <stddef.h>

#include "nnlab/error.h"

struct nl_store;

/* Opens (creating it, its parent directories and the schema when missing) the database at path,
 * in WAL mode with foreign keys on. A database of a newer schema version is refused. */
int nl_store_open(struct nl_store **out, const char *path, struct nl_error *err);
/* Opens an existing database for a command that only reads: a path with no file is refused
 * ("there is no store here yet") and nothing is created; a file or folder this process may not
 * write (a read-only mount, another user's store) is opened read-only, and then every write is
 * refused with an error naming the file. */
int nl_store_open_read(struct nl_store **out, const char *path, struct nl_error *err);
/* Gives the pages that removals freed back to the file system (stores created since incremental
 * vacuum was added); *unused is what stays free inside the file (older stores keep their size:
 * VACUUM reclaims it). */
int nl_store_reclaim(struct nl_store *s, long long *unused, struct nl_error *err);
/* For a training session, which reads its dataset once and then only writes (metrics, and
 * checkpoints in place): SQLite's page cache shrinks to a few hundred KiB, and the pages it held
 * (the dataset's, 2 MiB) go back to the system. */
int nl_store_lean_cache(struct nl_store *s, struct nl_error *err);
/* Whether the store was opened read-only. */
int nl_store_readonly(const struct nl_store *s);
void nl_store_close(struct nl_store *s);
const char *nl_store_path(const struct nl_store *s);

/* Writes the default database path, $XDG_DATA_HOME/nnlab/nnlab.db (XDG_DATA_HOME defaulting to
 * $HOME/.local/share), into buf. */
int nl_store_default_path(char *buf, size_t size, struct nl_error *err);

#endif
