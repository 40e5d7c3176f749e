/* The application's actions (quit, about) and the keyboard shortcuts of the application's and
 * the window's actions; those of the pages' own actions ("predict.open") are the window's
 * (window.c; the Train page's in ui/train-page.c), since a page's actions are reached from
 * inside it only. */
#include <gtk/gtk.h>

#include "app-actions.h"
#include "nnlab-config.h"

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
                          "nnlab", "version", NNLAB_VERSION, "logo-icon-name", NL_APP_ID,
                          "comments", "Train neural networks on your workstation's cores",
                          "license-type", GTK_LICENSE_MIT_X11, "authors", authors, NULL);
}

void nl_app_actions_install(GtkApplication *app)
{
    static const GActionEntry actions[] = {
        {.name = "quit", .activate = quit},
        {.name = "about", .activate = about},
    };
    static const struct {
        const char *action;
        const char *accels[3];
    } accels[] = {
        {"app.quit", {"<Control>q", NULL}},         {"win.show-page::datasets", {"<Alt>1", NULL}},
        {"win.show-page::model", {"<Alt>2", NULL}}, {"win.show-page::train", {"<Alt>3", NULL}},
        {"win.show-page::runs", {"<Alt>4", NULL}},  {"win.show-page::predict", {"<Alt>5", NULL}},
        {"window.close", {"<Control>w", NULL}},
    };
    g_action_map_add_action_entries(G_ACTION_MAP(app), actions, G_N_ELEMENTS(actions), app);
    for (size_t i = 0; i < G_N_ELEMENTS(accels); i++)
        gtk_application_set_accels_for_action(app, accels[i].action, accels[i].accels);
}
