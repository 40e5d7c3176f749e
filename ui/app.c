/* The GtkApplication: its actions (quit, about), keyboard shortcuts, the style sheet, and one
 * window per activation. */
#include <gtk/gtk.h>

#include "nl-resources.h"
#include "nnlab-config.h"
#include "nnlab-ui.h"
#include "nnlab/kernels.h"
#include "window.h"

#define APP_ID "org.nnlab.Nnlab"

static void on_activate(GApplication *app, gpointer data)
{
    GtkWindow *win = gtk_application_get_active_window(GTK_APPLICATION(app));
    if (!win)
        win = GTK_WINDOW(nl_window_new(GTK_APPLICATION(app), data));
    gtk_window_present(win);
}

static void quit(GSimpleAction *a, GVariant *p, gpointer data)
{
    /* Closing each window runs its close-request, which asks when training. */
    GList *wins = gtk_application_get_windows(GTK_APPLICATION(data));
    if (!wins)
        g_application_quit(G_APPLICATION(data));
    for (GList *l = wins; l; l = l->next)
        gtk_window_close(l->data);
}

static void about(GSimpleAction *a, GVariant *p, gpointer data)
{
    static const char *authors[] = {"The nnlab authors", NULL};
    gtk_show_about_dialog(gtk_application_get_active_window(GTK_APPLICATION(data)), "program-name",
                          "nnlab", "version", NNLAB_VERSION, "logo-icon-name", APP_ID, "comments",
                          "Train neural networks on your workstation's cores", "license-type",
                          GTK_LICENSE_MIT_X11, "authors", authors, NULL);
}

static void on_startup(GApplication *app, gpointer data)
{
    static const GActionEntry actions[] = {
        {.name = "quit", .activate = quit},
        {.name = "about", .activate = about},
    };
    static const struct {
        const char *action;
        const char *accels[3];
    } accels[] = {
        {"app.quit", {"<Control>q", NULL}},
        {"win.show-page::datasets", {"<Alt>1", NULL}},
        {"win.show-page::model", {"<Alt>2", NULL}},
        {"win.show-page::train", {"<Alt>3", NULL}},
        {"win.show-page::runs", {"<Alt>4", NULL}},
        {"win.show-page::predict", {"<Alt>5", NULL}},
        {"win.import", {"<Control>i", NULL}},
        {"win.predict-open", {"<Control>o", NULL}},
        {"win.train-start", {"<Control>Return", NULL}},
        {"win.train-stop", {"<Control>period", NULL}},
        {"win.runs-refresh", {"F5", NULL}},
        {"window.close", {"<Control>w", NULL}},
    };
    g_action_map_add_action_entries(G_ACTION_MAP(app), actions, G_N_ELEMENTS(actions), app);
    for (size_t i = 0; i < G_N_ELEMENTS(accels); i++)
        gtk_application_set_accels_for_action(GTK_APPLICATION(app), accels[i].action,
                                              accels[i].accels);

    GtkCssProvider *css = gtk_css_provider_new();
    gtk_css_provider_load_from_resource(css, "/org/nnlab/Nnlab/style.css");
    gtk_style_context_add_provider_for_display(gdk_display_get_default(), GTK_STYLE_PROVIDER(css),
                                               GTK_STYLE_PROVIDER_PRIORITY_APPLICATION);
    g_object_unref(css);
    gtk_window_set_default_icon_name(APP_ID);
    nl_kernels_init();
}

GObject *nl_app_new(const char *db_path)
{
    static gsize registered;
    if (g_once_init_enter(&registered)) {
        /* In a static library the resources' constructor would be dropped by the linker. */
        nl_register_resource();
        g_once_init_leave(&registered, 1);
    }
    GtkApplication *app = gtk_application_new(APP_ID, G_APPLICATION_NON_UNIQUE);
    char *db = g_strdup(db_path);
    g_object_set_data_full(G_OBJECT(app), "nl-db", db, g_free);
    g_signal_connect(app, "startup", G_CALLBACK(on_startup), NULL);
    g_signal_connect(app, "activate", G_CALLBACK(on_activate), db);
    return G_OBJECT(app);
}

int nl_ui_run(int argc, char **argv, const char *db_path)
{
    GObject *app = nl_app_new(db_path);
    /* The command line was parsed by main(); GApplication sees only the program's name. */
    int status = g_application_run(G_APPLICATION(app), argc > 0 ? 1 : 0, argv);
    g_object_unref(app);
    return status;
}
