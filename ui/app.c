/* The GtkApplication: resources, the style sheet, its actions (app-actions.c), and one window
 * per activation. */
#include <gtk/gtk.h>

#include "app-actions.h"
#include "nl-resources.h"
#include "nnlab-ui.h"
#include "nnlab/kernels.h"
#include "window.h"

static void on_activate(GApplication *app, gpointer data)
{
    GtkWindow *win = gtk_application_get_active_window(GTK_APPLICATION(app));
    if (!win)
        win = GTK_WINDOW(nl_window_new(GTK_APPLICATION(app), data));
    gtk_window_present(win);
}

static void on_startup(GApplication *app, gpointer data)
{
    nl_app_actions_install(GTK_APPLICATION(app));
    GtkCssProvider *css = gtk_css_provider_new();
    gtk_css_provider_load_from_resource(css, "/org/nnlab/Nnlab/style.css");
    gtk_style_context_add_provider_for_display(gdk_display_get_default(), GTK_STYLE_PROVIDER(css),
                                               GTK_STYLE_PROVIDER_PRIORITY_APPLICATION);
    g_object_unref(css);
    gtk_window_set_default_icon_name(NL_APP_ID);
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
    GtkApplication *app = gtk_application_new(NL_APP_ID, G_APPLICATION_NON_UNIQUE);
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
