/* Following the store while other processes write it (the Runs page's list, the Train page's
 * offer of a run trained elsewhere): the store's runs are read in a worker thread, on a read-only
 * connection of its own, into a job of the page's, which comes back on the main loop. */
#ifndef NNLAB_UI_STORE_POLL_H
#define NNLAB_UI_STORE_POLL_H

#include <gio/gio.h>

#include "nnlab/runs.h"
#include "nnlab/store.h"

/* Reads what the page wants into job: s is open, runs (nruns of them, oldest first) listed.
 * Called in the worker thread: no GTK. */
typedef void (*StorePollRead)(struct nl_store *s, const struct nl_run_info *runs, int nruns,
                              gpointer job);

/* Opens the store at db_path read-only in a worker thread and calls read on its runs (not when the
 * store cannot be read or listed), then done(source, result, NULL) on the main loop, where
 * store_poll_job(result) gives job back; job is freed with free_job after done. */
void store_poll(gpointer source, const char *db_path, StorePollRead read, gpointer job,
                GDestroyNotify free_job, GAsyncReadyCallback done);

gpointer store_poll_job(GAsyncResult *result);

#endif
