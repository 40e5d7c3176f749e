/* What the window's tests (test_gui*.c) share: starting under a
 * private D-Bus session and Xvfb, opening the window on a store, driving the main loop, finding
 * widgets and giving them real input with xdotool, screenshots, the command line as a child
 * process, and a generated dataset. Each test is one program that includes this header once;
 * the helpers are static, and those a test does not use cost it nothing.
 *
 * Start-up: gui_start() re-executes the test under `dbus-run-session -- xvfb-run` with
 * GSK_RENDERER=cairo, GSETTINGS_BACKEND=memory and private XDG folders in a new temporary folder
 * (gui_tmp, removed when the test passes), skipping when those programs are missing; in the
 * re-executed process it sets gui_tmp and gui_shots (BUILD/ui-screenshots/) and initialises GTK.
 * gui_open() then opens the application's window on a store (the test's `win`). */
#ifndef NNLAB_TESTS_GUI_UTIL_H
#define NNLAB_TESTS_GUI_UTIL_H

#include <errno.h>
#include <gdk/x11/gdkx.h>
#include <gtk/gtk.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "idx_writer.h"
#include "nnlab-ui.h"
#include "tap.h"
#include "window.h"

static char gui_tmp[512] G_GNUC_UNUSED, gui_shots[1024] G_GNUC_UNUSED;
static GtkWidget *win G_GNUC_UNUSED; /* the window under test */

static G_GNUC_UNUSED void bail_out(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));
static G_GNUC_UNUSED void bail_out(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("Bail out! ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    exit(1);
}

static G_GNUC_UNUSED int in_path(const char *prog)
{
    char *p = g_find_program_in_path(prog);
    g_free(p);
    return p != NULL;
}

/* Re-runs this program inside a private D-Bus session and a virtual X server of that screen size
 * ("1920x1080"); name prefixes the temporary folder; xdotool: the test gives real input. */
static G_GNUC_UNUSED void gui_reexec(char **argv, const char *name, const char *screen, int xdotool)
{
    if (!in_path("xvfb-run") || !in_path("dbus-run-session") || !in_path("xauth") ||
        (xdotool && !in_path("xdotool")))
        skip_all("xvfb-run, xauth, dbus-run-session%s missing (apt-get install xvfb xauth "
                 "dbus-daemon%s)",
                 xdotool ? " or xdotool" : "", xdotool ? " xdotool" : "");
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/%s-XXXXXX", name);
    if (!mkdtemp(dir))
        skip_all("mkdtemp: %s", strerror(errno));
    static const char *sub[] = {"config", "data", "cache", "runtime"};
    static const char *var[] = {"XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_CACHE_HOME",
                                "XDG_RUNTIME_DIR"};
    for (int i = 0; i < 4; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%s", dir, sub[i]);
        mkdir(path, 0700);
        setenv(var[i], path, 1);
    }
    setenv("NNLAB_GUI_TMP", dir, 1);
    setenv("NNLAB_GUI_INNER", "1", 1);
    setenv("GSK_RENDERER", "cairo", 1);
    setenv("GSETTINGS_BACKEND", "memory", 1);
    setenv("GDK_BACKEND", "x11", 1);
    setenv("GTK_A11Y", "none", 1);
    setenv("NO_AT_BRIDGE", "1", 1);
    unsetenv("WAYLAND_DISPLAY");
    unsetenv("DISPLAY");
    char server[64];
    snprintf(server, sizeof server, "-screen 0 %sx24", screen);
    char *args[] = {"dbus-run-session", "--", "xvfb-run", "-a", "-s", server, argv[0], NULL};
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        skip_all("fork: %s", strerror(errno));
    if (pid == 0) {
        execvp(args[0], args);
        skip_all("cannot run dbus-run-session: %s", strerror(errno));
    }
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    /* The folder goes when the test passed; it stays, said, for a look at a failure. */
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (rc != 0)
        fprintf(stderr, "the test's files are in %s\n", dir);
    else if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    exit(rc);
}

/* The start of a window test's main(): see the top of this file. */
static G_GNUC_UNUSED void gui_start(char **argv, const char *name, const char *screen, int xdotool)
{
    if (!getenv("NNLAB_GUI_INNER"))
        gui_reexec(argv, name, screen, xdotool);
    const char *t = getenv("NNLAB_GUI_TMP");
    snprintf(gui_tmp, sizeof gui_tmp, "%s", t ? t : "/tmp");
    const char *build = getenv("NNLAB_BUILD_ROOT");
    snprintf(gui_shots, sizeof gui_shots, "%s/ui-screenshots", build ? build : gui_tmp);
    mkdir(gui_shots, 0755);
    if (!gtk_init_check())
        skip_all("no display even under xvfb-run");
}

/* ---- A generated dataset ---- */

/* Six classes of 28x28 images as IDX files DIR/PREFIX-{images-idx3,labels-idx1}-ubyte.gz: a
 * bright band at a class's own rows, with noise. confuse > 0: one sample in confuse has its band
 * at the next class's rows, so that a trained model makes mistakes. */
static G_GNUC_UNUSED void gui_write_bands(const char *dir, const char *prefix, uint32_t n,
                                          uint32_t confuse)
{
    enum { S = 28 };
    uint8_t *px = malloc((size_t)n * S * S), *lab = malloc(n);
    uint32_t r = 7;
    for (uint32_t i = 0; i < n; i++) {
        lab[i] = (uint8_t)(i % 6);
        const int cls = confuse && i % confuse == confuse - 1 ? (lab[i] + 1) % 6 : lab[i];
        for (int k = 0; k < S * S; k++) {
            r = r * 1103515245u + 12345u;
            const int row = k / S, band = 2 + 4 * cls;
            px[(size_t)i * S * S + k] =
                (uint8_t)((row >= band && row < band + 3 ? 200 : 0) + ((r >> 16) % 50));
        }
    }
    char a[700], b[700];
    snprintf(a, sizeof a, "%s/%s-images-idx3-ubyte.gz", dir, prefix);
    snprintf(b, sizeof b, "%s/%s-labels-idx1-ubyte.gz", dir, prefix);
    idx_write(a, b, px, lab, n, S, S);
    free(px);
    free(lab);
}

/* Writes text to path (a spec, a CSV); bails out when it cannot. */
static G_GNUC_UNUSED void gui_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0)
        bail_out("cannot write %s", path);
}

/* The bands dataset the window's tests train on: gui_write_bands' train and t10k pairs, ntrain
 * and ntest samples, one in 8 confused, in gui_tmp/bands (its path into dir). */
static G_GNUC_UNUSED void gui_bands(char *dir, size_t size, uint32_t ntrain, uint32_t ntest)
{
    snprintf(dir, size, "%s/bands", gui_tmp);
    mkdir(dir, 0755);
    gui_write_bands(dir, "train", ntrain, 8);
    gui_write_bands(dir, "t10k", ntest, 8);
}

/* ---- The command line beside the window ---- */

static pid_t gui_child G_GNUC_UNUSED; /* the process gui_spawn started; 0: none */

/* Starts the command line cmd (split as a shell would, the program found on PATH, its stdout to
 * /dev/null) as gui_child; whether it started (why not is shown). */
static G_GNUC_UNUSED int gui_spawn(const char *cmd)
{
    char **argv = NULL;
    GPid pid = 0;
    GError *e = NULL;
    gboolean ok =
        g_shell_parse_argv(cmd, NULL, &argv, &e) &&
        g_spawn_async(NULL, argv, NULL,
                      G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_SEARCH_PATH,
                      NULL, NULL, &pid, &e);
    if (!ok)
        diag("%s: %s", cmd, e ? e->message : "?");
    g_clear_error(&e);
    g_strfreev(argv);
    gui_child = ok ? pid : 0;
    return ok;
}

/* Whether gui_child has ended (reaped; an end other than exit 0 is shown), or none runs. */
static G_GNUC_UNUSED int gui_child_gone(void)
{
    int status = 0;
    if (gui_child <= 0)
        return 1;
    if (waitpid(gui_child, &status, WNOHANG) != gui_child)
        return 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        diag("the child process ended with status %d", status);
    gui_child = 0;
    return 1;
}

/* ---- Driving the main loop ---- */

static G_GNUC_UNUSED void spin(int ms)
{
    gint64 end = g_get_monotonic_time() + (gint64)ms * 1000;
    while (g_get_monotonic_time() < end)
        if (!g_main_context_iteration(NULL, FALSE))
            g_usleep(2000);
}

typedef int (*cond_fn)(void);
static G_GNUC_UNUSED int wait_for(cond_fn cond, int timeout_ms)
{
    gint64 end = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
    while (!cond() && g_get_monotonic_time() < end)
        if (!g_main_context_iteration(NULL, FALSE))
            g_usleep(2000);
    return cond();
}

/* A 10 ms heartbeat: the longest gap between two beats while measuring is the longest main-loop
 * stall. What these checks catch is work that blocks the main loop (a store query, a thread
 * joined, a connection made on it), which takes seconds; the bound leaves room for a shared
 * machine and for the sanitizers' slowdown, so that it never measures speed. */
#if defined(__SANITIZE_ADDRESS__)
#define STALL_MS "1500"
#define STALL_US 1500000
#else
#define STALL_MS "500"
#define STALL_US 500000
#endif
static gint64 last_beat G_GNUC_UNUSED, max_gap G_GNUC_UNUSED;
static gboolean measuring G_GNUC_UNUSED;
static G_GNUC_UNUSED gboolean beat(gpointer data)
{
    gint64 now = g_get_monotonic_time();
    if (measuring && last_beat && now - last_beat > max_gap)
        max_gap = now - last_beat;
    last_beat = now;
    return G_SOURCE_CONTINUE;
}

/* Starts measuring the longest stall from now. */
static G_GNUC_UNUSED void measure_stalls(void)
{
    max_gap = 0;
    last_beat = 0;
    measuring = TRUE;
}

/* ---- The window ---- */

/* Opens the application's window on the store at db (bails out when it cannot). */
static G_GNUC_UNUSED GObject *gui_open(const char *db)
{
    GObject *app = nl_app_new(db);
    GError *error = NULL;
    if (!g_application_register(G_APPLICATION(app), NULL, &error))
        bail_out("the application does not register: %s", error->message);
    g_application_activate(G_APPLICATION(app));
    win = GTK_WIDGET(gtk_application_get_active_window(GTK_APPLICATION(app)));
    if (!win)
        bail_out("no window");
    return app;
}

static G_GNUC_UNUSED NlWindow *nw(void)
{
    return NL_WINDOW(win);
}

/* The Train page, where its train.* actions are. */
static G_GNUC_UNUSED GtkWidget *train_widget(void)
{
    return GTK_WIDGET(nw()->train);
}

static G_GNUC_UNUSED void show(const char *page)
{
    gtk_widget_activate_action(win, "win.show-page", "s", page);
    spin(400);
}

/* Resizes the window and lets it settle (no window manager: the size is taken as asked, less
 * the client-side decorations' margins). */
static G_GNUC_UNUSED void resize(int w, int h)
{
    gtk_window_set_default_size(GTK_WINDOW(win), w, h);
    /* A loaded machine takes longer to lay the window out again: wait for the size, up to 5 s. */
    for (int waited = 0; waited < 5000; waited += 100) {
        spin(100);
        const int ww = gtk_widget_get_width(win), wh = gtk_widget_get_height(win);
        if (ww <= w && ww >= w - 20 && wh <= h && wh >= h - 20)
            break;
    }
    spin(500);
}

/* The window as drawn, into BUILD/ui-screenshots/NAME.png. A window laid out anew since its
 * last frame (a list rebuilt) gives no picture until it is drawn: up to 2 s. */
static G_GNUC_UNUSED int screenshot(const char *name)
{
    char path[1200];
    const int w = gtk_widget_get_width(win), h = gtk_widget_get_height(win);
    GskRenderNode *node = NULL;
    for (int tries = 0; !node && tries < 20; tries++) {
        GdkPaintable *paint = gtk_widget_paintable_new(win);
        GtkSnapshot *s = gtk_snapshot_new();
        gdk_paintable_snapshot(paint, s, w, h);
        node = gtk_snapshot_free_to_node(s);
        g_object_unref(paint);
        if (!node)
            spin(100);
    }
    int ok = 0;
    if (node) {
        GskRenderer *r = gtk_native_get_renderer(GTK_NATIVE(win));
        GdkTexture *tex = gsk_renderer_render_texture(r, node, &GRAPHENE_RECT_INIT(0, 0, w, h));
        snprintf(path, sizeof path, "%s/%s.png", gui_shots, name);
        ok = gdk_texture_save_to_png(tex, path);
        g_object_unref(tex);
        gsk_render_node_unref(node);
    }
    if (ok)
        diag("screenshot %s (%dx%d)", path, w, h);
    return ok;
}

/* A visible toplevel of that type (a dialog, a file chooser), or NULL. */
static G_GNUC_UNUSED GtkWidget *find_toplevel(GType type)
{
    GListModel *tops = gtk_window_get_toplevels();
    GtkWidget *found = NULL;
    for (guint i = 0; i < g_list_model_get_n_items(tops); i++) {
        GObject *o = g_list_model_get_item(tops, i);
        if (G_TYPE_CHECK_INSTANCE_TYPE(o, type) && gtk_widget_get_visible(GTK_WIDGET(o)))
            found = GTK_WIDGET(o);
        g_object_unref(o);
    }
    return found;
}

static G_GNUC_UNUSED GtkWidget *file_chooser(void)
{
    return find_toplevel(GTK_TYPE_FILE_CHOOSER_DIALOG);
}

static G_GNUC_UNUSED int chooser_open(void)
{
    return file_chooser() != NULL;
}

static G_GNUC_UNUSED int chooser_gone(void)
{
    return file_chooser() == NULL;
}

/* ---- Finding widgets and giving them real input ---- */

/* The first widget under root (depth first) of that type whose action-name is action (NULL: any
 * action), or NULL. */
static G_GNUC_UNUSED GtkWidget *find(GtkWidget *root, GType type, const char *action)
{
    if (G_TYPE_CHECK_INSTANCE_TYPE(root, type)) {
        const char *a =
            GTK_IS_ACTIONABLE(root) ? gtk_actionable_get_action_name(GTK_ACTIONABLE(root)) : NULL;
        if (!action || (a && strcmp(a, action) == 0))
            return root;
    }
    for (GtkWidget *c = gtk_widget_get_first_child(root); c; c = gtk_widget_get_next_sibling(c)) {
        GtkWidget *f = find(c, type, action);
        if (f)
            return f;
    }
    return NULL;
}

/* The centre of w in the window's surface coordinates (what xdotool's --window takes). */
static G_GNUC_UNUSED int centre(GtkWidget *w, double *x, double *y)
{
    graphene_rect_t r;
    if (!gtk_widget_compute_bounds(w, win, &r))
        return 0;
    double sx = 0, sy = 0;
    gtk_native_get_surface_transform(GTK_NATIVE(win), &sx, &sy);
    *x = r.origin.x + r.size.width / 2 + sx;
    *y = r.origin.y + r.size.height / 2 + sy;
    return 1;
}

/* Whether w is wholly inside the window and is what the pointer finds at its centre (disabled
 * or not). */
static G_GNUC_UNUSED int in_view(GtkWidget *w)
{
    graphene_rect_t r;
    if (!w || !gtk_widget_get_mapped(w) || !gtk_widget_compute_bounds(w, win, &r))
        return 0;
    if (r.origin.x < 0 || r.origin.y < 0 || r.origin.x + r.size.width > gtk_widget_get_width(win) ||
        r.origin.y + r.size.height > gtk_widget_get_height(win))
        return 0;
    GtkWidget *at = gtk_widget_pick(win, r.origin.x + r.size.width / 2,
                                    r.origin.y + r.size.height / 2, GTK_PICK_INSENSITIVE);
    return at && (at == w || gtk_widget_is_ancestor(at, w));
}

/* Runs xdotool with these arguments (the window's X id substituted for "WIN"), then lets the
 * main loop take the events. */
static G_GNUC_UNUSED int xdotool(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static G_GNUC_UNUSED int xdotool(const char *fmt, ...)
{
    char args[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    unsigned long xid = gdk_x11_surface_get_xid(gtk_native_get_surface(GTK_NATIVE(win)));
    GString *s = g_string_new("xdotool ");
    for (const char *p = args; *p; p++) {
        if (strncmp(p, "WIN", 3) == 0) {
            g_string_append_printf(s, "%lu", xid);
            p += 2;
        } else {
            g_string_append_c(s, *p);
        }
    }
    int rc = system(s->str);
    g_string_free(s, TRUE);
    spin(150);
    return rc == 0;
}

/* A left click at w's centre. */
static G_GNUC_UNUSED int click(GtkWidget *w)
{
    double x, y;
    if (!w || !centre(w, &x, &y))
        return 0;
    return xdotool("mousemove --window WIN %.0f %.0f click 1", x, y);
}

/* Clicks into a text field, replaces its text with text, and presses Tab. */
static G_GNUC_UNUSED int type_into(GtkWidget *w, const char *text)
{
    return click(w) && xdotool("key --clearmodifiers ctrl+a") &&
           xdotool("type --delay 20 '%s'", text) && xdotool("key Tab");
}

#endif
