/* The desktop window's entry point, called by app/main.c when nnlab runs with no command and a
 * display is available. Compiled only when GTK 4 is found. */
#ifndef NNLAB_UI_H
#define NNLAB_UI_H

/* Runs the application until its last window closes; returns the exit status. db_path NULL:
 * the default database. argv[0] only is used. */
int nl_ui_run(int argc, char **argv, const char *db_path);

/* The application object itself (a GtkApplication, returned as a GObject so that this header
 * needs no GTK): activating it opens a window on db_path. For tests that drive the window. */
struct _GObject;
struct _GObject *nl_app_new(const char *db_path);

#endif
