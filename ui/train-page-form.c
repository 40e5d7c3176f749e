/* The Train page's form: the run's settings, where it trains, and what Start may do.
 *
 * Start and Stop stay in view under the form. Why Start is refused (no dataset, the model's
 * error, a run name that exists, with the next free one) shows above them, checked before
 * anything of the last run's view is cleared; number fields refuse text that is not a number or
 * is out of range (the field keeps its value, is marked, and the reason shows there too). A
 * change of optimizer brings its default learning rate, as the command line does when --lr is
 * not given. train.option sets any field by key, for tests and scripts. */
#include <math.h>
#include <string.h>

#include "core/formats/json.h"
#include "nnlab-config.h"
#include "nnlab/alloc.h"
#if NNLAB_HAVE_SSH
#include "nnlab/driver.h"
#endif
#include "nnlab/runs.h"
#include "train-page-private.h"

/* The number fields' names in messages, in the order of the SPIN_ enum. */
static const char *const field_names[NSPINS] = {
    "Epochs",  "Batch", "Learning rate",     "Momentum",
    "Threads", "Seed",  "Heartbeat timeout", "Max restarts"};

/* The optimizer list is in the order of enum nl_optim_kind. */
static enum nl_optim_kind selected_optim(NlTrainPage *p)
{
    guint i = gtk_drop_down_get_selected(GTK_DROP_DOWN(p->optim));
    return i <= NL_OPTIM_ADAGRAD ? (enum nl_optim_kind)i : NL_OPTIM_SGD;
}

static gboolean takes_momentum(enum nl_optim_kind kind)
{
    return kind == NL_OPTIM_SGD || kind == NL_OPTIM_RMSPROP;
}

static double value(NlTrainPage *p, int field)
{
    return gtk_adjustment_get_value(p->adj[field]);
}

char *train_form_hosts(NlTrainPage *p)
{
    const char *t = gtk_editable_get_text(GTK_EDITABLE(p->hosts));
    char **parts = g_strsplit_set(t, ", \t\n", -1);
    GString *s = g_string_new(NULL);
    for (int i = 0; parts[i]; i++) {
        if (!parts[i][0])
            continue;
        if (s->len)
            g_string_append_c(s, ',');
        g_string_append(s, parts[i]);
    }
    g_strfreev(parts);
    if (s->len == 0) {
        g_string_free(s, TRUE);
        return NULL;
    }
    return g_string_free(s, FALSE);
}

static char *entry_or_null(GtkWidget *e)
{
    const char *t = gtk_editable_get_text(GTK_EDITABLE(e));
    char *s = g_strstrip(g_strdup(t));
    if (!s[0]) {
        g_free(s);
        return NULL;
    }
    /* ~/ as a shell would say it. */
    if (s[0] == '~' && s[1] == '/') {
        char *full = g_build_filename(g_get_home_dir(), s + 2, NULL);
        g_free(s);
        return full;
    }
    return s;
}

void cluster_opts_clear(struct cluster_opts *c)
{
    g_free(c->hosts);
    g_free(c->ssh_config);
    g_free(c->remote_nnlab);
    memset(c, 0, sizeof *c);
}

void train_form_cluster(NlTrainPage *p, struct cluster_opts *c)
{
    c->hosts = train_form_hosts(p);
    c->ssh_config = entry_or_null(p->ssh_config);
    c->remote_nnlab = entry_or_null(p->remote_nnlab);
    c->accept_new = gtk_check_button_get_active(GTK_CHECK_BUTTON(p->accept_new));
    c->bf16 = gtk_check_button_get_active(GTK_CHECK_BUTTON(p->bf16));
    c->heartbeat_s = (int)value(p, SPIN_HEARTBEAT);
    c->max_restarts = (int)value(p, SPIN_RESTARTS);
}

int train_hosts_valid(const char *hosts, struct nl_error *err)
{
#if NNLAB_HAVE_SSH
    struct nl_host *list = NULL;
    int n = 0;
    int rc = nl_hosts_parse(hosts, &list, &n, err);
    nl_free(list);
    return rc;
#else
    (void)hosts;
    return nl_error_set(err, NL_EINVAL, "this nnlab was built without cluster mode (libssh)");
#endif
}

void train_form_options(NlTrainPage *p, struct nl_train_opts *o)
{
    nl_train_defaults(o);
    o->epochs = (int)value(p, SPIN_EPOCHS);
    o->batch = (int)value(p, SPIN_BATCH);
    o->threads = (int)value(p, SPIN_THREADS);
    o->seed = (uint64_t)value(p, SPIN_SEED);
    nl_optim_defaults(&o->optim, selected_optim(p));
    o->optim.lr = (float)value(p, SPIN_LR);
    if (takes_momentum(o->optim.kind))
        o->optim.momentum = (float)value(p, SPIN_MOMENTUM);
    /* The list reads cosine, constant, plateau: each is a schedule's own text. */
    static const char *const schedules[] = {"cosine", "constant", "plateau"};
    guint sched = gtk_drop_down_get_selected(GTK_DROP_DOWN(p->schedule));
    nl_schedule_parse(&o->schedule, schedules[sched < 3 ? sched : 0], NULL);
}

/* The next run name after NAME that no run has: NAME-2, NAME-3, … (NAME-7 goes on to NAME-8). */
static char *free_run_name(struct nl_store *s, const char *name)
{
    const char *dash = strrchr(name, '-');
    char *end = NULL;
    long n = dash && dash[1] ? strtol(dash + 1, &end, 10) : 0;
    gboolean numbered = end && !*end && n > 0 && n < 1000000;
    char *base = numbered ? g_strndup(name, (gsize)(dash - name)) : g_strdup(name);
    char *next = NULL;
    for (long i = numbered ? n + 1 : 2;; i++) {
        next = g_strdup_printf("%s-%ld", base, i);
        struct nl_run_info info;
        struct nl_error err = {0};
        if (nl_run_get(s, next, &info, NULL, NULL, &err) < 0)
            break;
        g_free(next);
    }
    g_free(base);
    return next;
}

char *train_form_refusal(NlTrainPage *p)
{
    if (p->job)
        return NULL;
    if (!p->win->data)
        return g_strdup("No dataset: import or select one on the Datasets page.");
    if (!p->win->model || !model_page_valid(p->win->model))
        return g_strdup("The model has an error: fix it on the Model page.");
    const char *name = gtk_editable_get_text(GTK_EDITABLE(p->run_name));
    if (name[0] && p->win->store) {
        struct nl_run_info info;
        struct nl_error err = {0};
        if (nl_run_get(p->win->store, name, &info, NULL, NULL, &err) == 0) {
            char *next = free_run_name(p->win->store, name);
            char *t = g_strdup_printf(
                "A run named “%s” exists: choose another name, such as “%s”, or clear the "
                "field for an automatic one.",
                name, next);
            g_free(next);
            return t;
        }
    }
    return NULL;
}

void train_form_update(NlTrainPage *p)
{
    gboolean running = p->job != NULL;
    char *why = train_form_refusal(p);
    gboolean can = !running && !why;
    /* A refused number is said until the field takes a number again. */
    const char *said = why ? why : p->field_error;
    gtk_label_set_text(GTK_LABEL(p->start_reason), said ? said : "");
    gtk_widget_set_visible(p->start_reason, said != NULL);
    g_free(why);
    nl_page_set_enabled(GTK_WIDGET(p), "train.start", can);
    nl_page_set_enabled(GTK_WIDGET(p), "train.stop", running);
    gtk_widget_set_sensitive(p->form, !running);
    gtk_widget_set_sensitive(p->cluster_form, !running);
    if (!running && !p->checking)
        gtk_widget_set_sensitive(p->check_hosts, TRUE);
}

static void spin_update(gpointer spin, gpointer data)
{
    gtk_spin_button_update(GTK_SPIN_BUTTON(spin));
}

gboolean train_form_take_numbers(NlTrainPage *p)
{
    /* Text typed into a number field counts only once taken (Ctrl+Return skips the focus-out
     * that takes it). */
    p->field_refused = FALSE;
    for (int i = 0; i < NSPINS; i++)
        spin_update(p->spins[i], NULL);
    return !p->field_refused;
}

/* The "hosts" a run's settings name (the window records them), or NULL. */
static char *settings_hosts(const char *settings)
{
    struct nl_json_doc *doc = NULL;
    struct nl_error err = {0};
    char *hosts = NULL;
    if (nl_json_parse(&doc, settings, strlen(settings), "run settings", &err) == 0) {
        const struct nl_json *v = nl_json_get(nl_json_root(doc), "hosts");
        if (v && v->type == NL_JSON_STRING && v->string[0])
            hosts = g_strdup(v->string);
    }
    nl_json_free(doc);
    return hosts;
}

void train_form_show(NlTrainPage *p, const struct nl_train_opts *o, const char *name,
                     const char *hosts)
{
    gtk_adjustment_set_value(p->adj[SPIN_EPOCHS], o->epochs);
    gtk_adjustment_set_value(p->adj[SPIN_BATCH], o->batch);
    gtk_adjustment_set_value(p->adj[SPIN_THREADS],
                             o->threads > 0 ? o->threads : (int)g_get_num_processors());
    gtk_adjustment_set_value(p->adj[SPIN_SEED], (double)o->seed);
    /* The optimizer first: choosing it sets its default rate. */
    gtk_drop_down_set_selected(GTK_DROP_DOWN(p->optim), (guint)o->optim.kind);
    gtk_adjustment_set_value(p->adj[SPIN_LR], o->optim.lr);
    gtk_adjustment_set_value(p->adj[SPIN_MOMENTUM], o->optim.momentum);
    const enum nl_schedule_kind k = o->schedule.kind;
    if (k == NL_SCHEDULE_COSINE || k == NL_SCHEDULE_CONSTANT || k == NL_SCHEDULE_PLATEAU)
        gtk_drop_down_set_selected(GTK_DROP_DOWN(p->schedule), k == NL_SCHEDULE_COSINE     ? 0
                                                               : k == NL_SCHEDULE_CONSTANT ? 1
                                                                                           : 2);
    gtk_editable_set_text(GTK_EDITABLE(p->run_name), name);
    if (hosts)
        gtk_editable_set_text(GTK_EDITABLE(p->hosts), hosts);
    g_free(p->resumed_name);
    p->resumed_name = g_strdup(name);
}

/* A stopped run's settings for train_page_resume, shown in the form: its hosts, or those of the
 * Hosts field for a cluster run the command line started (which records none). FALSE, said in a
 * notice, when it cannot resume from here. */
gboolean train_form_resumed(NlTrainPage *p, const char *run)
{
    struct nl_run_info info;
    struct nl_train_opts o;
    struct nl_error err = {0};
    char *settings = NULL;
    int cluster = 0;
    if (nl_run_get(p->win->store, run, &info, NULL, &settings, &err) < 0 ||
        nl_run_settings_parse(settings, info.name, &o, NULL, &cluster, &err) < 0) {
        nl_window_notify(p->win, "%s", err.msg);
        nl_free(settings);
        return FALSE;
    }
    char *hosts = cluster ? settings_hosts(settings) : NULL;
    nl_free(settings);
    char *field = train_form_hosts(p);
    gboolean known = !cluster || hosts || field;
    g_free(field);
    if (!known) {
        nl_window_notify(p->win,
                         "“%s” trained on hosts it did not record: name them under Hosts, then "
                         "resume it",
                         info.name);
        return FALSE;
    }
    train_form_show(p, &o, info.name, cluster ? hosts : "");
    g_free(hosts);
    return TRUE;
}

void train_form_run_ended(NlTrainPage *p)
{
    /* The form showed the resumed run's name; a new run needs another. */
    if (p->resumed_name &&
        strcmp(gtk_editable_get_text(GTK_EDITABLE(p->run_name)), p->resumed_name) == 0)
        gtk_editable_set_text(GTK_EDITABLE(p->run_name), "");
    g_clear_pointer(&p->resumed_name, g_free);
}

/* The place line under the form follows the hosts field. */
static void hosts_changed(GtkEditable *e, gpointer data)
{
    NlTrainPage *p = data;
    char *hosts = train_form_hosts(p);
    char *where = hosts ? g_strdup_printf("Trains on %s, one worker each (threads: each host's "
                                          "cores or :CORES); validation and test run here.",
                                          hosts)
                        : g_strdup_printf("Trains on this computer: %d cores. Every epoch is "
                                          "checkpointed and recorded as a run.",
                                          (int)g_get_num_processors());
    gtk_label_set_text(GTK_LABEL(p->where), where);
    g_free(where);
    g_free(hosts);
}

void train_form_option(GtkWidget *widget, const char *action, GVariant *param)
{
    NlTrainPage *p = NL_TRAIN_PAGE(widget);
    const char *key, *v;
    g_variant_get(param, "(&s&s)", &key, &v);
    static const char *const numbers[NSPINS] = {
        "epochs",      "batch", "lr", "momentum", "threads", "seed", "heartbeat-timeout",
        "max-restarts"};
    for (int i = 0; i < NSPINS; i++)
        if (strcmp(key, numbers[i]) == 0) {
            gtk_adjustment_set_value(p->adj[i], g_ascii_strtod(v, NULL));
            return;
        }
    if (strcmp(key, "optim") == 0) {
        enum nl_optim_kind kind;
        if (nl_optim_kind_parse(&kind, v, NULL) == 0)
            gtk_drop_down_set_selected(GTK_DROP_DOWN(p->optim), (guint)kind);
    } else if (strcmp(key, "schedule") == 0)
        gtk_drop_down_set_selected(GTK_DROP_DOWN(p->schedule), strcmp(v, "constant") == 0  ? 1
                                                               : strcmp(v, "plateau") == 0 ? 2
                                                                                           : 0);
    else if (strcmp(key, "name") == 0)
        gtk_editable_set_text(GTK_EDITABLE(p->run_name), v);
    else if (strcmp(key, "hosts") == 0)
        gtk_editable_set_text(GTK_EDITABLE(p->hosts), v);
    else if (strcmp(key, "ssh-config") == 0)
        gtk_editable_set_text(GTK_EDITABLE(p->ssh_config), v);
    else if (strcmp(key, "remote-nnlab") == 0)
        gtk_editable_set_text(GTK_EDITABLE(p->remote_nnlab), v);
    else if (strcmp(key, "accept-new-host-keys") == 0)
        gtk_check_button_set_active(GTK_CHECK_BUTTON(p->accept_new), strcmp(v, "true") == 0);
    else if (strcmp(key, "compress") == 0)
        gtk_check_button_set_active(GTK_CHECK_BUTTON(p->bf16), strcmp(v, "bf16") == 0);
    else
        nl_window_notify(p->win, "No training option “%s”", key);
}

/* Momentum applies to SGD and RMSprop only. */
static void optim_changed(GObject *dd, GParamSpec *ps, gpointer data)
{
    NlTrainPage *p = data;
    struct nl_optim o;
    nl_optim_defaults(&o, selected_optim(p));
    gtk_adjustment_set_value(p->adj[SPIN_LR], o.lr);
    gtk_widget_set_sensitive(p->spins[SPIN_MOMENTUM], takes_momentum(o.kind));
}

/* A number field's text as its value. What is not a number, or is outside the field's range,
 * is refused: the field keeps its value (update-policy if-valid), is marked with the error
 * class, and the reason shows next to Start until the field takes a number again. */
static gint spin_input(GtkSpinButton *spin, double *out, gpointer data)
{
    NlTrainPage *p = data;
    const char *field = g_object_get_data(G_OBJECT(spin), "nl-field");
    char *text = g_strstrip(g_strdup(gtk_editable_get_text(GTK_EDITABLE(spin))));
    char *end = NULL;
    double v = g_ascii_strtod(text, &end);
    GtkAdjustment *adj = gtk_spin_button_get_adjustment(spin);
    const double lo = gtk_adjustment_get_lower(adj), hi = gtk_adjustment_get_upper(adj);
    char *why = NULL;
    char kept[G_ASCII_DTOSTR_BUF_SIZE], slo[G_ASCII_DTOSTR_BUF_SIZE], shi[G_ASCII_DTOSTR_BUF_SIZE];
    g_ascii_formatd(kept, sizeof kept, "%g", gtk_adjustment_get_value(adj));
    if (!text[0] || end == text || *end || !isfinite(v)) {
        why = g_strdup_printf("%s: “%s” is not a number; it stays %s.", field, text, kept);
    } else if (v < lo || v > hi) {
        g_ascii_formatd(slo, sizeof slo, "%g", lo);
        g_ascii_formatd(shi, sizeof shi, "%g", hi);
        why = g_strdup_printf("%s: %s is outside %s to %s; it stays %s.", field, text, slo, shi,
                              kept);
    }
    g_free(text);
    if (why) {
        g_free(p->field_error);
        p->field_error = why;
        if (p->field_error_spin)
            gtk_widget_remove_css_class(p->field_error_spin, "error");
        p->field_error_spin = GTK_WIDGET(spin);
        gtk_widget_add_css_class(GTK_WIDGET(spin), "error");
        p->field_refused = TRUE;
        train_form_update(p);
        return GTK_INPUT_ERROR;
    }
    if (p->field_error_spin == GTK_WIDGET(spin)) {
        gtk_widget_remove_css_class(GTK_WIDGET(spin), "error");
        p->field_error_spin = NULL;
        g_clear_pointer(&p->field_error, g_free);
        train_form_update(p);
    }
    *out = v;
    return TRUE;
}

static void run_name_changed(GtkEditable *e, gpointer data)
{
    train_form_update(data);
}

void train_form_init(NlTrainPage *p)
{
    for (int i = 0; i < NSPINS; i++) {
        g_object_set_data(G_OBJECT(p->spins[i]), "nl-field", (gpointer)field_names[i]);
        gtk_spin_button_set_update_policy(GTK_SPIN_BUTTON(p->spins[i]), GTK_UPDATE_IF_VALID);
        g_signal_connect(p->spins[i], "input", G_CALLBACK(spin_input), p);
    }
    g_signal_connect(p->run_name, "changed", G_CALLBACK(run_name_changed), p);
    gtk_adjustment_set_value(p->adj[SPIN_THREADS], (int)g_get_num_processors());
    hosts_changed(NULL, p);
    g_signal_connect(p->hosts, "changed", G_CALLBACK(hosts_changed), p);
    g_signal_connect(p->optim, "notify::selected", G_CALLBACK(optim_changed), p);
}

void train_form_release(NlTrainPage *p)
{
    g_clear_pointer(&p->resumed_name, g_free);
    g_clear_pointer(&p->field_error, g_free);
    p->field_error_spin = NULL;
}
