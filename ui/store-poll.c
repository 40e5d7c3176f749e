/* Reading the store's runs off the main loop for the pages that follow it (store-poll.h). */
#include "store-poll.h"

#include "nnlab/alloc.h"

struct store_poll {
    char *db_path;
    StorePollRead read;
    gpointer job;
    GDestroyNotify free_job;
};

static void store_poll_free(gpointer data)
{
    struct store_poll *sp = data;
    g_free(sp->db_path);
    if (sp->free_job)
        sp->free_job(sp->job);
    g_free(sp);
}

static void store_poll_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancel)
{
    struct store_poll *sp = data;
    struct nl_store *s = NULL;
    struct nl_run_info *runs = NULL;
    struct nl_error err = {0};
    int n = 0;
    if (nl_store_open_read(&s, sp->db_path, &err) == 0 && nl_run_list(s, &runs, &n, &err) == 0)
        sp->read(s, runs, n, sp->job);
    nl_free(runs);
    nl_store_close(s);
    g_task_return_boolean(task, TRUE);
}

void store_poll(gpointer source, const char *db_path, StorePollRead read, gpointer job,
                GDestroyNotify free_job, GAsyncReadyCallback done)
{
    struct store_poll *sp = g_new0(struct store_poll, 1);
    sp->db_path = g_strdup(db_path);
    sp->read = read;
    sp->job = job;
    sp->free_job = free_job;
    GTask *task = g_task_new(source, NULL, done, NULL);
    g_task_set_task_data(task, sp, store_poll_free);
    g_task_run_in_thread(task, store_poll_thread);
    g_object_unref(task);
}

gpointer store_poll_job(GAsyncResult *result)
{
    const struct store_poll *sp = g_task_get_task_data(G_TASK(result));
    return sp->job;
}
