/* The main window: the pages in a stack with a sidebar, the main thread's store connection, the
 * selected dataset, notifications, and the question asked when closing during training. */
#include "window.h"

#include <stdarg.h>

#include "nnlab/alloc.h"

G_DEFINE_FINAL_TYPE(NlWindow, nl_window, GTK_TYPE_APPLICATION_WINDOW)

GtkBuilder *nl_page_builder(const char *name)
{
    char path[128];
    g_snprintf(path, sizeof path, "/org/nnlab/Nnlab/%s.ui", name);
    return gtk_builder_new_from_resource(path);
}

void nl_page_set_enabled(GtkWidget *page, const char *action, gboolean enabled)
{
    gtk_widget_action_set_enabled(page, action, enabled);
    g_object_set_data_full(G_OBJECT(page), action, g_strdup(enabled ? "1" : "0"), g_free);
}

gboolean nl_page_action_enabled(GtkWidget *page, const char *action)
{
    const char *on = g_object_get_data(G_OBJECT(page), action);
    return !on || on[0] == '1';
}

struct chart_rgb nl_window_fg(GtkWidget *widget)
{
    GdkRGBA c;
    gtk_style_context_get_color(gtk_widget_get_style_context(widget), &c);
    return (struct chart_rgb){c.red, c.green, c.blue};
}

/* A faded toast leaves the overlay: a revealer whose child is hidden still takes the pointer
 * over its whole rectangle (a crossfade keeps its size), so it is hidden itself once the fade
 * ends, and shown again before the next toast. */
static void toast_revealed(GObject *revealer, GParamSpec *ps, gpointer data)
{
    GtkRevealer *r = GTK_REVEALER(revealer);
    if (!gtk_revealer_get_child_revealed(r) && !gtk_revealer_get_reveal_child(r))
        gtk_widget_set_visible(GTK_WIDGET(r), FALSE);
}

static gboolean toast_hide(gpointer data)
{
    NlWindow *w = data;
    gtk_revealer_set_reveal_child(GTK_REVEALER(w->toast), FALSE);
    w->toast_timer = 0;
    return G_SOURCE_REMOVE;
}

void nl_window_notify(NlWindow *w, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    gtk_label_set_text(GTK_LABEL(w->toast_label), msg);
    gtk_widget_set_visible(w->toast, TRUE);
    gtk_revealer_set_reveal_child(GTK_REVEALER(w->toast), TRUE);
    if (w->toast_timer)
        g_source_remove(w->toast_timer);
    w->toast_timer = g_timeout_add_seconds(5, toast_hide, w);
    g_free(msg);
}

gboolean nl_window_training(NlWindow *w)
{
    return w->train && train_page_running(w->train);
}

void nl_window_update_subtitle(NlWindow *w)
{
    char *s = g_strdup_printf("%s · model %s", w->data ? w->data->name : "no dataset",
                              w->model ? model_page_name(w->model) : "-");
    gtk_label_set_text(GTK_LABEL(w->subtitle), s);
    g_free(s);
}

static void dataset_loaded(NlWindow *w, struct nl_dataset *d)
{
    nl_dataset_free(w->data);
    w->data = d;
    if (w->datasets)
        datasets_page_dataset_changed(w->datasets);
    if (w->model)
        model_page_dataset_changed(w->model);
    if (w->train)
        train_page_dataset_changed(w->train);
    nl_window_update_subtitle(w);
}

/* A dataset load on a worker thread; owned by its GTask. */
struct load_job {
    char *db_path, *name;
    guint generation;
    struct nl_dataset *d;
    struct nl_error err;
};

static void load_job_free(gpointer data)
{
    struct load_job *j = data;
    g_free(j->db_path);
    g_free(j->name);
    nl_dataset_free(j->d);
    g_free(j);
}

static void load_thread(GTask *task, gpointer source, gpointer data, GCancellable *c)
{
    struct load_job *j = data;
    struct nl_store *s;
    if (nl_store_open(&s, j->db_path, &j->err) == 0) {
        nl_dataset_load(s, j->name, &j->d, &j->err);
        nl_store_close(s);
    }
    g_task_return_boolean(task, TRUE);
}

static void load_done(GObject *source, GAsyncResult *res, gpointer data)
{
    NlWindow *w = NL_WINDOW(source);
    struct load_job *j = g_task_get_task_data(G_TASK(res));
    /* A later selection, or a closed window, makes this load moot. */
    if (w->closed || j->generation != w->load_generation)
        return;
    w->loading = FALSE;
    if (!j->d) {
        nl_window_notify(w, "%s", j->err.msg);
        return;
    }
    dataset_loaded(w, j->d);
    j->d = NULL;
}

void nl_window_select_dataset(NlWindow *w, const char *name)
{
    w->load_generation++;
    w->loading = FALSE;
    if (!name) {
        dataset_loaded(w, NULL);
        return;
    }
    if (w->data && strcmp(w->data->name, name) == 0)
        return;
    /* Samples are read on a worker thread: a large dataset takes a moment. */
    struct load_job *j = g_new0(struct load_job, 1);
    j->db_path = g_strdup(w->db_path);
    j->name = g_strdup(name);
    j->generation = w->load_generation;
    w->loading = TRUE;
    GTask *task = g_task_new(w, NULL, load_done, NULL);
    g_task_set_task_data(task, j, load_job_free);
    g_task_run_in_thread(task, load_thread);
    g_object_unref(task);
}

struct confirm {
    void (*yes)(gpointer data);
    gpointer data;
};

static void confirm_response(GtkDialog *dialog, int response, gpointer data)
{
    struct confirm *c = data;
    gtk_window_destroy(GTK_WINDOW(dialog));
    if (response == GTK_RESPONSE_ACCEPT)
        c->yes(c->data);
    g_free(c);
}

void nl_window_confirm(NlWindow *w, const char *question, const char *detail, const char *accept,
                       void (*yes)(gpointer data), gpointer data)
{
    GtkWidget *d =
        gtk_message_dialog_new(GTK_WINDOW(w), GTK_DIALOG_MODAL | GTK_DIALOG_DESTROY_WITH_PARENT,
                               GTK_MESSAGE_QUESTION, GTK_BUTTONS_NONE, "%s", question);
    gtk_message_dialog_format_secondary_text(GTK_MESSAGE_DIALOG(d), "%s", detail);
    gtk_dialog_add_buttons(GTK_DIALOG(d), "_Cancel", GTK_RESPONSE_CANCEL, accept,
                           GTK_RESPONSE_ACCEPT, NULL);
    gtk_widget_add_css_class(gtk_dialog_get_widget_for_response(GTK_DIALOG(d), GTK_RESPONSE_ACCEPT),
                             "destructive-action");
    struct confirm *c = g_new(struct confirm, 1);
    c->yes = yes;
    c->data = data;
    g_signal_connect(d, "response", G_CALLBACK(confirm_response), c);
    gtk_window_present(GTK_WINDOW(d));
}

static void show_page(GSimpleAction *a, GVariant *param, gpointer data)
{
    NlWindow *w = data;
    const char *name = g_variant_get_string(param, NULL);
    if (gtk_stack_get_child_by_name(w->stack, name))
        gtk_stack_set_visible_child_name(w->stack, name);
}

static void close_response(GtkDialog *dialog, int response, gpointer data)
{
    NlWindow *w = data;
    gtk_window_destroy(GTK_WINDOW(dialog));
    if (response == GTK_RESPONSE_ACCEPT) {
        train_page_stop_and_wait(w->train);
        gtk_window_destroy(GTK_WINDOW(w));
    }
}

/* Closing during training asks first; stopping marks the run stopped, its checkpoints kept. */
static gboolean on_close_request(GtkWindow *win, gpointer data)
{
    NlWindow *w = NL_WINDOW(win);
    if (!nl_window_training(w))
        return FALSE;
    GtkWidget *d =
        gtk_message_dialog_new(win, GTK_DIALOG_MODAL | GTK_DIALOG_DESTROY_WITH_PARENT,
                               GTK_MESSAGE_QUESTION, GTK_BUTTONS_NONE, "Stop training and close?");
    gtk_message_dialog_format_secondary_text(
        GTK_MESSAGE_DIALOG(d), "The run is marked stopped; its last checkpoint is kept.");
    gtk_dialog_add_buttons(GTK_DIALOG(d), "_Keep Training", GTK_RESPONSE_CANCEL, "_Stop and Close",
                           GTK_RESPONSE_ACCEPT, NULL);
    GtkWidget *stop = gtk_dialog_get_widget_for_response(GTK_DIALOG(d), GTK_RESPONSE_ACCEPT);
    gtk_widget_add_css_class(stop, "destructive-action");
    g_signal_connect(d, "response", G_CALLBACK(close_response), w);
    gtk_window_present(GTK_WINDOW(d));
    return TRUE;
}

/* ---- Pages that are widgets of their own ----
 * A page type says in its class_init what it is to the window (nl_page_class_set_info: its name
 * in the stack, title and icon in the sidebar) and which of its actions have shortcuts that work
 * from any page (nl_page_class_add_shortcut; a page's actions are reached from inside it only,
 * so the window's shortcut controller shows the page and activates the action there). The window
 * adds a page with nl_window_add_page and asks the page nothing else. */

struct page_shortcut {
    const char *accel, *action;
    struct page_shortcut *next;
};

struct page_info {
    const char *name, *title, *icon;
    struct page_shortcut *shortcuts;
};

static GQuark page_info_quark(void)
{
    return g_quark_from_static_string("nl-page-info");
}

static struct page_info *page_info_of(GType type, gboolean create)
{
    struct page_info *pi = g_type_get_qdata(type, page_info_quark());
    if (!pi && create) {
        pi = g_new0(struct page_info, 1); /* lives as long as the type */
        g_type_set_qdata(type, page_info_quark(), pi);
    }
    return pi;
}

void nl_page_class_set_info(GtkWidgetClass *wc, const char *name, const char *title,
                            const char *icon)
{
    struct page_info *pi = page_info_of(G_TYPE_FROM_CLASS(wc), TRUE);
    pi->name = name;
    pi->title = title;
    pi->icon = icon;
}

void nl_page_class_add_shortcut(GtkWidgetClass *wc, const char *accel, const char *action)
{
    struct page_info *pi = page_info_of(G_TYPE_FROM_CLASS(wc), TRUE);
    struct page_shortcut *s = g_new0(struct page_shortcut, 1); /* as long as the type */
    s->accel = accel;
    s->action = action;
    s->next = pi->shortcuts;
    pi->shortcuts = s;
}

/* A page's shortcut: shows the page and activates its action there while the action is enabled
 * (nl_page_set_enabled); a disabled one lets the key through, to the focused widget. The
 * shortcut's argument is the action's name; data is the page, held by the window's stack as the
 * controller is by the window. */
static gboolean page_shortcut(GtkWidget *widget, GVariant *args, gpointer data)
{
    NlWindow *w = NL_WINDOW(widget);
    GtkWidget *page = data;
    const char *action = g_variant_get_string(args, NULL);
    if (w->closed || !nl_page_action_enabled(page, action))
        return FALSE;
    gtk_stack_set_visible_child(w->stack, page);
    return gtk_widget_activate_action(page, action, NULL);
}

void nl_window_add_page(NlWindow *w, GtkWidget *page)
{
    const struct page_info *pi = page_info_of(G_OBJECT_TYPE(page), FALSE);
    g_return_if_fail(pi != NULL && pi->name != NULL);
    GtkStackPage *sp = gtk_stack_add_titled(w->stack, page, pi->name, pi->title);
    gtk_stack_page_set_icon_name(sp, pi->icon);
    if (!w->page_keys) {
        w->page_keys = gtk_shortcut_controller_new();
        gtk_event_controller_set_name(w->page_keys, "nl-page-shortcuts");
        gtk_shortcut_controller_set_scope(GTK_SHORTCUT_CONTROLLER(w->page_keys),
                                          GTK_SHORTCUT_SCOPE_GLOBAL);
        gtk_event_controller_set_propagation_phase(w->page_keys, GTK_PHASE_CAPTURE);
        gtk_widget_add_controller(GTK_WIDGET(w), w->page_keys);
    }
    for (const struct page_shortcut *s = pi->shortcuts; s; s = s->next) {
        GtkShortcut *sc = gtk_shortcut_new(gtk_shortcut_trigger_parse_string(s->accel),
                                           gtk_callback_action_new(page_shortcut, page, NULL));
        gtk_shortcut_set_arguments(sc, g_variant_new_string(s->action));
        gtk_shortcut_controller_add_shortcut(GTK_SHORTCUT_CONTROLLER(w->page_keys), sc);
    }
}

static void nl_window_init(NlWindow *w)
{
    gtk_widget_init_template(GTK_WIDGET(w));
    g_signal_connect(w->toast, "notify::child-revealed", G_CALLBACK(toast_revealed), NULL);
}

static void nl_window_dispose(GObject *obj)
{
    NlWindow *w = NL_WINDOW(obj);
    w->closed = TRUE;
    train_page_stop_and_wait(w->train);
    w->train = NULL; /* disposed with the stack */
    if (w->toast_timer) {
        g_source_remove(w->toast_timer);
        w->toast_timer = 0;
    }
    gtk_widget_dispose_template(GTK_WIDGET(w), NL_TYPE_WINDOW);
    /* The pages that are widgets went with the stack. */
    w->datasets = NULL;
    w->model = NULL;
    w->runs = NULL;
    w->predict = NULL;
    G_OBJECT_CLASS(nl_window_parent_class)->dispose(obj);
}

static void nl_window_finalize(GObject *obj)
{
    NlWindow *w = NL_WINDOW(obj);
    /* The pages' widgets are gone with the window; their state goes here. */
    nl_dataset_free(w->data);
    nl_store_close(w->store);
    g_free(w->db_path);
    G_OBJECT_CLASS(nl_window_parent_class)->finalize(obj);
}

static void nl_window_class_init(NlWindowClass *klass)
{
    GtkWidgetClass *wc = GTK_WIDGET_CLASS(klass);
    G_OBJECT_CLASS(klass)->dispose = nl_window_dispose;
    G_OBJECT_CLASS(klass)->finalize = nl_window_finalize;
    gtk_widget_class_set_template_from_resource(wc, "/org/nnlab/Nnlab/window.ui");
    gtk_widget_class_bind_template_child(wc, NlWindow, stack);
    gtk_widget_class_bind_template_child(wc, NlWindow, subtitle);
    gtk_widget_class_bind_template_child(wc, NlWindow, toast);
    gtk_widget_class_bind_template_child(wc, NlWindow, toast_label);
}

NlWindow *nl_window_new(GtkApplication *app, const char *db_path)
{
    NlWindow *w = g_object_new(NL_TYPE_WINDOW, "application", app, NULL);
    struct nl_error err = {0};
    char path[4096];

    if (db_path) {
        w->db_path = g_strdup(db_path);
    } else if (nl_store_default_path(path, sizeof path, &err) == 0) {
        w->db_path = g_strdup(path);
    }
    if (!w->db_path || nl_store_open(&w->store, w->db_path, &err) < 0) {
        GtkWidget *l = gtk_label_new(err.msg);
        gtk_label_set_wrap(GTK_LABEL(l), TRUE);
        gtk_widget_add_css_class(l, "nl-error");
        gtk_stack_add_titled(w->stack, l, "error", "Error");
        return w;
    }

    static const GActionEntry actions[] = {
        {.name = "show-page", .activate = show_page, .parameter_type = "s"},
    };
    g_action_map_add_action_entries(G_ACTION_MAP(w), actions, G_N_ELEMENTS(actions), w);
    g_signal_connect(w, "close-request", G_CALLBACK(on_close_request), NULL);

    w->datasets = nl_datasets_page_new(w);
    nl_window_add_page(w, GTK_WIDGET(w->datasets));
    w->model = nl_model_page_new(w);
    nl_window_add_page(w, GTK_WIDGET(w->model));
    w->train = train_page_new(w);
    nl_window_add_page(w, GTK_WIDGET(w->train));
    w->runs = nl_runs_page_new(w);
    nl_window_add_page(w, GTK_WIDGET(w->runs));
    w->predict = nl_predict_page_new(w);
    nl_window_add_page(w, GTK_WIDGET(w->predict));
    /* The pages hold their own references until the stack took them. */
    g_object_unref(w->datasets);
    g_object_unref(w->model);
    g_object_unref(w->train);
    g_object_unref(w->runs);
    g_object_unref(w->predict);

    datasets_page_refresh(w->datasets);
    nl_window_update_subtitle(w);
    return w;
}
