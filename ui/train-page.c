/* The Train page as a widget (NlTrainPage): its template, its actions and their shortcuts, its
 * lifetime, and what the window asks of it. The form, Check Hosts, the running job and the charts
 * live in train-page-form.c, train-page-hosts.c, train-page-job.c, train-page-watch.c and
 * train-page-charts.c (train-page-private.h says what they share).
 *
 * The shortcuts (Ctrl+Return, Ctrl+., Ctrl+Shift+H) are declared on the class like every page's
 * (nl_page_class_add_shortcut) and work wherever the focus is in the window (window.c). */
#include "train-page-private.h"

G_DEFINE_FINAL_TYPE(NlTrainPage, nl_train_page, GTK_TYPE_WIDGET)

void train_page_dataset_changed(NlTrainPage *p)
{
    const struct nl_dataset *d = p->win->data;
    if (!p->job && !p->watched && !p->watched_last) {
        char *t = d ? g_strdup_printf("%s · %u training samples, %u validation", d->name,
                                      d->split[NL_TRAIN].n, d->split[NL_VAL].n)
                    : g_strdup("Select a dataset on the Datasets page first.");
        gtk_label_set_text(GTK_LABEL(p->what), t);
        g_free(t);
        train_charts_rate_title(p, FALSE);
    }
    train_form_update(p);
}

static void page_mapped(GtkWidget *w, gpointer data)
{
    NlTrainPage *p = NL_TRAIN_PAGE(w);
    if (!p->job)
        train_page_dataset_changed(p);
    train_watch_update_offer(p);
}

static void page_unmapped(GtkWidget *w, gpointer data)
{
    train_watch_update_offer(NL_TRAIN_PAGE(w));
}

const char *train_page_start_reason(NlTrainPage *p)
{
    return gtk_widget_get_visible(p->start_reason) ? gtk_label_get_text(GTK_LABEL(p->start_reason))
                                                   : NULL;
}

void train_page_form(NlTrainPage *p, int *epochs, const char **hosts, const char **name)
{
    *epochs = (int)gtk_adjustment_get_value(p->adj[SPIN_EPOCHS]);
    *hosts = gtk_editable_get_text(GTK_EDITABLE(p->hosts));
    *name = gtk_editable_get_text(GTK_EDITABLE(p->run_name));
}

NlTrainPage *train_page_new(NlWindow *w)
{
    NlTrainPage *p = g_object_ref_sink(g_object_new(NL_TYPE_TRAIN_PAGE, NULL));
    p->win = w;
    train_page_dataset_changed(p);
    return p;
}

static void nl_train_page_init(NlTrainPage *p)
{
    gtk_widget_init_template(GTK_WIDGET(p));
    p->report_text = g_string_new(NULL);
    train_form_init(p);
    train_charts_init(p);
    g_signal_connect(p, "map", G_CALLBACK(page_mapped), NULL);
    g_signal_connect(p, "unmap", G_CALLBACK(page_unmapped), NULL);
}

static void nl_train_page_dispose(GObject *obj)
{
    NlTrainPage *p = NL_TRAIN_PAGE(obj);
    p->disposed = TRUE;
    train_page_stop_and_wait(p);
    train_charts_update_tick(p);
    train_watch_release(p);
    gtk_widget_dispose_template(GTK_WIDGET(p), NL_TYPE_TRAIN_PAGE);
    G_OBJECT_CLASS(nl_train_page_parent_class)->dispose(obj);
}

static void nl_train_page_finalize(GObject *obj)
{
    NlTrainPage *p = NL_TRAIN_PAGE(obj);
    train_charts_release(p);
    train_form_release(p);
    g_free(p->watched_last);
    g_free(p->watch_status);
    g_string_free(p->report_text, TRUE);
    G_OBJECT_CLASS(nl_train_page_parent_class)->finalize(obj);
}

static void nl_train_page_class_init(NlTrainPageClass *klass)
{
    GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
    G_OBJECT_CLASS(klass)->dispose = nl_train_page_dispose;
    G_OBJECT_CLASS(klass)->finalize = nl_train_page_finalize;
    gtk_widget_class_set_layout_manager_type(wc, GTK_TYPE_BIN_LAYOUT);
    gtk_widget_class_set_template_from_resource(wc, "/org/nnlab/Nnlab/train-page.ui");
#define CHILD(x) gtk_widget_class_bind_template_child(wc, NlTrainPage, x)
    CHILD(page);
    CHILD(what);
    CHILD(form);
    CHILD(where);
    CHILD(start);
    CHILD(stop);
    CHILD(start_reason);
    CHILD(charts);
    CHILD(progress);
    CHILD(stat_epoch);
    CHILD(stat_loss);
    CHILD(stat_acc);
    CHILD(stat_ips);
    CHILD(stat_ips_title);
    CHILD(stat_eta);
    CHILD(loss_chart);
    CHILD(acc_chart);
    CHILD(ips_chart);
    CHILD(optim);
    CHILD(schedule);
    CHILD(run_name);
    CHILD(cluster_form);
    CHILD(hosts);
    CHILD(ssh_config);
    CHILD(remote_nnlab);
    CHILD(accept_new);
    CHILD(bf16);
    CHILD(check_hosts);
    CHILD(host_report);
    CHILD(elsewhere);
    CHILD(elsewhere_label);
    CHILD(watch);
#undef CHILD
    /* The number fields and their adjustments, by their ids in train-page.ui. */
    static const char *const spins[NSPINS][2] = {
        {"epochs", "epochs_adj"},       {"batch", "batch_adj"},          {"lr", "lr_adj"},
        {"momentum", "momentum_adj"},   {"threads", "threads_adj"},      {"seed", "seed_adj"},
        {"heartbeat", "heartbeat_adj"}, {"max_restarts", "restarts_adj"}};
    for (int i = 0; i < NSPINS; i++) {
        gtk_widget_class_bind_template_child_full(wc, spins[i][0], FALSE,
                                                  G_STRUCT_OFFSET(NlTrainPage, spins) +
                                                      (gssize)(i * sizeof(GtkWidget *)));
        gtk_widget_class_bind_template_child_full(wc, spins[i][1], FALSE,
                                                  G_STRUCT_OFFSET(NlTrainPage, adj) +
                                                      (gssize)(i * sizeof(GtkAdjustment *)));
    }
    gtk_widget_class_install_action(wc, "train.start", NULL, train_job_start);
    gtk_widget_class_install_action(wc, "train.stop", NULL, train_job_stop);
    gtk_widget_class_install_action(wc, "train.check-hosts", NULL, train_hosts_check);
    gtk_widget_class_install_action(wc, "train.option", "(ss)", train_form_option);
    gtk_widget_class_install_action(wc, "train.watch", "s", train_watch_action);
    nl_page_class_set_info(wc, "train", "Train", "media-playback-start-symbolic");
    nl_page_class_add_shortcut(wc, "<Control>Return", "train.start");
    nl_page_class_add_shortcut(wc, "<Control>period", "train.stop");
    nl_page_class_add_shortcut(wc, "<Control><Shift>h", "train.check-hosts");
}
