/* The Train page's Check Hosts (train.check-hosts): nl_host_check for each host of the Hosts
 * field on a worker thread, with the form's SSH options; what each host has is listed under the
 * hosts, a line each. The same lines also say a cluster run's per-worker totals and its
 * recoveries (train-page-job.c, train-page-charts.c). */
#include "nnlab-config.h"
#include "nnlab/alloc.h"
#if NNLAB_HAVE_SSH
#include "nnlab/driver.h"
#endif
#include "train-page-private.h"

struct host_result {
    char name[256];
    int rc;
    char msg[512];
#if NNLAB_HAVE_SSH
    struct nl_host_report r;
#endif
};

/* Owned by its GTask. */
struct check_job {
    struct cluster_opts cl;
    guint generation;
    struct host_result *res;
    int n;
    struct nl_error err; /* the host list's own mistake */
};

static void check_job_free(gpointer data)
{
    struct check_job *c = data;
    cluster_opts_clear(&c->cl);
    g_free(c->res);
    g_free(c);
}

static void check_thread(GTask *task, gpointer source, gpointer data, GCancellable *cancel)
{
    struct check_job *c = data;
#if NNLAB_HAVE_SSH
    struct nl_host *hosts = NULL;
    if (nl_hosts_parse(c->cl.hosts, &hosts, &c->n, &c->err) == 0) {
        struct nl_ssh_opts so = {.config = c->cl.ssh_config,
                                 .accept_new = c->cl.accept_new,
                                 .remote_nnlab = c->cl.remote_nnlab,
                                 .version = "nnlab " NNLAB_VERSION,
                                 .timeout_ms = 15000};
        c->res = g_new0(struct host_result, (size_t)c->n);
        for (int i = 0; i < c->n; i++) {
            struct nl_error err = {0};
            g_strlcpy(c->res[i].name, hosts[i].name, sizeof c->res[i].name);
            c->res[i].rc = nl_host_check(&hosts[i], &so, &c->res[i].r, &err);
            g_strlcpy(c->res[i].msg, err.msg, sizeof c->res[i].msg);
        }
        nl_free(hosts);
    }
#else
    nl_error_set(&c->err, NL_EINVAL, "this nnlab was built without cluster mode (libssh)");
#endif
    g_task_return_boolean(task, TRUE);
}

void train_report_line(NlTrainPage *p, const char *text, gboolean error)
{
    GtkWidget *l = gtk_label_new(text);
    gtk_label_set_xalign(GTK_LABEL(l), 0);
    gtk_label_set_wrap(GTK_LABEL(l), TRUE);
    gtk_label_set_selectable(GTK_LABEL(l), TRUE);
    gtk_label_set_max_width_chars(GTK_LABEL(l), 36);
    gtk_widget_add_css_class(l, "caption");
    if (error)
        gtk_widget_add_css_class(l, "nl-error");
    gtk_box_append(GTK_BOX(p->host_report), l);
    g_string_append(p->report_text, text);
    g_string_append_c(p->report_text, '\n');
}

void train_report_clear(NlTrainPage *p)
{
    GtkWidget *child;
    while ((child = gtk_widget_get_first_child(p->host_report)))
        gtk_box_remove(GTK_BOX(p->host_report), child);
    g_string_truncate(p->report_text, 0);
}

/* The task's source object is the page (a reference while the check runs). */
static void check_done(GObject *source, GAsyncResult *res, gpointer data)
{
    NlTrainPage *p = NL_TRAIN_PAGE(source);
    struct check_job *c = g_task_get_task_data(G_TASK(res));
    if (p->disposed || c->generation != p->check_generation)
        return;
    p->checking = FALSE;
    gtk_widget_set_sensitive(p->check_hosts, TRUE);
    train_report_clear(p);
    if (!c->res)
        train_report_line(p, c->err.msg, TRUE);
    for (int i = 0; c->res && i < c->n; i++) {
        const struct host_result *h = &c->res[i];
        char *t;
        if (h->rc < 0) {
            t = g_strdup_printf("✗ %s", h->msg);
        } else {
#if NNLAB_HAVE_SSH
            const struct nl_host_report *r = &h->r;
            t = g_strdup_printf(
                "✓ %s (%s@%s:%d): %s · %d cores · %.1f GiB · %s", h->name, r->user, r->address,
                r->port, r->remote_version[0] ? r->remote_version : "no nnlab", r->cores,
                r->mem_kb / 1048576.0, r->would_upload ? "this nnlab would be uploaded" : "ready");
#else
            t = g_strdup(h->name);
#endif
        }
        train_report_line(p, t, h->rc < 0);
        g_free(t);
    }
    p->checks_done++;
}

void train_hosts_check(GtkWidget *widget, const char *action, GVariant *param)
{
    NlTrainPage *p = NL_TRAIN_PAGE(widget);
    struct check_job *c = g_new0(struct check_job, 1);
    train_form_cluster(p, &c->cl);
    train_report_clear(p);
    if (!c->cl.hosts) {
        train_report_line(p, "Name the hosts first (e.g. node1:4,node2:4); empty trains here.",
                          TRUE);
        check_job_free(c);
        p->checks_done++;
        return;
    }
    c->generation = ++p->check_generation;
    p->checking = TRUE;
    gtk_widget_set_sensitive(p->check_hosts, FALSE);
    char *t = g_strdup_printf("Connecting to %s…", c->cl.hosts);
    train_report_line(p, t, FALSE);
    g_free(t);
    GTask *task = g_task_new(p, NULL, check_done, NULL);
    g_task_set_task_data(task, c, check_job_free);
    g_task_run_in_thread(task, check_thread);
    g_object_unref(task);
}

void train_page_hosts_report(NlTrainPage *p, int *checks_done, const char **text)
{
    *checks_done = p->checks_done;
    *text = p->report_text->str;
}
