/* The application's own actions and every keyboard shortcut. Private to ui/. */
#ifndef NNLAB_UI_APP_ACTIONS_H
#define NNLAB_UI_APP_ACTIONS_H

#include <gtk/gtk.h>

#define NL_APP_ID "org.nnlab.Nnlab"

/* Adds app.quit and app.about and sets the accelerators of app.* and win.* actions. */
void nl_app_actions_install(GtkApplication *app);

#endif
